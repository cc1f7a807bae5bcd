/* calib: the host calibration store behind the virtual clock.
 *
 * The virtual clock maps a layer's host time to device time. Host times on a
 * shared machine move from run to run (the core's clock speed, the L3 that
 * neighbouring processes and VMs share: 10-20% for one conv layer here), so
 * a calibration measured once is kept in a store and reused: runs that find
 * their layers there get the same device times whatever the host's load.
 *
 * The store is a text file of tab-separated lines, appended to (one write()
 * per line, so concurrent appenders do not interleave):
 *   HOST <tab> KEY <tab> A <tab> B
 * HOST fingerprints the host and the code (CPU model, BLIS kernels and
 * threads, the compute-code hash BT_COMPUTE_HASH); KEY names a layer configuration
 * (bt_calib_layer_key), A and B its forward and backward host seconds; the
 * key "#host-rates" holds the host's sgemm GFLOP/s and memory GB/s. When a
 * key appears more than once the smallest figures win (load only ever slows
 * a measurement down). Lines of other hosts are kept and ignored. */
#ifndef BATON_CALIB_H
#define BATON_CALIB_H

#include <stddef.h>

#include <stdint.h>

#include "baton/err.h"
#include "baton/layers.h"
#include "baton/model.h"

#define BT_CALIB_HOST_RATES "#host-rates"

typedef struct bt_calib_store bt_calib_store;

/* "<cpu model>|<blis arch>x<threads>|<version>", tabs and newlines removed. */
void bt_calib_host(const char *blis_arch, int threads, const char *version, char *buf, size_t n);

/* A key for layer `l` at micro-batch `batch`: kind, shapes and
 * hyper-parameters (recursively for residual blocks). `no_input_grad` marks a
 * layer whose backward skips its input gradient (the first of the model). */
void bt_calib_layer_key(const bt_layer *l, int batch, int no_input_grad, char *buf, size_t n);

/* Loads the entries of `host` from `path`; a missing file is an empty
 * store. Malformed lines are an error naming the file and line. */
int bt_calib_load(const char *path, const char *host, bt_calib_store **out, bt_err *err);
/* 1 and the figures when `key` is stored, else 0. */
int bt_calib_lookup(const bt_calib_store *s, const char *key, double *a, double *b);
void bt_calib_free(bt_calib_store *s);

/* Appends one entry (creating the file and its directory). Figures must be
 * finite and positive. */
int bt_calib_append(const char *path, const char *host, const char *key, double a, double b,
                    bt_err *err);

/* ---- measuring ---- */

/* Flops of the reference kernel, a 256^3 sgemm (its operands, 768 KiB, stay
 * in cache, so its time follows the core's clock speed), and its best
 * thread-CPU seconds over `repeats` runs. */
#define BT_CALIB_REFERENCE_FLOPS (2.0 * 256 * 256 * 256)
double bt_calib_reference(int repeats);

/* Host rates: sgemm GFLOP/s (the reference kernel, best of 20) and memory
 * GB/s (a 16 MiB memcpy, read + write, best of 16). */
void bt_calib_measure_host_rates(double *sgemm_gflops, double *mem_gbs);

/* How a stage calibrates. */
typedef struct bt_calib_options {
  int repeats;        /* timed passes (the minimum is kept), >= 1; one warm-up pass precedes */
  double ref_seconds; /* > 0: rescale each pass to this reference-kernel time (see .c) */
  uint64_t seed;      /* inputs' random stream */
  int batch_size;     /* whole batch (the loss scale), >= micro_batch */
  const char *store;  /* store to reuse and extend; NULL = measure, store nothing */
  const char *host;   /* fingerprint of the store's entries (bt_calib_host) */
  int wall_clock;     /* time with the monotonic clock (several BLIS threads), not thread CPU */
} bt_calib_options;

typedef struct bt_calib_result {
  int stored, measured; /* layers taken from the store / measured now */
  double cpu_share;     /* thread-CPU / wall time while measuring (1 = had the core) */
} bt_calib_result;

/* Host thread-CPU seconds of forward and backward of every layer of stage
 * `s` of `m` on one micro-batch: each layer's store entry when there is one,
 * else measured (minimum over the passes) and appended. Weights, state and
 * gradients of the stage are left as they were. fwd and bwd have
 * s->last - s->first entries. */
int bt_calib_stage(bt_stage *s, const bt_model *m, int micro_batch, const bt_calib_options *o,
                   double *fwd, double *bwd, bt_calib_result *res, bt_err *err);

/* Host rates from the store (key BT_CALIB_HOST_RATES) or measured and
 * appended; store NULL = measured. Store write failures are warnings. */
int bt_calib_host_rates(const char *store, const char *host, double *sgemm_gflops, double *mem_gbs,
                        bt_err *err);

/* The default store: $BATON_CALIBRATION, else $XDG_CACHE_HOME/baton/
 * calibration.tsv, else $HOME/.cache/baton/calibration.tsv. */
void bt_calib_default_path(char *buf, size_t n);

#endif
