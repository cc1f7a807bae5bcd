/* pipeline: the MPI runtime. Rank r runs stage r of a model cut into
 * consecutive layer ranges, following a schedule's op list; activations go
 * forward and gradients backward by non-blocking point-to-point messages
 * posted as early as their buffers allow.
 *
 * Each rank keeps a clock. Under the virtual clock, a compute op advances it
 * by the device time of the op (the host time mapped through the device
 * model, from a per-layer calibration so that the host's load does not leak
 * in); a message carries its arrival time from the sender's link model and
 * the receiver's clock becomes max(own, arrival). Under the wall clock the
 * rank sleeps so that wall time equals device time; under `none` nothing is
 * emulated and the clock is the host's. */
#ifndef BATON_PIPELINE_H
#define BATON_PIPELINE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"
#include "baton/model.h"
#include "baton/netem.h"
#include "baton/optim.h"
#include "baton/runlog.h"
#include "baton/schedule.h"

typedef enum bt_clock_mode { BT_CLOCK_VIRTUAL, BT_CLOCK_WALL, BT_CLOCK_NONE } bt_clock_mode;

/* Maps a host measurement of one layer's forward (pass 0) or backward (pass
 * 1) to this rank's device time. NULL means device time = host time. */
typedef double (*bt_device_time_fn)(void *ctx, const bt_layer *layer, int layer_index, int pass,
                                    int batch, double host_seconds, long iteration);

typedef struct bt_pipeline_config {
  const bt_model *model;
  const int *cuts; /* [n_stages + 1]: stage s runs layers [cuts[s], cuts[s+1]) */
  bt_schedule_kind schedule;
  int batch_size, micro_batches;
  bt_sgd opt;
  uint64_t seed;
  bt_clock_mode clock;
  bt_link_params link_next; /* this rank -> rank + 1 (activations) */
  bt_link_params link_prev; /* this rank -> rank - 1 (gradients) */
  bt_device_time_fn device_time;
  void *device_ctx;
  /* Codecs of the messages (names as bt_codec_parse takes them; NULL =
   * "none"): activations this rank sends to the next stage and receives from
   * the previous one, gradients it sends to the previous and receives from
   * the next. Both ends of a boundary must name the same codec (a receiver
   * sizes its buffers by it; frames are self-describing). */
  const char *codec_act_out, *codec_act_in, *codec_grad_out, *codec_grad_in;
  /* Device seconds of an encode or decode touching `bytes` (tensor plus
   * frame), measured as host_seconds; NULL = host time. */
  double (*codec_time)(void *ctx, double bytes, double host_seconds, long iteration);
  int calibration_repeats; /* per-layer calibration passes (min taken); 0 = none */
  /* Host seconds of the reference kernel (bt_calib_reference) that the
   * device mapping's host rates assume. When > 0 the calibration times that
   * kernel beside every pass and expresses each layer's time in units of it,
   * so that the host core's speed at the moment (frequency shifts, a
   * neighbour's load) cancels out. 0 = raw host seconds. */
  double calibration_reference_s;
  /* Calibration store (calib.h) to reuse and extend, and the host
   * fingerprint of its entries; NULL store = measure every run. */
  const char *calibration_store, *calibration_host;
  /* The rank that receives the loss, the evaluation and the whole-model
   * vectors below (the run's coordinator; 0 when it runs the first stage). */
  int root;
} bt_pipeline_config;

typedef struct bt_pipeline bt_pipeline;

/* How many of this rank's layers took their calibration from the store and
 * how many were measured in this run. */
void bt_pipeline_calibration_counts(const bt_pipeline *p, int *stored, int *measured);

typedef struct bt_pipeline_stats {
  double loss;                         /* mean over the batch (on cfg.root) */
  long correct;                        /* (on cfg.root) */
  double iter_time;                    /* this rank's clock advance over the iteration */
  double wall_time;                    /* host seconds */
  double compute_time, comm_wait_time; /* this rank: device compute, waiting on receives */
  int64_t bytes_sent;                  /* by this rank */
  double host_overhead;                /* host wall seconds in neither compute nor MPI waits */
  /* Host thread-CPU seconds of this rank: inside compute ops, and outside
   * both compute and receive waits (the runtime's own work: posting and
   * copying messages, bookkeeping). Robust on a shared core. */
  double cpu_compute, cpu_overhead;
} bt_pipeline_stats;

/* This rank's part of the analytic model of an iteration, from the last
 * step: device seconds per micro-batch of forward and backward, of the
 * optimizer step, and the ideal link time of an activation message to the
 * next stage and of a gradient message to the previous one (0 where there is
 * no neighbour). */
typedef struct bt_stage_costs {
  double fwd, bwd, optim, act_comm, grad_comm;
} bt_stage_costs;

bt_stage_costs bt_pipeline_stage_costs(const bt_pipeline *p);

/* Collective over `comm` (size = number of stages). */
int bt_pipeline_create(bt_pipeline **p, MPI_Comm comm, const bt_pipeline_config *cfg, bt_err *err);

/* One synchronous iteration (all micro-batches, then the optimizer step).
 * x: the whole batch (NHWC) on the first stage, NULL elsewhere; y: its labels
 * on the last stage, NULL elsewhere. */
int bt_pipeline_step(bt_pipeline *p, const float *x, const int32_t *y, long step,
                     bt_pipeline_stats *out, bt_err *err);

/* The events this rank recorded during the last step. */
const bt_event *bt_pipeline_events(const bt_pipeline *p, size_t *n);

/* Per-layer host-measured and device times of this rank's layers in the last
 * step (arrays of the stage's layer count). */
void bt_pipeline_layer_times(const bt_pipeline *p, const double **fwd, const double **bwd,
                             int *first, int *count);

/* The stage this rank runs (parameters, gradients, state). */
bt_stage *bt_pipeline_stage(bt_pipeline *p);

/* Collects every stage's parameters and state (batch-norm running stats)
 * into the model-wide vectors on cfg.root (collective; state may be NULL
 * to drop it; both are ignored on other ranks). */
int bt_pipeline_gather_params(bt_pipeline *p, float *params, float *state, bt_err *err);

/* Evaluation of test data through the pipeline (forward only, collective):
 * x on the first stage, y on the last; returns on cfg.root. */
/* Re-planning: every stage's parameters, momentum and state gathered into
 * whole-model arrays on cfg.root (laid out by the layers' param_off and
 * state_off; ignored elsewhere), and scattered back into the stages of a
 * pipeline with other cuts. Collective. */
int bt_pipeline_export_state(bt_pipeline *p, float *params, float *momentum, float *state,
                             bt_err *err);
int bt_pipeline_import_state(bt_pipeline *p, const float *params, const float *momentum,
                             const float *state, bt_err *err);

/* This rank's clock, and setting it: a pipeline re-created with new cuts
 * continues the run's time line. */
double bt_pipeline_clock(const bt_pipeline *p);
void bt_pipeline_set_clock(bt_pipeline *p, double t);

int bt_pipeline_evaluate(bt_pipeline *p, const float *x, const int32_t *y, long n, double *loss,
                         long *correct, bt_err *err);

void bt_pipeline_free(bt_pipeline **p);

/* A barrier whose waiting ranks sleep (2 ms polls) rather than spin, for
 * moments when one rank measures and the others must not disturb it. */
void bt_mpi_quiet_barrier(MPI_Comm comm);

/* Cuts for `n_stages` stages with equal layer counts (the earlier stages get
 * the extra layers). cuts has n_stages + 1 entries. */
int bt_partition_even(int n_layers, int n_stages, int *cuts, bt_err *err);

#endif
