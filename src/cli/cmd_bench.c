/* baton bench: benchmarks that print their figures next to the reference
 * they are judged against, measured in the same run.
 *
 *   baton bench step  training-step time of a zoo model vs the BLIS sgemm
 *                     rate of this machine (and optionally PyTorch's step)
 *   baton bench gemm  BLIS sgemm GFLOP/s at a few sizes; --small: the small-product
 *                     path against BLIS alone
 *   baton bench plan  exact plan search time vs the even split (bench_plan.c) */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/data.h"
#include "baton/gemm.h"
#include "baton/model.h"
#include "baton/modelfile.h"
#include "baton/optim.h"
#include "cli.h"

static void bench_usage(FILE *f) {
  fprintf(f, "usage: baton bench step --model M --batch B [options]\n"
             "       baton bench gemm [--size N] [--arch A] [--threads T] [--small]\n"
             "       baton bench codec [options]  (codec GB/s vs memcpy, zstd, lz4; --help)\n"
             "       baton bench plan [options]   (exact plan search time; --help)\n\n"
             "step options:\n"
             "  --model M            zoo model (see 'baton models')\n"
             "  --batch B            samples per step (default 32)\n"
             "  --input HxWxC        input shape (default 32x32x3)\n"
             "  --micro-batches M    micro-batches per step (default 1)\n"
             "  --repeats N          timed steps (default 10); --warmup N untimed (default 2)\n"
             "  --arch A             BLIS kernels: auto, skx, haswell, sandybridge, generic\n"
             "  --threads T          BLIS threads (default 1)\n"
             "  --layers             also print each layer's forward and backward time\n"
             "  --compare-pytorch    also run bench/pytorch_step.py (python3-torch) on the same\n"
             "                       model and report baton's time as a ratio of PyTorch's\n\n"
             "gemm options: --size N (n^3 sgemm, default 1024); --small: a dense layer's three\n"
             "  products at 70 sizes on baton's small-product path and on BLIS alone, same run\n");
}

/* Median GFLOP/s of an n^3 sgemm through the same seam the layers use. */
static double sgemm_gflops(int n, int repeats) {
  float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
  float *c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; i++)
    a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f, c[i] = 0;
  double t[64];
  if (repeats > 64)
    repeats = 64;
  bt_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  for (int r = 0; r < repeats; r++) {
    double t0 = bt_cli_now();
    bt_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t[r] = bt_cli_now() - t0;
  }
  free(a), free(b), free(c);
  return 2.0 * n * (double)n * n / bt_cli_median(t, repeats) / 1e9;
}

/* Best seconds of one product: the minimum over 25 timings of enough
 * back-to-back calls to take about 50 us (the clock's own cost vanishes). */
static double product_seconds(bool ta, bool tb, int m, int n, int k, const float *a, const float *b,
                              float *c) {
  const int lda = ta ? m : k, ldb = tb ? k : n;
  bt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
  double t0 = bt_cli_now();
  bt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
  const double one = bt_cli_now() - t0;
  const int calls = one > 50e-6 ? 1 : (int)(50e-6 / fmax(one, 1e-7)) + 1;
  double best = INFINITY;
  for (int r = 0; r < 25; r++) {
    t0 = bt_cli_now();
    for (int i = 0; i < calls; i++)
      bt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
    best = fmin(best, (bt_cli_now() - t0) / calls);
  }
  return best;
}

/* The three products of a dense layer (forward, weight and input gradient)
 * at a sweep of sizes, with the small-product path (gemm.c) and with BLIS
 * alone, in the same run: where the path pays, and by how much. */
static int bench_small_products(void) {
  const long limit = bt_gemm_small_limit();
  if (limit == 0) {
    printf("BLIS %s: the small-product path is off with these kernels (it runs only under "
           "BLIS's skx kernels); nothing to compare\n",
           bt_gemm_arch());
    return 0;
  }
  static const int batches[] = {1, 2, 4, 8, 32};
  static const int widths[][2] = {{10, 64},    {64, 64},     {32, 256},    {128, 128},  {100, 256},
                                  {256, 256},  {64, 1024},   {512, 512},   {1024, 256}, {2048, 512},
                                  {512, 2048}, {1024, 1024}, {4096, 1024}, {4096, 4096}};
  float *a = calloc(1 << 24, sizeof(float)), *b = calloc(1 << 24, sizeof(float));
  float *c = calloc(1 << 24, sizeof(float));
  if (!a || !b || !c) {
    free(a), free(b), free(c);
    return bt_cli_fail("bench", "out of memory");
  }
  for (int i = 0; i < 1 << 24; i++)
    a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
  printf("BLIS %s, 1 thread: dense-layer products, best of 25, small path (limit %ld "
         "multiply-adds) vs BLIS alone, same run\n",
         bt_gemm_arch(), limit);
  printf("%-6s %6s %6s %-8s %10s %10s %10s %8s\n", "batch", "in", "out", "product", "MACs",
         "small us", "BLIS us", "BLIS/small");
  double log_sum = 0;
  int below = 0, slower = 0, missed = 0;
  for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++)
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
      const int B = batches[bi], I = widths[w][0], O = widths[w][1];
      const struct {
        const char *name;
        bool ta, tb;
        int m, n, k;
      } prods[] = {{"forward", false, false, B, O, I},
                   {"dweight", true, false, I, O, B},
                   {"dinput", false, true, B, I, O}};
      for (int q = 0; q < 3; q++) {
        const double macs = (double)prods[q].m * prods[q].n * prods[q].k;
        bt_gemm_set_small_limit(LONG_MAX);
        const double ts =
            product_seconds(prods[q].ta, prods[q].tb, prods[q].m, prods[q].n, prods[q].k, a, b, c);
        bt_gemm_set_small_limit(0);
        const double tb =
            product_seconds(prods[q].ta, prods[q].tb, prods[q].m, prods[q].n, prods[q].k, a, b, c);
        bt_gemm_set_small_limit(limit);
        const int taken =
            bt_gemm_small_takes(prods[q].ta, prods[q].tb, prods[q].m, prods[q].n, prods[q].k);
        printf("%-6d %6d %6d %-8s %10.0f %10.2f %10.2f %7.2fx%s\n", B, I, O, prods[q].name, macs,
               ts * 1e6, tb * 1e6, tb / ts, taken ? "  (small path)" : "");
        if (taken)
          log_sum += log(tb / ts), below++, slower += tb < ts;
        else
          missed += tb > ts;
      }
    }
  printf("products the small path takes: %d; BLIS/small time geometric mean %.2fx; of them BLIS "
         "alone is faster: %d; of the others, the small path would be faster: %d\n",
         below, below ? exp(log_sum / below) : 0.0, slower, missed);
  free(a), free(b), free(c);
  return 0;
}

/* Forward + backward FLOPs per sample of every conv2d, inside blocks too. */
static double model_conv_flops(const bt_layer *layers, int n) {
  double f = 0;
  for (int i = 0; i < n; i++) {
    const bt_layer *l = &layers[i];
    if (l->kind == BT_CONV2D)
      f += bt_layer_flops_fwd(l) + bt_layer_flops_bwd(l);
    else if (l->kind == BT_RESIDUAL)
      f += model_conv_flops(l->sub, l->n_body + l->n_short);
  }
  return f;
}

static size_t current_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    fclose(f);
  }
  return (size_t)resident * 4096;
}

typedef struct step_opts {
  const char *model;
  int batch, micro, repeats, warmup, threads, pytorch, per_layer;
  bt_shape input;
  const char *arch;
} step_opts;

/* Runs bench/pytorch_step.py for the same model; returns its median ms or -1. */
static double pytorch_median_ms(const step_opts *o, char *layout, size_t layout_len) {
  char dir[4096], script[4200], cmd[8600];
  bt_cli_data_dir(dir, sizeof dir);
  snprintf(script, sizeof script, "%s/../bench/pytorch_step.py", dir);
  FILE *probe = fopen(script, "r");
  if (!probe)
    snprintf(script, sizeof script, "%s/bench/pytorch_step.py", dir);
  else
    fclose(probe);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s' --model %s --batch %d --input %dx%dx%d --threads %d "
           "--layout both --repeats %d --warmup %d 2>&1",
           script, o->model, o->batch, o->input.h, o->input.w, o->input.c, o->threads, o->repeats,
           o->warmup);
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  char line[1024];
  double ms = -1;
  while (fgets(line, sizeof line, p)) {
    if (strncmp(line, "RESULT", 6) == 0) {
      const char *m = strstr(line, "median_ms="), *l = strstr(line, "best_layout=");
      if (m)
        ms = atof(m + 10);
      if (l)
        sscanf(l + 12, "%31s", layout);
      (void)layout_len;
    } else {
      printf("  pytorch: %s", line);
    }
  }
  return pclose(p) == 0 ? ms : -1;
}

static int bench_step(const step_opts *o) {
  bt_err err;
  bt_model m;
  char data[4096], models[4200];
  snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
  if (bt_model_resolve(o->model, models, o->input, 10, &m, &err) < 0)
    return bt_cli_fail("bench", "%s", err.msg);
  if (o->batch % o->micro != 0) {
    bt_model_free(&m);
    return bt_cli_fail("bench", "--micro-batches %d must divide --batch %d", o->micro, o->batch);
  }
  const size_t rss0 = current_rss();
  bt_stage s;
  const int mb = o->batch / o->micro;
  if (bt_stage_init(&s, &m, 0, m.n_layers, mb, 1, 1, &err) < 0) {
    bt_model_free(&m);
    return bt_cli_fail("bench", "%s", err.msg);
  }
  bt_dataset ds;
  if (bt_data_synthetic(o->batch, o->input.h, o->input.w, o->input.c, 10, 1, &ds, &err) < 0) {
    bt_stage_free(&s);
    bt_model_free(&m);
    return bt_cli_fail("bench", "%s", err.msg);
  }
  const int n = m.n_layers;
  double *lf = calloc((size_t)n, sizeof(double)), *lb = calloc((size_t)n, sizeof(double));
  double tf[64], tb[64], tu[64], tt[64];
  const int reps = o->repeats > 64 ? 64 : o->repeats;
  const bt_sgd opt = {0.01, 0.9, 0.0, 0};
  const size_t in_elems = bt_shape_elems(o->input);
  for (int r = -o->warmup; r < reps; r++) {
    if (r == 0) { /* per-layer times only over the timed steps */
      s.layer_fwd_s = lf, s.layer_bwd_s = lb;
      s.timing_clock = CLOCK_MONOTONIC;
    }
    bt_exec x = {
        .training = 1, .seed = 1, .step = r + o->warmup, .loss_scale = 1.0f / (float)o->batch};
    double t0 = bt_cli_now(), fwd = 0, bwd = 0;
    bt_stage_zero_grad(&s);
    for (int k = 0; k < o->micro; k++) {
      const float *xm = ds.x + (size_t)k * mb * in_elems;
      x.micro = k;
      x.labels = ds.y + (size_t)k * mb;
      double a = bt_cli_now();
      bt_stage_forward(&s, 0, xm, mb, &x);
      double b = bt_cli_now();
      bt_stage_backward(&s, 0, xm, NULL, NULL, mb, &x);
      fwd += b - a;
      bwd += bt_cli_now() - b;
    }
    double t1 = bt_cli_now();
    bt_sgd_step(&opt, s.params, s.grads, s.momentum, s.n_params);
    double t2 = bt_cli_now();
    if (r >= 0)
      tf[r] = fwd, tb[r] = bwd, tu[r] = t2 - t1, tt[r] = t2 - t0;
  }
  const size_t peak = bt_cli_peak_rss();
  double conv_time = 0, conv_flops = 0;
  for (int i = 0; i < n; i++)
    if (m.layers[i].kind == BT_CONV2D) {
      conv_time += lf[i] + lb[i];
      conv_flops +=
          (bt_layer_flops_fwd(&m.layers[i]) + bt_layer_flops_bwd(&m.layers[i])) * o->batch * reps;
    }
  const double step = bt_cli_median(tt, reps), f_med = bt_cli_median(tf, reps),
               b_med = bt_cli_median(tb, reps);
  const double u_med = bt_cli_median(tu, reps);
  const double flops = (bt_model_flops_fwd(&m) + bt_model_flops_bwd(&m)) * o->batch;
  const double gemm = sgemm_gflops(1024, 10);
  char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
  printf("baton bench step: %s, batch %d (%d micro-batches), input %dx%dx%d, BLIS %s, %d "
         "thread(s), %d timed steps after %d warm-up\n",
         m.name, o->batch, o->micro, o->input.h, o->input.w, o->input.c, bt_gemm_arch(),
         bt_gemm_threads(), reps, o->warmup);
  printf("reference: BLIS sgemm 1024^3 on this machine, this run: %.1f GFLOP/s\n", gemm);
  printf("step: median %.1f ms = forward %.1f + backward %.1f + update %.1f ms (min %.1f, "
         "max %.1f)\n",
         step * 1e3, f_med * 1e3, b_med * 1e3, u_med * 1e3, tt[0] * 1e3, tt[reps - 1] * 1e3);
  printf("achieved: %.1f GFLOP/s over %.3f GFLOP per step = %.0f%% of sgemm\n", flops / step / 1e9,
         flops / 1e9, 100.0 * flops / step / 1e9 / gemm);
  /* Convolutions inside residual blocks are timed with their block, so the
   * figure is only meaningful when top-level convolutions carry the model's
   * convolution work. FLOPs count padding taps, as PyTorch's count does; a
   * kernel that skips them can exceed the sgemm rate. */
  const double all_conv = model_conv_flops(m.layers, n) * o->batch * reps;
  if (conv_time > 0 && conv_flops >= 0.9 * all_conv)
    printf("convolutions (conv2d, forward + backward, padding FLOPs counted): %.1f GFLOP/s = "
           "%.0f%% of sgemm, %.0f%% of step time\n",
           conv_flops / conv_time / 1e9, 100.0 * conv_flops / conv_time / 1e9 / gemm,
           100.0 * conv_time / reps / step);
  else if (all_conv > 0)
    printf("convolutions: %.0f%% of their FLOPs sit inside residual blocks, timed with the "
           "block (see --layers)\n",
           100.0 * (1.0 - conv_flops / all_conv));
  if (o->per_layer) {
    printf("%-4s %-22s %-15s %10s %10s %10s %10s\n", "#", "layer", "kind", "fwd ms", "bwd ms",
           "fwd GF/s", "bwd GF/s");
    for (int i = 0; i < n; i++) {
      const bt_layer *l = &m.layers[i];
      double f = lf[i] / reps, b = lb[i] / reps;
      printf("%-4d %-22s %-15s %10.2f %10.2f %10.1f %10.1f\n", i + 1, l->name,
             bt_layer_kind_name(l->kind), f * 1e3, b * 1e3,
             f > 0 ? bt_layer_flops_fwd(l) * o->batch / f / 1e9 : 0.0,
             b > 0 ? bt_layer_flops_bwd(l) * o->batch / b / 1e9 : 0.0);
    }
  }
  const bt_stage_mem *mm = &s.mem;
  const double core = (double)(mm->params + mm->grads + mm->optim + mm->acts);
  printf("memory: params %s + grads %s + optimizer %s + activations %s = %s; buffers and "
         "scratch %s\n",
         bt_cli_bytes((double)mm->params, b1, sizeof b1),
         bt_cli_bytes((double)mm->grads, b2, sizeof b2),
         bt_cli_bytes((double)mm->optim, b3, sizeof b3),
         bt_cli_bytes((double)mm->acts, b4, sizeof b4), bt_cli_bytes(core, b5, sizeof b5),
         bt_cli_bytes((double)(mm->state + mm->grad_bufs + mm->workspace), b6, sizeof b6));
  printf("peak memory: %s above the process baseline (peak RSS %s) = %.2fx of params + grads "
         "+ optimizer + activations\n",
         bt_cli_bytes((double)(peak - rss0), b1, sizeof b1),
         bt_cli_bytes((double)peak, b2, sizeof b2), (double)(peak - rss0) / core);
  if (o->pytorch) {
    char layout[32] = "?";
    double pt = pytorch_median_ms(o, layout, sizeof layout);
    if (pt > 0)
      printf("reference: PyTorch median step %.1f ms (%s), this run; baton/PyTorch time = "
             "%.2fx\n",
             pt, layout, step * 1e3 / pt);
    else
      printf("reference: PyTorch could not be run (install python3-torch)\n");
  }
  free(lf), free(lb);
  bt_dataset_free(&ds);
  bt_stage_free(&s);
  bt_model_free(&m);
  return 0;
}

static int parse_int(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
    bt_cli_fail(cmd, "%s '%s': expected an integer in %d..%d", opt, v, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

int bt_cmd_bench(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    bench_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "codec") == 0) /* its own options: cmd_bench_codec.c */
    return bt_cmd_bench_codec(argc - 1, argv + 1);
  if (strcmp(argv[1], "plan") == 0) /* its own options: bench_plan.c */
    return bt_cmd_bench_plan(argc - 1, argv + 1);
  const char *what = argv[1];
  step_opts o = {.model = NULL,
                 .batch = 32,
                 .micro = 1,
                 .repeats = 10,
                 .warmup = 2,
                 .threads = 1,
                 .input = {32, 32, 3},
                 .arch = "auto"};
  int size = 1024, small = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (strcmp(a, "--compare-pytorch") == 0) {
      o.pytorch = 1;
      continue;
    }
    if (strcmp(a, "--layers") == 0) {
      o.per_layer = 1;
      continue;
    }
    if (strcmp(a, "--small") == 0) {
      small = 1;
      continue;
    }
    if (strcmp(a, "--help") == 0) {
      bench_usage(stdout);
      return 0;
    }
    if (!v)
      return bt_cli_fail("bench", "option '%s' needs a value; see 'baton bench --help'", a);
    i++;
    if (strcmp(a, "--model") == 0)
      o.model = v;
    else if (strcmp(a, "--batch") == 0)
      rc = parse_int("bench", a, v, 1, 65536, &o.batch);
    else if (strcmp(a, "--micro-batches") == 0)
      rc = parse_int("bench", a, v, 1, 65536, &o.micro);
    else if (strcmp(a, "--repeats") == 0)
      rc = parse_int("bench", a, v, 1, 64, &o.repeats);
    else if (strcmp(a, "--warmup") == 0)
      rc = parse_int("bench", a, v, 0, 1000, &o.warmup);
    else if (strcmp(a, "--threads") == 0)
      rc = parse_int("bench", a, v, 1, 256, &o.threads);
    else if (strcmp(a, "--size") == 0)
      rc = parse_int("bench", a, v, 16, 8192, &size);
    else if (strcmp(a, "--arch") == 0)
      o.arch = v;
    else if (strcmp(a, "--input") == 0) {
      if (bt_cli_parse_shape(v, &o.input.h, &o.input.w, &o.input.c) < 0)
        return bt_cli_fail("bench", "--input '%s': expected HxWxC such as 32x32x3", v);
    } else
      return bt_cli_fail("bench", "unknown option '%s'; see 'baton bench --help'", a);
    if (rc < 0)
      return 2;
  }
  if (bt_gemm_configure(o.arch, o.threads) < 0)
    return bt_cli_fail("bench", "--arch '%s': choose auto, skx, haswell, sandybridge or generic",
                       o.arch);
  if (strcmp(what, "gemm") == 0 && small)
    return bench_small_products();
  if (strcmp(what, "gemm") == 0) {
    printf("BLIS %s, %d thread(s): sgemm %d^3 %.1f GFLOP/s\n", bt_gemm_arch(), bt_gemm_threads(),
           size, sgemm_gflops(size, 10));
    return 0;
  }
  if (strcmp(what, "step") == 0) {
    if (!o.model)
      return bt_cli_fail("bench", "step needs --model (one of the zoo, see 'baton models')");
    return bench_step(&o);
  }
  return bt_cli_fail("bench", "unknown benchmark '%s'; choose step or gemm", what);
}
