/* partition: choosing the pipeline plan (stage count, device order, cuts).
 *
 * A model is a chain of L layers; a plan splits it into S contiguous stages,
 * stage s running layers [first[s], first[s+1]) on device device[s], each
 * device at most once. The objective is the predicted iteration time: the
 * makespan of bt_schedule_build(kind, S, M) replayed with the plan's stage
 * costs (bt_schedule_makespan: fill, steady state, drain and optimizer step
 * included), not only the slowest stage. Plans whose stages do not fit their
 * device's memory are never returned.
 *
 * Cost model of stage s = [i, j) on device d (all per micro-batch):
 *   fwd  = sum fwd[d][l]  + decode(act in) + encode(act out)
 *   bwd  = sum bwd[d][l]  + decode(grad in) + encode(grad out)
 *   where a cut after layer c carries act_bytes[c] raw bytes each way (the
 *   gradient of an activation has its shape); encode/decode cost
 *   codec_encode / codec_decode seconds per raw byte, on the stage's clock
 *   (or per device and cut: codec_act[d][c], codec_grad[d][c]);
 *   act link d -> e:  latency[d][e] + codec_ratio * act_bytes[c] / bandwidth[d][e]
 *   grad link e -> d: latency[e][d] + codec_ratio * act_bytes[c] / bandwidth[e][d]
 *   optim = sum optim[d][l] (optional), or optim_stage(d, i, j) when given
 *   memory = sum state_bytes[l] + in_flight * sum stash_bytes[l], with
 *   in_flight = M (GPipe) or min(S - s, M) (1F1B), <= mem_cap[d] * mem_scale.
 *
 * Search (bt_plan_search) is exact; see docs/partition.md for the argument.
 * Pure: no MPI, no I/O, no globals. Functions that can fail follow err.h. */
#ifndef BATON_PARTITION_H
#define BATON_PARTITION_H

#include "baton/err.h"
#include "baton/schedule.h"

#define BT_PLAN_MAX_DEVICES 16
#define BT_PLAN_DEFAULT_NODES 1000000L

/* Which devices a plan may use. The runtime runs one stage per rank, so
 * `baton train` plans with BT_PLAN_DEVICES_IN_ORDER; `baton plan` also shows
 * what the freer choices would give. */
typedef enum bt_plan_device_use {
  BT_PLAN_ANY_DEVICES = 0,  /* any subset in any order (devices may stay unused) */
  BT_PLAN_ALL_DEVICES,      /* every device runs one stage, in any order */
  BT_PLAN_DEVICES_IN_ORDER, /* every device runs one stage, stage s on device s */
  BT_PLAN_ALL_FIRST_FIXED,  /* every device runs one stage, device 0 the first, the rest in
                               any order (the coordinating rank keeps stage 0) */
} bt_plan_device_use;

/* Bounds of the branch and bound (docs/partition.md). All are exact; they
 * differ only in speed. */
typedef enum bt_plan_bounds {
  BT_PLAN_BOUNDS_AUTO = 0, /* scalar; small tables switch to Pareto lists if that is slow */
  BT_PLAN_BOUNDS_SCALAR,   /* one (max, sum, max + sum) triple per DP state */
  BT_PLAN_BOUNDS_PARETO,   /* Pareto lists of (max, sum) per state, after a first plan */
  BT_PLAN_BOUNDS_STAIR,    /* scalar, then (if the search has not finished within 50 000
                              nodes, fewer on small tables) also the least sum under 4
                              thresholds of the max: 16 more bytes per state */
} bt_plan_bounds;

/* Device-major matrices: x[d * n_layers + l]; device pairs: x[a * n_devices + b]. */
typedef struct bt_plan_problem {
  int n_layers, n_devices; /* 1 <= n_devices <= BT_PLAN_MAX_DEVICES */
  const double *fwd, *bwd; /* [D*L] seconds per micro-batch, required */
  const double *optim;     /* [D*L] optimizer step seconds; NULL = 0 */
  /* Optional, replaces `optim`: the optimizer step of stage [first, end) on
   * device d when it is not a sum over layers (baton's runtime sweeps the
   * stage's parameters in one op: one launch overhead, cache effects of
   * the whole sweep). Must be finite and >= 0. */
  double (*optim_stage)(const void *ctx, int device, int first, int end);
  const void *optim_ctx;
  const double *act_bytes;   /* [L] bytes of layer l's output (cut after l); required if D > 1 */
  const double *state_bytes; /* [L] weights + grads + optimizer state; NULL = 0 */
  const double *stash_bytes; /* [L] activation stash per micro-batch in flight; NULL = 0 */
  const double *mem_cap;     /* [D] bytes; NULL = unlimited */
  const double *bandwidth;   /* [D*D] bytes/s, a -> b (> 0 off the diagonal); required if D > 1 */
  const double *latency;     /* [D*D] seconds; NULL = 0 */
  double codec_ratio;        /* wire bytes / raw bytes; 0 means 1 */
  double codec_encode, codec_decode; /* seconds per raw byte (0 = no codec cost) */
  /* [D*L] device seconds of one encode (or decode: the same sweep) of the
   * activation / gradient frame at the cut after layer l on device d; when
   * set, they replace codec_encode and codec_decode. NULL = not given. */
  const double *codec_act, *codec_grad;
  bt_schedule_kind kind;
  int micro;                     /* micro-batches per iteration, >= 1 */
  double mem_scale;              /* factor on every capacity; 0 means 1 */
  bt_plan_device_use device_use; /* default: any */
  /* Devices every plan must use (bit d = device d; 0 = none): with
   * BT_PLAN_ANY_DEVICES, the subsets that leave one out are not searched
   * (baton train keeps its coordinating rank in the pipeline). */
  unsigned required_devices;
  long max_nodes;        /* branch-and-bound node budget; 0 = BT_PLAN_DEFAULT_NODES,
                            < 0 = unlimited (always exact) */
  bt_plan_bounds bounds; /* default: auto */
  /* Only for bt_plan_flops: */
  const double *layer_flops; /* [L] */
  const double *device_peak; /* [D] FLOP/s */
} bt_plan_problem;

typedef struct bt_plan {
  int n_stages;
  int device[BT_PLAN_MAX_DEVICES];    /* device of stage s */
  int first[BT_PLAN_MAX_DEVICES + 1]; /* first layer of stage s; first[S] = L */
  double iter_time;                   /* predicted makespan of one iteration (s) */
  double fwd[BT_PLAN_MAX_DEVICES], bwd[BT_PLAN_MAX_DEVICES], optim[BT_PLAN_MAX_DEVICES];
  double act_comm[BT_PLAN_MAX_DEVICES], grad_comm[BT_PLAN_MAX_DEVICES]; /* link s -> s+1 */
  double mem[BT_PLAN_MAX_DEVICES]; /* bytes the stage needs on its device */
} bt_plan;

typedef struct bt_plan_stats {
  long dp_states;     /* (suffix, device set, device) states filled */
  long nodes;         /* branch-and-bound nodes expanded */
  long evaluated;     /* complete plans replayed with the exact makespan */
  int exact;          /* 1: the search finished, the plan is optimal; 0: the node budget
                         ran out and the plan is the best found (gap: see lower_bound) */
  double lower_bound; /* a proven lower bound on the optimum (= iter_time when exact) */
  double table_cpu;   /* thread CPU seconds spent building the stage and bound tables
                         (the rest of the search is the branch and bound) */
  int refined;        /* 1: a second table (Pareto lists or staircase) was built */
  long polished;      /* incumbents improved by the local search around new plans */
  double local_cpu;   /* thread CPU seconds of that local search */
} bt_plan_stats;

/* Checks the problem's shape and values (sizes, finite non-negative times,
 * positive bandwidths, micro >= 1). */
int bt_plan_problem_check(const bt_plan_problem *p, bt_err *err);

/* Fills every predicted field of a plan whose n_stages, device[] and first[]
 * are set: validates them (cuts strictly increasing within [1, L), devices
 * distinct and in range), computes stage costs and memory, and the makespan.
 * Fails, naming the stage, if a stage does not fit its device. */
int bt_plan_evaluate(const bt_plan_problem *p, bt_plan *plan, bt_err *err);

/* Exact search over stage counts, device subsets and orders, and cuts:
 * returns a feasible plan of minimum predicted iteration time (devices may
 * be left unused). Exact when it finishes within p->max_nodes nodes
 * (stats->exact); otherwise the best plan found, with a proven lower bound. With no feasible plan,
 * fails with a message stating the smallest memory scale that would make some plan fit. stats may
 * be NULL. */
int bt_plan_search(const bt_plan_problem *p, bt_plan *out, bt_plan_stats *stats, bt_err *err);

/* The smallest factor on every capacity with which some plan fits
 * (min over plans of max over stages of memory / capacity; exact). */
int bt_plan_min_mem_scale(const bt_plan_problem *p, double *scale, bt_err *err);

/* The layers plan p puts on devices that have no measurement of them
 * (measured[d * n_layers + l] == 0, d < n_devices), as runs of consecutive
 * layers per device: device d's k-th run is [first[d * max_runs + k],
 * end[d * max_runs + k]), n[d] runs (n, first, end: n_devices entries /
 * n_devices * max_runs). A device with more than max_runs runs gets its
 * last run stretched over the gaps (layers it has measured are then timed
 * again). Returns the number of new (layer, device) pairs, -1 with err set
 * on bad arguments (a stage's device out of range, max_runs < 1). */
int bt_plan_unmeasured_runs(const bt_plan *p, int n_layers, int n_devices,
                            const unsigned char *measured, int max_runs, int *n, int *first,
                            int *end, bt_err *err);

/* Reference: every ordered subset of devices and every cut vector (small
 * problems only: tests). Same result contract as bt_plan_search. */
int bt_plan_brute_force(const bt_plan_problem *p, bt_plan *out, bt_err *err);

/* Baselines; all use n_stages devices in the given order 0..n_stages-1
 * (n_stages <= n_devices and <= n_layers), then bt_plan_evaluate.
 * even: equal layer counts (the first L mod S stages get one more);
 * params: balance state_bytes (parameters) across stages;
 * flops: stage s gets a share of layer_flops proportional to device_peak[s]. */
int bt_plan_even(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err);
int bt_plan_params(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err);
int bt_plan_flops(const bt_plan_problem *p, int n_stages, bt_plan *out, bt_err *err);

/* Explicit cuts: cuts[k] (k < n_stages-1) is the first layer of stage k+1,
 * strictly increasing in [1, L). devices: device of each stage, NULL = in
 * order. An out-of-range or non-increasing cut fails naming the cut. */
int bt_plan_explicit(const bt_plan_problem *p, int n_stages, const int *cuts, const int *devices,
                     bt_plan *out, bt_err *err);

#endif
