/* Tests for data: the Fashion-MNIST loader against the real Debian package
 * (skipped when it is not installed) and against small IDX files written here
 * into a temporary directory, plus synthetic data, normalisation, shuffling
 * and batch gathering. */
#define _POSIX_C_SOURCE 200809L

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "baton/data.h"
#include "baton/err.h"

#define FM_DIR BT_DATA_FASHION_MNIST_DIR
#define HINT "install it with: apt-get install dataset-fashion-mnist (or set data.path)"
#define PIX (28 * 28)

static int have_fashion_mnist(void) {
  static const char *files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  char p[512];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", FM_DIR, files[i]);
    if (access(p, R_OK) != 0)
      return 0;
  }
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- temporary IDX fixtures ---------------------------------------------- */

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test_data_XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp failed");
}

static void remove_tmpdir(void) {
  static const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  char p[512];
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
    unlink(p);
  }
  rmdir(tmpdir);
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* Writes bytes to tmpdir/name, gzip-compressed. */
static void write_gz(const char *name, const unsigned char *data, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  gzFile f = gzopen(p, "wb");
  cr_assert_not_null(f, "cannot write fixture %s", p);
  if (len)
    cr_assert_eq(gzwrite(f, data, (unsigned)len), (int)len);
  cr_assert_eq(gzclose(f), Z_OK);
}

/* Writes raw bytes to tmpdir/name (for damaged gzip streams). */
static void write_raw(const char *name, const unsigned char *data, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

static unsigned char *read_raw(const char *name, size_t *len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "rb");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  long l = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)l);
  cr_assert_eq(fread(b, 1, (size_t)l, f), (size_t)l);
  fclose(f);
  *len = (size_t)l;
  return b;
}

/* An image file of `n` 28x28 images whose header claims `claimed` images;
 * pixel k of image i is (i * 31 + k) & 255, so every byte value occurs. */
static void write_images(const char *name, uint32_t magic, uint32_t claimed, uint32_t n,
                         uint32_t rows, uint32_t cols) {
  size_t len = 16 + (size_t)n * rows * cols;
  unsigned char *b = malloc(len);
  put_be32(b, magic);
  put_be32(b + 4, claimed);
  put_be32(b + 8, rows);
  put_be32(b + 12, cols);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < (size_t)rows * cols; k++)
      b[16 + i * rows * cols + k] = (unsigned char)((i * 31 + k) & 255);
  write_gz(name, b, len);
  free(b);
}

static void write_labels(const char *name, uint32_t magic, uint32_t claimed, uint32_t n,
                         const unsigned char *labels) {
  size_t len = 8 + n;
  unsigned char *b = malloc(len);
  put_be32(b, magic);
  put_be32(b + 4, claimed);
  memcpy(b + 8, labels, n);
  write_gz(name, b, len);
  free(b);
}

static const unsigned char good_labels[5] = {3, 0, 9, 1, 7};

/* A valid 5-sample "test" split in tmpdir. */
static void write_good_test_split(void) {
  write_images("t10k-images-idx3-ubyte.gz", 0x803, 5, 5, 28, 28);
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 5, 5, good_labels);
}

/* Loads the test split from tmpdir expecting failure; returns the message. */
static const char *load_fails(bt_err *err) {
  bt_dataset ds;
  memset(err->msg, 0, sizeof err->msg);
  int rc = bt_data_load_fashion_mnist(tmpdir, 0, &ds, err);
  cr_assert_lt(rc, 0, "load should fail");
  cr_assert_null(ds.x, "a failed load leaves no data");
  cr_assert_null(ds.y);
  cr_assert_eq(ds.n, 0);
  cr_log_info("error: %s", err->msg);
  return err->msg;
}

/* ---- real Fashion-MNIST ---------------------------------------------------- */

Test(data_fmnist, real_train_set) {
  if (!have_fashion_mnist())
    cr_skip_test("dataset-fashion-mnist is not installed");
  bt_dataset ds;
  bt_err err = {{0}};
  double t0 = now_s();
  int rc = bt_data_load_fashion_mnist(NULL, 1, &ds, &err);
  double dt = now_s() - t0;
  cr_assert_eq(rc, 0, "%s", err.msg);
  cr_log_info("train set loaded in %.3f s", dt);
  printf("fashion-mnist train set loaded in %.3f s\n", dt);
  cr_assert_eq(ds.n, 60000);
  cr_assert_eq(ds.h, 28);
  cr_assert_eq(ds.w, 28);
  cr_assert_eq(ds.c, 1);
  cr_assert_eq(ds.classes, 10);
  long hist[10] = {0};
  for (long i = 0; i < ds.n; i++) {
    cr_assert(ds.y[i] >= 0 && ds.y[i] < 10);
    hist[ds.y[i]]++;
  }
  for (int k = 0; k < 10; k++)
    cr_assert_eq(hist[k], 6000, "class %d has %ld samples", k, hist[k]);
  float lo = 1, hi = 0;
  for (size_t i = 0; i < (size_t)ds.n * PIX; i++) {
    lo = fminf(lo, ds.x[i]);
    hi = fmaxf(hi, ds.x[i]);
  }
  cr_assert_eq(lo, 0.0f);
  cr_assert_eq(hi, 1.0f);
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_log_info("train mean %.5f std %.5f", mean, std);
  cr_assert(fabsf(mean - 0.2860f) < 5e-4f, "mean %f", mean);
  cr_assert(fabsf(std - 0.3530f) < 5e-4f, "std %f", std);
  bt_dataset_free(&ds);
  cr_assert_null(ds.x);
  cr_assert_eq(ds.n, 0);
}

Test(data_fmnist, real_test_set_with_train_stats) {
  if (!have_fashion_mnist())
    cr_skip_test("dataset-fashion-mnist is not installed");
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_load_fashion_mnist(FM_DIR, 0, &ds, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.n, 10000);
  cr_assert_eq(ds.h * ds.w * ds.c, PIX);
  long hist[10] = {0};
  for (long i = 0; i < ds.n; i++)
    hist[ds.y[i]]++;
  for (int k = 0; k < 10; k++)
    cr_assert_eq(hist[k], 1000, "class %d has %ld samples", k, hist[k]);
  float lo = 1, hi = 0;
  for (size_t i = 0; i < (size_t)ds.n * PIX; i++) {
    lo = fminf(lo, ds.x[i]);
    hi = fmaxf(hi, ds.x[i]);
  }
  cr_assert(lo >= 0.0f && hi <= 1.0f && hi > 0.9f);
  /* The caller applies the training set's stats; the test set then comes out
   * close to, but not exactly at, mean 0 and std 1. */
  bt_data_normalize(&ds, 0.2860f, 0.3530f);
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_assert(fabsf(mean) < 0.02f && fabsf(std - 1.0f) < 0.02f, "mean %f std %f", mean, std);
  bt_dataset_free(&ds);
}

/* ---- loader errors on missing and damaged files ---------------------------- */

Test(data_fmnist, missing_dir_names_file_and_package) {
  bt_dataset ds;
  bt_err err = {{0}};
  int rc = bt_data_load_fashion_mnist("/nonexistent/bt-no-such-dir", 1, &ds, &err);
  cr_assert_lt(rc, 0);
  cr_assert_null(ds.x);
  cr_assert_not_null(strstr(err.msg, "/nonexistent/bt-no-such-dir/train-"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, "-ubyte.gz"), "%s", err.msg);
  cr_assert_not_null(strstr(err.msg, HINT), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'), "one line");
}

Test(data_fmnist, missing_image_file_named, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 5, 5, good_labels);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, HINT), "%s", m);
}

Test(data_fmnist, small_valid_files_load_exactly, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_load_fashion_mnist(tmpdir, 0, &ds, &err), 0, "%s", err.msg);
  cr_assert_eq(ds.n, 5);
  cr_assert_eq(ds.h, 28);
  cr_assert_eq(ds.w, 28);
  cr_assert_eq(ds.c, 1);
  cr_assert_eq(ds.classes, 10);
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(ds.y[i], good_labels[i]);
    for (int k = 0; k < PIX; k++) {
      float want = (float)((i * 31 + k) & 255) / 255.0f;
      cr_assert_eq(ds.x[i * PIX + k], want, "pixel %d of image %d", k, i);
    }
  }
  bt_dataset_free(&ds);
  bt_dataset_free(&ds); /* freeing twice is harmless */
}

Test(data_fmnist, truncated_images, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_images("t10k-images-idx3-ubyte.gz", 0x803, 5, 3, 28, 28);
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 5, 5, good_labels);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "truncated"), "%s", m);
  cr_assert_not_null(strstr(m, "3920"), "names expected bytes: %s", m);
  cr_assert_not_null(strstr(m, "2352"), "names bytes found: %s", m);
}

Test(data_fmnist, truncated_header, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  unsigned char b[6] = {0, 0, 8, 1, 0, 0};
  write_gz("t10k-labels-idx1-ubyte.gz", b, sizeof b);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-labels-idx1-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "truncated"), "%s", m);
  cr_assert_not_null(strstr(m, "header"), "%s", m);
}

Test(data_fmnist, cut_gzip_stream, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  size_t len;
  unsigned char *b = read_raw("t10k-images-idx3-ubyte.gz", &len);
  write_raw("t10k-images-idx3-ubyte.gz", b, len / 2);
  free(b);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "truncated"), "%s", m);
}

Test(data_fmnist, gzip_trailer_cut, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  size_t len;
  unsigned char *b = read_raw("t10k-labels-idx1-ubyte.gz", &len);
  write_raw("t10k-labels-idx1-ubyte.gz", b, len - 4); /* data complete, trailer cut */
  free(b);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-labels-idx1-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "truncated"), "%s", m);
}

Test(data_fmnist, gzip_crc_mismatch, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  size_t len;
  unsigned char *b = read_raw("t10k-images-idx3-ubyte.gz", &len);
  b[len - 8] ^= 0x5a; /* first byte of the CRC-32 in the gzip trailer */
  write_raw("t10k-images-idx3-ubyte.gz", b, len);
  free(b);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "corrupt gzip data"), "%s", m);
  const char *first = strstr(m, tmpdir);
  cr_assert_not_null(first);
  cr_assert_null(strstr(first + 1, tmpdir), "the path is said once, not again in zlib's text: %s",
                 m);
}

Test(data_fmnist, bad_magic, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  /* A labels file where the images file belongs: the commonest mix-up. */
  write_images("t10k-images-idx3-ubyte.gz", 0x801, 5, 5, 28, 28);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "magic"), "%s", m);
  cr_assert_not_null(strstr(m, "0x00000801"), "%s", m);
  cr_assert_not_null(strstr(m, "0x00000803"), "%s", m);
}

Test(data_fmnist, not_gzip_garbage, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  const unsigned char junk[] = "<html>404 not found</html>";
  write_raw("t10k-labels-idx1-ubyte.gz", junk, sizeof junk);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-labels-idx1-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "magic"), "%s", m);
}

Test(data_fmnist, wrong_dimensions, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  write_images("t10k-images-idx3-ubyte.gz", 0x803, 5, 5, 32, 32);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-images-idx3-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "32x32"), "%s", m);
}

Test(data_fmnist, count_mismatch, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_images("t10k-images-idx3-ubyte.gz", 0x803, 4, 4, 28, 28);
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 5, 5, good_labels);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "4 images"), "%s", m);
  cr_assert_not_null(strstr(m, "5 labels"), "%s", m);
}

Test(data_fmnist, extra_data_after_count, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 4, 5, good_labels);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-labels-idx1-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "more data"), "%s", m);
}

Test(data_fmnist, label_out_of_range, .init = make_tmpdir, .fini = remove_tmpdir) {
  write_good_test_split();
  const unsigned char bad[5] = {3, 0, 9, 10, 7};
  write_labels("t10k-labels-idx1-ubyte.gz", 0x801, 5, 5, bad);
  bt_err err;
  const char *m = load_fails(&err);
  cr_assert_not_null(strstr(m, "t10k-labels-idx1-ubyte.gz"), "%s", m);
  cr_assert_not_null(strstr(m, "label 10 of sample 3"), "%s", m);
}

/* ---- stats and normalisation ----------------------------------------------- */

Test(data_norm, stats_of_known_values) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  int32_t y[3] = {0, 1, 0};
  bt_dataset ds = {.n = 3, .h = 1, .w = 1, .c = 2, .classes = 2, .x = x, .y = y};
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_assert_float_eq(mean, 3.5f, 1e-6f);
  cr_assert_float_eq(std, sqrtf(35.0f / 12.0f), 1e-6f);
  bt_dataset empty = {0};
  bt_data_stats(&empty, &mean, &std);
  cr_assert_eq(mean, 0.0f);
  cr_assert_eq(std, 0.0f);
}

Test(data_norm, normalize_gives_mean0_std1) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(500, 8, 8, 3, 10, 42, &ds, &err), 0, "%s", err.msg);
  /* Shift and scale so there is something to undo. */
  for (size_t i = 0; i < (size_t)ds.n * 8 * 8 * 3; i++)
    ds.x[i] = 0.25f * ds.x[i] + 3.0f;
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_assert(fabsf(mean - 3.0f) < 0.01f && fabsf(std - 0.25f) < 0.01f, "mean %f std %f", mean, std);
  bt_data_normalize(&ds, mean, std);
  bt_data_stats(&ds, &mean, &std);
  cr_assert(fabsf(mean) < 1e-5f, "mean %g", mean);
  cr_assert(fabsf(std - 1.0f) < 1e-5f, "std %g", std);
  bt_dataset_free(&ds);
}

Test(data_norm, constant_data_does_not_become_nan) {
  float x[4] = {2, 2, 2, 2};
  int32_t y[4] = {0};
  bt_dataset ds = {.n = 4, .h = 1, .w = 1, .c = 1, .classes = 2, .x = x, .y = y};
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_assert_eq(std, 0.0f);
  bt_data_normalize(&ds, mean, std);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(x[i], 0.0f);
}

/* ---- permutation ------------------------------------------------------------ */

static void assert_is_permutation(const long *idx, long n) {
  char *seen = calloc((size_t)n, 1);
  for (long i = 0; i < n; i++) {
    cr_assert(idx[i] >= 0 && idx[i] < n, "idx[%ld] = %ld out of range", i, idx[i]);
    cr_assert_eq(seen[idx[i]], 0, "%ld appears twice", idx[i]);
    seen[idx[i]] = 1;
  }
  free(seen);
}

Test(data_perm, permutation_reproducible_and_differs_by_epoch) {
  enum { N = 1000 };
  static long a[N], b[N], c[N], d[N];
  bt_data_permutation(N, 7, 0, a);
  bt_data_permutation(N, 7, 0, b);
  bt_data_permutation(N, 7, 1, c);
  bt_data_permutation(N, 8, 0, d);
  assert_is_permutation(a, N);
  assert_is_permutation(c, N);
  assert_is_permutation(d, N);
  cr_assert_eq(memcmp(a, b, sizeof a), 0, "same (seed, epoch) gives the same order");
  cr_assert_neq(memcmp(a, c, sizeof a), 0, "another epoch gives another order");
  cr_assert_neq(memcmp(a, d, sizeof a), 0, "another seed gives another order");
  long fixed = 0;
  for (long i = 0; i < N; i++)
    fixed += a[i] == i;
  cr_assert_lt(fixed, 20, "a shuffle moves nearly everything (%ld fixed points)", fixed);
}

Test(data_perm, every_epoch_of_many_differs) {
  enum { N = 50, E = 20 };
  static long p[E][N];
  for (int e = 0; e < E; e++) {
    bt_data_permutation(N, 123, e, p[e]);
    assert_is_permutation(p[e], N);
    for (int f = 0; f < e; f++)
      cr_assert_neq(memcmp(p[e], p[f], sizeof p[e]), 0, "epochs %d and %d agree", e, f);
  }
}

Test(data_perm, tiny_sizes) {
  long one = 99;
  bt_data_permutation(1, 1, 0, &one);
  cr_assert_eq(one, 0);
  bt_data_permutation(0, 1, 0, NULL); /* nothing to do, touches nothing */
  long two[2];
  int seen_swap = 0, seen_id = 0;
  for (long e = 0; e < 64; e++) {
    bt_data_permutation(2, 5, e, two);
    assert_is_permutation(two, 2);
    seen_swap |= two[0] == 1;
    seen_id |= two[0] == 0;
  }
  cr_assert(seen_swap && seen_id, "both orders of two items occur");
}

/* ---- synthetic -------------------------------------------------------------- */

Test(data_synth, deterministic_and_seed_dependent) {
  bt_dataset a, b, c;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(200, 6, 5, 2, 10, 99, &a, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_data_synthetic(200, 6, 5, 2, 10, 99, &b, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_data_synthetic(200, 6, 5, 2, 10, 100, &c, &err), 0, "%s", err.msg);
  size_t m = 200 * 6 * 5 * 2;
  cr_assert_eq(a.n, 200);
  cr_assert_eq(a.h, 6);
  cr_assert_eq(a.w, 5);
  cr_assert_eq(a.c, 2);
  cr_assert_eq(a.classes, 10);
  cr_assert_eq(memcmp(a.x, b.x, m * sizeof(float)), 0);
  cr_assert_eq(memcmp(a.y, b.y, 200 * sizeof(int32_t)), 0);
  cr_assert_neq(memcmp(a.x, c.x, m * sizeof(float)), 0);
  cr_assert_neq(memcmp(a.y, c.y, 200 * sizeof(int32_t)), 0);
  bt_dataset_free(&a);
  bt_dataset_free(&b);
  bt_dataset_free(&c);
}

Test(data_synth, prefix_stable_across_n) {
  /* Sample i does not depend on how many samples are made. */
  bt_dataset a, b;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(30, 4, 4, 1, 5, 3, &a, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_data_synthetic(60, 4, 4, 1, 5, 3, &b, &err), 0, "%s", err.msg);
  cr_assert_eq(memcmp(a.x, b.x, 30 * 16 * sizeof(float)), 0);
  cr_assert_eq(memcmp(a.y, b.y, 30 * sizeof(int32_t)), 0);
  bt_dataset_free(&a);
  bt_dataset_free(&b);
}

Test(data_synth, inputs_standard_normal_labels_spread) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(2000, 28, 28, 1, 10, 1, &ds, &err), 0, "%s", err.msg);
  float mean, std;
  bt_data_stats(&ds, &mean, &std);
  cr_assert(fabsf(mean) < 0.01f && fabsf(std - 1.0f) < 0.01f, "mean %f std %f", mean, std);
  long hist[10] = {0};
  for (long i = 0; i < ds.n; i++) {
    cr_assert(ds.y[i] >= 0 && ds.y[i] < 10);
    hist[ds.y[i]]++;
  }
  for (int k = 0; k < 10; k++)
    cr_assert_gt(hist[k], 50, "class %d has only %ld of 2000 samples", k, hist[k]);
  bt_dataset_free(&ds);
}

Test(data_synth, many_classes_use_low_rank_path) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(3000, 4, 4, 3, 100, 5, &ds, &err), 0, "%s", err.msg);
  char seen[100] = {0};
  int distinct = 0;
  for (long i = 0; i < ds.n; i++) {
    cr_assert(ds.y[i] >= 0 && ds.y[i] < 100);
    distinct += !seen[ds.y[i]];
    seen[ds.y[i]] = 1;
  }
  cr_assert_gt(distinct, 50, "only %d of 100 classes occur", distinct);
  bt_dataset_free(&ds);
}

/* A multi-class perceptron reaching high training accuracy shows the labels
 * are a (nearly) linearly separable function of the inputs: learnable. */
Test(data_synth, labels_learnable_by_linear_model) {
  enum { N = 2000, D = 16, K = 4 };
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(N, 4, 4, 1, K, 11, &ds, &err), 0, "%s", err.msg);
  static float wts[K][D];
  memset(wts, 0, sizeof wts);
  int correct = 0;
  for (int epoch = 0; epoch < 50; epoch++) {
    correct = 0;
    for (int i = 0; i < N; i++) {
      const float *x = ds.x + i * D;
      int best = 0;
      float bs = -INFINITY;
      for (int k = 0; k < K; k++) {
        float s = 0;
        for (int j = 0; j < D; j++)
          s += wts[k][j] * x[j];
        if (s > bs) {
          bs = s;
          best = k;
        }
      }
      if (best == ds.y[i]) {
        correct++;
      } else {
        for (int j = 0; j < D; j++) {
          wts[ds.y[i]][j] += x[j];
          wts[best][j] -= x[j];
        }
      }
    }
  }
  cr_log_info("perceptron train accuracy %.3f", correct / (double)N);
  cr_assert_gt(correct, N * 95 / 100, "perceptron fits only %d of %d", correct, N);
  bt_dataset_free(&ds);
}

Test(data_synth, rejects_bad_arguments) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_lt(bt_data_synthetic(0, 4, 4, 1, 10, 1, &ds, &err), 0);
  cr_assert_not_null(strstr(err.msg, "n=0"), "%s", err.msg);
  cr_assert_null(ds.x);
  cr_assert_lt(bt_data_synthetic(10, 4, -1, 1, 10, 1, &ds, &err), 0);
  cr_assert_not_null(strstr(err.msg, "w=-1"), "%s", err.msg);
  cr_assert_lt(bt_data_synthetic(10, 4, 4, 0, 10, 1, &ds, &err), 0);
  cr_assert_lt(bt_data_synthetic(10, 4, 4, 1, 1, 1, &ds, &err), 0);
  cr_assert_not_null(strstr(err.msg, "classes"), "%s", err.msg);
  cr_assert_lt(bt_data_synthetic(1L << 40, 1 << 20, 1 << 20, 3, 10, 1, &ds, &err), 0);
  cr_assert_not_null(strstr(err.msg, "overflow"), "%s", err.msg);
  cr_assert_null(ds.x);
  cr_assert_null(ds.y);
  cr_assert_eq(ds.n, 0);
}

/* ---- gather ---------------------------------------------------------------- */

Test(data_gather, copies_samples_in_index_order) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(20, 3, 2, 2, 4, 8, &ds, &err), 0, "%s", err.msg);
  const long idx[5] = {5, 0, 19, 5, 7};
  enum { D = 3 * 2 * 2 };
  float x[5 * D];
  int32_t y[5];
  memset(x, 0xff, sizeof x);
  bt_data_gather(&ds, idx, 5, x, y);
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(memcmp(x + i * D, ds.x + idx[i] * D, D * sizeof(float)), 0, "sample %d", i);
    cr_assert_eq(y[i], ds.y[idx[i]]);
  }
  int32_t y2[5] = {-1, -1, -1, -1, -1};
  bt_data_gather(&ds, idx, 5, NULL, y2);
  cr_assert_eq(memcmp(y, y2, sizeof y), 0, "labels only");
  bt_dataset_free(&ds);
}

Test(data_gather, full_permuted_epoch_preserves_pairs) {
  bt_dataset ds;
  bt_err err = {{0}};
  cr_assert_eq(bt_data_synthetic(64, 2, 2, 1, 3, 4, &ds, &err), 0, "%s", err.msg);
  long idx[64];
  bt_data_permutation(64, 4, 2, idx);
  float x[64 * 4];
  int32_t y[64];
  /* Two half batches, as a training loop would take them. */
  bt_data_gather(&ds, idx, 32, x, y);
  bt_data_gather(&ds, idx + 32, 32, x + 32 * 4, y + 32);
  double sum_in = 0, sum_out = 0;
  for (int i = 0; i < 64; i++) {
    cr_assert_eq(y[i], ds.y[idx[i]]);
    cr_assert_eq(x[i * 4 + 3], ds.x[idx[i] * 4 + 3]);
    for (int j = 0; j < 4; j++) {
      sum_in += ds.x[i * 4 + j];
      sum_out += x[i * 4 + j];
    }
  }
  cr_assert_float_eq(sum_in, sum_out, 1e-9);
  bt_dataset_free(&ds);
}
