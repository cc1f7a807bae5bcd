/* profile: layer-latency profiling sets for the predictor.
 *
 * A profiling set is a list of layers (each with a batch size) and, for one
 * device, the forward and backward time of each. The corpus mixes randomised
 * configurations of every layer kind (conv, depthwise conv, dense, pooling,
 * batch-norm, ReLU, residual blocks) with every distinct layer of the zoo
 * models. Timing follows the runtime's calibration exactly: one micro-batch,
 * thread-CPU seconds per layer (wall seconds with several BLIS threads, whose
 * workers the thread clock would miss), the minimum of `repeats` runs after a
 * warm-up; an emulated device's time is that host figure mapped through the
 * device model (bt_device_layer_mapped), as the virtual clock maps it.
 *
 * Outliers: the minimum is robust to runs slowed down by other processes,
 * but when the two smallest runs of a layer still differ by more than 5% the
 * layer is timed again (up to three more rounds) and the spread is recorded.
 *
 * Layers are stored as one-line specs (bt_layer_spec_format), e.g.
 *   conv2d@16x16x32:out=64,k=3x3,s=1,p=1
 *   residual@8x8x64:post=1{conv2d:out=64,k=3x3,s=1,p=1;batchnorm;relu|conv2d:out=64,k=1x1,s=1,p=0}
 * HDF5 layout (docs/predictor.md): root attributes format = "baton-profile",
 * version, device, blis_arch, threads, clock, repeats, passes (optional, 1 if
 * absent), seed, host_key (optional), host_sgemm_gflops,
 * host_mem_gbs; 1-D datasets of length n: spec, source (strings), batch
 * (int32), host_fwd, host_bwd, fwd, bwd, spread (float64, seconds). */
#ifndef BATON_PROFILE_H
#define BATON_PROFILE_H

#include <stdint.h>

#include "baton/device.h"
#include "baton/err.h"
#include "baton/layers.h"

#define BT_PROFILE_FORMAT "baton-profile"
#define BT_PROFILE_VERSION 1

enum { BT_LAYER_SPEC_MAX = 512 };

typedef struct bt_profile_entry {
  bt_layer layer; /* finalized; residual blocks own their sub-layers */
  int batch;
  char spec[BT_LAYER_SPEC_MAX];
  char source[48];           /* "random" or the zoo model it comes from */
  double host_fwd, host_bwd; /* host seconds (min of repeats) */
  double fwd, bwd;           /* device seconds (= host on the host) */
  double spread;             /* (2nd smallest - smallest) / smallest, worst pass */
  /* Backward without the input gradient (a model's first layer), host and
   * device seconds: convolutions and dense layers of sets profiled with
   * nodin; NaN otherwise. */
  double host_bwd_nodin, bwd_nodin;
  /* A zoo row timed inside its whole model (sets profiled with in_model), as
   * the runtime's calibration times it: host and device seconds and the
   * spread of those readings; NaN otherwise (the backward of a model's first
   * layer, which computes no input gradient there, too). */
  double host_fwd_model, host_bwd_model, fwd_model, bwd_model, spread_model;
} bt_profile_entry;

typedef struct bt_profile {
  char device[64];
  char blis_arch[32];
  int threads;
  char clock[16]; /* "thread" or "wall" */
  int repeats;
  int passes; /* timing passes over the corpus (minimum kept); 0 or 1: one */
  int nodin;  /* bt_profile_measure also times the backward without input gradient */
  /* bt_profile_measure also times the zoo rows inside their whole model, as
   * the runtime's calibration does (attribute zoo_in_model; the *_model
   * figures of the entries). */
  int in_model;
  uint64_t seed;
  /* The host and build that timed it (bt_calib_host: CPU model, BLIS kernels
   * and threads, compute-code hash); "" in sets made before 4 December. */
  char host_key[512];
  bt_host_rates host;
  int n, cap;
  bt_profile_entry *e;
} bt_profile;

/* One-line layer specs: kind[@HxWxC][:key=value,...][{body;...|shortcut;...}].
 * format: returns the length written or -1 if it does not fit. parse: the
 * layer is finalized at its @ shape (required at the top level). */
int bt_layer_spec_format(const bt_layer *l, char *buf, size_t len);
int bt_layer_spec_parse(const char *spec, bt_layer *out, bt_err *err);

/* Adds a layer (taking ownership of a residual's sub-layers), finalized, if no
 * layer with the same spec and batch is there yet. Returns 1 added, 0 duplicate. */
int bt_profile_add(bt_profile *p, bt_layer l, int batch, const char *source, bt_err *err);

/* The row of `l` at `batch`, or -1. */
int bt_profile_find(const bt_profile *p, const bt_layer *l, int batch);

/* The corpus: the probe set (source "probe"), `n_random` randomised layers
 * from `seed`, then every distinct layer of the zoo models at batches 8 and
 * 32 (vgg16 at 8 only). `zoo` names the zoo models whose layers it holds, a
 * comma-separated list (NULL: all six; "none": no zoo layers); an unknown
 * name is an error. */
int bt_profile_corpus(bt_profile *p, uint64_t seed, int n_random, const char *zoo, bt_err *err);

/* Adds `n` randomised layers of networks' late stages (source "deep"):
 * convolutions and residual blocks of 256-1024 channels on 1-8 pixels, dense
 * layers of 256-4096 units, where the weights' bytes set the time. */
int bt_profile_add_deep(bt_profile *p, uint64_t seed, int n, bt_err *err);

/* Adds `n` randomised layers of shapes off the random corpus's menus (source
 * "odd"): convolutions of any 1-64 input and 1-128 output channels, kernels
 * 1-7 with any padding up to half the kernel, dense layers of any 8-1200
 * inputs and 2-600 outputs, pooling, ReLU and batch norm on any channel
 * count, on 3-32 pixels, within the corpus's size limit; never a zoo model's
 * own layer. The random corpus draws channels from {3, 8, 16, ...} and pads
 * by half the kernel, so LeNet-like layers (1 or 6 channels, no padding) lie
 * outside it. */
int bt_profile_add_odd(bt_profile *p, uint64_t seed, int n, bt_err *err);

/* Adds `n` randomised dense layers (source "dense"): 8-4096 inputs and 2-4096
 * units, both log-uniform, batches 1-32, within the corpus's size limit;
 * never a zoo model's own layer. */
int bt_profile_add_dense(bt_profile *p, uint64_t seed, int n, bt_err *err);

/* Adds a grid of late-stage convolutions (source "grid"): 256-1024 input and
 * output channels (5 steps each) on 2, 4 and 8 pixels, kernels 1 and 3,
 * strides 1 and 2, batches 1-32, within the corpus's size limit, leaving out
 * every convolution of the zoo models (the evaluation's layers). */
int bt_profile_add_deep_grid(bt_profile *p, bt_err *err);

/* Adds a grid of large convolutions (source "big"): 16-512 input and output
 * channels (6 powers of 2) on 4-32 pixels, kernels 1 and 3, strides 1 and 2,
 * batches 8, 16 and 32, each kept where its forward takes 1e8-5e9 FLOPs (the
 * random corpus stops at 4e8; the zoo's layers at batch 32 reach 2.4e9),
 * never the zoo's own. */
int bt_profile_add_big_grid(bt_profile *p, bt_err *err);

/* Adds what the random corpus stops short of besides convolutions (source
 * "big"): depthwise convolutions (16-576 channels on 8-32 pixels, kernels 3
 * and 5, strides 1 and 2), batch norm, ReLU and ReLU6 on the same shapes,
 * inverted residuals (16-128 channels, expansion 6) and basic blocks (32-256
 * channels on 4-32 pixels, with and without a projecting shortcut), at
 * batches 8, 16 and 32, each kept where its tensors exceed the random
 * corpus's 6e6 elements or its FLOPs 4e8 (mobilenetv2's and resnet18's early
 * stages at batch 32), never a zoo model's own layer. */
int bt_profile_add_big_blocks(bt_profile *p, bt_err *err);

/* Whether a host corpus row of this source is fitted (randomised layers);
 * the zoo's and the probes' rows stay out of the fit, for the evaluation. */
int bt_profile_source_fitted(const char *source);

/* The probe set a new device is characterised by: at most 10 layers chosen to
 * exercise every term of the device model (rates of each class, per-op
 * overhead, fill-up, bandwidth roof, cache). */
int bt_profile_probe_set(bt_profile *p, bt_err *err);

/* Host rates measured as the runtime measures them (sgemm 384^3 best of 20,
 * 16 MiB memcpy best of 16), with the thread clock or (wall) the monotonic one. */
void bt_profile_host_rates(bt_host_rates *h, int wall_clock);

typedef void (*bt_profile_progress)(void *ctx, int done, int total);

/* Times every entry on the host (repeats >= 1) and maps it to `dev` (NULL:
 * the host itself) with `host` (from bt_host_as_device of p->host). With
 * p->passes > 1 the whole corpus is timed that many times one pass after the
 * other and each layer keeps its minimum over the passes (load bursts of a
 * shared host slow down runs of consecutive layers; a later pass misses
 * most of them); progress then counts passes x layers. The host rates are
 * then measured again before every later pass, the best kept in p->host and
 * used for the mapping (`host` is then only a fallback). */
int bt_profile_measure(bt_profile *p, const bt_device *dev, const bt_device *host, int repeats,
                       int wall_clock, bt_profile_progress progress, void *ctx, bt_err *err);

/* HDF5 out and in. Reading validates everything: format and version, equal
 * lengths, parseable specs, positive finite times; errors name the file and
 * the first bad row. */
int bt_profile_write(const bt_profile *p, const char *path, bt_err *err);
int bt_profile_read(const char *path, bt_profile *p, bt_err *err);

void bt_profile_free(bt_profile *p);

/* What a profiling set in a directory is for, by its file name:
 *   corpus-*.h5           a host corpus (more layers for the host-time model
 *                         only, timed on the base host; bt_predictor_fit_ex)
 *   NAME.h5, device host  a real host variant when NAME is not "host" (an
 *                         unseen device in the evaluation; not fitted)
 *   NAME.h5               otherwise the set of device NAME (fitted, a head) */
typedef enum bt_profile_role {
  BT_PROFILE_DEVICE,
  BT_PROFILE_VARIANT,
  BT_PROFILE_CORPUS
} bt_profile_role;

typedef struct bt_profile_dir {
  int n;
  bt_profile *sets; /* sorted by file name */
  char **names;     /* file names without .h5 */
  bt_profile_role *role;
} bt_profile_dir;

/* Reads every *.h5 of dir (at most 256); an unreadable set is an error
 * naming it, and so is a directory without a device set. */
int bt_profile_dir_read(const char *dir, bt_profile_dir *out, bt_err *err);
/* The sets of one role as shallow copies (owned by d) and their names, in
 * file-name order; returns the count (at most max). */
int bt_profile_dir_select(const bt_profile_dir *d, bt_profile_role role, bt_profile *sets,
                          const char **names, int max);
void bt_profile_dir_free(bt_profile_dir *d);

#endif
