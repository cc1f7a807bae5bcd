/* device: edge-device profiles, the device-time model, throttling and memory
 * accounting. Pure: no MPI, no clocks; the runtime and the simulator call it.
 *
 * A profile (data/devices/<name>.yaml, format in docs/devices.md) describes
 * one board: sustained rates per op class, a per-op overhead, how fast a GPU
 * fills up with work, memory, cache and its default network link. Reading is
 * strict: an unknown key, a wrong type, a negative, zero (where it would
 * divide) or non-finite number is an error "file:line:col: what; how to fix".
 *
 * The model (docs/devices.md explains why each term exists). For one op of
 * class c with `flops` FLOPs touching `bytes` bytes, on a device d:
 *
 *   T_d(op) = f_c(it) * max(flops / (R_c * util(flops)), bytes / B(bytes))  c compute-bound
 *   T_d(op) = f_c(it) * bytes / (R_c * cache(bytes))                       c memory-bound
 *   util(w) = w / (w + half_util_flops)   (1 when half_util_flops is 0)
 *   cache(b) = cache_speedup if b <= cache, else 1;  B(b) = elementwise rate * cache(b)
 *   f_c(it) = throttle multiplier of class c at iteration it (1 without throttling)
 *
 * Analytic mode (simulator): device_time = op_overhead + T_d(op).
 * Host-mapped mode (emulation): the caller measured the op on the host in
 * host_seconds; the host is described by the same analytic model (its
 * calibration rates), and
 *
 *   device_time = op_overhead + host_seconds * T_d(op) / T_host(op)
 *
 * which for a large compute-bound op is host_time * host_rate / device_rate
 * / util. Memory-bound ops (and layers whose host model is mostly
 * memory-bound) keep their analytic time T_d: their host time measures the
 * host's caches and neighbours more than anything about the device. A layer
 * is a list of ops (a residual block: its sub-layers' ops
 * plus the add), each op paying the overhead once. */
#ifndef BATON_DEVICE_H
#define BATON_DEVICE_H

#include <stddef.h>

#include "baton/err.h"
#include "baton/layers.h"
#include "baton/model.h"

/* Op classes: the first three are compute-bound (rates in GFLOP/s), the last
 * two memory-bound (rates in GB/s). */
typedef enum bt_op_class {
  BT_OP_CONV,        /* conv2d (im2col + GEMM, or cuDNN implicit GEMM) */
  BT_OP_DWCONV,      /* depthwise conv2d: few FLOPs per byte */
  BT_OP_DENSE,       /* fully connected (GEMM with the batch as one side) */
  BT_OP_ELEMENTWISE, /* relu, relu6, dropout, residual add, flatten, softmax-ce */
  BT_OP_POOL_NORM,   /* max/avg/global pooling, batch-norm */
  BT_OP_CLASS_COUNT
} bt_op_class;

/* "conv", "dwconv", "dense", "elementwise", "pool_norm" (the profile keys
 * without their unit suffix, and the throttle keys). */
const char *bt_op_class_name(bt_op_class c);
/* 1 for conv, dwconv, dense. */
int bt_op_class_compute_bound(bt_op_class c);

typedef enum bt_device_kind { BT_DEVICE_CPU, BT_DEVICE_GPU } bt_device_kind;

/* From iteration `after_iteration` on (until the next entry), the time of
 * every op of class c is multiplied by factor[c] (overhead excluded):
 * factor 2 = that class runs at half speed. */
typedef struct bt_throttle {
  long after_iteration;
  double factor[BT_OP_CLASS_COUNT];
} bt_throttle;

enum { BT_DEVICE_NAME_MAX = 64, BT_DEVICE_DESC_MAX = 256, BT_DEVICE_THROTTLE_MAX = 16 };

typedef struct bt_device {
  char name[BT_DEVICE_NAME_MAX];
  char description[BT_DEVICE_DESC_MAX];
  bt_device_kind kind;
  /* Sustained rates, indexed by bt_op_class: GFLOP/s (compute-bound
   * classes) or GB/s (memory-bound classes). All > 0. */
  double rate[BT_OP_CLASS_COUNT];
  double op_overhead_us;      /* per op: kernel launch / thread fork-join, >= 0 */
  double half_util_flops;     /* FLOPs at which utilisation is 50%, >= 0 */
  double capacity_mib;        /* memory a training process can use, > 0 */
  double bandwidth_gbs;       /* DRAM bandwidth (datasheet), > 0; informative */
  double cache_kib;           /* last-level cache, >= 0 */
  double cache_speedup;       /* bandwidth gain when the working set fits, >= 1 */
  double link_bandwidth_mbps; /* default link, Mbit/s, > 0 */
  double link_latency_ms;     /* default link one-way latency, >= 0 */
  int n_throttle;             /* entries in order of after_iteration */
  bt_throttle throttle[BT_DEVICE_THROTTLE_MAX];
} bt_device;

/* ---- loading ---------------------------------------------------------- */

/* Loads and validates the profile at `path`. On failure `d` is zeroed and
 * err says "path:line:col: ...". */
int bt_device_load(const char *path, bt_device *d, bt_err *err);

/* The same from YAML text; `name_for_errors` (NULL: "<string>") prefixes
 * messages. */
int bt_device_load_string(const char *yaml, const char *name_for_errors, bt_device *d, bt_err *err);

/* Loads <data_dir>/devices/<name>.yaml. An unknown name is an error listing
 * the known ones. The profile's `name` key must equal `name`. */
int bt_device_find(const char *name, const char *data_dir, bt_device *d, bt_err *err);

/* The profile names in <data_dir>/devices (files *.yaml, without the
 * extension), sorted. The caller frees with bt_device_names_free. */
typedef struct bt_device_names {
  char **names;
  int count;
} bt_device_names;
int bt_device_list(const char *data_dir, bt_device_names *out, bt_err *err);
void bt_device_names_free(bt_device_names *n);

/* ---- the model ---------------------------------------------------------- */

/* One op: its class, FLOPs and the bytes it reads and writes (also its
 * working set for the cache decision). */
typedef struct bt_device_op {
  bt_op_class cls;
  double flops;
  double bytes;
} bt_device_op;

/* The host, as calibrated by the caller at start-up. Zero fields fall back
 * as noted, so a caller may fill only sgemm_gflops and mem_gbs. */
typedef struct bt_host_rates {
  double sgemm_gflops;    /* > 0: large square sgemm on the host */
  double conv_gflops;     /* 0: sgemm_gflops */
  double dense_gflops;    /* 0: sgemm_gflops */
  double dwconv_gflops;   /* 0: sgemm_gflops / 8 (a depthwise conv is no GEMM) */
  double mem_gbs;         /* > 0: streaming read+write bandwidth */
  double pool_norm_gbs;   /* 0: mem_gbs */
  double cache_kib;       /* 0: no cache term */
  double cache_speedup;   /* 0: 1 */
  double half_util_flops; /* 0: the host is fully used at any op size */
} bt_host_rates;

/* The host as a device profile (no overhead, no throttling, named "host"),
 * so both sides of the mapping use one model. Fails on missing rates. */
int bt_host_as_device(const bt_host_rates *h, bt_device *out, bt_err *err);

/* Utilisation of a compute op of `flops` on d: flops / (flops + half_util). */
double bt_device_util(const bt_device *d, double flops);

/* Throttle multiplier of class c at iteration `iteration`. */
double bt_device_throttle(const bt_device *d, bt_op_class c, long iteration);

/* T_d(op): seconds without the overhead, throttled at `iteration`. */
double bt_device_op_busy(const bt_device *d, const bt_device_op *op, long iteration);

/* Analytic: op_overhead + T_d(op). */
double bt_device_op_analytic(const bt_device *d, const bt_device_op *op, long iteration);

/* Host-mapped: op_overhead + host_seconds * T_d(op) / T_host(op). `host`
 * comes from bt_host_as_device. */
double bt_device_op_mapped(const bt_device *d, const bt_device *host, const bt_device_op *op,
                           double host_seconds, long iteration);

/* ---- layers ----------------------------------------------------------- */

/* BT_PASS_BWD_NODIN: the backward pass of a model's first layer, which
 * computes no input gradient (nothing upstream needs it): a convolution or
 * dense layer then runs only its weight gradient. For every other kind it is
 * the same as BT_PASS_BWD. bt_pass_backward_of gives the backward
 * pass of layer `index` (0-based) of a model. */
typedef enum bt_pass { BT_PASS_FWD, BT_PASS_BWD, BT_PASS_BWD_NODIN } bt_pass;
bt_pass bt_pass_backward_of(const bt_layer *l, int index);

enum { BT_DEVICE_LAYER_OPS_MAX = 64 };

/* The ops one pass of layer `l` runs on `batch` samples (a residual block:
 * its sub-layers' ops, then the add and the optional ReLU). Writes at most
 * `max` ops; returns how many there are (which may exceed max). */
int bt_device_layer_ops(const bt_layer *l, int batch, bt_pass pass, bt_device_op *ops, int max);

/* Per-layer times, split by class (busy time, overhead excluded) so that
 * reports can show where a device spends its time. */
typedef struct bt_layer_time {
  double total;                       /* seconds, overhead included */
  double overhead;                    /* n_ops * op_overhead */
  double by_class[BT_OP_CLASS_COUNT]; /* busy seconds per class */
  int n_ops;
} bt_layer_time;

/* Analytic time of one pass of `l` (the simulator's figure). */
bt_layer_time bt_device_layer_analytic(const bt_device *d, const bt_layer *l, int batch,
                                       bt_pass pass, long iteration);

/* Host-mapped time of one pass of `l` whose measured host time (all its ops
 * together) is host_seconds: the busy part scales by T_d(layer)/T_host(layer)
 * and is split over classes in proportion to T_d. */
bt_layer_time bt_device_layer_mapped(const bt_device *d, const bt_device *host, const bt_layer *l,
                                     int batch, bt_pass pass, double host_seconds, long iteration);

/* ---- memory accounting -------------------------------------------------- */

/* Bytes a pipeline stage holds at once. */
typedef struct bt_mem_need {
  double params, grads, optim, state; /* weights, their gradients, momentum, bn stats */
  double act_per_micro;               /* activation stash (outputs + aux) of one micro-batch */
  int in_flight;                      /* micro-batches stashed at once */
  double buffers;                     /* gradient ping-pong, workspace, send/recv buffers */
} bt_mem_need;

double bt_mem_need_total(const bt_mem_need *n);

/* What stage [first, last) of `m` needs with micro-batches of `micro_batch`
 * samples and `in_flight` of them stashed, laid out as bt_stage_init lays it
 * out (so the figure equals bt_stage_mem_total of that stage plus the
 * activation send/recv buffers of a pipeline stage). */
int bt_mem_need_stage(const bt_model *m, int first, int last, int micro_batch, int in_flight,
                      bt_mem_need *out, bt_err *err);

/* Checks need against d's capacity times memory_scale (> 0); the error names
 * the device, the bytes needed (by kind) and the capacity. */
int bt_device_check_memory(const bt_device *d, const bt_mem_need *need, double memory_scale,
                           bt_err *err);

#endif
