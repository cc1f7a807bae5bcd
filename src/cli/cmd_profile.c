/* baton profile: time a corpus of layers on an emulated device (or the bare
 * host) and write a profiling set (HDF5) for the latency predictor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/device.h"
#include "baton/gemm.h"
#include "baton/profile.h"
#include "cli.h"

static void profile_usage(FILE *f) {
  fprintf(f,
          "usage: baton profile --device NAME --out FILE.h5 [options]\n\n"
          "Times the forward and backward pass of every layer of the corpus (randomised conv,\n"
          "depthwise, dense, pooling, batch-norm, ReLU and residual layers, plus every layer of\n"
          "the zoo models) on the host, minimum thread-CPU time of repeats as the runtime's\n"
          "calibration does, and maps it to the device through the device model. NAME 'host'\n"
          "keeps the host's own times.\n\n"
          "options:\n"
          "  --device NAME     a profile of data/devices, or host\n"
          "  --out FILE.h5     the profiling set to write\n"
          "  --random N        randomised layers (default 300)\n"
          "  --deep N          also N randomised late-stage layers (256-1024 channels on\n"
          "                    1-8 pixels, large dense layers; default 0)\n"
          "  --odd N           also N randomised layers of any channel count, kernel\n"
          "                    and padding (1-128 channels, kernels 1-7, dense 8-1200;\n"
          "                    never the zoo's own; default 0)\n"
          "  --dense N         also N randomised dense layers (8-4096 inputs, 2-4096\n"
          "                    units, log-uniform; never the zoo's own; default 0)\n"
          "  --deep-grid       also a grid of late-stage convolutions (256-1024 channels\n"
          "                    on 2-8 pixels, batches 1-32; never the zoo's own)\n"
          "  --big-grid        also a grid of large convolutions (16-512 channels on 4-32\n"
          "                    pixels, 1e8-5e9 FLOPs, batches 8-32; never the zoo's own)\n"
          "  --big-blocks      also large depthwise convolutions, batch norm, ReLU(6),\n"
          "                    inverted residuals and basic blocks (above the random\n"
          "                    layers' size cap, batches 8-32; never the zoo's own)\n"
          "  --zoo LIST        the zoo models whose layers the corpus holds, comma-\n"
          "                    separated, or none (default all six: mlp, lenet5,\n"
          "                    vgg11, vgg16, resnet18, mobilenetv2)\n"
          "  --seed S          corpus seed (default 1)\n"
          "  --repeats N       timed runs per layer, minimum kept (default 10)\n"
          "  --passes P        time the whole corpus P times, minimum per layer over the\n"
          "                    passes (default 1; load bursts then miss most layers)\n"
          "  --probes          time only the probe set (at most 10 layers)\n"
          "  --nodin           also time the backward of convolutions and dense layers\n"
          "                    without the input gradient (what a model's first layer runs)\n"
          "  --in-model        time the zoo models' layers inside their whole model, as\n"
          "                    the runtime's calibration does (weights and stashed tensors\n"
          "                    evicted by the other layers), not back to back\n"
          "  --arch A          BLIS kernels: auto, skx, haswell, sandybridge, generic\n"
          "  --threads T       BLIS threads (default 1; > 1 times with the wall clock)\n"
          "  --quiet           no progress line\n");
}

static void progress(void *ctx, int done, int total) {
  if (done % 20 == 0 || done == total)
    fprintf(stderr, "\rbaton profile %s: %d/%d layers", (const char *)ctx, done, total);
  if (done == total)
    fprintf(stderr, "\n");
}

static int int_arg(const char *opt, const char *v, int lo, int hi, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    bt_cli_fail("profile", "%s '%s': expected an integer in %d..%d", opt, v, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

int bt_cmd_profile(int argc, char **argv) {
  const char *device = NULL, *out = NULL, *arch = "auto", *zoo = NULL;
  int n_random = 300, n_deep = 0, n_odd = 0, n_dense = 0, deep_grid = 0, big_grid = 0,
      big_blocks = 0, seed = 1, repeats = 10, passes = 1, threads = 1, probes = 0, quiet = 0,
      nodin = 0, in_model = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      profile_usage(stdout);
      return 0;
    } else if (strcmp(a, "--probes") == 0) {
      probes = 1;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = 1;
    } else if (strcmp(a, "--nodin") == 0) {
      nodin = 1;
    } else if (strcmp(a, "--in-model") == 0) {
      in_model = 1;
    } else if (strcmp(a, "--deep-grid") == 0) {
      deep_grid = 1;
    } else if (strcmp(a, "--big-grid") == 0) {
      big_grid = 1;
    } else if (strcmp(a, "--big-blocks") == 0) {
      big_blocks = 1;
    } else if (!v) {
      profile_usage(stderr);
      return bt_cli_fail("profile", "unknown option or missing value: %s", a) + 1;
    } else if (strcmp(a, "--device") == 0) {
      device = argv[++i];
    } else if (strcmp(a, "--out") == 0) {
      out = argv[++i];
    } else if (strcmp(a, "--arch") == 0) {
      arch = argv[++i];
    } else if (strcmp(a, "--zoo") == 0) {
      zoo = argv[++i];
    } else if (strcmp(a, "--random") == 0) {
      if (int_arg(a, argv[++i], 0, 100000, &n_random) < 0)
        return 2;
    } else if (strcmp(a, "--deep") == 0) {
      if (int_arg(a, argv[++i], 0, 100000, &n_deep) < 0)
        return 2;
    } else if (strcmp(a, "--odd") == 0) {
      if (int_arg(a, argv[++i], 0, 100000, &n_odd) < 0)
        return 2;
    } else if (strcmp(a, "--dense") == 0) {
      if (int_arg(a, argv[++i], 0, 100000, &n_dense) < 0)
        return 2;
    } else if (strcmp(a, "--seed") == 0) {
      if (int_arg(a, argv[++i], 0, 1 << 30, &seed) < 0)
        return 2;
    } else if (strcmp(a, "--repeats") == 0) {
      if (int_arg(a, argv[++i], 1, 1000, &repeats) < 0)
        return 2;
    } else if (strcmp(a, "--passes") == 0) {
      if (int_arg(a, argv[++i], 1, 100, &passes) < 0)
        return 2;
    } else if (strcmp(a, "--threads") == 0) {
      if (int_arg(a, argv[++i], 1, 256, &threads) < 0)
        return 2;
    } else {
      profile_usage(stderr);
      return bt_cli_fail("profile", "unknown option %s", a) + 1;
    }
  }
  if (!device || !out) {
    profile_usage(stderr);
    return bt_cli_fail("profile", "--device and --out are required") + 1;
  }
  if (bt_gemm_configure(arch, threads) < 0)
    return bt_cli_fail("profile",
                       "--arch '%s': expected auto, skx, haswell, sandybridge or "
                       "generic",
                       arch);
  bt_err err = {{0}};
  bt_device dev, host;
  const int emulated = strcmp(device, "host") != 0;
  char data[4096];
  if (emulated && bt_device_find(device, bt_cli_data_dir(data, sizeof data), &dev, &err) < 0)
    return bt_cli_fail("profile", "%s", err.msg);
  const int wall = threads > 1;
  bt_profile p;
  memset(&p, 0, sizeof p);
  bt_profile_host_rates(&p.host, wall);
  if (bt_host_as_device(&p.host, &host, &err) < 0)
    return bt_cli_fail("profile", "%s", err.msg);
  p.seed = (uint64_t)seed;
  p.passes = passes;
  p.nodin = nodin;
  p.in_model = in_model;
  p.threads = bt_gemm_threads();
  snprintf(p.blis_arch, sizeof p.blis_arch, "%s", bt_gemm_arch());
  bt_cli_host_key(p.host_key, sizeof p.host_key);
  int rc =
      probes ? bt_profile_probe_set(&p, &err) : bt_profile_corpus(&p, p.seed, n_random, zoo, &err);
  if (rc == 0 && !probes && n_deep > 0)
    rc = bt_profile_add_deep(&p, p.seed, n_deep, &err);
  if (rc == 0 && !probes && n_odd > 0)
    rc = bt_profile_add_odd(&p, p.seed, n_odd, &err);
  if (rc == 0 && !probes && n_dense > 0)
    rc = bt_profile_add_dense(&p, p.seed, n_dense, &err);
  if (rc == 0 && !probes && deep_grid)
    rc = bt_profile_add_deep_grid(&p, &err);
  if (rc == 0 && !probes && big_grid)
    rc = bt_profile_add_big_grid(&p, &err);
  if (rc == 0 && !probes && big_blocks)
    rc = bt_profile_add_big_blocks(&p, &err);
  if (rc == 0)
    rc = bt_profile_measure(&p, emulated ? &dev : NULL, &host, repeats, wall,
                            quiet ? NULL : progress, (void *)device, &err);
  if (rc == 0)
    rc = bt_profile_write(&p, out, &err);
  if (rc < 0) {
    bt_profile_free(&p);
    return bt_cli_fail("profile", "%s", err.msg);
  }
  double tf = 0, tb = 0, hf = 0, hb = 0;
  for (int i = 0; i < p.n; i++)
    tf += p.e[i].fwd, tb += p.e[i].bwd, hf += p.e[i].host_fwd, hb += p.e[i].host_bwd;
  printf("baton profile: %d layers on %s (BLIS %s, %d thread(s), %s clock, min of %d x %d "
         "pass(es)%s); host "
         "sgemm %.1f GFLOP/s, memory %.1f GB/s; host %.3f s, device %.3f s (fwd %.3f + bwd "
         "%.3f) -> %s\n",
         p.n, p.device, p.blis_arch, p.threads, p.clock, repeats, p.passes,
         p.in_model ? ", zoo layers timed in their model" : "", p.host.sgemm_gflops, p.host.mem_gbs,
         hf + hb, tf + tb, tf, tb, out);
  bt_profile_free(&p);
  return 0;
}
