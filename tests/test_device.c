/* Tests for device: every shipped profile loads; mistakes in a profile are
 * one-line file:line:col errors; the device-time model has the properties
 * docs/devices.md promises (monotone in work, fixed costs dominate tiny ops,
 * memory-bound ops ignore FLOP rates, throttling starts at its iteration, GPU
 * boards are relatively worse on small layers, analytic and host-mapped
 * modes agree); memory accounting matches the stage allocator and fails
 * with a useful message. */
#include "baton/device.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton/model.h"

#ifndef BT_SOURCE_ROOT
#define BT_SOURCE_ROOT "."
#endif
#define DATA_DIR BT_SOURCE_ROOT "/data"

#define assert_has(msg, needle)                                                                    \
  cr_assert(strstr((msg), (needle)) != NULL, "expected \"%s\" in: %s", (needle), (msg))

static const char *const shipped[] = {
    "jetson-nano", "jetson-tx2", "jetson-xavier-nx", "jetson-orin-nano", "rpi3bplus",
    "rpi4",        "rpi5",       "x86-laptop"};
enum { N_SHIPPED = sizeof shipped / sizeof shipped[0] };

/* A valid profile; tests splice mistakes into copies of it. */
static const char *const GOOD = "name: testdev\n"
                                "description: a test board\n"
                                "kind: gpu\n"
                                "compute:\n"
                                "  conv_gflops: 100\n"
                                "  dwconv_gflops: 10\n"
                                "  dense_gflops: 80\n"
                                "  elementwise_gbs: 20\n"
                                "  pool_norm_gbs: 15\n"
                                "  op_overhead_us: 20\n"
                                "  half_util_flops: 2e6\n"
                                "memory:\n"
                                "  capacity_mib: 1024\n"
                                "  bandwidth_gbs: 25.6\n"
                                "  cache_kib: 256\n"
                                "  cache_speedup: 2\n"
                                "link:\n"
                                "  bandwidth_mbps: 100\n"
                                "  latency_ms: 1\n";

/* GOOD with the first occurrence of `from` replaced by `to`. */
static char *variant(const char *from, const char *to) {
  const char *p = strstr(GOOD, from);
  cr_assert(p, "fixture text '%s' not in GOOD", from);
  size_t n = strlen(GOOD) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  snprintf(s, n, "%.*s%s%s", (int)(p - GOOD), GOOD, to, p + strlen(from));
  return s;
}

/* Loads `text`, expects failure with each of the needles in the message. */
static void expect_error(const char *text, const char *needle1, const char *needle2) {
  bt_device d;
  bt_err err = {{0}};
  int rc = bt_device_load_string(text, "p.yaml", &d, &err);
  cr_assert_lt(rc, 0, "expected an error for:\n%s", text);
  assert_has(err.msg, "p.yaml:");
  assert_has(err.msg, needle1);
  if (needle2)
    assert_has(err.msg, needle2);
  cr_assert(strchr(err.msg, '\n') == NULL, "one line: %s", err.msg);
  cr_assert_eq(d.name[0], '\0', "a failed load leaves the profile empty");
}

static bt_device load_good(void) {
  bt_device d;
  bt_err err;
  cr_assert_eq(bt_device_load_string(GOOD, "good", &d, &err), 0, "%s", err.msg);
  return d;
}

static bt_device find(const char *name) {
  bt_device d;
  bt_err err;
  cr_assert_eq(bt_device_find(name, DATA_DIR, &d, &err), 0, "%s", err.msg);
  return d;
}

static bt_model zoo(const char *name, bt_shape in, int classes) {
  bt_model m;
  bt_err err;
  cr_assert_eq(bt_zoo_build(name, in, classes, &m, &err), 0, "%s", err.msg);
  return m;
}

/* A finalized single conv layer (for small/large layer comparisons). */
static bt_layer conv_layer(int hw, int cin, int cout) {
  bt_layer l = bt_conv2d(cout, 3, 1, 1);
  l.in = (bt_shape){hw, hw, cin};
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, "conv", &err), 0, "%s", err.msg);
  return l;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(a), fabs(b)); }

/* ---- shipped profiles ---------------------------------------------------- */

Test(profiles, every_shipped_profile_loads) {
  bt_device_names names;
  bt_err err;
  cr_assert_eq(bt_device_list(DATA_DIR, &names, &err), 0, "%s", err.msg);
  cr_assert_geq(names.count, N_SHIPPED);
  for (int i = 0; i < N_SHIPPED; i++) {
    int listed = 0;
    for (int j = 0; j < names.count; j++)
      listed |= strcmp(names.names[j], shipped[i]) == 0;
    cr_assert(listed, "%s is not in data/devices", shipped[i]);
  }
  for (int j = 0; j < names.count; j++) {
    if (j > 0)
      cr_assert_lt(strcmp(names.names[j - 1], names.names[j]), 0, "sorted");
    bt_device d = find(names.names[j]);
    cr_assert_str_eq(d.name, names.names[j]);
    cr_assert(d.description[0], "%s: describe the board", d.name);
    for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
      cr_assert_gt(d.rate[c], 0, "%s: rate %s", d.name, bt_op_class_name((bt_op_class)c));
    cr_assert_gt(d.capacity_mib, 0);
    cr_assert_gt(d.link_bandwidth_mbps, 0);
    /* Sustained element-wise streaming cannot beat the DRAM wire rate. */
    cr_assert_leq(d.rate[BT_OP_ELEMENTWISE], d.bandwidth_gbs, "%s", d.name);
  }
  bt_device_names_free(&names);
}

Test(profiles, kinds_and_the_character_of_gpu_boards) {
  for (int i = 0; i < N_SHIPPED; i++) {
    bt_device d = find(shipped[i]);
    int jetson = strncmp(d.name, "jetson", 6) == 0;
    cr_assert_eq(d.kind, jetson ? BT_DEVICE_GPU : BT_DEVICE_CPU, "%s", d.name);
    /* GPU boards: costly launches and a large fill-up size; CPU boards: small. */
    if (jetson) {
      cr_assert_geq(d.op_overhead_us, 5, "%s", d.name);
      cr_assert_geq(d.half_util_flops, 1e6, "%s", d.name);
    } else {
      cr_assert_leq(d.half_util_flops, 1e6, "%s", d.name);
    }
  }
}

/* ---- strict loading ------------------------------------------------------ */

Test(loading, good_profile_and_defaults) {
  bt_device d = load_good();
  cr_assert_str_eq(d.name, "testdev");
  cr_assert_eq(d.kind, BT_DEVICE_GPU);
  cr_assert_eq(d.rate[BT_OP_CONV], 100);
  cr_assert_eq(d.rate[BT_OP_POOL_NORM], 15);
  cr_assert_eq(d.half_util_flops, 2e6);
  cr_assert_eq(d.cache_speedup, 2);
  cr_assert_eq(d.n_throttle, 0);
  char *s = variant("  cache_speedup: 2\n", "");
  bt_err err;
  cr_assert_eq(bt_device_load_string(s, "x", &d, &err), 0, "%s", err.msg);
  cr_assert_eq(d.cache_speedup, 1, "cache_speedup defaults to 1");
  free(s);
}

Test(loading, unknown_keys) {
  char *s = variant("kind: gpu\n", "kind: gpu\nspeed: 3\n");
  expect_error(s, "p.yaml:4:1:", "unknown key 'speed'");
  free(s);
  s = variant("  conv_gflops: 100\n", "  conv_gflops: 100\n  conv_gflop: 100\n");
  expect_error(s, "p.yaml:6:3:", "allowed: conv_gflops");
  free(s);
}

Test(loading, negative_nan_zero_and_non_numbers) {
  char *s = variant("op_overhead_us: 20", "op_overhead_us: -1");
  expect_error(s, "p.yaml:10:19:", "compute.op_overhead_us: -1 is out of range");
  free(s);
  s = variant("conv_gflops: 100", "conv_gflops: .nan");
  expect_error(s, "p.yaml:5:16:", "expected a number");
  free(s);
  s = variant("conv_gflops: 100", "conv_gflops: 1e999");
  expect_error(s, "not a finite number", NULL);
  free(s);
  s = variant("conv_gflops: 100", "conv_gflops: 0");
  expect_error(s, "must be > 0", NULL);
  free(s);
  s = variant("conv_gflops: 100", "conv_gflops: \"100\"");
  expect_error(s, "remove the quotes", NULL);
  free(s);
  s = variant("conv_gflops: 100", "conv_gflops: [100]");
  expect_error(s, "expected a number, got a list", NULL);
  free(s);
  s = variant("cache_speedup: 2", "cache_speedup: 0.5");
  expect_error(s, "memory.cache_speedup", ">= 1");
  free(s);
}

Test(loading, structure_errors) {
  char *s = variant("kind: gpu", "kind: npu");
  expect_error(s, "kind: expected gpu or cpu", NULL);
  free(s);
  s = variant("  latency_ms: 1\n", "");
  expect_error(s, "link: missing 'latency_ms'", NULL);
  free(s);
  s = variant("name: testdev\n", "");
  expect_error(s, "missing 'name'", NULL);
  free(s);
  s = variant("kind: gpu\n", "kind: gpu\nkind: cpu\n");
  expect_error(s, "given twice", NULL);
  free(s);
  s = variant("memory:\n", "memory: 3\nmemory_x:\n");
  expect_error(s, "unknown key 'memory_x'", NULL);
  free(s);
  expect_error("name: [\n", "invalid YAML", NULL);
  bt_device d;
  bt_err err;
  cr_assert_lt(bt_device_load_string("", "p.yaml", &d, &err), 0);
  assert_has(err.msg, "empty device profile");
  size_t n = strlen(GOOD) * 2 + 8;
  char *two = malloc(n);
  snprintf(two, n, "%s---\n%s", GOOD, GOOD);
  expect_error(two, "second YAML document", NULL);
  free(two);
}

Test(loading, throttle_entries) {
  char *s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle:\n"
                                         "  - {after_iteration: 50, conv: 2.0}\n"
                                         "  - {after_iteration: 80, all: 1.5, dense: 2}\n");
  bt_device d;
  bt_err err;
  cr_assert_eq(bt_device_load_string(s, "t", &d, &err), 0, "%s", err.msg);
  free(s);
  cr_assert_eq(d.n_throttle, 2);
  cr_assert_eq(d.throttle[0].after_iteration, 50);
  cr_assert_eq(d.throttle[0].factor[BT_OP_CONV], 2.0);
  cr_assert_eq(d.throttle[0].factor[BT_OP_DENSE], 1.0);
  cr_assert_eq(d.throttle[1].factor[BT_OP_CONV], 1.5, "all applies to every class");
  cr_assert_eq(d.throttle[1].factor[BT_OP_DENSE], 3.0, "a class factor multiplies all");

  s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle:\n"
                                   "  - {after_iteration: 50, conv: 2}\n"
                                   "  - {after_iteration: 50, conv: 3}\n");
  expect_error(s, "does not come after", NULL);
  free(s);
  s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle: [{after_iteration: 5}]\n");
  expect_error(s, "at least one factor", NULL);
  free(s);
  s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle: [{conv: 2}]\n");
  expect_error(s, "missing 'after_iteration'", NULL);
  free(s);
  s = variant("  latency_ms: 1\n",
              "  latency_ms: 1\nthrottle: [{after_iteration: 2.5, conv: 2}]\n");
  expect_error(s, "whole iteration", NULL);
  free(s);
  s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle: [{after_iteration: 1, gpu: 2}]\n");
  expect_error(s, "unknown key 'gpu'", NULL);
  free(s);
  s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle: [{after_iteration: 1, conv: -2}]\n");
  expect_error(s, "out of range", NULL);
  free(s);
}

Test(finding, unknown_name_lists_the_known_ones) {
  bt_device d;
  bt_err err;
  cr_assert_lt(bt_device_find("jetson-nanoo", DATA_DIR, &d, &err), 0);
  assert_has(err.msg, "unknown device 'jetson-nanoo'");
  for (int i = 0; i < N_SHIPPED; i++)
    assert_has(err.msg, shipped[i]);
  cr_assert_lt(bt_device_find("../models/lenet5", DATA_DIR, &d, &err), 0);
  assert_has(err.msg, "not a profile name");
  cr_assert_lt(bt_device_find("rpi4", "/nonexistent", &d, &err), 0);
  assert_has(err.msg, "none found");
}

Test(finding, file_name_must_match_profile_name) {
  char dir[] = "/tmp/bt_devtestXXXXXX";
  cr_assert(mkdtemp(dir));
  char sub[64], path[96];
  snprintf(sub, sizeof sub, "%s/devices", dir);
  cr_assert_eq(mkdir(sub, 0700), 0);
  snprintf(path, sizeof path, "%s/other.yaml", sub);
  FILE *f = fopen(path, "w");
  fputs(GOOD, f);
  fclose(f);
  bt_device d;
  bt_err err;
  cr_assert_lt(bt_device_find("other", dir, &d, &err), 0);
  assert_has(err.msg, "its file must be testdev.yaml");
  unlink(path);
  rmdir(sub);
  rmdir(dir);
}

/* ---- the model ------------------------------------------------------------- */

Test(model, monotone_in_work) {
  for (int i = 0; i < N_SHIPPED; i++) {
    bt_device d = find(shipped[i]);
    double prev_c = 0, prev_e = 0, prev_d = 0;
    for (double w = 1e3; w < 1e12; w *= 1.7) {
      bt_device_op conv = {BT_OP_CONV, w, w / 20};
      bt_device_op dense = {BT_OP_DENSE, w, w / 2};
      bt_device_op elem = {BT_OP_ELEMENTWISE, 0, w / 10};
      double tc = bt_device_op_analytic(&d, &conv, 0), te = bt_device_op_analytic(&d, &elem, 0),
             td = bt_device_op_analytic(&d, &dense, 0);
      cr_assert_geq(tc, prev_c, "%s conv at %g", d.name, w);
      cr_assert_geq(te, prev_e, "%s elementwise at %g (cache boundary included)", d.name, w);
      cr_assert_geq(td, prev_d, "%s dense at %g", d.name, w);
      prev_c = tc, prev_e = te, prev_d = td;
    }
  }
}

Test(model, fixed_costs_dominate_tiny_ops) {
  for (int i = 0; i < N_SHIPPED; i++) {
    bt_device d = find(shipped[i]);
    bt_device_op tiny = {BT_OP_CONV, 1e3, 1e3}, tiny2 = {BT_OP_CONV, 2e3, 2e3};
    double t1 = bt_device_op_analytic(&d, &tiny, 0), t2 = bt_device_op_analytic(&d, &tiny2, 0);
    cr_assert_geq(t1, d.op_overhead_us * 1e-6);
    cr_assert_lt(rel(t1, t2), 0.05, "%s: doubling a tiny op barely changes its time", d.name);
    /* Far from FLOP-proportional: */
    cr_assert_gt(t1 / (1e3 / (d.rate[BT_OP_CONV] * 1e9)), 20.0, "%s", d.name);
    /* Fixed costs: the overhead plus, for a compute op, the fill-up time. */
    double fixed = d.op_overhead_us * 1e-6 + d.half_util_flops / (d.rate[BT_OP_CONV] * 1e9);
    cr_assert_gt(fixed / t1, 0.95, "%s: fixed costs are most of it", d.name);
    bt_device_op relu = {BT_OP_ELEMENTWISE, 16, 64};
    cr_assert_gt(d.op_overhead_us * 1e-6 / bt_device_op_analytic(&d, &relu, 0), 0.9, "%s", d.name);
  }
}

Test(model, large_compute_ops_follow_the_rate) {
  bt_device d = find("jetson-nano");
  bt_device_op big = {BT_OP_CONV, 1e12, 1e8};
  double t = bt_device_op_analytic(&d, &big, 0);
  cr_assert_lt(rel(t, 1e12 / (d.rate[BT_OP_CONV] * 1e9)), 0.001);
  cr_assert_lt(rel(bt_device_util(&d, 1e12), 1.0), 1e-5);
  cr_assert_lt(rel(bt_device_util(&d, d.half_util_flops), 0.5), 1e-12);
}

Test(model, memory_bound_ops_ignore_flop_rates) {
  for (int i = 0; i < N_SHIPPED; i++) {
    bt_device d = find(shipped[i]), fast = d;
    fast.rate[BT_OP_CONV] *= 10;
    fast.rate[BT_OP_DENSE] *= 10;
    fast.rate[BT_OP_DWCONV] *= 10;
    fast.half_util_flops = 0;
    for (double bytes = 1e3; bytes < 1e10; bytes *= 7) {
      for (int c = BT_OP_ELEMENTWISE; c <= BT_OP_POOL_NORM; c++) {
        bt_device_op op = {(bt_op_class)c, bytes / 4, bytes}, op2 = {(bt_op_class)c, bytes * 100, bytes};
        double t = bt_device_op_analytic(&d, &op, 0);
        cr_assert_eq(t, bt_device_op_analytic(&fast, &op, 0), "%s", d.name);
        cr_assert_eq(t, bt_device_op_analytic(&d, &op2, 0), "FLOPs do not matter");
      }
    }
    /* ... and follow bandwidth: twice the GB/s, half the busy time. */
    bt_device bw = d;
    bw.rate[BT_OP_ELEMENTWISE] *= 2;
    bt_device_op big = {BT_OP_ELEMENTWISE, 0, 1e10};
    cr_assert_lt(rel(bt_device_op_busy(&d, &big, 0), 2 * bt_device_op_busy(&bw, &big, 0)), 1e-12);
  }
}

Test(model, cache_term) {
  bt_device d = load_good(); /* 256 KiB cache, x2 */
  bt_device_op in = {BT_OP_ELEMENTWISE, 0, 200 * 1024.0}, out = {BT_OP_ELEMENTWISE, 0, 300 * 1024.0};
  double per_byte_in = bt_device_op_busy(&d, &in, 0) / in.bytes;
  double per_byte_out = bt_device_op_busy(&d, &out, 0) / out.bytes;
  cr_assert_lt(rel(per_byte_out, 2 * per_byte_in), 1e-12, "inside the cache: twice as fast");
  cr_assert_lt(rel(per_byte_out, 1.0 / 20e9), 1e-12, "outside: the element-wise bandwidth");
}

Test(model, throttle_applies_from_its_iteration) {
  char *s = variant("  latency_ms: 1\n", "  latency_ms: 1\nthrottle:\n"
                                         "  - {after_iteration: 50, conv: 2.0}\n"
                                         "  - {after_iteration: 90, all: 1}\n");
  bt_device d;
  bt_err err;
  cr_assert_eq(bt_device_load_string(s, "t", &d, &err), 0, "%s", err.msg);
  free(s);
  bt_device_op conv = {BT_OP_CONV, 1e10, 1e6}, dense = {BT_OP_DENSE, 1e10, 1e6};
  double c0 = bt_device_op_busy(&d, &conv, 0), c49 = bt_device_op_busy(&d, &conv, 49);
  double c50 = bt_device_op_busy(&d, &conv, 50), c89 = bt_device_op_busy(&d, &conv, 89);
  double c90 = bt_device_op_busy(&d, &conv, 90);
  cr_assert_eq(c0, c49);
  cr_assert_lt(rel(c50, 2 * c49), 1e-12);
  cr_assert_eq(c89, c50);
  cr_assert_eq(c90, c0, "the next entry replaces it");
  cr_assert_eq(bt_device_op_busy(&d, &dense, 60), bt_device_op_busy(&d, &dense, 0));
  /* The overhead is not throttled. */
  double a49 = bt_device_op_analytic(&d, &conv, 49), a50 = bt_device_op_analytic(&d, &conv, 50);
  cr_assert_lt(rel(a50 - a49, c49), 1e-9);
  /* Layers too: a conv layer's busy time doubles at 50. */
  bt_layer l = conv_layer(32, 64, 64);
  bt_layer_time t49 = bt_device_layer_analytic(&d, &l, 8, BT_PASS_FWD, 49);
  bt_layer_time t50 = bt_device_layer_analytic(&d, &l, 8, BT_PASS_FWD, 50);
  cr_assert_lt(rel(t50.by_class[BT_OP_CONV], 2 * t49.by_class[BT_OP_CONV]), 1e-12);
}

Test(model, gpu_boards_are_relatively_worse_on_small_layers) {
  bt_layer small = conv_layer(8, 8, 8), big = conv_layer(32, 128, 128);
  const char *gpus[] = {"jetson-nano", "jetson-xavier-nx", "jetson-orin-nano"};
  const char *cpus[] = {"rpi4", "rpi5", "x86-laptop"};
  for (int g = 0; g < 3; g++) {
    bt_device gpu = find(gpus[g]);
    for (int c = 0; c < 3; c++) {
      bt_device cpu = find(cpus[c]);
      double rs = bt_device_layer_analytic(&gpu, &small, 1, BT_PASS_FWD, 0).total /
                  bt_device_layer_analytic(&cpu, &small, 1, BT_PASS_FWD, 0).total;
      double rb = bt_device_layer_analytic(&gpu, &big, 32, BT_PASS_FWD, 0).total /
                  bt_device_layer_analytic(&cpu, &big, 32, BT_PASS_FWD, 0).total;
      cr_assert_gt(rs, 2 * rb, "%s vs %s: small %g, big %g", gpu.name, cpu.name, rs, rb);
    }
    /* Its own effective rate: a small layer runs far below the big one's. */
    double fs = bt_layer_flops_fwd(&small), fb = 32 * bt_layer_flops_fwd(&big);
    double es = fs / bt_device_layer_analytic(&gpu, &small, 1, BT_PASS_FWD, 0).total;
    double eb = fb / bt_device_layer_analytic(&gpu, &big, 32, BT_PASS_FWD, 0).total;
    cr_assert_lt(es, eb / 50, "%s", gpu.name);
  }
  bt_layer_release(&small);
  bt_layer_release(&big);
}

/* The host's model from a device's rates: the same numbers on both sides. */
static bt_host_rates host_like(const bt_device *d) {
  return (bt_host_rates){.sgemm_gflops = d->rate[BT_OP_CONV],
                         .conv_gflops = d->rate[BT_OP_CONV],
                         .dense_gflops = d->rate[BT_OP_DENSE],
                         .dwconv_gflops = d->rate[BT_OP_DWCONV],
                         .mem_gbs = d->rate[BT_OP_ELEMENTWISE],
                         .pool_norm_gbs = d->rate[BT_OP_POOL_NORM],
                         .cache_kib = d->cache_kib,
                         .cache_speedup = d->cache_speedup,
                         .half_util_flops = d->half_util_flops};
}

Test(model, analytic_and_mapped_agree_when_host_rates_equal_device_rates) {
  bt_model models[] = {zoo("resnet18", (bt_shape){32, 32, 3}, 10),
                       zoo("mobilenetv2", (bt_shape){32, 32, 3}, 10),
                       zoo("vgg11", (bt_shape){32, 32, 3}, 10)};
  for (int i = 0; i < N_SHIPPED; i++) {
    bt_device d = find(shipped[i]), host;
    bt_host_rates h = host_like(&d);
    bt_err err;
    cr_assert_eq(bt_host_as_device(&h, &host, &err), 0, "%s", err.msg);
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
      for (int j = 0; j < models[k].n_layers; j++) {
        const bt_layer *l = &models[k].layers[j];
        for (int p = 0; p < 2; p++) {
          bt_layer_time a = bt_device_layer_analytic(&d, l, 16, (bt_pass)p, 7);
          /* The host ran the layer in exactly its modelled time. */
          double hs = bt_device_layer_analytic(&d, l, 16, (bt_pass)p, 0).total - a.overhead;
          bt_layer_time m = bt_device_layer_mapped(&d, &host, l, 16, (bt_pass)p, hs, 7);
          cr_assert_lt(rel(a.total, m.total), 1e-9, "%s %s layer %d", d.name, models[k].name, j);
          cr_assert_eq(a.n_ops, m.n_ops);
          for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
            cr_assert(rel(a.by_class[c], m.by_class[c]) < 1e-9 || a.by_class[c] == 0);
        }
      }
    }
  }
  for (size_t k = 0; k < sizeof models / sizeof *models; k++)
    bt_model_free(&models[k]);
}

Test(model, mapped_scales_measured_time_by_the_rate_ratio) {
  bt_device nano = find("jetson-nano"), host;
  bt_host_rates h = {.sgemm_gflops = 230, .mem_gbs = 10};
  bt_err err;
  cr_assert_eq(bt_host_as_device(&h, &host, &err), 0, "%s", err.msg);
  /* Large compute-bound op: host_time * host_rate / device_rate / util. */
  bt_device_op big = {BT_OP_CONV, 1e11, 1e7};
  double hs = 0.5; /* measured: the host ran slower than its calibration says */
  double want = nano.op_overhead_us * 1e-6 +
                hs * 230 / nano.rate[BT_OP_CONV] / bt_device_util(&nano, big.flops);
  cr_assert_lt(rel(bt_device_op_mapped(&nano, &host, &big, hs, 0), want), 1e-9);
  /* Memory-bound op: the device's analytic bandwidth time, whatever the host
   * measured (host caches and neighbours' traffic say nothing of the device). */
  bt_device_op relu = {BT_OP_ELEMENTWISE, 1e8, 8e8};
  want = bt_device_op_analytic(&nano, &relu, 0);
  cr_assert_lt(rel(bt_device_op_mapped(&nano, &host, &relu, hs, 0), want), 1e-9);
  cr_assert_lt(rel(bt_device_op_mapped(&nano, &host, &relu, 10 * hs, 0), want), 1e-9);
  /* Linear in the measured time. */
  double t1 = bt_device_op_mapped(&nano, &host, &big, 1.0, 0) - nano.op_overhead_us * 1e-6;
  double t2 = bt_device_op_mapped(&nano, &host, &big, 2.0, 0) - nano.op_overhead_us * 1e-6;
  cr_assert_lt(rel(t2, 2 * t1), 1e-12);
  /* Consistency with the analytic mode when the host meets its model. */
  bt_device_op ops[] = {{BT_OP_DENSE, 3e5, 4e5}, {BT_OP_DWCONV, 1e7, 4e6}, {BT_OP_POOL_NORM, 0, 1e5}};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    cr_assert_lt(
        rel(bt_device_op_mapped(&nano, &host, &ops[i], bt_device_op_busy(&host, &ops[i], 0), 3),
            bt_device_op_analytic(&nano, &ops[i], 3)),
        1e-9);
  bt_host_rates bad = {.sgemm_gflops = 0, .mem_gbs = 10};
  cr_assert_lt(bt_host_as_device(&bad, &host, &err), 0);
  assert_has(err.msg, "sgemm_gflops");
}

Test(model, layer_ops_by_kind) {
  bt_model m = zoo("resnet18", (bt_shape){32, 32, 3}, 10);
  bt_device_op ops[BT_DEVICE_LAYER_OPS_MAX];
  for (int i = 0; i < m.n_layers; i++) {
    const bt_layer *l = &m.layers[i];
    int n = bt_device_layer_ops(l, 4, BT_PASS_FWD, ops, BT_DEVICE_LAYER_OPS_MAX);
    cr_assert_leq(n, BT_DEVICE_LAYER_OPS_MAX);
    if (l->kind != BT_RESIDUAL) {
      cr_assert_eq(n, 1);
      continue;
    }
    /* Sub-layers, the add, the optional ReLU; FLOPs add up to the block's. */
    cr_assert_eq(n, l->n_body + l->n_short + 1 + (l->post_relu ? 1 : 0));
    double f = 0;
    int convs = 0;
    for (int k = 0; k < n; k++) {
      f += ops[k].flops;
      convs += ops[k].cls == BT_OP_CONV;
      cr_assert_gt(ops[k].bytes, 0);
    }
    cr_assert_lt(rel(f, 4 * bt_layer_flops_fwd(l)), 1e-12);
    cr_assert_geq(convs, 2);
    bt_device d = find("rpi4");
    bt_layer_time t = bt_device_layer_analytic(&d, l, 4, BT_PASS_BWD, 0);
    cr_assert_eq(t.n_ops, n);
    cr_assert_lt(rel(t.overhead, n * d.op_overhead_us * 1e-6), 1e-12);
    double sum = t.overhead;
    for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
      sum += t.by_class[c];
    cr_assert_lt(rel(sum, t.total), 1e-12);
  }
  bt_model_free(&m);
}

Test(model, dense_with_batch_one_is_bandwidth_bound) {
  bt_device d = find("rpi4");
  bt_layer l = bt_dense(4096);
  l.in = (bt_shape){1, 1, 4096};
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, "dense", &err), 0, "%s", err.msg);
  bt_layer_time t = bt_device_layer_analytic(&d, &l, 1, BT_PASS_FWD, 0);
  double weights = 4.0 * 4096 * 4096;
  /* 64 MiB of weights at 5.5 GB/s, not 33.5 MFLOP at 16 GFLOP/s. */
  cr_assert_gt(t.total, 0.9 * weights / (d.rate[BT_OP_ELEMENTWISE] * 1e9));
}

/* ---- memory accounting --------------------------------------------------------- */

Test(memory, need_matches_the_stage_allocator) {
  bt_model m = zoo("lenet5", (bt_shape){32, 32, 3}, 10);
  int first = 2, last = m.n_layers, micro = 8, slots = 3;
  bt_stage s;
  bt_err err;
  cr_assert_eq(bt_stage_init(&s, &m, first, last, micro, slots, 1, &err), 0, "%s", err.msg);
  bt_mem_need need;
  cr_assert_eq(bt_mem_need_stage(&m, first, last, micro, slots, &need, &err), 0, "%s", err.msg);
  double comm =
      4.0 * micro *
      (double)(bt_shape_elems(m.layers[first].in) + bt_shape_elems(m.layers[last - 1].out));
  cr_assert_lt(rel(bt_mem_need_total(&need) - comm, (double)bt_stage_mem_total(&s.mem)), 1e-12,
               "need %g + comm vs allocated %zu", bt_mem_need_total(&need) - comm,
               bt_stage_mem_total(&s.mem));
  cr_assert_eq(need.params, (double)s.mem.params);
  bt_stage_free(&s);
  cr_assert_lt(bt_mem_need_stage(&m, 3, 3, micro, slots, &need, &err), 0);
  assert_has(err.msg, "not a layer range");
  cr_assert_lt(bt_mem_need_stage(&m, 0, 2, 0, 1, &need, &err), 0);
  bt_model_free(&m);
}

Test(memory, capacity_check_and_its_message) {
  bt_device d = find("rpi3bplus");
  bt_model m = zoo("vgg16", (bt_shape){32, 32, 3}, 10);
  bt_mem_need need;
  bt_err err;
  cr_assert_eq(bt_mem_need_stage(&m, 0, m.n_layers, 64, 4, &need, &err), 0, "%s", err.msg);
  double total = bt_mem_need_total(&need);
  cr_assert_gt(total, d.capacity_mib * 1048576.0, "vgg16 x 4 micro-batches exceeds a Pi 3B+");
  cr_assert_lt(bt_device_check_memory(&d, &need, 1.0, &err), 0);
  assert_has(err.msg, "device rpi3bplus");
  assert_has(err.msg, "needs");
  assert_has(err.msg, "700 MiB x memory_scale 1");
  char bytes[64];
  snprintf(bytes, sizeof bytes, "%.0f bytes", total);
  assert_has(err.msg, bytes);
  /* memory_scale stretches the capacity. */
  double scale = total / (d.capacity_mib * 1048576.0) * 1.01;
  cr_assert_eq(bt_device_check_memory(&d, &need, scale, &err), 0, "%s", err.msg);
  cr_assert_lt(bt_device_check_memory(&d, &need, 0.0, &err), 0);
  assert_has(err.msg, "memory_scale");
  /* Fewer micro-batches in flight need less. */
  bt_mem_need one;
  cr_assert_eq(bt_mem_need_stage(&m, 0, m.n_layers, 64, 1, &one, &err), 0, "%s", err.msg);
  cr_assert_lt(bt_mem_need_total(&one), total);
  bt_device x = find("x86-laptop");
  cr_assert_eq(bt_device_check_memory(&x, &need, 1.0, &err), 0, "%s", err.msg);
  bt_model_free(&m);
}
