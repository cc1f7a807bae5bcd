/* Predictor and profiling sets: layer specs, HDF5 round trip and bad files,
 * the head reproducing the device model, few-shot adaptation, online
 * updates after a slowdown, model files, and predictions that are always
 * finite and non-negative. Profiling sets here are synthetic (host times
 * from the host model with a little deterministic scatter, device times
 * through bt_device_layer_mapped), so the suite is fast and deterministic. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton/device.h"
#include "baton/model.h"
#include "baton/predictor.h"
#include "baton/profile.h"

#ifndef BT_SOURCE_ROOT
#define BT_SOURCE_ROOT "."
#endif
#define DATA_DIR BT_SOURCE_ROOT "/data"

static const char *const devs[] = {"jetson-nano", "jetson-tx2", "rpi4", "rpi5", "x86-laptop"};
enum { N_DEVS = 5 };

static double scatter(int i, int pass) { return 1.0 + 0.02 * sin(1.7 * i + 0.9 * pass); }

/* Equal times, or both NaN (not timed). */
static int same_time(double a, double b) { return isnan(a) ? isnan(b) : a == b; }

/* Host seconds t of entry e mapped to device d (NULL: the host keeps them). */
static double map_time(const bt_device *d, const bt_device *host, const bt_profile_entry *e,
                       bt_pass pass, double t) {
  return d ? bt_device_layer_mapped(d, host, &e->layer, e->batch, pass, t, 0).total : t;
}

/* A synthetic profiling set of `dev` (NULL: the host) over the corpus. */
static void synth_seed(bt_profile *p, const char *dev, int n_random, uint64_t seed) {
  bt_err err = {{0}};
  memset(p, 0, sizeof *p);
  cr_assert_eq(bt_profile_corpus(p, seed, n_random, NULL, &err), 0, "%s", err.msg);
  p->host.sgemm_gflops = 100;
  p->host.mem_gbs = 20;
  p->threads = 1;
  snprintf(p->blis_arch, sizeof p->blis_arch, "skx");
  snprintf(p->clock, sizeof p->clock, "thread");
  bt_device host, d;
  cr_assert_eq(bt_host_as_device(&p->host, &host, &err), 0);
  if (dev)
    cr_assert_eq(bt_device_find(dev, DATA_DIR, &d, &err), 0, "%s", err.msg);
  snprintf(p->device, sizeof p->device, "%s", dev ? dev : "host");
  for (int i = 0; i < p->n; i++) {
    bt_profile_entry *e = &p->e[i];
    e->host_fwd =
        bt_device_layer_analytic(&host, &e->layer, e->batch, BT_PASS_FWD, 0).total * scatter(i, 0);
    e->host_bwd =
        bt_device_layer_analytic(&host, &e->layer, e->batch, BT_PASS_BWD, 0).total * scatter(i, 1);
    e->fwd = map_time(dev ? &d : NULL, &host, e, BT_PASS_FWD, e->host_fwd);
    e->bwd = map_time(dev ? &d : NULL, &host, e, BT_PASS_BWD, e->host_bwd);
  }
}

static void synth(bt_profile *p, const char *dev, int n_random) { synth_seed(p, dev, n_random, 1); }

static void tmp_path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "/tmp/bt_pred_%d_%s", (int)getpid(), name);
}

Test(predictor, layer_specs_round_trip) {
  const char *zoo[] = {"resnet18", "mobilenetv2", "vgg11", "lenet5"};
  for (int z = 0; z < 4; z++) {
    bt_model m;
    bt_err err;
    bt_shape in = z == 3 ? (bt_shape){28, 28, 1} : (bt_shape){32, 32, 3};
    cr_assert_eq(bt_zoo_build(zoo[z], in, 10, &m, &err), 0, "%s", err.msg);
    for (int i = 0; i < m.n_layers; i++) {
      char a[BT_LAYER_SPEC_MAX], b[BT_LAYER_SPEC_MAX];
      bt_layer l;
      cr_assert_gt(bt_layer_spec_format(&m.layers[i], a, sizeof a), 0);
      cr_assert_eq(bt_layer_spec_parse(a, &l, &err), 0, "%s: %s", a, err.msg);
      cr_assert_gt(bt_layer_spec_format(&l, b, sizeof b), 0);
      cr_assert_str_eq(a, b);
      cr_assert_eq(l.n_params, m.layers[i].n_params);
      cr_assert_eq(bt_shape_elems(l.out), bt_shape_elems(m.layers[i].out));
      bt_layer_release(&l);
    }
    bt_model_free(&m);
  }
  bt_layer l;
  bt_err err;
  cr_assert_lt(bt_layer_spec_parse("conv2d:out=3,k=3x3,s=1,p=1", &l, &err), 0);
  cr_assert(strstr(err.msg, "@HxWxC"), "%s", err.msg);
  cr_assert_lt(bt_layer_spec_parse("bogus@4x4x4", &l, &err), 0);
  cr_assert(strstr(err.msg, "unknown layer kind"), "%s", err.msg);
  cr_assert_lt(bt_layer_spec_parse("conv2d@4x4x4:out=8,k=3x3,s=1,p=1,zz=3", &l, &err), 0);
}

Test(predictor, probe_set_is_small_and_cheap) {
  bt_profile p;
  memset(&p, 0, sizeof p);
  bt_err err;
  cr_assert_eq(bt_profile_probe_set(&p, &err), 0);
  cr_assert_leq(p.n, 10);
  /* Under 2 s of device time on the slowest shipped device, both passes. */
  bt_device d;
  cr_assert_eq(bt_device_find("rpi3bplus", DATA_DIR, &d, &err), 0, "%s", err.msg);
  double t = 0;
  for (int i = 0; i < p.n; i++)
    t += bt_device_layer_analytic(&d, &p.e[i].layer, p.e[i].batch, BT_PASS_FWD, 0).total +
         bt_device_layer_analytic(&d, &p.e[i].layer, p.e[i].batch, BT_PASS_BWD, 0).total;
  cr_assert_lt(t, 2.0, "probe set takes %.2f s on rpi3bplus", t);
  /* Every shipped device's cache lies between two memory-bound probe ops
   * at most 4x apart (the old set left 448 KiB to 3 MiB empty). */
  double sizes[64];
  int ns = 0;
  for (int i = 0; i < p.n; i++)
    for (int pass = 0; pass < 2; pass++) {
      bt_device_op ops[BT_DEVICE_LAYER_OPS_MAX];
      const int n =
          bt_device_layer_ops(&p.e[i].layer, p.e[i].batch, pass ? BT_PASS_BWD : BT_PASS_FWD, ops,
                              BT_DEVICE_LAYER_OPS_MAX);
      for (int k = 0; k < n && ns < 64; k++)
        if (!bt_op_class_compute_bound(ops[k].cls))
          sizes[ns++] = ops[k].bytes;
    }
  bt_device_names names;
  cr_assert_eq(bt_device_list(DATA_DIR, &names, &err), 0, "%s", err.msg);
  for (int j = 0; j < names.count; j++) {
    cr_assert_eq(bt_device_find(names.names[j], DATA_DIR, &d, &err), 0, "%s", err.msg);
    const double cache = d.cache_kib * 1024;
    double below = 0, above = INFINITY;
    for (int k = 0; k < ns; k++)
      if (sizes[k] <= cache)
        below = fmax(below, sizes[k]);
      else
        above = fmin(above, sizes[k]);
    cr_assert(above / below <= 4, "%s: cache %.0f KiB between probe ops of %.0f and %.0f KiB",
              names.names[j], d.cache_kib, below / 1024, above / 1024);
  }
  bt_device_names_free(&names);
  bt_profile_free(&p);
}

/* The late-stage generator reaches what the random corpus never does: many
 * channels on few pixels, weights of megabytes; fitted like random rows. */
Test(predictor, deep_layers_are_late_stage_layers) {
  bt_profile p;
  memset(&p, 0, sizeof p);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_deep(&p, 3, 200, &err), 0, "%s", err.msg);
  cr_assert_eq(p.n, 200);
  int big = 0;
  for (int i = 0; i < p.n; i++) {
    const bt_layer *l = &p.e[i].layer;
    cr_assert_str_eq(p.e[i].source, "deep");
    cr_assert(bt_profile_source_fitted(p.e[i].source));
    cr_assert(l->kind == BT_DENSE || (l->in.c >= 256 && l->in.h <= 8), "%s", p.e[i].spec);
    big += 4.0 * (double)l->n_params >= 4e6;
  }
  cr_assert_gt(big, 50, "only %d of 200 layers have 4 MB of weights", big);
  cr_assert(!bt_profile_source_fitted("vgg11") && !bt_profile_source_fitted("probe"));
  bt_profile_free(&p);
}

/* The odd-shape generator reaches channel counts and paddings off the
 * random corpus's menus (LeNet's 1 and 6 channels, no padding), never a zoo
 * layer itself, and its rows are fitted like random ones. */
Test(predictor, odd_layers_leave_the_menus_but_never_hold_the_zoo) {
  bt_profile odd, zoo;
  memset(&odd, 0, sizeof odd), memset(&zoo, 0, sizeof zoo);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_odd(&odd, 8, 1000, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&zoo, 1, 0, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(odd.n, 1000);
  cr_assert(bt_profile_source_fitted("odd"));
  int one_channel = 0, six_channels = 0, unpadded_k5 = 0, dense = 0;
  for (int i = 0; i < odd.n; i++) {
    const bt_layer *l = &odd.e[i].layer;
    cr_assert_str_eq(odd.e[i].source, "odd");
    for (int j = 0; j < zoo.n; j++)
      if (strcmp(zoo.e[j].source, "probe") != 0)
        cr_assert_str_neq(odd.e[i].spec, zoo.e[j].spec, "holds the zoo layer %s", zoo.e[j].spec);
    if (l->kind == BT_CONV2D) {
      one_channel += l->in.c == 1;
      six_channels += l->in.c == 6 || l->out.c == 6;
      unpadded_k5 += l->kh == 5 && l->pad == 0;
    }
    dense += l->kind == BT_DENSE;
  }
  cr_assert(one_channel > 5 && six_channels > 5 && unpadded_k5 > 5 && dense > 50,
            "1 channel %d, 6 channels %d, unpadded 5x5 %d, dense %d", one_channel, six_channels,
            unpadded_k5, dense);
  bt_profile_free(&odd);
  bt_profile_free(&zoo);
}

/* --dense: dense layers only, spread over small and large widths and every
 * batch, none a zoo model's own. */
Test(predictor, dense_layers_span_the_widths_but_never_hold_the_zoo) {
  bt_profile dense, zoo;
  memset(&dense, 0, sizeof dense), memset(&zoo, 0, sizeof zoo);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_dense(&dense, 9, 1000, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&zoo, 1, 0, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(dense.n, 1000);
  cr_assert(bt_profile_source_fitted("dense"));
  int narrow = 0, wide = 0, batch1 = 0, batch32 = 0;
  for (int i = 0; i < dense.n; i++) {
    const bt_layer *l = &dense.e[i].layer;
    cr_assert_eq(l->kind, BT_DENSE);
    cr_assert_str_eq(dense.e[i].source, "dense");
    cr_assert(l->in.c >= 8 && l->in.c <= 4096 && l->out.c >= 2 && l->out.c <= 4096, "%s",
              dense.e[i].spec);
    for (int j = 0; j < zoo.n; j++)
      if (strcmp(zoo.e[j].source, "probe") != 0)
        cr_assert_str_neq(dense.e[i].spec, zoo.e[j].spec, "holds the zoo layer %s", zoo.e[j].spec);
    narrow += l->in.c <= 64 && l->out.c <= 64;
    wide += l->in.c >= 1024 && l->out.c >= 1024;
    batch1 += dense.e[i].batch == 1;
    batch32 += dense.e[i].batch == 32;
  }
  cr_assert(narrow > 50 && wide > 20 && batch1 > 100 && batch32 > 100,
            "narrow %d, wide %d, batch 1 %d, batch 32 %d", narrow, wide, batch1, batch32);
  bt_profile_free(&dense);
  bt_profile_free(&zoo);
}

/* --zoo: the corpus holds the named zoo models' layers and no other's; an
 * unknown name is an error that lists the names. */
Test(predictor, corpus_holds_only_the_named_zoo_models) {
  bt_err err = {{0}};
  bt_profile all, some, none, bad;
  memset(&all, 0, sizeof all), memset(&some, 0, sizeof some);
  memset(&none, 0, sizeof none), memset(&bad, 0, sizeof bad);
  cr_assert_eq(bt_profile_corpus(&all, 1, 0, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&some, 1, 0, "lenet5,mlp", &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&none, 1, 0, "none", &err), 0, "%s", err.msg);
  int all_named = 0, probes = 0;
  for (int i = 0; i < all.n; i++) {
    all_named += !strcmp(all.e[i].source, "lenet5") || !strcmp(all.e[i].source, "mlp");
    probes += !strcmp(all.e[i].source, "probe");
  }
  cr_assert_gt(all_named, 4);
  cr_assert_eq(none.n, probes, "'none' holds the probe set only");
  cr_assert_eq(some.n, probes + all_named);
  for (int i = probes; i < some.n; i++)
    cr_assert(!strcmp(some.e[i].source, "lenet5") || !strcmp(some.e[i].source, "mlp"), "%s",
              some.e[i].source);
  cr_assert_eq(bt_profile_corpus(&bad, 1, 0, "lenet5,vgg", &err), -1);
  cr_assert(strstr(err.msg, "'vgg'") && strstr(err.msg, "mobilenetv2"), "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&bad, 1, 0, "", &err), -1);
  bt_profile_free(&all), bt_profile_free(&some), bt_profile_free(&none), bt_profile_free(&bad);
}

/* The grid covers the late-stage regime around the zoo's convolutions at
 * every batch, and never one of them: the zoo rows stay out of the fit. */
Test(predictor, deep_grid_surrounds_but_never_holds_the_zoo_convolutions) {
  bt_profile grid, zoo;
  memset(&grid, 0, sizeof grid);
  memset(&zoo, 0, sizeof zoo);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_deep_grid(&grid, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&zoo, 1, 0, NULL, &err), 0, "%s", err.msg);
  cr_assert_gt(grid.n, 1000);
  int zoo_convs = 0;
  for (int j = 0; j < zoo.n; j++)
    zoo_convs += zoo.e[j].layer.kind == BT_CONV2D && strcmp(zoo.e[j].source, "probe") != 0;
  cr_assert_gt(zoo_convs, 10);
  int b4_neighbour = 0;
  for (int i = 0; i < grid.n; i++) {
    const bt_profile_entry *g = &grid.e[i];
    cr_assert_str_eq(g->source, "grid");
    cr_assert(bt_profile_source_fitted(g->source));
    cr_assert(g->layer.kind == BT_CONV2D && g->layer.in.c >= 256 && g->layer.in.h <= 8);
    for (int j = 0; j < zoo.n; j++)
      if (strcmp(zoo.e[j].source, "probe") != 0)
        cr_assert_str_neq(g->spec, zoo.e[j].spec, "the grid holds the zoo layer %s", g->spec);
    /* vgg11's 2x2x512 -> 512 convolution is left out; one input width off is in. */
    b4_neighbour += g->batch == 4 && strcmp(g->spec, "conv2d@2x2x384:out=512,k=3x3,s=1,p=1") == 0;
  }
  cr_assert_eq(b4_neighbour, 1);
  bt_profile_free(&grid);
  bt_profile_free(&zoo);
}

/* The big grid holds the large convolutions the random corpus stops short
 * of (its cap is 4e8 FLOPs), around but never on the zoo's own. */
Test(predictor, big_grid_covers_large_convolutions_but_never_the_zoo) {
  bt_profile big, zoo;
  memset(&big, 0, sizeof big);
  memset(&zoo, 0, sizeof zoo);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_big_grid(&big, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&zoo, 1, 0, NULL, &err), 0, "%s", err.msg);
  cr_assert_gt(big.n, 300);
  int above_cap = 0, neighbour = 0;
  for (int i = 0; i < big.n; i++) {
    const bt_profile_entry *g = &big.e[i];
    cr_assert_str_eq(g->source, "big");
    cr_assert(bt_profile_source_fitted(g->source));
    const double flops = bt_layer_flops_fwd(&g->layer) * g->batch;
    cr_assert(g->layer.kind == BT_CONV2D && flops >= 1e8 && flops <= 5e9, "%s at %d: %g FLOPs",
              g->spec, g->batch, flops);
    above_cap += flops > 4e8;
    for (int j = 0; j < zoo.n; j++)
      if (strcmp(zoo.e[j].source, "probe") != 0)
        cr_assert_str_neq(g->spec, zoo.e[j].spec, "the big grid holds the zoo layer %s", g->spec);
    /* resnet18's 32x32x64 -> 64 convolution is left out; a wider output is in. */
    neighbour += g->batch == 32 && strcmp(g->spec, "conv2d@32x32x64:out=128,k=3x3,s=1,p=1") == 0;
  }
  cr_assert_gt(above_cap, 100);
  cr_assert_eq(neighbour, 1);
  bt_profile_free(&big);
  bt_profile_free(&zoo);
}

/* The big blocks hold the large depthwise, element-wise and residual
 * layers the random corpus stops short of (6e6 elements in and out, 4e8
 * FLOPs), around but never on the zoo's own (residual sub-layers included:
 * the zoo's top-level rows are the evaluation's). */
Test(predictor, big_blocks_cover_large_blocks_but_never_the_zoo) {
  bt_profile big, zoo;
  memset(&big, 0, sizeof big);
  memset(&zoo, 0, sizeof zoo);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_add_big_blocks(&big, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_corpus(&zoo, 1, 0, NULL, &err), 0, "%s", err.msg);
  int per_kind[BT_LAYER_KIND_COUNT] = {0}, mbv2_neighbour = 0;
  for (int i = 0; i < big.n; i++) {
    const bt_profile_entry *g = &big.e[i];
    cr_assert_str_eq(g->source, "big");
    cr_assert(bt_profile_source_fitted(g->source));
    const bt_layer *l = &g->layer;
    const double in_out =
        ((double)bt_shape_elems(l->in) + (double)bt_shape_elems(l->out)) * g->batch;
    cr_assert(in_out > 3e6 || bt_layer_flops_fwd(l) * g->batch > 4e8, "%s at %d is small", g->spec,
              g->batch);
    per_kind[l->kind]++;
    for (int j = 0; j < zoo.n; j++)
      if (strcmp(zoo.e[j].source, "probe") != 0)
        cr_assert_str_neq(g->spec, zoo.e[j].spec, "the big blocks hold the zoo layer %s", g->spec);
    /* mobilenetv2's 32x32x96 depthwise convolution is left out; 32x32x128 is in. */
    cr_assert_str_neq(g->spec, "dwconv2d@32x32x96:k=3x3,s=1,p=1");
    mbv2_neighbour += g->batch == 32 && strcmp(g->spec, "dwconv2d@32x32x128:k=3x3,s=1,p=1") == 0;
  }
  cr_assert_eq(mbv2_neighbour, 1);
  const bt_layer_kind kinds[] = {BT_DWCONV2D, BT_BATCHNORM, BT_RELU, BT_RELU6, BT_RESIDUAL};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    cr_assert_gt(per_kind[kinds[k]], 10, "kind %d: %d rows", (int)kinds[k], per_kind[kinds[k]]);
  bt_profile_free(&big);
  bt_profile_free(&zoo);
}

Test(predictor, profile_file_round_trip_and_bad_files) {
  bt_profile p, q;
  synth(&p, "rpi4", 20);
  char path[256];
  tmp_path(path, sizeof path, "set.h5");
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_write(&p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_read(path, &q, &err), 0, "%s", err.msg);
  cr_assert_eq(q.n, p.n);
  cr_assert_str_eq(q.device, "rpi4");
  for (int i = 0; i < p.n; i++) {
    cr_assert_str_eq(q.e[i].spec, p.e[i].spec);
    cr_assert_eq(q.e[i].batch, p.e[i].batch);
    cr_assert_eq(q.e[i].fwd, p.e[i].fwd);
    cr_assert_eq(q.e[i].host_bwd, p.e[i].host_bwd);
  }
  cr_assert_str_eq(q.host_key, "", "a set without a host key reads as none");
  bt_profile_free(&q);
  /* The host key (which host and build timed the set) round-trips. */
  snprintf(p.host_key, sizeof p.host_key, "AMD EPYC|skx x1|abc123");
  cr_assert_eq(bt_profile_write(&p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_read(path, &q, &err), 0, "%s", err.msg);
  cr_assert_str_eq(q.host_key, p.host_key);
  bt_profile_free(&q);
  /* NaN and negative timings. */
  double keep = p.e[3].fwd;
  p.e[3].fwd = NAN;
  cr_assert_eq(bt_profile_write(&p, path, &err), 0);
  cr_assert_lt(bt_profile_read(path, &q, &err), 0);
  cr_assert(strstr(err.msg, "row 3") && strstr(err.msg, "positive and finite"), "%s", err.msg);
  p.e[3].fwd = -1e-3;
  cr_assert_eq(bt_profile_write(&p, path, &err), 0);
  cr_assert_lt(bt_profile_read(path, &q, &err), 0);
  cr_assert(strstr(err.msg, "positive and finite"), "%s", err.msg);
  p.e[3].fwd = keep;
  /* A corrupt (truncated) file and a file that is not HDF5. */
  cr_assert_eq(bt_profile_write(&p, path, &err), 0);
  cr_assert_eq(truncate(path, 2000), 0);
  cr_assert_lt(bt_profile_read(path, &q, &err), 0);
  cr_assert(strstr(err.msg, path), "%s", err.msg);
  FILE *f = fopen(path, "w");
  fputs("not hdf5\n", f);
  fclose(f);
  cr_assert_lt(bt_profile_read(path, &q, &err), 0);
  cr_assert(strstr(err.msg, "not an HDF5 file"), "%s", err.msg);
  char missing[300];
  snprintf(missing, sizeof missing, "%s.missing", path);
  cr_assert_lt(bt_profile_read(missing, &q, &err), 0);
  cr_assert(strstr(err.msg, "no such profile file"), "%s", err.msg);
  unlink(path);
  bt_profile_free(&p);
}

Test(predictor, mismatched_sets_are_an_error) {
  bt_profile s[2];
  synth(&s[0], "rpi4", 20);
  synth(&s[1], "rpi5", 25);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_lt(bt_predictor_fit(s, NULL, 2, NULL, NULL, &p, &err), 0);
  cr_assert(strstr(err.msg, "different corpora"), "%s", err.msg);
  bt_profile_free(&s[0]);
  bt_profile_free(&s[1]);
}

typedef struct world {
  bt_profile s[N_DEVS + 1];
  const char *names[N_DEVS + 1];
} world;

static void make_world(world *w) {
  for (int k = 0; k < N_DEVS; k++) {
    synth(&w->s[k], devs[k], 60);
    w->names[k] = devs[k];
  }
  synth(&w->s[N_DEVS], NULL, 60);
  w->names[N_DEVS] = "host";
}

static void free_world(world *w) {
  for (int k = 0; k <= N_DEVS; k++)
    bt_profile_free(&w->s[k]);
}

/* Share of rows of set s whose predictions on dev are within tol. */
static double within(const bt_predictor *p, int dev, const bt_profile *s, double tol) {
  int ok = 0;
  for (int i = 0; i < s->n; i++)
    for (int pass = 0; pass < 2; pass++) {
      double t = bt_predictor_predict_dev(p, dev, &s->e[i].layer, s->e[i].batch, pass);
      double y = pass ? s->e[i].bwd : s->e[i].fwd;
      ok += fabs(t - y) <= tol * y;
    }
  return (double)ok / (2.0 * s->n);
}

Test(predictor, fits_seen_devices_and_the_head_is_the_device_model) {
  world w;
  make_world(&w);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0, "%s", err.msg);
  for (int k = 0; k <= N_DEVS; k++) {
    double share = within(p, k, &w.s[k], 0.10);
    cr_assert_geq(share, 0.9, "%s: %.1f%% within 10%%", w.names[k], 100 * share);
  }
  /* Given the measured host time, the fitted head maps it as the device
   * model does (the head has the device model's form). */
  int ok = 0, n = 0;
  const bt_profile *s = &w.s[0];
  for (int i = 0; i < s->n; i++, n++) {
    double t =
        bt_predictor_map_dev(p, 0, &s->e[i].layer, s->e[i].batch, BT_PASS_FWD, s->e[i].host_fwd);
    ok += fabs(t - s->e[i].fwd) <= 0.05 * s->e[i].fwd;
  }
  cr_assert_geq((double)ok / n, 0.95, "head vs device model: %d of %d within 5%%", ok, n);
  bt_predictor_free(p);
  free_world(&w);
}

/* Re-maps set s (of device `dev`) as if its session's host had other rates. */
static void remap_session(bt_profile *s, const char *dev, double sgemm, double mem) {
  bt_err err = {{0}};
  bt_device host, d;
  s->host.sgemm_gflops = sgemm;
  s->host.mem_gbs = mem;
  cr_assert_eq(bt_host_as_device(&s->host, &host, &err), 0);
  cr_assert_eq(bt_device_find(dev, DATA_DIR, &d, &err), 0, "%s", err.msg);
  for (int i = 0; i < s->n; i++) {
    bt_profile_entry *e = &s->e[i];
    e->fwd =
        bt_device_layer_mapped(&d, &host, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd, 0).total;
    e->bwd =
        bt_device_layer_mapped(&d, &host, &e->layer, e->batch, BT_PASS_BWD, e->host_bwd, 0).total;
  }
}

/* Each set maps host times with the host rates its session measured (they
 * drift by 10-20% between sets of one profiling run); a head maps with its
 * set's rates, so it stays the device model and keeps them in the file. */
Test(predictor, a_head_maps_with_its_sessions_host_rates) {
  world w;
  make_world(&w);
  remap_session(&w.s[0], devs[0], 80, 28); /* the others: 100 GFLOP/s, 20 GB/s */
  remap_session(&w.s[3], devs[3], 125, 14);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0, "%s", err.msg);
  char path[256];
  tmp_path(path, sizeof path, "rates.txt");
  cr_assert_eq(bt_predictor_save(p, path, &err), 0, "%s", err.msg);
  bt_predictor *q;
  cr_assert_eq(bt_predictor_load(path, &q, &err), 0, "%s", err.msg);
  unlink(path);
  for (int k = 0; k < 4; k += 3) {
    const bt_profile *s = &w.s[k];
    int ok = 0, same = 0, n = 0;
    for (int i = 0; i < s->n; i++)
      for (int pass = 0; pass < 2; pass++) {
        const bt_layer_kind kind = s->e[i].layer.kind;
        if (kind != BT_CONV2D && kind != BT_DENSE && kind != BT_DWCONV2D && kind != BT_RESIDUAL)
          continue; /* the memory-bound kinds keep their analytic device time */
        n++;
        const double h = pass ? s->e[i].host_bwd : s->e[i].host_fwd,
                     y = pass ? s->e[i].bwd : s->e[i].fwd;
        const double t = bt_predictor_map_dev(p, k, &s->e[i].layer, s->e[i].batch, pass, h);
        ok += fabs(t - y) <= 0.02 * y;
        same += t == bt_predictor_map_dev(q, k, &s->e[i].layer, s->e[i].batch, pass, h);
      }
    cr_assert_geq((double)ok / n, 0.97, "%s: head vs device model %d of %d within 2%%", w.names[k],
                  ok, n);
    cr_assert_eq(same, n, "%s: the loaded file maps otherwise", w.names[k]);
  }
  /* A clone keeps the rates of the head it copies; bad rates are refused. */
  cr_assert_geq(bt_predictor_clone_device(p, w.names[3], "rank1:rpi5", &err), 0, "%s", err.msg);
  const int c = bt_predictor_device(p, "rank1:rpi5");
  const bt_profile_entry *e = &w.s[3].e[0];
  cr_assert_eq(bt_predictor_map_dev(p, c, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd),
               bt_predictor_map_dev(p, 3, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd));
  const bt_host_rates bad = {.sgemm_gflops = -1, .mem_gbs = 20};
  cr_assert_eq(bt_predictor_set_host_rates(p, c, &bad, &err), -1);
  cr_assert(strstr(err.msg, "sgemm") != NULL, "%s", err.msg);
  cr_assert_eq(bt_predictor_set_host_rates(p, 99, &w.s[0].host, &err), -1);
  /* A head adapted from samples of a session maps with that session's rates. */
  const int k = bt_predictor_adapt(p, "new-rpi5", NULL, 0, &err);
  cr_assert_eq(bt_predictor_set_host_rates(p, k, &w.s[3].host, &err), 0, "%s", err.msg);
  bt_pred_sample smp[256];
  int ns = 0;
  for (int i = 0; i < w.s[3].n && ns < 256; i++)
    for (int pass = 0; pass < 2; pass++)
      smp[ns++] = (bt_pred_sample){&w.s[3].e[i].layer, w.s[3].e[i].batch, pass,
                                   pass ? w.s[3].e[i].bwd : w.s[3].e[i].fwd};
  cr_assert_eq(bt_predictor_adapt(p, "new-rpi5", smp, ns, &err), k, "%s", err.msg);
  int ok = 0, n = 0;
  for (int i = 0; i < w.s[3].n; i++) {
    const bt_profile_entry *r = &w.s[3].e[i];
    if (r->layer.kind != BT_CONV2D && r->layer.kind != BT_DENSE)
      continue;
    n++;
    ok += fabs(bt_predictor_map_dev(p, k, &r->layer, r->batch, BT_PASS_FWD, r->host_fwd) -
               r->fwd) <= 0.02 * r->fwd;
  }
  cr_assert_geq((double)ok / n, 0.97, "adapted head vs device model: %d of %d within 2%%", ok, n);
  bt_predictor_free(q);
  bt_predictor_free(p);
  free_world(&w);
}

Test(predictor, adapts_to_an_unseen_device_from_ten_probes) {
  world w;
  make_world(&w);
  /* Hold out the Jetson Nano (index 0): fit on the others. */
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s + 1, w.names + 1, N_DEVS, NULL, NULL, &p, &err), 0, "%s",
               err.msg);
  cr_assert_eq(bt_predictor_device(p, "jetson-nano"), -1);
  bt_pred_sample probes[20];
  int np = 0;
  for (int i = 0; i < w.s[0].n && np < 20; i++)
    if (strcmp(w.s[0].e[i].source, "probe") == 0) {
      const bt_profile_entry *e = &w.s[0].e[i];
      probes[np++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, e->fwd};
      probes[np++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, e->bwd};
    }
  cr_assert_eq(np, 20);
  int d0 = bt_predictor_adapt(p, "jetson-nano", probes, 0, &err);
  cr_assert_geq(d0, 0, "%s", err.msg);
  double before = within(p, d0, &w.s[0], 0.10);
  int d = bt_predictor_adapt(p, "jetson-nano", probes, np, &err);
  cr_assert_eq(d, d0);
  double after = within(p, d, &w.s[0], 0.10);
  cr_assert_geq(after, 0.85, "after 10 probes: %.1f%% within 10%% (before %.1f%%)", 100 * after,
                100 * before);
  cr_assert_gt(after, before);
  /* Bad samples: a clear error, the head untouched. */
  probes[3].seconds = NAN;
  cr_assert_lt(bt_predictor_adapt(p, "jetson-nano", probes, np, &err), 0);
  cr_assert(strstr(err.msg, "positive and finite"), "%s", err.msg);
  probes[3].seconds = -1;
  cr_assert_lt(bt_predictor_update(p, "jetson-nano", probes, np, &err), 0);
  cr_assert(strstr(err.msg, "sample 3"), "%s", err.msg);
  cr_assert_eq(within(p, d, &w.s[0], 0.10), after);
  bt_predictor_free(p);
  free_world(&w);
}

/* A predictor fitted on every set of w but the one of device `held`. */
static bt_predictor *fit_holding_out(const world *w, const char *held) {
  bt_profile others[N_DEVS];
  const char *names[N_DEVS];
  int m = 0;
  for (int k = 0; k <= N_DEVS; k++)
    if (strcmp(w->names[k], held) != 0 && m < N_DEVS)
      others[m] = w->s[k], names[m++] = w->names[k];
  cr_assert_eq(m, N_DEVS, "%s is not one of the world's devices", held);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(others, names, N_DEVS, NULL, NULL, &p, &err), 0, "%s", err.msg);
  return p;
}

/* The cache term is a step, so its size has no gradient far from the
 * threshold: a few-shot fit starting from the population (caches of 0.25-2
 * MiB) must search for the laptop's 12 MiB as the full fit does (without
 * any search: 486 KiB from these rows). */
Test(predictor, adapting_finds_a_cache_far_from_the_population) {
  world w;
  make_world(&w);
  const bt_profile *laptop = &w.s[4];
  cr_assert_str_eq(w.names[4], "x86-laptop");
  bt_predictor *p = fit_holding_out(&w, "x86-laptop");
  bt_err err = {{0}};
  /* The layers whose tensors need 4-32 MiB (where the cache decides) and
   * every twentieth other one: the cross-validation refits once per layer, so
   * all the rows would cost a minute under the sanitizers. */
  bt_pred_sample *smp = malloc(2 * (size_t)laptop->n * sizeof *smp);
  cr_assert(smp);
  int ns = 0;
  for (int i = 0; i < laptop->n; i++) {
    const bt_profile_entry *e = &laptop->e[i];
    const double mib = 4.0 * e->batch *
                       (double)(bt_shape_elems(e->layer.in) + bt_shape_elems(e->layer.out)) /
                       (1 << 20);
    if ((mib < 4 || mib > 32) && i % 20 != 0)
      continue;
    smp[ns++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, e->fwd};
    smp[ns++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, e->bwd};
  }
  const int d = bt_predictor_adapt(p, "x86-laptop", smp, ns, &err);
  cr_assert_geq(d, 0, "%s", err.msg);
  bt_device truth, head;
  cr_assert_eq(bt_device_find("x86-laptop", DATA_DIR, &truth, &err), 0, "%s", err.msg);
  bt_predictor_head_device(p, d, &head);
  cr_assert(head.cache_kib > truth.cache_kib / 1.2 && head.cache_kib < truth.cache_kib * 1.2,
            "cache %.0f KiB, the device's %.0f KiB", head.cache_kib, truth.cache_kib);
  const double share = within(p, d, laptop, 0.10);
  cr_assert_geq(share, 0.9, "%.1f%% within 10%%", 100 * share);
  free(smp);
  bt_predictor_free(p);
  free_world(&w);
}

/* Between two samples' byte counts the probes cannot tell where the cache
 * is: the head takes the middle of the gap (in log size), and the fit of
 * every other parameter is not held at a cache that sits on a sample's
 * byte count (LM moved the cache there, then no step could cross the jump:
 * a batch-norm probe stayed 23% off on an emulated rpi4). rpi4 held out
 * (1 MiB cache); its compute probes plus ReLUs of 16/24 KiB, 600/900 KiB,
 * 1800/2700 KiB and 16/24 MiB: the middle is sqrt(900 x 1800) KiB. */
Test(predictor, a_cache_between_two_probes_is_the_middle_of_the_gap) {
  world w;
  make_world(&w);
  const bt_profile *rpi4 = &w.s[2];
  cr_assert_str_eq(w.names[2], "rpi4");
  bt_predictor *p = fit_holding_out(&w, "rpi4");
  bt_err err = {{0}};
  bt_device truth;
  cr_assert_eq(bt_device_find("rpi4", DATA_DIR, &truth, &err), 0, "%s", err.msg);
  /* ReLUs: forward moves 2 x 4 x elems bytes, backward 3 x 4 x elems. */
  const struct {
    int h, c, batch;
  } relus[] = {{8, 16, 2}, {10, 64, 12}, {15, 64, 16}, {32, 64, 32}};
  bt_profile extra = {0};
  for (size_t j = 0; j < sizeof relus / sizeof *relus; j++) {
    bt_layer l = bt_relu();
    l.in = (bt_shape){relus[j].h, relus[j].h, relus[j].c};
    cr_assert_eq(bt_profile_add(&extra, l, relus[j].batch, "probe", &err), 1, "%s", err.msg);
  }
  bt_pred_sample smp[32];
  int ns = 0;
  for (int i = 0; i < rpi4->n; i++) {
    const bt_profile_entry *e = &rpi4->e[i];
    const bt_layer_kind k = e->layer.kind;
    if (strcmp(e->source, "probe") != 0 || !(k == BT_CONV2D || k == BT_DWCONV2D || k == BT_DENSE))
      continue;
    smp[ns++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, e->fwd};
    smp[ns++] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, e->bwd};
  }
  cr_assert_eq(ns, 10);
  for (int i = 0; i < extra.n; i++)
    for (int pass = 0; pass < 2; pass++) {
      const bt_pass ps = pass ? BT_PASS_BWD : BT_PASS_FWD;
      const double t =
          bt_device_layer_analytic(&truth, &extra.e[i].layer, extra.e[i].batch, ps, 0).total;
      smp[ns++] = (bt_pred_sample){&extra.e[i].layer, extra.e[i].batch, ps, t};
    }
  const int d = bt_predictor_adapt(p, "rpi4", smp, ns, &err);
  cr_assert_geq(d, 0, "%s", err.msg);
  bt_device head;
  bt_predictor_head_device(p, d, &head);
  const double middle = sqrt(900.0 * 1800.0);
  cr_assert(fabs(head.cache_kib / middle - 1) < 0.01, "cache %.0f KiB, the gap's middle %.0f KiB",
            head.cache_kib, middle);
  for (int i = 0; i < ns; i++) {
    const double t = bt_predictor_predict_dev(p, d, smp[i].layer, smp[i].batch, smp[i].pass);
    cr_assert(fabs(t / smp[i].seconds - 1) < 0.05, "sample %d: %.3g s predicted, %.3g s timed", i,
              t, smp[i].seconds);
  }
  bt_profile_free(&extra);
  bt_predictor_free(p);
  free_world(&w);
}

Test(predictor, online_updates_follow_a_slowdown) {
  world w;
  make_world(&w);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0, "%s", err.msg);
  bt_device d, host;
  cr_assert_eq(bt_device_find("rpi4", DATA_DIR, &d, &err), 0);
  cr_assert_eq(bt_host_as_device(&w.s[2].host, &host, &err), 0);
  d.n_throttle = 1;
  d.throttle[0].after_iteration = 0;
  for (int c = 0; c < BT_OP_CLASS_COUNT; c++)
    d.throttle[0].factor[c] = c == BT_OP_CONV ? 2.0 : 1.3;
  /* The zoo rows at batch 8 play the stage the runtime measures. */
  bt_pred_sample s[1024];
  int n = 0;
  const bt_profile *set = &w.s[2];
  for (int i = 0; i < set->n && n < 1024; i++)
    if (set->e[i].batch == 8 && strcmp(set->e[i].source, "resnet18") == 0)
      for (int pass = 0; pass < 2; pass++)
        s[n++] = (bt_pred_sample){
            &set->e[i].layer, 8, pass,
            bt_device_layer_mapped(&d, &host, &set->e[i].layer, 8, pass,
                                   pass ? set->e[i].host_bwd : set->e[i].host_fwd, 0)
                .total};
  cr_assert_gt(n, 10);
  /* One head per rank: a copy of the device's, followed on its own. */
  const int dev = bt_predictor_clone_device(p, "rpi4", "rank2:rpi4", &err);
  cr_assert_geq(dev, 0, "%s", err.msg);
  const int orig = bt_predictor_device(p, "rpi4");
  const double before = bt_predictor_predict_dev(p, orig, s[0].layer, 8, s[0].pass);
  double err_sum[6];
  for (int round = 0; round < 6; round++) {
    double ps = 0, ts = 0;
    for (int i = 0; i < n; i++) {
      ps += bt_predictor_predict_dev(p, dev, s[i].layer, 8, s[i].pass);
      ts += s[i].seconds;
    }
    err_sum[round] = fabs(ps - ts) / ts;
    cr_assert_eq(bt_predictor_update(p, "rank2:rpi4", s, n, &err), 0, "%s", err.msg);
  }
  cr_assert_eq(bt_predictor_predict_dev(p, orig, s[0].layer, 8, s[0].pass), before);
  cr_assert_gt(err_sum[0], 0.2, "the slowdown should show: %.3f", err_sum[0]);
  cr_assert_lt(err_sum[5], 0.10, "stage error after 5 updates: %.3f", err_sum[5]);
  bt_predictor_free(p);
  free_world(&w);
}

Test(predictor, model_file_round_trip_and_bad_files) {
  world w;
  make_world(&w);
  bt_predictor *p, *q;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0);
  char path[256];
  tmp_path(path, sizeof path, "model.txt");
  cr_assert_eq(bt_predictor_save(p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_load(path, &q, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_n_devices(q), N_DEVS + 1);
  /* Exactly the same predictions, before and after a few-shot adaptation:
   * the fit cache of `baton plan` and `baton train` relies on it. */
  bt_pred_sample probes[6];
  for (int j = 0; j < 6; j++)
    probes[j] = (bt_pred_sample){&w.s[1].e[3 * j].layer, w.s[1].e[3 * j].batch,
                                 j % 2 ? BT_PASS_BWD : BT_PASS_FWD,
                                 1.3 * (j % 2 ? w.s[1].e[3 * j].bwd : w.s[1].e[3 * j].fwd)};
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      cr_assert_geq(bt_predictor_adapt(p, "new-device", probes, 6, &err), 0, "%s", err.msg);
      cr_assert_geq(bt_predictor_adapt(q, "new-device", probes, 6, &err), 0, "%s", err.msg);
    }
    int differ = 0, n = 0;
    for (int i = 0; i < w.s[0].n; i++)
      for (int k = 0; k <= N_DEVS + round; k++)
        for (int pass = 0; pass < 2; pass++) {
          const char *dev = k <= N_DEVS ? w.names[k] : "new-device";
          const bt_profile_entry *e = &w.s[0].e[i];
          n++;
          differ += bt_predictor_predict(p, dev, &e->layer, e->batch, pass) !=
                    bt_predictor_predict(q, dev, &e->layer, e->batch, pass);
        }
    cr_assert_eq(differ, 0, "round %d: %d of %d predictions differ after loading", round, differ,
                 n);
  }
  bt_predictor_free(q);
  /* A tree that splits on a feature the regression does not have, and one
   * whose leaf is not finite: refused, not read past. */
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  static char text[4 << 20];
  const size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  char *trees = strstr(text, " trees ");
  cr_assert_not_null(trees, "the model file has no trees");
  int nt = 0, ntf = 0;
  cr_assert_eq(sscanf(trees, " trees %d %d", &nt, &ntf), 2);
  cr_assert_gt(nt, 0);
  char *line = strchr(trees + 1, '\n') + 1; /* the first tree: "f thr" x 7, 8 leaves */
  {
    /* feature index out of range */
    f = fopen(path, "w");
    fprintf(f, "%.*s %d", (int)(line - text), text, ntf + 3);
    const char *rest = line;
    while (*rest == ' ')
      rest++;
    rest = strchr(rest, ' '); /* skip the first feature index */
    fputs(rest, f);
    fclose(f);
    cr_assert_lt(bt_predictor_load(path, &q, &err), 0);
    cr_assert(strstr(err.msg, "not a valid baton predictor file"), "%s", err.msg);
    /* a NaN leaf: the last number of the first tree's line */
    f = fopen(path, "w");
    const char *eol = strchr(line, '\n');
    const char *last = eol;
    while (last > line && last[-1] != ' ')
      last--;
    fprintf(f, "%.*snan%s", (int)(last - text), text, eol);
    fclose(f);
    cr_assert_lt(bt_predictor_load(path, &q, &err), 0);
    cr_assert(strstr(err.msg, "not a valid baton predictor file"), "%s", err.msg);
  }
  cr_assert_eq(bt_predictor_save(p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(truncate(path, 300), 0);
  cr_assert_lt(bt_predictor_load(path, &q, &err), 0);
  cr_assert(strstr(err.msg, "not a valid baton predictor file"), "%s", err.msg);
  unlink(path);
  bt_predictor_free(p);
  free_world(&w);
}

Test(predictor, predictions_are_finite_and_non_negative) {
  world w;
  make_world(&w);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0);
  bt_layer big = bt_conv2d(4096, 7, 1, 3);
  big.in = (bt_shape){512, 512, 2048};
  cr_assert_eq(bt_layer_finalize(&big, "big", &err), 0);
  bt_layer tiny = bt_relu();
  tiny.in = (bt_shape){1, 1, 1};
  cr_assert_eq(bt_layer_finalize(&tiny, "tiny", &err), 0);
  const int batches[] = {1, 7, 100000};
  for (int k = 0; k <= N_DEVS; k++)
    for (int b = 0; b < 3; b++)
      for (int pass = 0; pass < 2; pass++) {
        double t1 = bt_predictor_predict_dev(p, k, &big, batches[b], pass);
        double t2 = bt_predictor_predict_dev(p, k, &tiny, batches[b], pass);
        cr_assert(isfinite(t1) && t1 >= 0 && isfinite(t2) && t2 >= 0);
      }
  double all[BT_PRED_DEVICES_MAX];
  cr_assert_eq(bt_predictor_predict_all(p, &tiny, 3, BT_PASS_BWD, all), N_DEVS + 1);
  for (int k = 0; k <= N_DEVS; k++)
    cr_assert_eq(all[k], bt_predictor_predict_dev(p, k, &tiny, 3, BT_PASS_BWD));
  cr_assert_eq(bt_predictor_predict_dev(p, 0, &tiny, 0, BT_PASS_FWD), 0.0);
  cr_assert_eq(bt_predictor_predict_dev(p, 99, &tiny, 1, BT_PASS_FWD), 0.0);
  cr_assert_eq(bt_predictor_predict(p, "no-such-device", &tiny, 1, BT_PASS_FWD), -1.0);
  bt_predictor_free(p);
  free_world(&w);
}

Test(predictor, profile_passes_keep_the_minimum_and_are_stored) {
  bt_profile p, q;
  memset(&p, 0, sizeof p);
  bt_err err = {{0}};
  cr_assert_eq(bt_profile_probe_set(&p, &err), 0);
  bt_profile_host_rates(&p.host, 0);
  bt_device host;
  cr_assert_eq(bt_host_as_device(&p.host, &host, &err), 0, "%s", err.msg);
  p.passes = 101;
  cr_assert_lt(bt_profile_measure(&p, NULL, &host, 2, 0, NULL, NULL, &err), 0);
  cr_assert(strstr(err.msg, "passes"), "%s", err.msg);
  p.passes = 3;
  cr_assert_eq(bt_profile_measure(&p, NULL, &host, 1, 0, NULL, NULL, &err), 0, "%s", err.msg);
  for (int i = 0; i < p.n; i++) {
    const bt_profile_entry *e = &p.e[i];
    cr_assert(e->host_fwd > 0 && isfinite(e->host_fwd) && e->host_bwd > 0 && isfinite(e->host_bwd));
    cr_assert_eq(e->fwd, e->host_fwd);
    /* The spread of the two best passes: >= 0 (the best is the minimum). */
    cr_assert(e->spread >= 0 && isfinite(e->spread), "row %d spread %g", i, e->spread);
  }
  char path[256];
  tmp_path(path, sizeof path, "passes.h5");
  cr_assert_eq(bt_profile_write(&p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_read(path, &q, &err), 0, "%s", err.msg);
  cr_assert_eq(q.passes, 3);
  cr_assert_eq(q.repeats, 1);
  cr_assert_eq(q.e[0].host_fwd, p.e[0].host_fwd);
  unlink(path);
  bt_profile_free(&q);
  /* On a device: the host rates are measured before every later pass and the
   * best kept, and the mapping uses them. */
  bt_device d;
  cr_assert_eq(bt_device_find("rpi4", DATA_DIR, &d, &err), 0, "%s", err.msg);
  const bt_host_rates r0 = p.host;
  p.passes = 2;
  cr_assert_eq(bt_profile_measure(&p, &d, &host, 1, 0, NULL, NULL, &err), 0, "%s", err.msg);
  cr_assert_geq(p.host.sgemm_gflops, r0.sgemm_gflops);
  cr_assert_geq(p.host.mem_gbs, r0.mem_gbs);
  cr_assert_eq(bt_host_as_device(&p.host, &host, &err), 0, "%s", err.msg);
  for (int i = 0; i < p.n; i++) {
    const bt_profile_entry *e = &p.e[i];
    const double f =
        bt_device_layer_mapped(&d, &host, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd, 0).total;
    cr_assert_eq(e->fwd, f, "row %d: %g vs %g", i, e->fwd, f);
  }
  bt_profile_free(&p);
}

/* Host times of a synthetic set: a smooth power law of the FLOPs with a
 * cliff no smooth regression has (3x3 convolutions on images of 14 pixels
 * or more run 1.6x slower). */
static void add_cliff(bt_profile *p) {
  for (int i = 0; i < p->n; i++) {
    bt_profile_entry *e = &p->e[i];
    const double c =
        e->layer.kind == BT_CONV2D && e->layer.kh == 3 && e->layer.in.h >= 14 ? 1.6 : 1.0;
    const double ff = e->batch * bt_layer_flops_fwd(&e->layer) + 1e3;
    const double fb = e->batch * bt_layer_flops_bwd(&e->layer) + 1e3;
    e->host_fwd = e->fwd = c * (2e-6 + 1e-9 * pow(ff, 0.95)) * scatter(i, 0);
    e->host_bwd = e->bwd = c * (3e-6 + 1e-9 * pow(fb, 0.95)) * scatter(i, 1);
  }
}

Test(predictor, boosted_trees_learn_what_the_regressions_miss) {
  bt_profile s;
  synth(&s, NULL, 400);
  add_cliff(&s);
  /* Fit on even rows, score the host model on odd convolution rows. */
  cr_assert(s.n > 100 && s.n < 2000, "%d rows", s.n);
  unsigned char *use = calloc(2000, 1);
  cr_assert_not_null(use);
  for (int i = 0; i < s.n && i < 2000; i++)
    use[i] = i % 2 == 0;
  double share[2];
  for (int t = 0; t < 2; t++) {
    bt_predictor_options o;
    bt_predictor_default_options(&o);
    o.trees = t ? 150 : 0;
    bt_predictor *p;
    bt_err err = {{0}};
    cr_assert_eq(bt_predictor_fit(&s, NULL, 1, use, &o, &p, &err), 0, "%s", err.msg);
    int ok = 0, n = 0;
    for (int i = 1; i < s.n; i += 2)
      if (s.e[i].layer.kind == BT_CONV2D)
        for (int pass = 0; pass < 2; pass++, n++) {
          double h = bt_predictor_host_time(p, &s.e[i].layer, s.e[i].batch, pass);
          double y = pass ? s.e[i].host_bwd : s.e[i].host_fwd;
          cr_assert(isfinite(h) && h > 0);
          ok += fabs(h - y) <= 0.10 * y;
        }
    share[t] = (double)ok / n;
    bt_predictor_free(p);
  }
  cr_assert_geq(share[1], share[0] + 0.1,
                "held-out convolutions within 10%%: trees %.1f%%, regressions alone %.1f%%",
                100 * share[1], 100 * share[0]);
  cr_assert_geq(share[1], 0.5, "trees: %.1f%% within 10%% (regressions %.1f%%)", 100 * share[1],
                100 * share[0]);
  free(use);
  bt_profile_free(&s);
}

/* 1 if the forward of `l` runs through BLIS GEMMs (dense layers, and the
 * convolutions layers.c lowers: 1x1, strided, or neither direct, at least 4
 * input channels and whole vectors of outputs, nor thin, < 16 outputs). */
static int is_gemm_layer(const bt_layer *l) {
  if (l->kind == BT_DENSE)
    return 1;
  if (l->kind != BT_CONV2D || l->stride != 1 || (l->kh == 1 && l->kw == 1 && l->pad == 0))
    return l->kind == BT_CONV2D;
  return !((l->in.c >= 4 && l->out.c % 16 == 0) || l->out.c < 16);
}

Test(predictor, a_real_cpu_with_slower_gemms_is_learnt_from_ten_probes) {
  world w;
  make_world(&w);
  bt_predictor *p;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0, "%s", err.msg);
  /* The host with other BLIS kernels: every GEMM 3x slower, the direct
   * convolutions and everything else as before. */
  const bt_profile *h = &w.s[N_DEVS];
  bt_pred_sample probes[20];
  int np = 0;
  for (int i = 0; i < h->n && np < 20; i++)
    if (strcmp(h->e[i].source, "probe") == 0) {
      const double f = is_gemm_layer(&h->e[i].layer) ? 3.0 : 1.0;
      probes[np++] = (bt_pred_sample){&h->e[i].layer, h->e[i].batch, BT_PASS_FWD, f * h->e[i].fwd};
      probes[np++] = (bt_pred_sample){&h->e[i].layer, h->e[i].batch, BT_PASS_BWD, f * h->e[i].bwd};
    }
  const int d = bt_predictor_adapt(p, "other-blis", NULL, 0, &err);
  cr_assert_geq(d, 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_set_raw(p, d, 1), 0);
  cr_assert_eq(bt_predictor_adapt(p, "other-blis", probes, np, &err), d, "%s", err.msg);
  int ok[2] = {0}, n[2] = {0};
  for (int i = 0; i < h->n; i++) {
    const bt_layer *l = &h->e[i].layer;
    if (l->kind != BT_CONV2D && l->kind != BT_DENSE)
      continue;
    const int g = is_gemm_layer(l);
    const double f = g ? 3.0 : 1.0;
    const double t = bt_predictor_predict_dev(p, d, l, h->e[i].batch, BT_PASS_FWD);
    ok[g] += fabs(t - f * h->e[i].fwd) <= 0.10 * f * h->e[i].fwd;
    n[g]++;
  }
  cr_assert_gt(n[0], 10);
  cr_assert_gt(n[1], 10);
  cr_assert_geq((double)ok[1] / n[1], 0.8, "GEMM layers: %d of %d within 10%%", ok[1], n[1]);
  cr_assert_geq((double)ok[0] / n[0], 0.8, "direct convolutions: %d of %d within 10%%", ok[0],
                n[0]);
  bt_predictor_free(p);
  free_world(&w);
}

/* Mean log ratio of the predicted host time to `scale` x the analytic host
 * time over the "random" rows of set c: 0 when the host model follows c. */
static double host_log_bias(const bt_predictor *p, const bt_profile *c, double scale) {
  double s = 0;
  int n = 0;
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->e[i].source, "random") == 0)
      for (int pass = 0; pass < 2; pass++, n++)
        s += log(bt_predictor_host_time(p, &c->e[i].layer, c->e[i].batch, pass) /
                 (scale * (pass ? c->e[i].host_bwd : c->e[i].host_fwd)));
  return s / n;
}

static void scale_host_times(bt_profile *c, double f) {
  for (int i = 0; i < c->n; i++) {
    c->e[i].host_fwd *= f, c->e[i].host_bwd *= f;
    c->e[i].fwd = c->e[i].host_fwd, c->e[i].bwd = c->e[i].host_bwd;
  }
}

Test(predictor, host_corpora_join_the_host_model_only_with_new_layers) {
  world w;
  make_world(&w);
  bt_err err = {{0}};
  bt_predictor *plain, *with;
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &plain, &err), 0, "%s",
               err.msg);
  /* A corpus of other random layers whose host times are all 2x: the host
   * model moves towards it (it holds most of the random rows). */
  bt_profile c;
  synth_seed(&c, NULL, 400, 2);
  scale_host_times(&c, 2.0);
  cr_assert_eq(bt_predictor_fit_ex(w.s, w.names, N_DEVS + 1, NULL, &c, 1, NULL, &with, &err), 0,
               "%s", err.msg);
  const double b_plain = host_log_bias(plain, &c, 0.5), b_with = host_log_bias(with, &c, 0.5);
  cr_assert_lt(fabs(b_plain), 0.1, "without the corpus: bias %.3f", b_plain);
  cr_assert_gt(b_with, 0.3, "with a 2x corpus the host model should move: bias %.3f", b_with);
  cr_assert_eq(bt_predictor_n_devices(with), N_DEVS + 1, "a corpus gets no head");
  bt_predictor_free(with);
  bt_profile_free(&c);
  /* A corpus of the main corpus's own layers (relabelled random) adds
   * nothing: every row is a duplicate, so the fit is the plain one. */
  bt_profile dup;
  synth(&dup, NULL, 60);
  scale_host_times(&dup, 2.0);
  for (int i = 0; i < dup.n; i++)
    snprintf(dup.e[i].source, sizeof dup.e[i].source, "random");
  cr_assert_eq(bt_predictor_fit_ex(w.s, w.names, N_DEVS + 1, NULL, &dup, 1, NULL, &with, &err), 0,
               "%s", err.msg);
  for (int i = 0; i < w.s[0].n; i++)
    for (int pass = 0; pass < 2; pass++) {
      const bt_profile_entry *e = &w.s[0].e[i];
      cr_assert_eq(bt_predictor_predict_dev(with, 0, &e->layer, e->batch, pass),
                   bt_predictor_predict_dev(plain, 0, &e->layer, e->batch, pass), "row %d", i);
    }
  bt_predictor_free(with);
  /* A corpus timed on another host is refused. */
  dup.threads = 2;
  cr_assert_lt(bt_predictor_fit_ex(w.s, w.names, N_DEVS + 1, NULL, &dup, 1, NULL, &with, &err), 0);
  cr_assert(strstr(err.msg, "base host") && strstr(err.msg, "2 threads"), "%s", err.msg);
  bt_profile_free(&dup);
  bt_predictor_free(plain);
  free_world(&w);
}

Test(predictor, a_directory_of_sets_is_sorted_into_roles) {
  char dir[256], path[320];
  tmp_path(dir, sizeof dir, "dir");
  cr_assert_eq(mkdir(dir, 0700), 0);
  bt_err err = {{0}};
  bt_profile d, h;
  synth(&d, "rpi4", 10);
  synth(&h, NULL, 10);
  const char *files[] = {"rpi4.h5", "host.h5", "host-haswell.h5", "corpus-a.h5"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    cr_assert_eq(bt_profile_write(i == 0 ? &d : &h, path, &err), 0, "%s", err.msg);
  }
  bt_profile_dir sd;
  cr_assert_eq(bt_profile_dir_read(dir, &sd, &err), 0, "%s", err.msg);
  cr_assert_eq(sd.n, 4);
  bt_profile sel[4];
  const char *names[4];
  cr_assert_eq(bt_profile_dir_select(&sd, BT_PROFILE_DEVICE, sel, names, 4), 2);
  cr_assert_str_eq(names[0], "host");
  cr_assert_str_eq(names[1], "rpi4");
  cr_assert_eq(bt_profile_dir_select(&sd, BT_PROFILE_VARIANT, sel, names, 4), 1);
  cr_assert_str_eq(names[0], "host-haswell");
  cr_assert_eq(bt_profile_dir_select(&sd, BT_PROFILE_CORPUS, sel, names, 4), 1);
  cr_assert_str_eq(names[0], "corpus-a");
  bt_profile_dir_free(&sd);
  /* A bad file is an error naming it; a directory of corpora only has no device. */
  snprintf(path, sizeof path, "%s/rpi4.h5", dir);
  FILE *f = fopen(path, "w");
  fputs("junk", f);
  fclose(f);
  cr_assert_lt(bt_profile_dir_read(dir, &sd, &err), 0);
  cr_assert(strstr(err.msg, "rpi4.h5"), "%s", err.msg);
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  cr_assert_lt(bt_profile_dir_read(dir, &sd, &err), 0);
  cr_assert(strstr(err.msg, "no device profiling sets"), "%s", err.msg);
  snprintf(path, sizeof path, "%s/%s", dir, files[3]);
  unlink(path);
  rmdir(dir);
  cr_assert_lt(bt_profile_dir_read(dir, &sd, &err), 0);
  cr_assert(strstr(err.msg, "no such directory"), "%s", err.msg);
  bt_profile_free(&d);
  bt_profile_free(&h);
}

/* Mean log ratio of the predicted host time of the backward without input
 * gradient to c's over c's random convolutions and dense layers. */
static double nodin_log_bias(const bt_predictor *p, const bt_profile *c) {
  double s = 0;
  int n = 0;
  for (int i = 0; i < c->n; i++)
    if (strcmp(c->e[i].source, "random") == 0 && isfinite(c->e[i].host_bwd_nodin)) {
      s += log(bt_predictor_host_time(p, &c->e[i].layer, c->e[i].batch, BT_PASS_BWD_NODIN) /
               c->e[i].host_bwd_nodin);
      n++;
    }
  return n ? s / n : NAN;
}

Test(predictor, a_first_layer_backward_without_input_gradient_is_learnt) {
  world w;
  make_world(&w);
  bt_err err = {{0}};
  /* A host corpus that also timed the backward without the input gradient:
   * 0.7x what the host device model says, which the fallback (the full
   * backward times the model's share) cannot know. */
  bt_profile c;
  synth_seed(&c, NULL, 400, 2);
  bt_device host;
  cr_assert_eq(bt_host_as_device(&c.host, &host, &err), 0);
  int timed = 0;
  for (int i = 0; i < c.n; i++) {
    bt_profile_entry *e = &c.e[i];
    if (bt_pass_backward_of(&e->layer, 0) != BT_PASS_BWD_NODIN)
      continue;
    e->host_bwd_nodin = e->bwd_nodin =
        0.7 * bt_device_layer_analytic(&host, &e->layer, e->batch, BT_PASS_BWD_NODIN, 0).total *
        scatter(i, 2);
    timed++;
  }
  cr_assert_gt(timed, 100);
  bt_predictor *plain, *with;
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &plain, &err), 0, "%s",
               err.msg);
  cr_assert_eq(bt_predictor_fit_ex(w.s, w.names, N_DEVS + 1, NULL, &c, 1, NULL, &with, &err), 0,
               "%s", err.msg);
  const double b_plain = nodin_log_bias(plain, &c), b_with = nodin_log_bias(with, &c);
  cr_assert_gt(b_plain, 0.25, "the fallback does not know the 0.7: bias %.3f", b_plain);
  cr_assert_lt(fabs(b_with), 0.08, "fitted on the corpus: bias %.3f", b_with);
  /* Kinds that compute nothing but the input gradient keep their backward. */
  bt_layer relu = bt_relu();
  relu.in = (bt_shape){8, 8, 16};
  cr_assert_eq(bt_layer_finalize(&relu, "relu", &err), 0);
  cr_assert_eq(bt_predictor_predict_dev(with, 0, &relu, 4, BT_PASS_BWD_NODIN),
               bt_predictor_predict_dev(with, 0, &relu, 4, BT_PASS_BWD));
  /* The regression survives the model file. */
  char path[256];
  tmp_path(path, sizeof path, "nodin.txt");
  bt_predictor *back;
  cr_assert_eq(bt_predictor_save(with, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_load(path, &back, &err), 0, "%s", err.msg);
  for (int i = 0; i < c.n; i += 7) {
    const bt_profile_entry *e = &c.e[i];
    const double a = bt_predictor_predict_dev(with, 1, &e->layer, e->batch, BT_PASS_BWD_NODIN),
                 b = bt_predictor_predict_dev(back, 1, &e->layer, e->batch, BT_PASS_BWD_NODIN);
    cr_assert_float_eq(a, b, 1e-6 * a, "row %d: %g vs %g", i, a, b);
  }
  remove(path);
  bt_predictor_free(back);
  bt_predictor_free(with);
  bt_predictor_free(plain);
  /* The profile file keeps the optional columns; a bad value is refused. */
  tmp_path(path, sizeof path, "nodin.h5");
  cr_assert_eq(bt_profile_write(&c, path, &err), 0, "%s", err.msg);
  bt_profile r;
  cr_assert_eq(bt_profile_read(path, &r, &err), 0, "%s", err.msg);
  for (int i = 0; i < c.n; i++)
    cr_assert(same_time(c.e[i].host_bwd_nodin, r.e[i].host_bwd_nodin), "row %d", i);
  bt_profile_free(&r);
  for (int i = 0; i < c.n; i++)
    if (isfinite(c.e[i].host_bwd_nodin)) {
      c.e[i].host_bwd_nodin = -1;
      break;
    }
  cr_assert_eq(bt_profile_write(&c, path, &err), 0, "%s", err.msg);
  cr_assert_lt(bt_profile_read(path, &r, &err), 0);
  cr_assert(strstr(err.msg, "host_bwd_nodin = -1"), "%s", err.msg);
  remove(path);
  bt_profile_free(&c);
  free_world(&w);
}

/* A profile of the zoo's lenet5 and mlp layers at batch 8 (all of both
 * models, so that each runs whole) after a layer of no zoo model. */
static void zoo_profile(bt_profile *p, int first_rows[2]) {
  bt_err err = {{0}};
  memset(p, 0, sizeof *p);
  bt_layer other = bt_dense(37);
  other.in = (bt_shape){5, 5, 3};
  cr_assert_eq(bt_profile_add(p, other, 3, "random", &err), 1, "%s", err.msg);
  static const char *names[] = {"lenet5", "mlp"};
  for (int z = 0; z < 2; z++) {
    bt_model m;
    cr_assert_eq(bt_zoo_build(names[z], (bt_shape){28, 28, 1}, 10, &m, &err), 0, "%s", err.msg);
    for (int i = 0; i < m.n_layers; i++) {
      char spec[BT_LAYER_SPEC_MAX];
      bt_layer copy;
      cr_assert_geq(bt_layer_spec_format(&m.layers[i], spec, sizeof spec), 0);
      cr_assert_eq(bt_layer_spec_parse(spec, &copy, &err), 0, "%s", err.msg);
      const int added = bt_profile_add(p, copy, 8, names[z], &err);
      cr_assert_geq(added, 0, "%s", err.msg);
      if (i == 0)
        first_rows[z] = added ? p->n - 1 : -1;
    }
    bt_model_free(&m);
  }
}

Test(predictor, zoo_layers_are_also_timed_inside_their_model) {
  bt_profile p, q;
  bt_err err = {{0}};
  int first_rows[2];
  zoo_profile(&p, first_rows);
  bt_profile_host_rates(&p.host, 0);
  bt_device host, d;
  cr_assert_eq(bt_host_as_device(&p.host, &host, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_device_find("jetson-nano", DATA_DIR, &d, &err), 0, "%s", err.msg);
  p.in_model = 1;
  cr_assert_eq(bt_profile_measure(&p, &d, &host, 2, 0, NULL, NULL, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_host_as_device(&p.host, &host, &err), 0, "%s", err.msg);
  int in_model = 0;
  for (int i = 0; i < p.n; i++) {
    const bt_profile_entry *e = &p.e[i];
    const int zoo = strcmp(e->source, "random") != 0;
    /* Only the zoo rows have in-model figures; a model's first layer has
     * no in-model backward with the input gradient. */
    const int first = i == first_rows[0] || i == first_rows[1];
    cr_assert_eq(isfinite(e->host_fwd_model), zoo, "row %d (%s)", i, e->spec);
    if (!zoo)
      continue;
    in_model++;
    cr_assert_gt(e->host_fwd_model, 0);
    cr_assert_eq(isfinite(e->host_bwd_model), !first, "row %d (%s)", i, e->spec);
    const double f =
        bt_device_layer_mapped(&d, &host, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd_model, 0)
            .total;
    cr_assert_eq(e->fwd_model, f, "row %d: the in-model time maps as the runtime maps it", i);
    cr_assert(isfinite(e->host_fwd) && e->host_fwd > 0, "the back-to-back figure stays");
  }
  cr_assert_gt(in_model, 10);
  char path[256];
  tmp_path(path, sizeof path, "inmodel.h5");
  cr_assert_eq(bt_profile_write(&p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_profile_read(path, &q, &err), 0, "%s", err.msg);
  cr_assert_eq(q.in_model, 1);
  for (int i = 0; i < p.n; i++) {
    const bt_profile_entry *a = &p.e[i], *b = &q.e[i];
    cr_assert(same_time(a->host_bwd_model, b->host_bwd_model), "row %d", i);
    cr_assert(same_time(a->fwd_model, b->fwd_model), "row %d", i);
  }
  bt_profile_free(&q);
  /* A bad in-model time is refused with its row and column. */
  for (int i = 0; i < p.n; i++)
    if (isfinite(p.e[i].fwd_model)) {
      p.e[i].fwd_model = -2;
      break;
    }
  cr_assert_eq(bt_profile_write(&p, path, &err), 0, "%s", err.msg);
  cr_assert_lt(bt_profile_read(path, &q, &err), 0);
  cr_assert(strstr(err.msg, "fwd_model = -2"), "%s", err.msg);
  remove(path);
  bt_profile_free(&p);
}

/* In-model figures of a synthetic set: the zoo rows' host times x a factor
 * per kind (depthwise 1.8, convolutions 1.1, the rest 1.3), mapped. */
static double ctx_truth(const bt_layer *l) {
  return l->kind == BT_DWCONV2D ? 1.8 : l->kind == BT_CONV2D ? 1.1 : 1.3;
}

static void add_in_model(bt_profile *p, const char *dev) {
  bt_err err = {{0}};
  bt_device host, d;
  cr_assert_eq(bt_host_as_device(&p->host, &host, &err), 0);
  if (dev)
    cr_assert_eq(bt_device_find(dev, DATA_DIR, &d, &err), 0, "%s", err.msg);
  p->in_model = 1;
  for (int i = 0; i < p->n; i++) {
    bt_profile_entry *e = &p->e[i];
    if (strcmp(e->source, "probe") == 0 || strcmp(e->source, "random") == 0)
      continue;
    e->host_fwd_model = e->host_fwd * ctx_truth(&e->layer);
    e->host_bwd_model = e->host_bwd * ctx_truth(&e->layer);
    e->fwd_model = map_time(dev ? &d : NULL, &host, e, BT_PASS_FWD, e->host_fwd_model);
    e->bwd_model = map_time(dev ? &d : NULL, &host, e, BT_PASS_BWD, e->host_bwd_model);
  }
}

Test(predictor, the_in_model_context_is_learnt_from_the_zoo_rows) {
  world w;
  make_world(&w);
  bt_predictor *plain, *p, *back;
  bt_err err = {{0}};
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &plain, &err), 0, "%s",
               err.msg);
  cr_assert_eq(bt_predictor_set_in_model(plain, 1), 0, "no set was timed in its model");
  for (int k = 0; k <= N_DEVS; k++)
    add_in_model(&w.s[k], k < N_DEVS ? devs[k] : NULL);
  cr_assert_eq(bt_predictor_fit(w.s, w.names, N_DEVS + 1, NULL, NULL, &p, &err), 0, "%s", err.msg);
  /* The factor per kind, and the in-model device times of the zoo rows. */
  int rows = 0, ok_ctx = 0, far_rows = 0, ok_plain = 0;
  const bt_profile *s = &w.s[0];
  for (int i = 0; i < s->n; i++) {
    const bt_profile_entry *e = &s->e[i];
    if (!isfinite(e->fwd_model))
      continue;
    const double c = bt_predictor_context_factor(p, &e->layer, e->batch, BT_PASS_FWD);
    cr_assert_float_eq(c, ctx_truth(&e->layer), 0.03 * ctx_truth(&e->layer), "row %d (%s): %g", i,
                       e->spec, c);
    cr_assert_eq(bt_predictor_context_factor(plain, &e->layer, e->batch, BT_PASS_FWD), 1.0);
    cr_assert_eq(bt_predictor_set_in_model(p, 1), 1);
    const double with = bt_predictor_predict_dev(p, 0, &e->layer, e->batch, BT_PASS_FWD);
    cr_assert_eq(bt_predictor_set_in_model(p, 0), 0);
    const double without = bt_predictor_predict_dev(p, 0, &e->layer, e->batch, BT_PASS_FWD);
    rows++;
    ok_ctx += fabs(with - e->fwd_model) <= 0.05 * e->fwd_model;
    /* Without the context a GEMM-like row misses by its factor (a
     * memory-bound one keeps its analytic device time either way); the
     * convolutions' 1.1 is near the 5% bound, so count dense (1.3) and
     * depthwise (1.8) rows. */
    if (e->layer.kind == BT_DENSE || e->layer.kind == BT_DWCONV2D) {
      far_rows++;
      ok_plain += fabs(without - e->fwd_model) <= 0.05 * e->fwd_model;
    }
  }
  cr_assert_gt(rows, 100);
  cr_assert_geq(ok_ctx, 0.95 * rows, "with the context %d of %d within 5%%", ok_ctx, rows);
  cr_assert_gt(far_rows, 20);
  cr_assert_leq(ok_plain, 0.05 * far_rows, "without it %d of %d", ok_plain, far_rows);
  /* The context survives the model file. */
  char path[256];
  tmp_path(path, sizeof path, "ctx.txt");
  cr_assert_eq(bt_predictor_save(p, path, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_load(path, &back, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_predictor_set_in_model(back, 1), 1);
  cr_assert_eq(bt_predictor_set_in_model(p, 1), 1);
  for (int i = 0; i < s->n; i += 5) {
    const bt_profile_entry *e = &s->e[i];
    const double a = bt_predictor_predict_dev(p, 1, &e->layer, e->batch, BT_PASS_BWD),
                 b = bt_predictor_predict_dev(back, 1, &e->layer, e->batch, BT_PASS_BWD);
    cr_assert_float_eq(a, b, 1e-5 * a, "row %d: %g vs %g", i, a, b);
  }
  remove(path);
  bt_predictor_free(back);
  bt_predictor_free(p);
  bt_predictor_free(plain);
  free_world(&w);
}
