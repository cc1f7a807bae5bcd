/* The calibration store: layer keys, round trips, the smallest figure
 * winning, other hosts ignored, and bad files. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton/calib.h"
#include "baton/model.h"

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/baton-calib-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(calib, .init = make_dir, .fini = remove_dir);

static bt_layer finalized(bt_layer l, bt_shape in) {
  bt_err err;
  l.in = in;
  cr_assert_eq(bt_layer_finalize(&l, "test layer", &err), 0, "%s", err.msg);
  return l;
}

Test(calib, keys_tell_layer_configurations_apart) {
  const bt_shape in = {16, 16, 8};
  bt_layer a = finalized(bt_conv2d(16, 3, 1, 1), in);
  bt_layer b = finalized(bt_conv2d(16, 3, 2, 1), in); /* stride differs */
  bt_layer c = finalized(bt_conv2d(32, 3, 1, 1), in); /* channels differ */
  char ka[256], kb[256], kc[256], ka4[256], ka_nodin[256], ka_again[256];
  bt_calib_layer_key(&a, 8, 0, ka, sizeof ka);
  bt_calib_layer_key(&b, 8, 0, kb, sizeof kb);
  bt_calib_layer_key(&c, 8, 0, kc, sizeof kc);
  bt_calib_layer_key(&a, 4, 0, ka4, sizeof ka4);
  bt_calib_layer_key(&a, 8, 1, ka_nodin, sizeof ka_nodin);
  bt_calib_layer_key(&a, 8, 0, ka_again, sizeof ka_again);
  cr_expect_str_neq(ka, kb);
  cr_expect_str_neq(ka, kc);
  cr_expect_str_neq(ka, ka4);
  cr_expect_str_neq(ka, ka_nodin);
  cr_expect_str_eq(ka, ka_again);
  cr_expect_null(strchr(ka, '\t'));
}

Test(calib, residual_keys_include_the_body) {
  bt_model m1, m2;
  bt_err err;
  cr_assert_eq(bt_zoo_build("resnet18", (bt_shape){32, 32, 3}, 10, &m1, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_zoo_build("resnet18", (bt_shape){32, 32, 3}, 10, &m2, &err), 0, "%s", err.msg);
  int residuals = 0;
  for (int i = 0; i < m1.n_layers; i++) {
    if (m1.layers[i].kind != BT_RESIDUAL)
      continue;
    residuals++;
    char k1[1024], k2[1024];
    bt_calib_layer_key(&m1.layers[i], 4, 0, k1, sizeof k1);
    bt_calib_layer_key(&m2.layers[i], 4, 0, k2, sizeof k2);
    cr_expect_str_eq(k1, k2);
    cr_expect_not_null(strstr(k1, "conv2d"), "key '%s' names no body layer", k1);
  }
  cr_expect_gt(residuals, 0);
  bt_model_free(&m1);
  bt_model_free(&m2);
}

Test(calib, missing_file_is_an_empty_store) {
  char path[128];
  snprintf(path, sizeof path, "%s/none.tsv", dir);
  bt_calib_store *s = NULL;
  bt_err err;
  cr_assert_eq(bt_calib_load(path, "h", &s, &err), 0, "%s", err.msg);
  double a, b;
  cr_expect_eq(bt_calib_lookup(s, "k", &a, &b), 0);
  bt_calib_free(s);
}

Test(calib, appended_entries_load_back_smallest_wins_other_hosts_ignored) {
  char path[128];
  snprintf(path, sizeof path, "%s/sub/dir/store.tsv", dir); /* directories are created */
  bt_err err;
  cr_assert_eq(bt_calib_append(path, "host-a", "k1", 2e-3, 4e-3, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_calib_append(path, "host-a", "k1", 3e-3, 3e-3, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_calib_append(path, "host-b", "k2", 1e-3, 1e-3, &err), 0, "%s", err.msg);
  bt_calib_store *s = NULL;
  cr_assert_eq(bt_calib_load(path, "host-a", &s, &err), 0, "%s", err.msg);
  double a = 0, b = 0;
  cr_assert_eq(bt_calib_lookup(s, "k1", &a, &b), 1);
  cr_expect_float_eq(a, 2e-3, 1e-12);
  cr_expect_float_eq(b, 3e-3, 1e-12);
  cr_expect_eq(bt_calib_lookup(s, "k2", &a, &b), 0, "host-b's entry leaked into host-a");
  bt_calib_free(s);
}

Test(calib, bad_figures_are_refused_on_append) {
  char path[128];
  snprintf(path, sizeof path, "%s/store.tsv", dir);
  bt_err err;
  cr_expect_lt(bt_calib_append(path, "h", "k", -1.0, 1.0, &err), 0);
  cr_expect_lt(bt_calib_append(path, "h", "k", 1.0, NAN, &err), 0);
  cr_expect_not_null(strstr(err.msg, "not a positive time"), "%s", err.msg);
  cr_expect_neq(access(path, F_OK), 0, "a refused entry created the store");
}

static void expect_load_error(const char *content, const char *want) {
  char path[128];
  snprintf(path, sizeof path, "%s/bad.tsv", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(content, f);
  fclose(f);
  bt_calib_store *s = NULL;
  bt_err err;
  cr_expect_lt(bt_calib_load(path, "h", &s, &err), 0, "'%s' loaded", content);
  cr_expect_null(s);
  cr_expect_not_null(strstr(err.msg, want), "error '%s' lacks '%s'", err.msg, want);
}

Test(calib, corrupt_lines_name_the_file_and_line) {
  expect_load_error("h\tk\t1e-3\t1e-3\ngarbage\n", "bad.tsv:2: not");
  expect_load_error("h\tk\t-1e-3\t1e-3\n", "bad.tsv:1");
  expect_load_error("h\tk\tnan\t1e-3\n", "bad.tsv:1");
  expect_load_error("h\tk\t1e-3x\t1e-3\n", "bad.tsv:1");
  expect_load_error("h\tk\t1e-3\n", "bad.tsv:1");
}

Test(calib, default_path_follows_the_environment) {
  char buf[512];
  setenv("BATON_CALIBRATION", "/x/y.tsv", 1);
  bt_calib_default_path(buf, sizeof buf);
  cr_expect_str_eq(buf, "/x/y.tsv");
  unsetenv("BATON_CALIBRATION");
  setenv("XDG_CACHE_HOME", "/cache", 1);
  bt_calib_default_path(buf, sizeof buf);
  cr_expect_str_eq(buf, "/cache/baton/calibration.tsv");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  bt_calib_default_path(buf, sizeof buf);
  cr_expect_str_eq(buf, "/home/u/.cache/baton/calibration.tsv");
}

/* Two equal layers of one stage are measured apart, but the store keeps one
 * figure per key: the run that measures must use that figure too, or its
 * virtual times differ from every later run's that reads the store. */
Test(calib, equal_layers_of_a_stage_agree_with_the_store) {
  bt_model m;
  bt_err err = {{0}};
  bt_model_init(&m, "twins", (bt_shape){1, 1, 256}, 10);
  bt_model_push(&m, bt_dense(256));
  bt_model_push(&m, bt_relu());
  bt_model_push(&m, bt_dense(256));
  bt_model_push(&m, bt_relu());
  bt_model_push(&m, bt_dense(10));
  bt_model_push(&m, bt_softmax_ce());
  cr_assert_eq(bt_model_finalize(&m, &err), 0, "%s", err.msg);
  bt_stage st;
  cr_assert_eq(bt_stage_init(&st, &m, 0, m.n_layers, 8, 1, 1, &err), 0, "%s", err.msg);
  char store[128];
  snprintf(store, sizeof store, "%s/store.tsv", dir);
  const bt_calib_options o = {
      .repeats = 3, .seed = 1, .batch_size = 8, .store = store, .host = "h"};
  const int n = m.n_layers;
  double f1[8], b1[8], f2[8], b2[8];
  bt_calib_result res;
  cr_assert_eq(bt_calib_stage(&st, &m, 8, &o, f1, b1, &res, &err), 0, "%s", err.msg);
  cr_assert_eq(res.measured, n);
  cr_assert_eq(f1[1], f1[3], "relu fwd %g vs %g", f1[1], f1[3]);
  cr_assert_eq(b1[1], b1[3], "relu bwd %g vs %g", b1[1], b1[3]);
  cr_assert_eq(bt_calib_stage(&st, &m, 8, &o, f2, b2, &res, &err), 0, "%s", err.msg);
  cr_assert_eq(res.stored, n);
  for (int k = 0; k < n; k++) {
    /* The store writes 9 significant digits. */
    cr_expect_leq(fabs(f1[k] - f2[k]), 1e-8 * f1[k], "layer %d fwd: measured %g, stored %g", k,
                  f1[k], f2[k]);
    cr_expect_leq(fabs(b1[k] - b2[k]), 1e-8 * b1[k], "layer %d bwd: measured %g, stored %g", k,
                  b1[k], b2[k]);
  }
  bt_stage_free(&st);
  bt_model_free(&m);
}
