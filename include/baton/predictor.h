/* predictor: per-layer forward/backward latency of every device, learned
 * from profiling sets, adapted to a new device from a few probe timings and
 * kept up to date online from the times the runtime measures.
 *
 * The model (docs/predictor.md gives the comparison behind the choice):
 *
 *  1. A shared representation: the host time h(layer, batch, pass) of our own
 *     kernels, predicted from the layer descriptor in log space by a ridge
 *     regression (GSL) per kind group and pass -- GEMM dimensions (M, N, K)
 *     and their products, the code path layers.c takes, the kernel taps the
 *     direct kernels really run, register-block fill, weight bytes against
 *     the caches for convolutions and dense layers; elements and cache-level
 *     hinges for the memory-bound kinds -- plus boosted regression trees on
 *     its residuals. A residual block is the sum of its sub-layers plus the
 *     add, corrected by a factor and trees of its own.
 *  2. A per-device head of 10 parameters theta (log scale): per-op overhead,
 *     a slowdown against the host for each op class (conv, dwconv, dense,
 *     element-wise, pool/norm), the FLOPs at which the device is half used,
 *     the last-level cache size and its speed-up, and (raw heads: real CPUs)
 *     the slowdown of the GEMM share of the host time. The head turns h into
 *     device time with the device model's own form (device.h): overhead x ops
 *     + h x T_theta(layer) / T_host(layer), roofline and cache included;
 *     T_host with the host rates of the session the head learnt from: its
 *     profiling set's (each set's session measures its own), or those of the
 *     probes' session for a head adapted from probes.
 *
 * Fitting: the host regressions on every set timed on the base host; each
 * seen device's head by maximum a posteriori Levenberg-Marquardt on log-time
 * residuals (plus a scan of the cache size); the population prior (mean and
 * covariance of the seen heads) then serves unseen devices.
 * Few-shot: bt_predictor_adapt fits a new head from probe samples and the
 * population prior alone. Online: bt_predictor_update is an iterated
 * extended Kalman filter step on the head: covariance inflated by a
 * forgetting factor and process noise, then the MAP update.
 *
 * Predictions are always finite and >= 0. Pure module: no MPI, no clocks. */
#ifndef BATON_PREDICTOR_H
#define BATON_PREDICTOR_H

#include "baton/device.h"
#include "baton/err.h"
#include "baton/layers.h"
#include "baton/profile.h"

#define BT_PREDICTOR_FORMAT "baton-predictor"
#define BT_PREDICTOR_VERSION 7

enum { BT_PRED_THETA = 10, BT_PRED_DEVICES_MAX = 64 };

typedef struct bt_predictor bt_predictor;

/* One measured time of one pass of one layer at one batch size. */
typedef struct bt_pred_sample {
  const bt_layer *layer;
  int batch;
  bt_pass pass;
  double seconds; /* > 0, finite */
} bt_pred_sample;

typedef struct bt_predictor_options {
  double sigma;        /* log-time noise of a sample (default 0.08) */
  double forget;       /* online: covariance / forget per update round (default 0.9) */
  double process;      /* online: process noise (std of theta per round, default 0.15) */
  double ridge;        /* host regressions: ridge on standardised features (default 0.3) */
  int linear_head;     /* 1: the comparison head (one time scale per device); 0: physics head */
  int residual_memory; /* 1: add the nearest fitted layers' residuals to the host time
                        * (+2-3 points within 10%, but ~10x the prediction time and a
                        * 275 kB model file); default 0 */
  int trees;           /* boosted regression trees on the host regressions' log
                        * residuals, per kind group and pass (default 200; 0: none) */
  int tree_depth;      /* their depth, 1..6 (default 5) */
} bt_predictor_options;

void bt_predictor_default_options(bt_predictor_options *o);

/* Fits a predictor on profiling sets that time the same corpus (same specs
 * and batches in the same order; otherwise an error naming the first
 * mismatching row). Set i is named names[i] (NULL: its device attribute).
 * Host regressions use the sets timed on the base host (threads 1 and the
 * most common BLIS arch); use_row (NULL: all) masks corpus rows out of every
 * fit, for cross-validation. Every set gets a head. */
int bt_predictor_fit(const bt_profile *sets, const char *const *names, int n_sets,
                     const unsigned char *use_row, const bt_predictor_options *opt,
                     bt_predictor **out, bt_err *err);
/* The same, with host corpora: further sets timed on the base host (device
 * "host", one thread, the base BLIS arch; another corpus --seed). Their
 * "random" rows join the host-time model's fit only, with their own host
 * times; rows whose layer and batch the main corpus holds are left out, so a
 * cross-validation over the main corpus's rows stays out of fold. They get
 * no head. A corpus not timed on the base host is an error. */
int bt_predictor_fit_ex(const bt_profile *sets, const char *const *names, int n_sets,
                        const unsigned char *use_row, const bt_profile *host_corpora, int n_corpora,
                        const bt_predictor_options *opt, bt_predictor **out, bt_err *err);
void bt_predictor_free(bt_predictor *p);

/* Model file (text, ~1.7 MB with the default 200 trees per regression): save
 * and load. Loading validates. */
int bt_predictor_save(const bt_predictor *p, const char *path, bt_err *err);
int bt_predictor_load(const char *path, bt_predictor **out, bt_err *err);

/* Device heads by name; -1 if unknown. */
int bt_predictor_device(const bt_predictor *p, const char *name);
int bt_predictor_n_devices(const bt_predictor *p);
const char *bt_predictor_device_name(const bt_predictor *p, int dev);

/* A new device (or a reset of a known one) characterised by probe samples
 * only: its head is the population prior updated by the probes (n may be 0).
 * Returns the device index or -1 (bad sample: NaN, negative, NULL layer). */
int bt_predictor_adapt(bt_predictor *p, const char *device, const bt_pred_sample *probes, int n,
                       bt_err *err);

/* A head is "emulated" by default: like bt_device_layer_mapped, a layer the
 * host model finds memory-bound keeps its analytic device time. A raw head
 * (real hardware, clock none, or the bare host: sets whose device is "host"
 * are fitted raw) scales every layer with its host time. Set it before
 * bt_predictor_adapt. Returns 0 or -1 (bad index). */
int bt_predictor_set_raw(bt_predictor *p, int dev, int raw);

/* The host rates (sgemm, memory bandwidth) a head maps host times with: the
 * rates of the session whose host times its device's times map
 * (bt_device_layer_mapped). A fitted head has its profiling set's rates, a
 * new one the sets' median; a head adapted from probes should get the
 * rates of the probes' session (baton train and plan: the calibration
 * store's). Raw heads ignore them. Set it before bt_predictor_adapt.
 * Returns 0 or -1 (bad index or rates). */
int bt_predictor_set_host_rates(bt_predictor *p, int dev, const bt_host_rates *rates, bt_err *err);

/* A copy of a known head under another name (e.g. one per rank, so that each
 * rank's throttling is followed separately). Returns its index or -1. */
int bt_predictor_clone_device(bt_predictor *p, const char *from, const char *to, bt_err *err);

/* One online round: the head of `device` follows the measured times (the
 * runtime calls it every K iterations with the layer times it measured). */
int bt_predictor_update(bt_predictor *p, const char *device, const bt_pred_sample *measured, int n,
                        bt_err *err);

/* Predicted seconds of one pass of `layer` on `batch` samples on device
 * `dev` (an index from bt_predictor_device or adapt). Finite and >= 0; 0 for
 * an unknown device index. */
double bt_predictor_predict_dev(const bt_predictor *p, int dev, const bt_layer *layer, int batch,
                                bt_pass pass);
/* The same by name (-1.0 for an unknown device: the only negative result). */
double bt_predictor_predict(const bt_predictor *p, const char *device, const bt_layer *layer,
                            int batch, bt_pass pass);

/* One layer on every device at once (out[bt_predictor_n_devices(p)]): the
 * shared part is computed once; what a partitioner calls. Returns the count. */
int bt_predictor_predict_all(const bt_predictor *p, const bt_layer *layer, int batch, bt_pass pass,
                             double *out);

/* The head alone: device seconds of a layer whose host time is known
 * (host_seconds > 0; otherwise the predicted one is used). */
double bt_predictor_map_dev(const bt_predictor *p, int dev, const bt_layer *layer, int batch,
                            bt_pass pass, double host_seconds);

/* The in-model context. The profiler times a layer back to back; the
 * runtime's calibration, inside its whole model, where the other layers
 * have pushed its weights and stashed tensors out of the caches. Sets
 * profiled with --in-model hold the zoo layers both ways, and the fit
 * learns the ratio. With `on`, every prediction of a layer whose host time
 * is not given carries it: what `baton plan` and `baton train` predict
 * (probes, timed back to back, are learned before). Returns whether the
 * predictor now predicts in-model times (0: no set was profiled so). */
int bt_predictor_set_in_model(bt_predictor *p, int on);

/* In-model host time over back-to-back host time of a layer (1 without a
 * context model). */
double bt_predictor_context_factor(const bt_predictor *p, const bt_layer *layer, int batch,
                                   bt_pass pass);

/* The shared representation alone: predicted host seconds. */
double bt_predictor_host_time(const bt_predictor *p, const bt_layer *layer, int batch,
                              bt_pass pass);

/* A head's parameters as a device profile (rates, overhead, half-use FLOPs,
 * cache): what the predictor believes the device is. */
void bt_predictor_head_device(const bt_predictor *p, int dev, bt_device *out);

#endif
