/* Tests for config: defaults, loading experiment files, every kind of error
 * (each message must name file:line:column and the key), --set overrides,
 * cross-field validation, the YAML dump round trip and the help text.
 *
 * Fixture files live in BT_TEST_FIXTURES/config; meson defines
 * BT_TEST_FIXTURES as the absolute path of tests/fixtures, and the default
 * below works when the tests run from the project root. */
#include "baton/config.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#ifndef BT_TEST_FIXTURES
#define BT_TEST_FIXTURES "tests/fixtures"
#endif
#define FIX(name) BT_TEST_FIXTURES "/config/" name

#define assert_has(msg, needle)                                                                    \
  cr_assert(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

/* Every key, spelled out here rather than taken from config.c, so that
 * dropping a row from the table fails the help test. */
static const char *const all_keys[] = {
    "model",
    "data.name",
    "data.path",
    "data.normalize",
    "data.shape",
    "data.classes",
    "data.train_samples",
    "data.test_samples",
    "batch_size",
    "micro_batches",
    "optimizer.name",
    "optimizer.lr",
    "optimizer.momentum",
    "optimizer.weight_decay",
    "optimizer.nesterov",
    "epochs",
    "iterations",
    "seed",
    "output",
    "threads",
    "blis_arch",
    "progress",
    "eval_every",
    "devices",
    "schedule",
    "partition",
    "cuts",
    "clock",
    "calibration",
    "device_order",
    "plan.bounds",
    "plan.max_nodes",
    "throttle",
    "replan.every",
    "replan.threshold",
    "replan.caution",
    "replan.probe",
    "links.bandwidth_mbps",
    "links.latency_ms",
    "links.jitter_ms",
    "links.pairs",
    "links.shared_medium",
    "codec.activations",
    "codec.gradients",
    "codec.boundaries",
    "memory_scale",
};

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* bt_config_dump_yaml into a malloc'ed string (tmpfile: plain C11). */
static char *dump(const bt_config *c) {
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  bt_config_dump_yaml(c, f);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static char *help_text(void) {
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  bt_config_print_help(f);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Field-by-field equality of every key (not path / yaml_text). */
static void assert_same_keys(const bt_config *a, const bt_config *b) {
  cr_assert_str_eq(a->model, b->model);
  cr_assert_str_eq(a->data_name, b->data_name);
  cr_assert_str_eq(a->data_path, b->data_path);
  cr_assert_eq(a->data_normalize, b->data_normalize);
  cr_assert_str_eq(a->data_shape, b->data_shape);
  cr_assert_eq(a->data_h, b->data_h);
  cr_assert_eq(a->data_w, b->data_w);
  cr_assert_eq(a->data_c, b->data_c);
  cr_assert_eq(a->data_classes, b->data_classes);
  cr_assert_eq(a->data_train_samples, b->data_train_samples);
  cr_assert_eq(a->data_test_samples, b->data_test_samples);
  cr_assert_eq(a->batch_size, b->batch_size);
  cr_assert_eq(a->micro_batches, b->micro_batches);
  cr_assert_str_eq(a->optimizer_name, b->optimizer_name);
  cr_assert(a->optimizer_lr == b->optimizer_lr, "lr %.17g vs %.17g", a->optimizer_lr,
            b->optimizer_lr);
  cr_assert(a->optimizer_momentum == b->optimizer_momentum);
  cr_assert(a->optimizer_weight_decay == b->optimizer_weight_decay);
  cr_assert_eq(a->optimizer_nesterov, b->optimizer_nesterov);
  cr_assert_eq(a->epochs, b->epochs);
  cr_assert_eq(a->iterations, b->iterations);
  cr_assert_eq(a->seed, b->seed);
  cr_assert_str_eq(a->output, b->output);
  cr_assert_eq(a->threads, b->threads);
  cr_assert_str_eq(a->blis_arch, b->blis_arch);
  cr_assert_str_eq(a->progress, b->progress);
  cr_assert_eq(a->eval_every, b->eval_every);
  cr_assert_eq(a->n_devices, b->n_devices);
  for (int i = 0; i < a->n_devices; i++)
    cr_assert_str_eq(a->devices[i], b->devices[i]);
}

/* Loads `yaml` on top of defaults and expects failure; returns the message. */
static void load_fails(const char *yaml, bt_err *err) {
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_lt(bt_config_load_string(&c, yaml, "exp.yaml", err), 0, "loaded: %s", yaml);
  bt_config_free(&c);
}

static void load_fixture_fails(const char *path, bt_err *err) {
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_lt(bt_config_load_file(&c, path, err), 0, "loaded %s", path);
  cr_assert_null(c.yaml_text);
  bt_config_free(&c);
}

static void set_fails(const char *assignment, bt_err *err) {
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_lt(bt_config_set(&c, assignment, err), 0, "accepted --set %s", assignment);
}

/* ---- defaults and good files ------------------------------------------ */

Test(config, defaults) {
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_str_eq(c.model, "lenet5");
  cr_assert_str_eq(c.data_name, "fashion-mnist");
  cr_assert_str_eq(c.data_path, "/usr/share/datasets/fashion-mnist");
  cr_assert(c.data_normalize);
  cr_assert_str_eq(c.data_shape, "28x28x1");
  cr_assert_eq(c.data_h, 28);
  cr_assert_eq(c.data_w, 28);
  cr_assert_eq(c.data_c, 1);
  cr_assert_eq(c.data_classes, 10);
  cr_assert_eq(c.data_train_samples, 60000);
  cr_assert_eq(c.data_test_samples, 10000);
  cr_assert_eq(c.batch_size, 64);
  cr_assert_eq(c.micro_batches, 1);
  cr_assert_str_eq(c.optimizer_name, "sgd");
  cr_assert(c.optimizer_lr == 0.01);
  cr_assert(c.optimizer_momentum == 0.9);
  cr_assert(c.optimizer_weight_decay == 0.0);
  cr_assert_not(c.optimizer_nesterov);
  cr_assert_eq(c.epochs, 2);
  cr_assert_eq(c.iterations, 0);
  cr_assert_eq(c.seed, 1);
  cr_assert_str_eq(c.output, "");
  cr_assert_eq(c.threads, 1);
  cr_assert_str_eq(c.blis_arch, "auto");
  cr_assert_str_eq(c.progress, "auto");
  cr_assert_eq(c.eval_every, 1);
  cr_assert_eq(c.n_devices, 0);
  cr_assert_str_eq(c.path, "");
  cr_assert_null(c.yaml_text);
  bt_err err = {{0}};
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);
  bt_config_free(&c);
}

Test(config, full_file) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_file(&c, FIX("full.yaml"), &err), 0, "%s", err.msg);
  cr_assert_str_eq(c.model, "vgg11");
  cr_assert_str_eq(c.data_name, "synthetic");
  cr_assert_str_eq(c.data_path, "/tmp/baton-data");
  cr_assert_not(c.data_normalize);
  cr_assert_str_eq(c.data_shape, "32x32x3");
  cr_assert_eq(c.data_h, 32);
  cr_assert_eq(c.data_w, 32);
  cr_assert_eq(c.data_c, 3);
  cr_assert_eq(c.data_classes, 100);
  cr_assert_eq(c.data_train_samples, 5000);
  cr_assert_eq(c.data_test_samples, 1000);
  cr_assert_eq(c.batch_size, 128);
  cr_assert_eq(c.micro_batches, 4);
  cr_assert_str_eq(c.optimizer_name, "sgd");
  cr_assert(c.optimizer_lr == 0.05);
  cr_assert(c.optimizer_momentum == 0.5);
  cr_assert(c.optimizer_weight_decay == 0.0005);
  cr_assert(c.optimizer_nesterov);
  cr_assert_eq(c.epochs, 10);
  cr_assert_eq(c.iterations, 1000000000000LL);
  cr_assert_eq(c.seed, UINT64_C(9223372036854775807));
  cr_assert_str_eq(c.output, "runs/exp1.json");
  cr_assert_eq(c.threads, 8);
  cr_assert_str_eq(c.blis_arch, "haswell");
  cr_assert_str_eq(c.progress, "never");
  cr_assert_eq(c.eval_every, 0);
  cr_assert_eq(c.n_devices, 2);
  cr_assert_str_eq(c.devices[0], "jetson-nano");
  cr_assert_str_eq(c.devices[1], "rpi4");
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);

  /* The file is kept verbatim for the run file. */
  cr_assert_str_eq(c.path, FIX("full.yaml"));
  char *text = read_all(FIX("full.yaml"));
  cr_assert_not_null(c.yaml_text);
  cr_assert_str_eq(c.yaml_text, text);
  free(text);
  bt_config_free(&c);
  cr_assert_null(c.yaml_text);
  bt_config_free(&c); /* twice is harmless */
}

Test(config, block_list_and_empty_sections) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_file(&c, FIX("block_list.yaml"), &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 3);
  cr_assert_str_eq(c.devices[0], "jetson-nano");
  cr_assert_str_eq(c.devices[1], "rpi4");
  cr_assert_str_eq(c.devices[2], "x86-host");
  cr_assert_str_eq(c.data_name, "fashion-mnist");
  bt_config_free(&c);
}

Test(config, empty_file_keeps_defaults) {
  bt_config c, d;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  bt_config_defaults(&d);
  cr_assert_eq(bt_config_load_file(&c, FIX("empty.yaml"), &err), 0, "%s", err.msg);
  assert_same_keys(&c, &d);
  cr_assert_not_null(c.yaml_text);
  cr_assert_str_eq(c.yaml_text, "");
  bt_config_free(&c);

  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_file(&c, FIX("comments_only.yaml"), &err), 0, "%s", err.msg);
  assert_same_keys(&c, &d);
  bt_config_free(&c);

  /* "---" alone and "~" are an empty (null) document too. */
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "---\n", "x", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_load_string(&c, "~\n", "x", &err), 0, "%s", err.msg);
  assert_same_keys(&c, &d);
}

Test(config, load_applies_on_top_and_replaces_text) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "threads=4", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_load_file(&c, FIX("block_list.yaml"), &err), 0, "%s", err.msg);
  cr_assert_eq(c.threads, 4, "keys the file does not set keep their value");
  cr_assert_eq(bt_config_load_file(&c, FIX("full.yaml"), &err), 0, "%s", err.msg);
  cr_assert_eq(c.threads, 8);
  cr_assert_str_eq(c.path, FIX("full.yaml"));
  assert_has(c.yaml_text, "model: vgg11"); /* the old text was freed (ASan checks) */
  bt_config_free(&c);
}

Test(config, yaml_null_values) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "output: runs/a.json\n", "x", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_load_string(&c, "output:\ndevices: ~\ndata:\n", "x", &err), 0, "%s",
               err.msg);
  cr_assert_str_eq(c.output, "", "an empty string value is the empty string");
  load_fails("batch_size:\n", &err);
  cr_assert_str_eq(err.msg, "exp.yaml:1:12: batch_size: no value given; expected an integer in "
                            "1..65536");
  load_fails("model: ~\n", &err);
  assert_has(err.msg, "exp.yaml:1:8: model: must not be empty");
}

/* ---- file errors ------------------------------------------------------- */

Test(config, missing_file) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_lt(bt_config_load_file(&c, FIX("no_such_file.yaml"), &err), 0);
  cr_assert_str_eq(err.msg,
                   "cannot open '" FIX("no_such_file.yaml") "': No such file or directory");
  cr_assert_str_eq(c.path, "");
  cr_assert_null(c.yaml_text);
}

Test(config, directory_is_not_a_file) {
  bt_err err = {{0}};
  load_fixture_fails(BT_TEST_FIXTURES "/config", &err);
  assert_has(err.msg, "cannot read '" BT_TEST_FIXTURES "/config'");
}

Test(config, unknown_key) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("unknown_key.yaml"), &err);
  cr_assert_str_eq(err.msg, FIX("unknown_key.yaml") ":4:3: unknown key 'optimizer.lrr'; keys under "
                                                    "'optimizer' are: name, lr, momentum, "
                                                    "weight_decay, nesterov");
}

Test(config, unknown_top_level_key) {
  bt_err err = {{0}};
  load_fails("model: lenet5\nbatchsize: 32\n", &err);
  assert_has(err.msg, "exp.yaml:2:1: unknown key 'batchsize'; top-level keys are: model, data, "
                      "batch_size,");
  assert_has(err.msg, "devices");
}

Test(config, bad_int) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("bad_int.yaml"), &err);
  cr_assert_str_eq(
      err.msg, FIX("bad_int.yaml") ":2:13: batch_size: expected an integer in 1..65536, got '-3'");
}

Test(config, bad_enum) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("bad_enum.yaml"), &err);
  cr_assert_str_eq(err.msg, FIX("bad_enum.yaml") ":7:9: data.name: 'mnist' is not allowed; choose "
                                                 "one of: fashion-mnist, synthetic");
}

Test(config, malformed_yaml) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("malformed.yaml"), &err);
  assert_has(err.msg, FIX("malformed.yaml") ":3:10: invalid YAML: ");
  assert_has(err.msg, "did not find expected ',' or '}'");
  assert_has(err.msg, "line 2, column 7"); /* where the unclosed '{' mapping began */

  load_fails("model: [a, b\n", &err);
  assert_has(err.msg, "exp.yaml:2:1: invalid YAML");
  load_fails("model: lenet5\n\tbatch_size: 3\n", &err);
  assert_has(err.msg, "exp.yaml:2:");
}

Test(config, invalid_utf8) {
  bt_err err = {{0}};
  load_fails("model: lenet5\nout: caf\xe9\n", &err);
  assert_has(err.msg, "exp.yaml:2:9: not readable as YAML text");
}

Test(config, duplicate_key) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("duplicate_key.yaml"), &err);
  cr_assert_str_eq(err.msg,
                   FIX("duplicate_key.yaml") ":4:3: duplicate key 'optimizer.lr' (first set "
                                             "at line 3, column 3); keep one");
  load_fails("data: {name: synthetic}\nbatch_size: 8\ndata: {classes: 3}\n", &err);
  assert_has(err.msg, "exp.yaml:3:1: duplicate key 'data'");
}

Test(config, mapping_where_scalar_expected) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("mapping_for_scalar.yaml"), &err);
  cr_assert_str_eq(err.msg, FIX("mapping_for_scalar.yaml") ":4:5: optimizer.lr: expected a number "
                                                           "in (0, 10], got a mapping");
  load_fails("batch_size: [1, 2]\n", &err);
  cr_assert_str_eq(err.msg,
                   "exp.yaml:1:13: batch_size: expected an integer in 1..65536, got a list");
  load_fails("devices: [rpi4, [a]]\n", &err);
  assert_has(err.msg, "exp.yaml:1:17: devices: entry 2: expected a name, got a list");
  load_fails("? [a, b]\n: 1\n", &err);
  assert_has(err.msg, "exp.yaml:1:3: keys must be plain names, got a list");
}

Test(config, scalar_where_mapping_expected) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("scalar_for_mapping.yaml"), &err);
  cr_assert_str_eq(err.msg, FIX("scalar_for_mapping.yaml") ":2:12: optimizer: expected a mapping "
                                                           "with keys among: name, lr, momentum, "
                                                           "weight_decay, nesterov; got 'sgd'");
  load_fixture_fails(FIX("list_not_sequence.yaml"), &err);
  cr_assert_str_eq(err.msg,
                   FIX("list_not_sequence.yaml") ":1:10: devices: expected a list, e.g. [rpi4]; "
                                                 "got 'rpi4'");
}

Test(config, top_level_must_be_mapping) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("top_level_list.yaml"), &err);
  assert_has(err.msg,
             FIX("top_level_list.yaml") ":1:1: expected a mapping of keys at the top level");
  assert_has(err.msg, "got a list");
  load_fails("hello\n", &err);
  assert_has(err.msg, "exp.yaml:1:1: expected a mapping of keys at the top level");
  assert_has(err.msg, "got 'hello'");
}

Test(config, two_documents) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("two_documents.yaml"), &err);
  assert_has(err.msg, FIX("two_documents.yaml") ":2:1: a second YAML document");
}

Test(config, dotted_key_in_file) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("dotted_key.yaml"), &err);
  cr_assert_str_eq(err.msg, FIX("dotted_key.yaml") ":2:1: key 'optimizer.lr': dotted names are for "
                                                   "--set; in a file nest them: 'optimizer: {lr: "
                                                   "...}'");
  load_fails("optimizer.lrr: 1\n", &err);
  assert_has(err.msg, "exp.yaml:1:1: unknown key 'optimizer.lrr'; keys under 'optimizer'");
}

Test(config, quoted_number) {
  bt_err err = {{0}};
  load_fixture_fails(FIX("quoted_number.yaml"), &err);
  assert_has(err.msg, FIX("quoted_number.yaml") ":1:13: batch_size: expected an integer");
  assert_has(err.msg, "remove the quotes");
  /* Quotes are fine for strings and enums. */
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "model: \"123\"\ndata: {name: 'synthetic'}\n", "x", &err),
               0, "%s", err.msg);
  cr_assert_str_eq(c.model, "123");
  cr_assert_str_eq(c.data_name, "synthetic");
}

Test(config, failed_load_leaves_config_unchanged) {
  bt_config c, d;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  bt_config_defaults(&d);
  cr_assert_lt(bt_config_load_string(&c, "batch_size: 32\nthreads: 4\nfoo: 1\n", "x", &err), 0);
  assert_same_keys(&c, &d);
  cr_assert_lt(bt_config_load_file(&c, FIX("bad_enum.yaml"), &err), 0);
  assert_same_keys(&c, &d);
  cr_assert_null(c.yaml_text);
}

/* ---- value types from YAML -------------------------------------------- */

Test(config, int_values) {
  bt_err err = {{0}};
  load_fails("batch_size: 65537\n", &err);
  assert_has(err.msg, "exp.yaml:1:13: batch_size: expected an integer in 1..65536, got '65537'");
  load_fails("batch_size: 1.5\n", &err);
  assert_has(err.msg, "got '1.5'");
  load_fails("batch_size: 0x10\n", &err);
  assert_has(err.msg, "got '0x10'");
  load_fails("iterations: 99999999999999999999999\n", &err);
  assert_has(err.msg, "iterations: expected an integer in 0..1000000000000");
  load_fails("iterations: 1e6\n", &err);
  assert_has(err.msg, "got '1e6'");
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "iterations: 1000000000000\nseed: 0\n", "x", &err), 0,
               "%s", err.msg);
  cr_assert_eq(c.iterations, 1000000000000LL);
  cr_assert_eq(c.seed, 0);
}

Test(config, double_values) {
  bt_err err = {{0}};
  load_fails("optimizer: {lr: 0}\n", &err);
  assert_has(err.msg, "exp.yaml:1:17: optimizer.lr: expected a number in (0, 10], got '0'");
  load_fails("optimizer: {momentum: 1}\n", &err);
  assert_has(err.msg, "optimizer.momentum: expected a number in [0, 1), got '1'");
  load_fails("optimizer: {lr: .nan}\n", &err);
  assert_has(err.msg, "got '.nan'");
  load_fails("optimizer: {lr: 1e400}\n", &err);
  assert_has(err.msg, "got '1e400'");
  load_fails("optimizer: {weight_decay: -0.1}\n", &err);
  assert_has(err.msg, "optimizer.weight_decay: expected a number in [0, 1)");
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "optimizer: {lr: 10, momentum: 0, weight_decay: 1e-4}\n",
                                     "x", &err),
               0, "%s", err.msg);
  cr_assert(c.optimizer_lr == 10.0);
  cr_assert(c.optimizer_momentum == 0.0);
  cr_assert(c.optimizer_weight_decay == 1e-4);
}

Test(config, bool_values) {
  static const char *const yes[] = {"true", "yes", "on", "1", "True", "YES"};
  static const char *const no[] = {"false", "no", "off", "0", "False", "OFF"};
  bt_err err = {{0}};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    char y[64];
    bt_config c;
    bt_config_defaults(&c);
    snprintf(y, sizeof y, "data: {normalize: %s}\noptimizer: {nesterov: %s}\n", no[i], yes[i]);
    cr_assert_eq(bt_config_load_string(&c, y, "x", &err), 0, "%s", err.msg);
    cr_assert_not(c.data_normalize, "%s", no[i]);
    cr_assert(c.optimizer_nesterov, "%s", yes[i]);
  }
  load_fails("data:\n  normalize: maybe\n", &err);
  assert_has(err.msg, "exp.yaml:2:14: data.normalize: expected true or false");
  assert_has(err.msg, "got 'maybe'");
}

Test(config, string_values) {
  bt_err err = {{0}};
  char y[700];
  memset(y, 0, sizeof y);
  strcpy(y, "output: ");
  memset(y + 8, 'a', 512);
  load_fails(y, &err);
  assert_has(err.msg, "exp.yaml:1:9: output: ");
  assert_has(err.msg, "is 512 characters long; at most 511 allowed");
  load_fails("model: \"\"\n", &err);
  assert_has(err.msg, "exp.yaml:1:8: model: must not be empty");
  load_fails("model: \"a\\0b\"\n", &err);
  assert_has(err.msg, "exp.yaml:1:8: model: value contains a NUL character");
}

Test(config, shape_values) {
  static const char *const bad[] = {"0x28x1", "28x28", "28x28x1x", "5000x1x1", "28X28X1",
                                    "28x28x", "x28x1", "28 x28x1", "-1x2x3",   "99999999999x1x1"};
  bt_err err = {{0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char y[128];
    snprintf(y, sizeof y, "data: {name: synthetic, shape: '%s'}\n", bad[i]);
    load_fails(y, &err);
    assert_has(err.msg, "exp.yaml:1:32: data.shape: expected a shape HxWxC, each in 1..4096");
  }
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "data: {shape: 4096x1x07}\n", "x", &err), 0, "%s",
               err.msg);
  cr_assert_eq(c.data_h, 4096);
  cr_assert_eq(c.data_w, 1);
  cr_assert_eq(c.data_c, 7);
  cr_assert_str_eq(c.data_shape, "4096x1x7", "stored in canonical form");
}

Test(config, list_values) {
  bt_err err = {{0}};
  bt_config c;
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, "devices: [a, b]\n", "x", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 2);
  cr_assert_eq(bt_config_load_string(&c, "devices: []\n", "x", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 0, "a later list replaces, not appends");

  load_fails("devices: [a, '']\n", &err);
  assert_has(err.msg, "exp.yaml:1:14: devices: entry 2 is empty");
  load_fails("devices: ['a,b']\n", &err);
  assert_has(err.msg, "exp.yaml:1:11: devices: entry 'a,b' contains ','");
  load_fails("devices: [0123456789012345678901234567890123456789012345678901234567890123]\n", &err);
  assert_has(err.msg, "exp.yaml:1:11: devices: entry '");
  assert_has(err.msg, "is 64 characters long; at most 63 allowed");

  /* 64 entries fit, 65 do not. */
  char y[1024] = "devices: [";
  for (int i = 0; i < 65; i++)
    snprintf(y + strlen(y), sizeof y - strlen(y), "%sd%d", i ? ", " : "", i);
  strcat(y, "]\n");
  load_fails(y, &err);
  assert_has(err.msg, "devices: more than 64 entries; at most 64 allowed");
  *strrchr(y, ',') = '\0';
  strcat(y, "]\n");
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_load_string(&c, y, "x", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 64);
  cr_assert_str_eq(c.devices[63], "d63");
}

/* ---- --set ------------------------------------------------------------- */

Test(config, set_each_type) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "batch_size=256", &err), 0, "%s", err.msg);
  cr_assert_eq(c.batch_size, 256);
  cr_assert_eq(bt_config_set(&c, "optimizer.lr=0.125", &err), 0, "%s", err.msg);
  cr_assert(c.optimizer_lr == 0.125);
  cr_assert_eq(bt_config_set(&c, "data.normalize=off", &err), 0, "%s", err.msg);
  cr_assert_not(c.data_normalize);
  cr_assert_eq(bt_config_set(&c, "data.name=synthetic", &err), 0, "%s", err.msg);
  cr_assert_str_eq(c.data_name, "synthetic");
  cr_assert_eq(bt_config_set(&c, "output=runs/a b=c.json", &err), 0, "%s", err.msg);
  cr_assert_str_eq(c.output, "runs/a b=c.json", "only the first '=' splits");
  cr_assert_eq(bt_config_set(&c, "data.shape=64x32x3", &err), 0, "%s", err.msg);
  cr_assert_eq(c.data_h, 64);
  cr_assert_eq(c.data_w, 32);
  cr_assert_eq(c.data_c, 3);
  cr_assert_eq(bt_config_set(&c, "seed=9223372036854775807", &err), 0, "%s", err.msg);
  cr_assert_eq(c.seed, UINT64_C(9223372036854775807));
  cr_assert_eq(bt_config_set(&c, "iterations=1000000000000", &err), 0, "%s", err.msg);
  cr_assert_eq(c.iterations, 1000000000000LL);
  cr_assert_eq(bt_config_set(&c, "output=", &err), 0, "%s", err.msg);
  cr_assert_str_eq(c.output, "");
  cr_assert_str_eq(c.plan_bounds, "auto");
  cr_assert_eq(bt_config_set(&c, "plan.bounds=stair", &err), 0, "%s", err.msg);
  cr_assert_str_eq(c.plan_bounds, "stair");
  cr_assert_eq(bt_config_set(&c, "plan.max_nodes=-1", &err), 0, "%s", err.msg);
  cr_assert_eq(c.plan_max_nodes, -1);
  set_fails("plan.bounds=exact", &err);
  assert_has(err.msg, "stair");
  set_fails("plan.max_nodes=-2", &err);
}

Test(config, set_list) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "devices=jetson-nano,rpi4", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 2);
  cr_assert_str_eq(c.devices[0], "jetson-nano");
  cr_assert_str_eq(c.devices[1], "rpi4");
  cr_assert_eq(bt_config_set(&c, "devices= a , b ,c", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 3);
  cr_assert_str_eq(c.devices[0], "a");
  cr_assert_str_eq(c.devices[1], "b");
  cr_assert_str_eq(c.devices[2], "c");
  cr_assert_eq(bt_config_set(&c, "devices=", &err), 0, "%s", err.msg);
  cr_assert_eq(c.n_devices, 0);

  cr_assert_eq(bt_config_set(&c, "devices=x", &err), 0, "%s", err.msg);
  cr_assert_lt(bt_config_set(&c, "devices=a,,b", &err), 0);
  cr_assert_str_eq(err.msg, "--set devices=a,,b: entry 2 is empty; every entry must be a name");
  cr_assert_lt(bt_config_set(&c, "devices=a,", &err), 0);
  cr_assert_eq(c.n_devices, 1, "a failed --set leaves the list as it was");
  cr_assert_str_eq(c.devices[0], "x");
}

Test(config, set_errors) {
  bt_err err = {{0}};
  set_fails("optimizer.lr=abc", &err);
  cr_assert_str_eq(err.msg, "--set optimizer.lr=abc: expected a number in (0, 10], got 'abc'");
  set_fails("batch_size=-3", &err);
  cr_assert_str_eq(err.msg, "--set batch_size=-3: expected an integer in 1..65536, got '-3'");
  set_fails("batch_size= 3", &err);
  assert_has(err.msg, "got ' 3'");
  set_fails("data.normalize=maybe", &err);
  assert_has(err.msg, "--set data.normalize=maybe: expected true or false");
  set_fails("data.name=mnist", &err);
  cr_assert_str_eq(err.msg, "--set data.name=mnist: 'mnist' is not allowed; choose one of: "
                            "fashion-mnist, synthetic");
  set_fails("blis_arch=Haswell", &err);
  assert_has(err.msg, "choose one of: auto, skx, haswell, sandybridge, generic");
  set_fails("optimizer.lrr=0.1", &err);
  cr_assert_str_eq(err.msg, "--set optimizer.lrr=0.1: unknown key 'optimizer.lrr'; keys under "
                            "'optimizer' are: name, lr, momentum, weight_decay, nesterov");
  set_fails("learning_rate=0.1", &err);
  assert_has(err.msg, "--set learning_rate=0.1: unknown key 'learning_rate'; top-level keys are:");
  set_fails("optimizer=sgd", &err);
  assert_has(err.msg, "--set optimizer=sgd: 'optimizer' is a group of keys; set one of "
                      "optimizer.{name, lr,");
  set_fails("batch_size", &err);
  assert_has(err.msg, "--set batch_size: expected key=value");
  set_fails("=3", &err);
  assert_has(err.msg, "--set =3: unknown key ''");
  set_fails("model=", &err);
  assert_has(err.msg, "--set model=: must not be empty");
  set_fails("seed=9223372036854775808", &err);
  assert_has(err.msg, "expected an integer in 0..9223372036854775807");
  set_fails("iterations=1000000000001", &err);
  assert_has(err.msg, "expected an integer in 0..1000000000000");
  set_fails("model=caf\xe9", &err);
  assert_has(err.msg, "is not valid UTF-8");
  set_fails("data.shape=28x28", &err);
  assert_has(err.msg, "--set data.shape=28x28: expected a shape HxWxC");
  char big[600] = "data.path=";
  memset(big + strlen(big), 'p', 512);
  set_fails(big, &err);
  assert_has(err.msg, "is 512 characters long; at most 511 allowed");
  cr_assert_lt(strlen(err.msg), 300, "long values are shortened in messages");
}

Test(config, set_failure_leaves_config_unchanged) {
  bt_config c, d;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  bt_config_defaults(&d);
  cr_assert_lt(bt_config_set(&c, "data.shape=28x28x0", &err), 0);
  cr_assert_lt(bt_config_set(&c, "optimizer.lr=20", &err), 0);
  assert_same_keys(&c, &d);
}

/* ---- validation -------------------------------------------------------- */

Test(config, micro_batches_must_divide_batch_size) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "micro_batches=8", &err), 0);
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_set(&c, "micro_batches=5", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  cr_assert_str_eq(err.msg, "micro_batches (5) must divide batch_size (64); set micro_batches to "
                            "a divisor of 64 such as 4 or 8, or batch_size to a multiple of 5");
  cr_assert_eq(bt_config_set(&c, "micro_batches=100", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "micro_batches (100) must divide batch_size (64)");
  assert_has(err.msg, "such as 64,");
}

Test(config, epochs_and_iterations_not_both_zero) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "epochs=0", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "epochs and iterations are both 0");
  assert_has(err.msg, "set epochs >= 1");
  cr_assert_eq(bt_config_set(&c, "iterations=100", &err), 0);
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);
}

Test(config, nesterov_needs_momentum) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "optimizer.nesterov=true", &err), 0);
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_set(&c, "optimizer.momentum=0", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "optimizer.nesterov is true but optimizer.momentum is 0");
}

Test(config, fashion_mnist_fixed_sizes) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "data.shape=32x32x3", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  cr_assert_str_eq(err.msg, "data.shape is 32x32x3 but fashion-mnist images are 28x28x1; remove it "
                            "or set data.name: synthetic");
  cr_assert_eq(bt_config_set(&c, "data.name=synthetic", &err), 0);
  cr_assert_eq(bt_config_validate(&c, &err), 0, "%s", err.msg);

  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "data.classes=5", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "data.classes is 5 but fashion-mnist has 10 classes");

  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "data.train_samples=100", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "data.train_samples is 100");

  bt_config_defaults(&c);
  cr_assert_eq(bt_config_set(&c, "data.path=", &err), 0);
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "data.path is empty");
}

Test(config, validate_rechecks_ranges_set_by_code) {
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  c.threads = 0;
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  cr_assert_str_eq(err.msg, "threads is 0; allowed: 1..256");

  bt_config_defaults(&c);
  c.optimizer_lr = 0;
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  cr_assert_str_eq(err.msg, "optimizer.lr is 0; allowed: (0, 10]");

  bt_config_defaults(&c);
  strcpy(c.progress, "sometimes");
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "progress 'sometimes' is not allowed");

  bt_config_defaults(&c);
  c.data_h = 32; /* text still says 28x28x1 */
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "data.shape");

  bt_config_defaults(&c);
  c.seed = UINT64_MAX;
  cr_assert_lt(bt_config_validate(&c, &err), 0);
  assert_has(err.msg, "seed is");
}

/* ---- dump and help ----------------------------------------------------- */

Test(config, dump_then_load_round_trip) {
  bt_config a, b;
  bt_err err = {{0}};
  bt_config_defaults(&a);
  cr_assert_eq(bt_config_load_file(&a, FIX("full.yaml"), &err), 0, "%s", err.msg);
  /* Values that need quoting or exact digits. */
  cr_assert_eq(bt_config_set(&a, "output=runs/\"q\" \\ #x: y\ttab 'é'", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_set(&a, "optimizer.lr=0.1", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_set(&a, "optimizer.momentum=0.30000000000000004", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_config_set(&a, "devices=true,null,- x,[y]", &err), 0, "%s", err.msg);
  char *text = dump(&a);

  bt_config_defaults(&b);
  cr_assert_eq(bt_config_load_string(&b, text, "dump", &err), 0, "%s\n%s", err.msg, text);
  assert_same_keys(&a, &b);
  char *again = dump(&b);
  cr_assert_str_eq(text, again);
  free(again);
  free(text);

  /* Defaults round-trip too. */
  bt_config_defaults(&b);
  text = dump(&b);
  assert_has(text, "optimizer:\n  name: sgd\n  lr: 0.01\n");
  bt_config_free(&a);
  bt_config_defaults(&a);
  cr_assert_eq(bt_config_set(&a, "batch_size=1", &err), 0);
  cr_assert_eq(bt_config_load_string(&a, text, "dump", &err), 0, "%s", err.msg);
  assert_same_keys(&a, &b);
  free(text);
  bt_config_free(&a);
}

Test(config, help_mentions_every_key) {
  char *h = help_text();
  for (size_t i = 0; i < sizeof all_keys / sizeof all_keys[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "\n%s\n", all_keys[i]);
    assert_has(h, line);
  }
  assert_has(h, "\noptimizer.lr\n    number in (0, 10]; default: 0.01\n");
  assert_has(h, "\nbatch_size\n    integer in 1..65536; default: 64\n");
  assert_has(h, "\ndata.name\n    one of: fashion-mnist, synthetic; default: fashion-mnist\n");
  assert_has(h, "\noutput\n    string of at most 511 characters; default: \"\"\n");
  assert_has(h, "\ndevices\n    list of at most 64 names");

  /* And it lists nothing else: one entry per key. */
  size_t entries = 0;
  for (const char *p = h; (p = strstr(p, "; default: ")) != NULL; p++)
    entries++;
  cr_assert_eq(entries, sizeof all_keys / sizeof all_keys[0]);
  free(h);
}

Test(config, every_key_known_to_set) {
  /* An empty value may be rejected, but never as an unknown key. */
  bt_config c;
  bt_err err = {{0}};
  bt_config_defaults(&c);
  for (size_t i = 0; i < sizeof all_keys / sizeof all_keys[0]; i++) {
    char a[128];
    snprintf(a, sizeof a, "%s=", all_keys[i]);
    cr_assert_eq(bt_config_set(&c, a, &err) < 0 && strstr(err.msg, "unknown key") != NULL, 0, "%s",
                 err.msg);
  }
}
