/* cli/planner: what `baton plan` and `baton train` need to choose a
 * pipeline plan for an experiment: the per-layer device times of every
 * device (the emulation's true times from the host calibration, and the
 * latency predictor's view), the memory and link figures, and one function
 * per partitioner (even, params, flops, profiled, predicted, oracle,
 * explicit) on top of the partition module. Single process, no MPI. */
#ifndef BATON_CLI_PLANNER_H
#define BATON_CLI_PLANNER_H

#include "baton/codec.h"
#include "baton/config.h"
#include "baton/device.h"
#include "baton/err.h"
#include "baton/model.h"
#include "baton/netem.h"
#include "baton/partition.h"
#include "baton/runlog.h"
#include "cli.h"

typedef struct cli_planner {
  const bt_config *cfg;
  const bt_model *model;
  int n_devices, n_layers, micro_batch;
  bt_device dev[BT_PLAN_MAX_DEVICES];
  bt_device host;              /* the host as a device (calibrated rates) */
  double host_ref_s;           /* calibration reference kernel seconds on this host */
  double *host_fwd, *host_bwd; /* [L] calibrated host seconds per micro-batch */
  double *true_fwd, *true_bwd; /* [D*L] device seconds (what the emulation runs) */
  double *pred_fwd, *pred_bwd; /* [D*L] the predictor's view; NULL until predicted */
  /* [D*L] what `predicted` plans with: the model times the ratio measured /
   * model of the last time the device ran the layer (1 if never). */
  double *view_fwd, *view_bwd;
  double *ratio_fwd, *ratio_bwd;
  /* [D*L] one encode or decode of the activation / gradient frame at the cut
   * after each layer, from the device profiles (analytic, as the runtime
   * charges them): `codec_*` at iteration 0, what `predicted` plans with;
   * `true_codec_*` at truth_iteration (throttling). The optimizer step is
   * priced per stage (one sweep over its parameters, as the runtime runs it):
   * planner.c's optim_stage with `optim_view` or `optim_true`. */
  double *codec_act, *codec_grad, *true_codec_act, *true_codec_grad;
  double *param_prefix; /* [L+1] parameters of layers [0, l) */
  struct cli_optim_ctx {
    const struct cli_planner *pl;
    int truth;
  } optim_view, optim_true;
  bt_codec_spec act_codec, grad_codec;
  double *act_bytes, *state_bytes, *stash_bytes, *flops; /* [L] */
  double mem_cap[BT_PLAN_MAX_DEVICES], peak[BT_PLAN_MAX_DEVICES];
  double *bandwidth, *latency;         /* [D*D] bytes/s, s */
  double *sub_bandwidth, *sub_latency; /* scratch: the pair tables of plan_devices < D */
  /* What the partitioners may use: devices 0..plan_devices-1 (0 = all), and
   * the devices every searched plan must include (bit d = device d; baton
   * train keeps its lead's stage when it may leave devices idle). */
  int plan_devices;
  unsigned required_devices;
  double codec_ratio;
  int calib_stored, calib_measured;
  double calib_seconds;     /* host seconds spent calibrating (0 when all stored) */
  double predict_seconds;   /* host seconds: fitting the predictor, probes, predictions */
  double probe_device_s;    /* device seconds of the probe set on the slowest device */
  int n_adapted;            /* devices the predictor did not know (adapted from probes) */
  int in_model;             /* predictions carry the in-model context (bt_predictor_set_in_model) */
  double host_sgemm_gflops; /* this host's rate, from the calibration store */
  bt_host_rates host_rates; /* the store's rates, which map host times to devices */
  char sets_dir[4400];      /* the profiling sets the predictor is fitted on */
  int per_host_sets;        /* 1: sets timed on this host (bt_cli_predictor_dir) */
  bt_cli_fit_info fit_info; /* fitted, or loaded from the predictor cache */
  double fit_seconds;       /* host seconds reading the sets and fitting (or loading) */
  /* Non-empty when the profiling sets were timed on another host than this
   * one (emulated devices follow this host's kernels): what differs. */
  char host_note[1400];
  struct bt_predictor *predictor;     /* kept for online updates */
  char head[BT_PLAN_MAX_DEVICES][96]; /* predictor head of device d: "rankD:NAME" */
  long truth_iteration;               /* iteration the true times describe */
  char store[4096], host_key[512];    /* calibration store ("" = none) and its host key */
  /* Probe times measured by the ranks themselves ([D][4 * n]: forward and
   * backward device seconds of each probe layer, then the host seconds they
   * map, 0 under clock none; NULL = the planner times them through the
   * device models), and whether the heads are raw (real hardware, clock
   * none). Set before cli_planner_predict. */
  const double *probe_given;
  int probe_given_n, raw_heads;
  /* The start-up probe timings the predictor learned from, with what it
   * predicted before (partition predicted; for the run file's /probes). */
  bt_probe_record *probe_log;
  size_t n_probe_log;
} cli_planner;

/* What a partitioner's plan costs and promises. */
typedef struct cli_plan_info {
  double predicted;    /* iteration time under the partitioner's own view (NAN: none) */
  double true_time;    /* iteration time under the true device times */
  double plan_seconds; /* host seconds of the search itself */
  double profiling_s;  /* device seconds of profiling the partitioner needed first */
  int exact;           /* search finished (1) or hit its node budget (0); 1 for baselines */
  double true_stage[BT_PLAN_MAX_DEVICES]; /* fwd + bwd of one micro-batch, true times */
} cli_plan_info;

/* Link parameters src -> dst of an experiment with n devices (links.*,
 * per-pair overrides, the sender's default link, the shared medium). */
int cli_link_params(const bt_config *c, int n, const bt_device *src_dev, int src, int dst,
                    bt_link_params *out, bt_err *err);

enum { CLI_PROBES_MAX = 16 };

/* The bounds named `name` (auto, scalar, pareto, stair: plan.bounds and
 * `baton bench plan --bounds`); -1 for another name. */
int cli_plan_bounds(const char *name, bt_plan_bounds *out);
/* The name of bounds b (as cli_plan_bounds reads it). */
const char *cli_plan_bounds_name(bt_plan_bounds b);

/* The probe set (bt_profile_probe_set) timed on this process: host times
 * from the calibration store `store` when it holds them (else measured,
 * minimum of 5, and added), mapped through `dev` (NULL: raw host times, the
 * device itself). fwd and bwd get n <= CLI_PROBES_MAX device seconds,
 * host_fwd and host_bwd the host seconds they map (0 when dev is NULL). */
int cli_probe_times(const char *store, const char *host_key, const bt_device *host,
                    const bt_device *dev, double *fwd, double *bwd, double *host_fwd,
                    double *host_bwd, int *n, bt_err *err);

/* Adds the experiment's `throttle:` entries for `rank` to its device
 * profile (n = devices in the experiment); a malformed entry is an error. */
int cli_apply_throttle(const bt_config *c, int n, int rank, bt_device *d, bt_err *err);

/* Loads the devices, calibrates every layer of the model on the host (through
 * the calibration store `store`, NULL = fresh; `host` its fingerprint) and
 * fills the true device times and the memory and link figures. */
int cli_planner_init(cli_planner *pl, const bt_config *c, const bt_model *m, const char *store,
                     const char *host, bt_err *err);
void cli_planner_free(cli_planner *pl);

/* Fills pred_fwd/pred_bwd from the latency predictor fitted on the
 * profiling sets in <data>/predictor; a device the sets do not name is
 * adapted from the probe set timed on it. Idempotent. */
int cli_planner_predict(cli_planner *pl, bt_err *err);

/* One online round: device d ran layers [first, first + count) in fwd/bwd
 * device seconds per micro-batch; its predictor head follows them
 * (bt_predictor_update), its predicted row is recomputed, and each measured
 * layer's ratio measured / model is remembered: the planning view is the
 * model times that ratio, so a measured layer is exact now and follows the
 * device's speed (through the head) later. */
int cli_planner_learn(cli_planner *pl, int d, int first, int count, const double *fwd,
                      const double *bwd, bt_err *err);

/* Re-indexes every device-indexed figure so that planner device s is the
 * experiment's device order[s] (a run whose stages follow a planned device
 * order then plans in order). */
int cli_planner_permute(cli_planner *pl, const int *order, bt_err *err);

/* Replaces the true times by what the devices measured themselves
 * (`measured`: [D][2 * L], forward then backward device seconds of every
 * layer per micro-batch, device index as in the experiment): PipeDream-style
 * profiling on the devices, real hardware included. */
void cli_planner_set_truth(cli_planner *pl, const double *measured);

/* Recomputes the true times for `iteration` (throttling schedules). */
void cli_planner_truth_at(cli_planner *pl, long iteration);

/* The plan of n_stages stages with these cuts (stage s on device s),
 * evaluated under the predictor's view (predicted != 0) or the true times. */
int cli_planner_evaluate(cli_planner *pl, int predicted, int n_stages, const int *cuts,
                         bt_plan *out, bt_err *err);

/* The same with the devices of the stages given (device[s] for stage s). */
int cli_planner_evaluate_order(cli_planner *pl, int predicted, int n_stages, const int *device,
                               const int *cuts, bt_plan *out, bt_err *err);

/* The plan with these cuts and stage devices (device NULL: in order) under
 * the predictor's view with every (device, layer) pair that has not run yet
 * taken `margin` (0.3 = 30%) slower: what a re-plan can count on when part
 * of it rests on the model alone. */
int cli_planner_evaluate_cautious(cli_planner *pl, int n_stages, const int *device, const int *cuts,
                                  double margin, bt_plan *out, bt_err *err);

/* The partitioners `partition:` accepts (NULL-terminated). */
extern const char *const cli_partitioners[];

/* Stage cuts of `partition: even` or `explicit` (cuts[0] = 0, cuts[stages]
 * = n_layers; explicit cuts are validated, naming the bad one). */
int cli_config_cuts(const bt_config *c, int n_layers, int stages, int *cuts, bt_err *err);

/* Plans with `partitioner` under `use`; explicit reads cfg->cuts. */
int cli_planner_plan(cli_planner *pl, const char *partitioner, bt_plan_device_use use, bt_plan *out,
                     cli_plan_info *info, bt_err *err);

#endif
