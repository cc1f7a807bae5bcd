/* runlog: one HDF5 file per run, written by rank 0 only.
 *
 * The file records what was asked for (the experiment YAML verbatim), what ran
 * (devices, layers, plans) and what happened (per-iteration per-layer device
 * times, the timeline of every operation on every rank, loss and accuracy).
 * Every append is flushed at the end of an iteration (bt_runlog_flush), so a
 * run that is killed keeps everything up to its last finished iteration.
 * Layout and units: docs/hdf5-schema.md. Times are seconds (device time under
 * the virtual clock). This module never includes mpi.h: the runtime gathers
 * records to rank 0 and hands them over. */
#ifndef BATON_RUNLOG_H
#define BATON_RUNLOG_H

#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"
#include "baton/model.h"

#define BT_RUNLOG_SCHEMA_VERSION 1

typedef struct bt_runlog bt_runlog;

/* Root attributes. */
typedef struct bt_runlog_meta {
  const char *baton_version;
  const char *git_describe;          /* "" if unknown */
  const char *config_yaml;           /* the experiment file verbatim ("" if none) */
  const char *effective_config_yaml; /* every key after defaults and --set */
  const char *mode;                  /* "train" or "sim" */
  const char *clock;                 /* "virtual", "wall" or "none" */
  int world_size;
  uint64_t seed;
  const char *blis_arch;
  int blis_threads;
  const char *schedule; /* "gpipe" or "1f1b" */
  int micro_batches;
  int batch_size;
  /* The latency predictor behind a predicted plan: its sets and whether it
   * was fitted or loaded from the cache (NULL or "": none, no attribute). */
  const char *predictor;
} bt_runlog_meta;

typedef struct bt_runlog_device {
  int rank;
  const char *profile;       /* e.g. "jetson-nano" */
  double memory_capacity;    /* bytes available to the stage (after any scale) */
  double link_bandwidth_bps; /* bits per second of the rank's default link */
  double link_latency_s;
} bt_runlog_device;

/* A plan: which layers each stage runs and on which device. */
typedef struct bt_runlog_plan {
  long iteration; /* first iteration the plan applies to */
  int n_stages;
  const int *first_layer;             /* [n_stages] first layer (0-based) of each stage */
  const int *device_rank;             /* [n_stages] rank that runs each stage */
  const double *predicted_stage_time; /* [n_stages] or NULL */
  double predicted_iteration_time;    /* or NAN */
  const char *partitioner;            /* "even", "explicit", ... */
} bt_runlog_plan;

typedef enum bt_event_kind {
  BT_EV_FORWARD,
  BT_EV_BACKWARD,
  BT_EV_SEND,
  BT_EV_RECV,
  BT_EV_ENCODE,
  BT_EV_DECODE,
  BT_EV_OPTIM,
  BT_EV_KIND_COUNT
} bt_event_kind;

const char *bt_event_kind_name(bt_event_kind kind);

/* Send and receive occupy a link; every other kind occupies the device. */
static inline int bt_event_kind_is_comm(int kind) {
  return kind == BT_EV_SEND || kind == BT_EV_RECV;
}

/* One operation on one rank. For SEND, t_start is the departure and t_end the
 * moment the last byte has left; for RECV, t_start is when the rank began
 * waiting and t_end the arrival. `peer` is the other rank of a transfer (-1
 * otherwise). */
typedef struct bt_event {
  int64_t iteration;
  int32_t rank;
  int32_t micro;
  int32_t kind; /* bt_event_kind */
  int32_t peer;
  double t_start, t_end;
  int64_t bytes;
} bt_event;

typedef struct bt_train_record {
  int64_t iteration;
  double loss;           /* mean over the batch */
  double accuracy;       /* fraction in [0, 1] of the batch */
  double iteration_time; /* seconds on the run's clock (max over ranks) */
  double wall_time;      /* host seconds the iteration took */
  int64_t bytes_sent;    /* all ranks */
} bt_train_record;

/* Creates (or truncates) `path`, writes the root attributes and every dataset
 * (empty), and starts SWMR writing: from then on the file on disk is always
 * readable, also by `baton report` while the run goes on. NULL strings in
 * meta are written as "". */
/* One evaluation on the test set (end of an epoch, end of the run). */
typedef struct bt_eval_record {
  int64_t iteration; /* optimizer steps done when it ran */
  int32_t epoch;     /* 1-based epoch it closes */
  double loss;       /* mean cross-entropy over the test set */
  double accuracy;   /* fraction in [0, 1] */
  int64_t samples;
} bt_eval_record;

/* One predictor check: a layer's predicted and measured device time on a
 * rank (per micro-batch), when rank 0 re-plans. predicted is what the
 * predictor said before it learned from `measured`. */
typedef struct bt_predictor_record {
  int64_t iteration; /* the iteration measured */
  int32_t rank;
  int32_t layer; /* 0-based */
  int32_t pass;  /* 0 forward, 1 backward */
  double predicted, measured;
} bt_predictor_record;

/* One probe timing: a layer a rank timed so that the predictor learns its
 * device (partition predicted) -- the probe set at start-up (iteration -1,
 * layer -1) or, before a re-plan is weighed (replan.probe), a model layer
 * the new plan would put on the rank for the first time. */
typedef struct bt_probe_record {
  int64_t iteration; /* -1: start-up probe set; else the re-plan check's iteration */
  int32_t rank;
  int32_t layer;    /* 0-based model layer; -1 for the start-up probe set */
  int32_t batch;    /* samples the layer ran on */
  int32_t pass;     /* 0 forward, 1 backward */
  double predicted; /* device s, what the predictor said before learning from it */
  double measured;  /* device s */
  double host;      /* host s the device time maps (emulated clocks); 0: none */
  char spec[512];   /* the layer (bt_layer_spec_format; BT_LAYER_SPEC_MAX) */
} bt_probe_record;

int bt_runlog_create(bt_runlog **log, const char *path, const bt_runlog_meta *meta, bt_err *err);
/* Once per run each. Write the layers before the first plan so that the
 * last stage's end layer is known. */
int bt_runlog_write_devices(bt_runlog *log, int n, const bt_runlog_device *devices, bt_err *err);
int bt_runlog_write_layers(bt_runlog *log, const bt_model *m, bt_err *err);
int bt_runlog_append_plan(bt_runlog *log, const bt_runlog_plan *plan, bt_err *err);
/* Per-layer device seconds of one iteration, all layers of the model (each
 * measured on the rank that owns the layer; NAN where not measured; fwd or
 * bwd NULL: none measured). n_layers is the same on every call. */
int bt_runlog_append_timing(bt_runlog *log, int64_t iteration, int n_layers, const double *fwd,
                            const double *bwd, bt_err *err);
int bt_runlog_append_events(bt_runlog *log, size_t n, const bt_event *events, bt_err *err);
int bt_runlog_append_train(bt_runlog *log, const bt_train_record *rec, bt_err *err);
int bt_runlog_append_eval(bt_runlog *log, const bt_eval_record *rec, bt_err *err);
int bt_runlog_append_predictor(bt_runlog *log, size_t n, const bt_predictor_record *recs,
                               bt_err *err);
int bt_runlog_append_probes(bt_runlog *log, size_t n, const bt_probe_record *recs, bt_err *err);
/* Makes everything appended so far durable (end of each iteration). */
int bt_runlog_flush(bt_runlog *log, bt_err *err);
/* Flushes and closes; *log becomes NULL. Safe on NULL. */
int bt_runlog_close(bt_runlog **log, bt_err *err);

/* ---- reading (trace export, report, tests) ---- */

/* One row of /layers: the model as it ran. Bytes and FLOPs are per sample. */
typedef struct bt_runlog_layer {
  int32_t index; /* 0-based position in the model */
  char name[48];
  int32_t kind; /* bt_layer_kind */
  bt_shape in, out;
  int64_t params;      /* trainable floats */
  int64_t param_bytes; /* 4 * params */
  int64_t out_bytes;   /* 4 * output elements, per sample */
  double flops_fwd, flops_bwd;
} bt_runlog_layer;

/* A whole run in memory. Everything is owned by the struct and released by
 * bt_runlog_data_free; pointers inside devices[] and plans[] point into the
 * struct's own arrays. */
typedef struct bt_runlog_data {
  int world_size;
  char clock[16];
  char schedule[16];
  int n_layers;
  size_t n_events;
  bt_event *events;
  size_t n_train;
  bt_train_record *train;
  size_t n_eval;
  bt_eval_record *eval;
  size_t n_predictor;
  bt_predictor_record *predictor;
  size_t n_probes; /* /probes (absent in older files: 0) */
  bt_probe_record *probes;
  int n_devices;
  char (*device_profile)[64]; /* [n_devices] */

  /* Root attributes beyond the ones above. */
  int schema_version;
  char mode[16];
  char baton_version[32];
  char git_describe[64];
  char blis_arch[32];
  char created[32]; /* ISO 8601 UTC */
  uint64_t seed;
  int blis_threads, micro_batches, batch_size;
  char *config_yaml, *effective_config_yaml;
  char *predictor_info; /* the predictor behind a predicted plan (NULL: none) */
  /* 1 when the writer never closed the file: it was killed, or still runs.
   * Everything it flushed is there; later rows may be missing. */
  int unclosed;

  bt_runlog_device *devices; /* [n_devices]; profile -> device_profile[i] */
  bt_runlog_layer *layers;   /* [n_layers], NULL if the run logged none */
  int n_plans;
  bt_runlog_plan *plans;           /* [n_plans] */
  size_t n_timing;                 /* rows of /timing */
  int timing_layers;               /* columns of /timing (n_layers when both exist) */
  int64_t *timing_iteration;       /* [n_timing] */
  double *timing_fwd, *timing_bwd; /* [n_timing * timing_layers], row-major */

  /* Storage behind plans[] (private). */
  int *plan_ints;
  double *plan_doubles;
  char (*plan_partitioner)[32];
} bt_runlog_data;

/* Reads a whole run. A file left open by a killed (or still running) writer
 * reads too, up to its last flush. Errors: missing file, not HDF5, not a
 * baton run log, schema_version other than BT_RUNLOG_SCHEMA_VERSION. On
 * failure *out is left empty (safe to free). */
int bt_runlog_read(const char *path, bt_runlog_data *out, bt_err *err);
void bt_runlog_data_free(bt_runlog_data *d);

#endif
