/* baton train, pipeline mode: one stage per MPI rank, each rank emulating
 * the device the experiment names for it (with device_order: subset some
 * ranks may wait idle, outside the pipeline, until a re-plan brings them in).
 *
 * Every rank parses the same experiment file; the first and the last stage
 * load the data (inputs go in at the first, labels are needed at the last);
 * rank 0 prints progress and writes the run file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton/calib.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/device.h"
#include "baton/modelfile.h"
#include "baton/pipeline.h"
#include "baton/profile.h"
#include "baton/runlog.h"
#include "baton_build.h"
#include "cli.h"
#include "git_version.h"
#include "planner.h"
#include "train_common.h"

typedef struct device_ctx {
  bt_device dev, host;
  double host_reference_s; /* the calibration reference kernel's best time on this node */
  size_t stage_params;
} device_ctx;

/* The device-time hook of the pipeline: host seconds -> this device's. */
static double device_time(void *ctx, const bt_layer *l, int index, int pass, int batch,
                          double host_seconds, long iteration) {
  const device_ctx *d = ctx;
  if (!l) { /* the optimizer step: a memory-bound sweep over p, g, momentum */
    bt_device_op op = {BT_OP_ELEMENTWISE, 3.0 * d->stage_params, 20.0 * d->stage_params};
    return bt_device_op_mapped(&d->dev, &d->host, &op, host_seconds, iteration);
  }
  return bt_device_layer_mapped(&d->dev, &d->host, l, batch,
                                pass ? bt_pass_backward_of(l, index) : BT_PASS_FWD, host_seconds,
                                iteration)
      .total;
}

/* Encode and decode are memory-bound sweeps: their device time is the
 * device's analytic streaming time (host memory figures are load-sensitive;
 * see docs/devices.md). */
static double codec_time(void *ctx, double bytes, double host_seconds, long iteration) {
  const device_ctx *d = ctx;
  (void)host_seconds;
  bt_device_op op = {BT_OP_ELEMENTWISE, 0, bytes};
  return bt_device_op_analytic(&d->dev, &op, iteration);
}

/* Every rank decides the same way; a rank that fails says why, the others
 * stay quiet, and all return -1 together. */
static int agree(MPI_Comm comm, int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, comm);
  return all ? 0 : -1;
}

typedef struct run {
  bt_config *cfg;
  /* comm: every process, ranked by position: positions 0..stages-1 run the
   * stages in order, the others (device_order: subset) wait idle. pcomm:
   * the pipeline's communicator of the stages (rank = stage; comm itself
   * when no rank is idle, MPI_COMM_NULL on an idle rank). */
  MPI_Comm comm, pcomm;
  int rank, size, stages;
  int own_pcomm;
  bt_model model;
  bt_dataset train, test;
  device_ctx dev;
  int cuts[BT_CONFIG_DEVICES_MAX + 1];
  bt_pipeline *pipe;
  char codec_act_out[64], codec_act_in[64], codec_grad_out[64], codec_grad_in[64];
  bt_runlog *log;
  float *xb;
  int32_t *yb;
  long *order;
  long n_train, n_test;
  char calib_path[4096], calib_host[512]; /* calib_path "" = measure every run */
  /* The plan's predicted figures (NAN without a planner): per stage fwd + bwd
   * of one micro-batch, the iteration, and the iteration under true times. */
  double plan_stage[BT_CONFIG_DEVICES_MAX], plan_iter, plan_true;
  /* The coordinator: the rank of comm that holds the planner and the run
   * file, receives the loss and prints. World rank 0's process from start to
   * end, whichever stage it runs (plans may put any device on stage 0). */
  int lead;
  cli_planner *planner; /* the lead, planned partitions: kept for re-planning */
  int replans;
  double pending_migration; /* device s of a migration, charged to the next iteration */
  int world_rank;           /* in MPI_COMM_WORLD: the index of this rank's device */
  int own_comm;             /* comm was split off MPI_COMM_WORLD (free it) */
  double last_iter_time;    /* rank 0: the last iteration's time (max over ranks) */
  /* stage_device[s]: the device (index in `devices`) of stage s = rank s of comm.
   * The identity unless a partitioner ordered the devices (device_order). */
  int stage_device[BT_CONFIG_DEVICES_MAX];
  /* log_rank[s]: the /devices entry of the process running stage s (the
   * stage it ran when the run file was opened; re-plans may reorder). */
  int log_rank[BT_CONFIG_DEVICES_MAX];
  double *probes;     /* [size][2 * n_probes]: every device's probe times, as its rank timed them */
  double profiling_s; /* device s the partitioner measured before training (on the run's clock) */
  int n_probes;
} run;

/* Whether the cuts come from a partitioner (rank 0 plans at start). */
static int planned(const bt_config *c) {
  return strcmp(c->partition, "even") != 0 && strcmp(c->partition, "explicit") != 0;
}

/* Whether the partitioner may order the devices (then any rank may become
 * the first or last stage, at the start and on every re-plan). */
static int reordering(const bt_config *c) {
  return planned(c) && strcmp(c->device_order, "experiment") != 0;
}

/* Whether the partitioner may leave devices idle (device_order: subset). */
static int subsetting(const bt_config *c) {
  return planned(c) && strcmp(c->device_order, "subset") == 0;
}

/* Whether this process runs a stage now. */
static int active(const run *r) { return r->rank < r->stages; }

static int setup_data_and_model(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  const int needs_data = r->rank == 0 || r->rank == r->size - 1 || reordering(c);
  int ok = !needs_data || bt_cli_load_data(c, &r->train, &r->test, err) == 0;
  if (agree(r->comm, ok) < 0)
    return -1;
  int shape[5] = {r->train.h, r->train.w, r->train.c, r->train.classes, 0};
  long counts[2] = {r->train.n, r->test.n};
  MPI_Bcast(shape, 5, MPI_INT, 0, r->comm);
  MPI_Bcast(counts, 2, MPI_LONG, 0, r->comm);
  r->n_train = counts[0];
  r->n_test = counts[1];
  char data[4096], models[4200];
  snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
  ok = bt_model_resolve(c->model, models, (bt_shape){shape[0], shape[1], shape[2]}, shape[3],
                        &r->model, err) == 0;
  if (agree(r->comm, ok) < 0)
    return -1;
  if (r->model.n_layers < r->size && !subsetting(c))
    ok = bt_err_set(err,
                    "model '%s' has %d layers, fewer than the %d devices; use fewer devices or "
                    "device_order: subset",
                    r->model.name, r->model.n_layers, r->size) == 0;
  if (!planned(c))
    ok = ok && cli_config_cuts(c, r->model.n_layers, r->size, r->cuts, err) == 0;
  return agree(r->comm, ok);
}

/* Host rates for the device mapping: from the calibration store when it
 * holds them, else measured once per node by its first rank while the others
 * wait (ranks sharing cores would disturb each other), best of several
 * repeats, then shared within the node (and stored). */
static void measure_host(const run *r, bt_host_rates *h) {
  MPI_Comm node;
  MPI_Comm_split_type(r->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_rank;
  MPI_Comm_rank(node, &node_rank);
  double rates[2] = {0, 0};
  bt_err err;
  if (node_rank == 0 && bt_calib_host_rates(r->calib_path[0] ? r->calib_path : NULL, r->calib_host,
                                            &rates[0], &rates[1], &err) < 0) {
    /* setup_calibration read the store already; a file that broke since is measured around */
    fprintf(stderr, "baton: warning: %s; measuring the host rates\n", err.msg);
    bt_calib_measure_host_rates(&rates[0], &rates[1]);
  }
  bt_mpi_quiet_barrier(node); /* the others sleep while node rank 0 measures */
  MPI_Bcast(rates, 2, MPI_DOUBLE, 0, node);
  if (getenv("BATON_DEBUG_CAL") && node_rank == 0)
    fprintf(stderr, "host rates: sgemm %.2f GFLOP/s, mem %.2f GB/s\n", rates[0], rates[1]);
  MPI_Comm_free(&node);
  memset(h, 0, sizeof *h);
  h->sgemm_gflops = rates[0];
  h->mem_gbs = rates[1];
}

/* Resolves the `calibration:` setting and checks that the store reads. */
static int setup_calibration(run *r, bt_err *err) {
  const char *v = r->cfg->calibration;
  r->calib_path[0] = 0;
  if (strcmp(v, "fresh") == 0 || strcmp(r->cfg->clock, "none") == 0)
    return agree(r->comm, 1);
  if (strcmp(v, "auto") == 0)
    bt_calib_default_path(r->calib_path, sizeof r->calib_path);
  else
    snprintf(r->calib_path, sizeof r->calib_path, "%s", v);
  bt_cli_host_key(r->calib_host, sizeof r->calib_host);
  bt_calib_store *store = NULL;
  const int ok = bt_calib_load(r->calib_path, r->calib_host, &store, err) == 0;
  bt_calib_free(store);
  return agree(r->comm, ok);
}

/* Every rank times the probe set on its own device (one after the other:
 * ranks may share cores) and all get every rank's figures: whoever plans
 * adapts the predictor from what the devices themselves measured. Under the
 * emulated clocks the host times come from the calibration store and go
 * through the device's model; under `none` they are the device's own. */
static int gather_probes(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  if (strcmp(c->partition, "predicted") != 0)
    return 0;
  double mine[4 * CLI_PROBES_MAX];
  int n = 0, ok = 1;
  const int raw = strcmp(c->clock, "none") == 0;
  for (int t = 0; t < r->size; t++) {
    if (t == r->rank)
      ok = cli_probe_times(r->calib_path[0] ? r->calib_path : NULL, r->calib_host, &r->dev.host,
                           raw ? NULL : &r->dev.dev, mine, mine + CLI_PROBES_MAX,
                           mine + 2 * CLI_PROBES_MAX, mine + 3 * CLI_PROBES_MAX, &n, err) == 0;
    bt_mpi_quiet_barrier(r->comm);
  }
  if (agree(r->comm, ok) < 0)
    return -1;
  int n_max = n;
  MPI_Allreduce(&n, &n_max, 1, MPI_INT, MPI_MAX, r->comm);
  /* [device fwd, device bwd, host fwd, host bwd] x n per rank. */
  double packed[4 * CLI_PROBES_MAX];
  for (int q = 0; q < 4; q++)
    memcpy(packed + q * n, mine + q * CLI_PROBES_MAX, sizeof(double) * (size_t)n);
  r->probes = malloc(sizeof(double) * 4 * (size_t)n_max * (size_t)r->size + 1);
  if (agree(r->comm, r->probes != NULL && n == n_max) < 0)
    return bt_err_set(err, "rank %d: probe set sizes differ or out of memory", r->rank);
  MPI_Allgather(packed, 4 * n, MPI_DOUBLE, r->probes, 4 * n, MPI_DOUBLE, r->comm);
  r->n_probes = n;
  return 0;
}

/* Times layers [first, first + count) of the model on this rank's device at
 * `iteration` (its throttling then), device seconds per micro-batch. Under
 * the emulated clocks the host times come through the calibration store and
 * the device's model; under `none` they are the device's own. */
static int time_layers(const run *r, int first, int count, long iteration, int repeats, double *fwd,
                       double *bwd, bt_err *err) {
  const bt_config *c = r->cfg;
  const int mb = c->batch_size / c->micro_batches, raw = strcmp(c->clock, "none") == 0;
  const bt_calib_options o = {.repeats = repeats,
                              .ref_seconds = r->dev.host_reference_s,
                              .seed = c->seed,
                              .batch_size = c->batch_size,
                              .store = r->calib_path[0] ? r->calib_path : NULL,
                              .host = r->calib_host};
  bt_calib_result res;
  bt_stage st;
  if (bt_stage_init(&st, &r->model, first, first + count, mb, 1, c->seed, err) < 0)
    return -1;
  const int rc = bt_calib_stage(&st, &r->model, mb, &o, fwd, bwd, &res, err);
  bt_stage_free(&st);
  for (int k = 0; rc == 0 && !raw && k < count; k++) {
    const bt_layer *y = &r->model.layers[first + k];
    fwd[k] =
        bt_device_layer_mapped(&r->dev.dev, &r->dev.host, y, mb, BT_PASS_FWD, fwd[k], iteration)
            .total;
    bwd[k] = bt_device_layer_mapped(&r->dev.dev, &r->dev.host, y, mb,
                                    bt_pass_backward_of(y, first + k), bwd[k], iteration)
                 .total;
  }
  return rc;
}

/* partition profiled (PipeDream): every rank times every layer of the model
 * on its own device, one rank after the other (ranks may share cores), and
 * all get the figures ([size][2 * L] device seconds per micro-batch). */
static int gather_profiles(run *r, double **out, bt_err *err) {
  const int L = r->model.n_layers;
  double *mine = malloc(2 * (size_t)L * sizeof(double));
  double *all = malloc(2 * (size_t)L * (size_t)r->size * sizeof(double));
  int ok = mine && all;
  if (!ok)
    bt_err_set(err, "rank %d: out of memory for the profile", r->rank);
  for (int t = 0; t < r->size; t++) {
    if (t == r->rank && ok)
      ok = time_layers(r, 0, L, 0, 20, mine, mine + L, err) == 0;
    bt_mpi_quiet_barrier(r->comm);
  }
  if (agree(r->comm, ok) < 0) {
    free(mine), free(all);
    return -1;
  }
  MPI_Allgather(mine, 2 * L, MPI_DOUBLE, all, 2 * L, MPI_DOUBLE, r->comm);
  free(mine);
  *out = all;
  return 0;
}

/* Hands the ranks' own probe times to a planner (before it predicts). */
static void give_probes(const run *r, cli_planner *pl) {
  pl->probe_given = r->probes;
  pl->probe_given_n = r->n_probes;
  pl->raw_heads = strcmp(r->cfg->clock, "none") == 0;
}

/* (Re-)creates pcomm: the stages' communicator, positions 0..stages-1 of
 * comm in order (comm itself when every process runs a stage). */
static int split_pipeline(run *r, bt_err *err) {
  if (r->own_pcomm)
    MPI_Comm_free(&r->pcomm);
  r->own_pcomm = 0;
  r->pcomm = r->comm;
  if (r->stages == r->size)
    return 0;
  if (MPI_Comm_split(r->comm, active(r) ? 0 : MPI_UNDEFINED, r->rank, &r->pcomm) != MPI_SUCCESS)
    return bt_err_set(err, "rank %d: MPI_Comm_split (the stages) failed", r->world_rank);
  r->own_pcomm = active(r);
  return 0;
}

/* Puts the ranks in stage order: a communicator in which position s runs
 * stage s on device stage_device[s] (positions from `stages` on are idle).
 * World rank 0 stays the lead and keeps its planner (for re-planning),
 * indexed by position from then on. */
static int reorder_ranks(run *r, bt_err *err) {
  int position = -1, identity = 1;
  for (int s = 0; s < r->size; s++) {
    if (r->stage_device[s] == r->world_rank)
      position = s;
    identity = identity && r->stage_device[s] == s;
  }
  if (position < 0)
    return bt_err_set(err, "rank %d: has no place in the plan", r->world_rank);
  for (int s = 0; s < r->size; s++)
    if (r->stage_device[s] == 0) /* device index = world rank */
      r->lead = s;
  if (!identity) {
    MPI_Comm stages;
    if (MPI_Comm_split(r->comm, 0, position, &stages) != MPI_SUCCESS)
      return bt_err_set(err, "rank %d: MPI_Comm_split (stage order) failed", r->world_rank);
    r->comm = stages;
    r->own_comm = 1;
    MPI_Comm_rank(r->comm, &r->rank);
  }
  int ok = split_pipeline(r, err) == 0;
  if (ok && r->rank == r->lead && r->planner)
    ok = cli_planner_permute(r->planner, r->stage_device, err) == 0;
  return agree(r->comm, ok);
}

/* "[8, 9, 20]": the 1-based first layers of stages 2..n. */
static void format_cuts(const int *cuts, int n, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int s = 1; s < n && used < len; s++)
    used += (size_t)snprintf(buf + used, len - used, "%s%d", s > 1 ? ", " : "", cuts[s] + 1);
  if (used < len)
    snprintf(buf + used, len - used, "]");
}

/* order[0..S-1] = the stages' devices (or positions) of a plan, then the
 * ones it leaves idle in increasing order: a permutation of 0..n-1. */
static void complete_order(const int *stage_of, int S, int n, int *order) {
  int used[BT_CONFIG_DEVICES_MAX] = {0};
  for (int s = 0; s < S; s++)
    order[s] = stage_of[s], used[stage_of[s]] = 1;
  for (int k = 0, at = S; k < n; k++)
    if (!used[k])
      order[at++] = k;
}

/* "a, b; idle: c": the devices of the processes at positions order[k]
 * (stage_device), the first S running the stages, the rest idle. */
static void format_stages(const run *r, const int *order, int S, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int k = 0; k < r->size && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s",
                             k == 0   ? ""
                             : k == S ? "; idle: "
                                      : ", ",
                             r->cfg->devices[r->stage_device[order[k]]]);
}

/* Rank 0 plans (planner.h: calibrates the model through the store, asks the
 * partitioner) while the others sleep; every rank gets the cuts. The plan
 * uses every device (device_order: experiment keeps their order, plan
 * orders them), or with device_order: subset any of them that includes
 * device 0 (world rank 0 keeps the run file and the planner: it runs a
 * stage), the others idle. */
static int setup_plan(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  r->plan_iter = r->plan_true = NAN;
  for (int s = 0; s < r->size; s++)
    r->plan_stage[s] = NAN;
  if (!planned(c))
    return 0;
  if (strcmp(c->clock, "none") == 0 && strcmp(c->partition, "oracle") == 0)
    return agree(r->comm,
                 bt_err_set(err, "partition oracle plans on the emulated devices' true "
                                 "times, which real hardware (clock none) does not have; use "
                                 "partition: predicted or profiled") == 0);
  double *profiles = NULL;
  if (strcmp(c->partition, "profiled") == 0 && gather_profiles(r, &profiles, err) < 0)
    return -1;
  if (gather_probes(r, err) < 0)
    return -1;
  int ok = 1, n_stages = r->size;
  double figures[3 + BT_CONFIG_DEVICES_MAX];
  int cuts[BT_CONFIG_DEVICES_MAX + 1], order[BT_CONFIG_DEVICES_MAX];
  if (r->rank == r->lead) {
    if (r->size > BT_PLAN_MAX_DEVICES)
      ok = bt_err_set(err,
                      "partition %s plans at most %d devices; use partition: even or "
                      "explicit for %d",
                      c->partition, BT_PLAN_MAX_DEVICES, r->size) == 0;
    r->planner = calloc(1, sizeof *r->planner);
    cli_planner *pl = r->planner;
    bt_plan plan;
    cli_plan_info info;
    if (ok && !pl)
      ok = bt_err_set(err, "out of memory for the planner") == 0;
    ok = ok && cli_planner_init(pl, c, &r->model, r->calib_path[0] ? r->calib_path : NULL,
                                r->calib_host, err) == 0;
    if (ok)
      give_probes(r, pl);
    if (ok && profiles)
      cli_planner_set_truth(pl, profiles);
    const bt_plan_device_use use = subsetting(c)   ? BT_PLAN_ANY_DEVICES
                                   : reordering(c) ? BT_PLAN_ALL_DEVICES
                                                   : BT_PLAN_DEVICES_IN_ORDER;
    if (ok)
      pl->required_devices = 1u; /* device 0: this process */
    ok = ok && cli_planner_plan(pl, c->partition, use, &plan, &info, err) == 0;
    if (ok) {
      n_stages = plan.n_stages;
      memcpy(cuts, plan.first, sizeof(int) * (size_t)(n_stages + 1));
      complete_order(plan.device, n_stages, r->size, order);
      figures[0] = plan.iter_time;
      figures[2 + r->size] = info.profiling_s;
      figures[1] = info.true_time;
      for (int s = 0; s < n_stages; s++)
        figures[2 + s] = plan.fwd[s] + plan.bwd[s];
      char list[256];
      format_cuts(cuts, n_stages, list, sizeof list);
      char devs[1024]; /* stage_device is still the identity: positions = devices */
      format_stages(r, order, n_stages, devs, sizeof devs);
      char truth[96] = ""; /* real hardware has no emulated true times */
      if (strcmp(c->clock, "none") != 0)
        snprintf(truth, sizeof truth, " (%.4f s with the true device times)", info.true_time);
      printf("plan: partition %s, stages on [%s], cuts %s, predicted %.4f s/iteration%s; "
             "planned in %.2f s\n",
             c->partition, devs, list, plan.iter_time, truth,
             info.plan_seconds + pl->calib_seconds + pl->predict_seconds);
      if (pl->pred_fwd)
        printf("plan: predictor %s on the sets %s in %.2f s%s%s\n",
               bt_cli_cache_state_name(pl->fit_info.state), pl->sets_dir, pl->fit_seconds,
               pl->fit_info.note[0] ? "; note: " : "", pl->fit_info.note);
      if (pl->pred_fwd && pl->host_note[0] && strcmp(c->clock, "none") != 0)
        printf("plan: note: %s; emulated devices follow this host's kernels, so predicted plans "
               "miss by more (docs/partition.md, \"Another host\")\n",
               pl->host_note);
      if (info.profiling_s > 0)
        printf("plan: the %s partitioner needs %.2f s of device time %s first (%s)\n", c->partition,
               info.profiling_s, strcmp(c->partition, "predicted") == 0 ? "probing" : "profiling",
               strcmp(c->clock, "none") == 0 ? "spent before the first iteration"
                                             : "the run's clock starts there");
      fflush(stdout);
    }
  }
  bt_mpi_quiet_barrier(r->comm); /* the others sleep while the lead calibrates and plans */
  if (agree(r->comm, ok) < 0) {
    free(profiles);
    return -1;
  }
  MPI_Bcast(&n_stages, 1, MPI_INT, r->lead, r->comm);
  MPI_Bcast(cuts, n_stages + 1, MPI_INT, r->lead, r->comm);
  MPI_Bcast(order, r->size, MPI_INT, r->lead, r->comm);
  MPI_Bcast(figures, 3 + r->size, MPI_DOUBLE, r->lead, r->comm);
  r->stages = n_stages;
  memcpy(r->cuts, cuts, sizeof(int) * (size_t)(n_stages + 1));
  memcpy(r->stage_device, order, sizeof(int) * (size_t)r->size);
  r->plan_iter = figures[0];
  r->plan_true = figures[1];
  r->profiling_s = figures[2 + r->size];
  for (int s = 0; s < n_stages; s++)
    r->plan_stage[s] = figures[2 + s];
  free(profiles);
  return reorder_ranks(r, err);
}

/* Whether stage `stage` of a plan of S stages with `cuts` fits this rank's
 * device (not agreed; an idle position, stage >= S, always fits). */
static int stage_fits(const run *r, int S, const int *cuts, int stage, bt_err *err) {
  const bt_config *c = r->cfg;
  if (stage >= S)
    return 1;
  bt_schedule sched;
  bt_schedule_kind kind;
  memset(&sched, 0, sizeof sched);
  int ok = bt_schedule_parse_kind(c->schedule, &kind, err) == 0 &&
           bt_schedule_build(&sched, kind, S, c->micro_batches, err) == 0;
  bt_mem_need need;
  const int mb = c->batch_size / c->micro_batches;
  ok = ok && bt_mem_need_stage(&r->model, cuts[stage], cuts[stage + 1], mb, sched.slots[stage],
                               &need, err) == 0;
  ok = ok && bt_device_check_memory(&r->dev.dev, &need, c->memory_scale, err) == 0;
  if (!ok)
    bt_err_prefix(err, "rank %d", r->rank);
  bt_schedule_free(&sched);
  return ok;
}

static int setup_device(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  char data[4096];
  bt_cli_data_dir(data, sizeof data);
  bt_host_rates h;
  measure_host(r, &h);
  r->dev.host_reference_s = BT_CALIB_REFERENCE_FLOPS / (h.sgemm_gflops * 1e9);
  const int device = r->world_rank; /* before any reordering: world rank = device index */
  int ok = bt_device_find(c->devices[device], data, &r->dev.dev, err) == 0 &&
           cli_apply_throttle(c, r->size, device, &r->dev.dev, err) == 0 &&
           bt_host_as_device(&h, &r->dev.host, err) == 0;
  return agree(r->comm, ok);
}

/* This rank's stage fits its device (after the plan: the cuts and the
 * stage order are known). */
static int setup_memory(run *r, bt_err *err) {
  return agree(r->comm, stage_fits(r, r->stages, r->cuts, r->rank, err));
}

/* The link from this rank to `peer`: the sending device's default link, the
 * global links.* overrides, then a links.pairs entry "SRC-DST:MBPS:MS" for
 * this directed pair. With links.shared_medium every directed link of the
 * pipeline gets an equal time share of one channel (TDMA-like: a static
 * split, not dynamic contention). */
static int link_params(const run *r, int peer, bt_link_params *out, bt_err *err) {
  /* links.pairs name devices by their index in `devices` */
  const int dst = peer >= 0 && peer < r->stages ? r->stage_device[peer] : -1;
  return cli_link_params(r->cfg, r->size, &r->dev.dev, r->stage_device[r->rank], dst, out, err);
}

/* The codecs of boundary b: codec.activations / codec.gradients, unless a
 * codec.boundaries entry "B=ACT/GRAD" names this boundary ("-" keeps the
 * default for that direction). */
static int boundary_codecs(const run *r, int b, char *act, char *grad, bt_err *err) {
  const bt_config *c = r->cfg;
  snprintf(act, 64, "%s", c->codec_activations);
  snprintf(grad, 64, "%s", c->codec_gradients);
  for (int i = 0; i < c->n_codec_boundaries; i++) {
    const char *e = c->codec_boundaries[i];
    char a[64], g[64];
    int at, used = 0;
    if (sscanf(e, "%d=%63[^/]/%63s%n", &at, a, g, &used) != 3 || e[used] != '\0' || at < 1 ||
        at >= r->size)
      return bt_err_set(err,
                        "codec.boundaries entry '%s': expected B=ACT/GRAD with B in 1..%d "
                        "(the boundary after stage B), e.g. 1=sparse-q8/q8-ef; '-' keeps "
                        "the default",
                        e, r->size - 1);
    if (at != b)
      continue;
    if (strcmp(a, "-") != 0)
      snprintf(act, 64, "%s", a);
    if (strcmp(g, "-") != 0)
      snprintf(grad, 64, "%s", g);
  }
  return 0;
}

static int create_pipeline(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  bt_pipeline_config pc = {
      .model = &r->model,
      .cuts = r->cuts,
      .batch_size = c->batch_size,
      .micro_batches = c->micro_batches,
      .opt = {c->optimizer_lr, c->optimizer_momentum, c->optimizer_weight_decay,
              c->optimizer_nesterov},
      .seed = c->seed,
      .clock = strcmp(c->clock, "virtual") == 0 ? BT_CLOCK_VIRTUAL
               : strcmp(c->clock, "wall") == 0  ? BT_CLOCK_WALL
                                                : BT_CLOCK_NONE,
      .calibration_repeats = strcmp(c->clock, "none") == 0 ? 0 : 20,
      .calibration_reference_s = r->dev.host_reference_s,
      .calibration_store = r->calib_path[0] ? r->calib_path : NULL,
      .calibration_host = r->calib_host,
      .root = r->lead,
  };
  if (bt_schedule_parse_kind(c->schedule, &pc.schedule, err) < 0)
    return -1;
  /* Boundary b (1-based) joins ranks b-1 and b: this rank sends activations
   * over boundary rank+1 and gradients over boundary rank. */
  if (boundary_codecs(r, r->rank + 1, r->codec_act_out, r->codec_grad_in, err) < 0 ||
      boundary_codecs(r, r->rank, r->codec_act_in, r->codec_grad_out, err) < 0)
    return -1;
  pc.codec_act_out = r->codec_act_out;
  pc.codec_act_in = r->codec_act_in;
  pc.codec_grad_out = r->codec_grad_out;
  pc.codec_grad_in = r->codec_grad_in;
  if (link_params(r, r->rank + 1, &pc.link_next, err) < 0 ||
      link_params(r, r->rank - 1, &pc.link_prev, err) < 0)
    return -1;
  if (pc.clock != BT_CLOCK_NONE) {
    pc.device_time = device_time;
    pc.codec_time = codec_time;
    pc.device_ctx = &r->dev;
    size_t n = 0;
    for (int i = r->cuts[r->rank]; i < r->cuts[r->rank + 1]; i++)
      n += r->model.layers[i].n_params;
    r->dev.stage_params = n;
  }
  return bt_pipeline_create(&r->pipe, r->pcomm, &pc, err);
}

/* The stages create the pipeline (idle ranks have none); all agree. */
static int setup_pipeline(run *r, bt_err *err) {
  int ok = !active(r) || create_pipeline(r, err) == 0;
  return r->stages == r->size ? (ok ? 0 : -1) : agree(r->comm, ok);
}

/* The start-up probe timings (partition predicted) to /probes. The planner
 * numbers devices as the experiment lists them; the run file by the stage
 * each process ran when it was opened. */
static int log_startup_probes(run *r, bt_err *err) {
  const cli_planner *pl = r->planner;
  if (!pl || pl->n_probe_log == 0)
    return 0;
  bt_probe_record *rec = malloc(pl->n_probe_log * sizeof *rec);
  if (!rec)
    return bt_err_set(err, "out of memory for probe records");
  for (size_t i = 0; i < pl->n_probe_log; i++) {
    rec[i] = pl->probe_log[i];
    for (int k = 0; k < r->size; k++)
      if (r->stage_device[k] == pl->probe_log[i].rank) {
        rec[i].rank = r->log_rank[k];
        break;
      }
  }
  const int rc = bt_runlog_append_probes(r->log, pl->n_probe_log, rec, err);
  free(rec);
  return rc;
}

static int open_runlog(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  /* Every rank contributes its device to /devices. */
  double mine[3] = {r->dev.dev.capacity_mib * 1048576.0 * c->memory_scale,
                    r->dev.dev.link_bandwidth_mbps * 1e6, r->dev.dev.link_latency_ms * 1e-3};
  double *all = r->rank == r->lead ? malloc(sizeof mine * (size_t)r->size) : NULL;
  MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, r->lead, r->comm);
  int ok = 1;
  if (r->rank == r->lead && c->output[0]) {
    char *effective;
    bt_runlog_meta meta = bt_cli_runlog_meta(c, c->clock, c->schedule, r->size, &effective);
    const cli_planner *pl = r->planner;
    char predictor[9000] = "";
    if (pl && pl->pred_fwd)
      snprintf(predictor, sizeof predictor, "sets %s; %s in %.2f s%s%s", pl->sets_dir,
               bt_cli_cache_state_name(pl->fit_info.state), pl->fit_seconds,
               pl->fit_info.path[0] ? "; cache file " : "", pl->fit_info.path);
    meta.predictor = predictor;
    bt_runlog_device devs[BT_CONFIG_DEVICES_MAX];
    for (int k = 0; k < r->size; k++)
      devs[k] = (bt_runlog_device){k, c->devices[r->stage_device[k]], all[3 * k], all[3 * k + 1],
                                   all[3 * k + 2]};
    int first[BT_CONFIG_DEVICES_MAX], ranks[BT_CONFIG_DEVICES_MAX];
    for (int k = 0; k < r->stages; k++)
      first[k] = r->cuts[k], ranks[k] = k;
    bt_runlog_plan plan = {.iteration = 0,
                           .n_stages = r->stages,
                           .first_layer = first,
                           .device_rank = ranks,
                           .predicted_stage_time = planned(c) ? r->plan_stage : NULL,
                           .predicted_iteration_time = r->plan_iter,
                           .partitioner = c->partition};
    ok = bt_runlog_create(&r->log, c->output, &meta, err) == 0 &&
         bt_runlog_write_devices(r->log, r->size, devs, err) == 0 &&
         bt_runlog_write_layers(r->log, &r->model, err) == 0 &&
         bt_runlog_append_plan(r->log, &plan, err) == 0 && log_startup_probes(r, err) == 0 &&
         bt_runlog_flush(r->log, err) == 0;
    free(effective);
  }
  free(all);
  return agree(r->comm, ok);
}

/* Gathers this iteration's events and layer times to the lead and logs them. */
static int log_iteration(run *r, long step, const bt_pipeline_stats *st, bt_err *err) {
  size_t n_ev = 0;
  const bt_event *ev = r->pipe ? bt_pipeline_events(r->pipe, &n_ev) : NULL;
  int mine = (int)(n_ev * sizeof(bt_event));
  int *counts = NULL, *displs = NULL;
  char *all = NULL;
  if (r->rank == r->lead) {
    counts = calloc((size_t)r->size, sizeof(int));
    displs = calloc((size_t)r->size, sizeof(int));
  }
  MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, r->lead, r->comm);
  int total = 0;
  if (r->rank == r->lead) {
    for (int k = 0; k < r->size; k++)
      displs[k] = total, total += counts[k];
    all = malloc((size_t)total + 1);
  }
  MPI_Gatherv(ev, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, r->lead, r->comm);
  const double *fwd = NULL, *bwd = NULL;
  int first = 0, count = 0;
  if (r->pipe)
    bt_pipeline_layer_times(r->pipe, &fwd, &bwd, &first, &count);
  const int L = r->model.n_layers;
  double *lf = r->rank == r->lead ? malloc(sizeof(double) * L) : NULL;
  double *lb = r->rank == r->lead ? malloc(sizeof(double) * L) : NULL;
  int *lc = NULL, *ld = NULL;
  if (r->rank == r->lead) {
    lc = malloc(sizeof(int) * r->size);
    ld = malloc(sizeof(int) * r->size);
    for (int k = 0; k < r->size; k++) /* idle positions send nothing */
      lc[k] = k < r->stages ? r->cuts[k + 1] - r->cuts[k] : 0,
      ld[k] = k < r->stages ? r->cuts[k] : 0;
  }
  MPI_Gatherv(fwd, count, MPI_DOUBLE, lf, lc, ld, MPI_DOUBLE, r->lead, r->comm);
  MPI_Gatherv(bwd, count, MPI_DOUBLE, lb, lc, ld, MPI_DOUBLE, r->lead, r->comm);
  double mx[2] = {st->iter_time, st->wall_time}, mx_all[2] = {0, 0};
  long long bytes = st->bytes_sent, bytes_all = 0;
  MPI_Reduce(mx, mx_all, 2, MPI_DOUBLE, MPI_MAX, r->lead, r->comm);
  r->last_iter_time = mx_all[0];
  MPI_Reduce(&bytes, &bytes_all, 1, MPI_LONG_LONG, MPI_SUM, r->lead, r->comm);
  int rc = 0;
  if (r->rank == r->lead && r->log) {
    /* Events name processes by their /devices entry, not by the stage they
     * run now (a re-plan may have reordered the stages). */
    bt_event *evs = (bt_event *)all;
    for (size_t k = 0; k < (size_t)total / sizeof(bt_event); k++) {
      evs[k].rank = r->log_rank[evs[k].rank];
      if (evs[k].peer >= 0)
        evs[k].peer = r->log_rank[evs[k].peer];
    }
    bt_train_record rec = {.iteration = step,
                           .loss = st->loss,
                           .accuracy = (double)st->correct / r->cfg->batch_size,
                           .iteration_time = mx_all[0],
                           .wall_time = mx_all[1],
                           .bytes_sent = bytes_all};
    if (bt_runlog_append_events(r->log, (size_t)total / sizeof(bt_event), (bt_event *)all, err) <
            0 ||
        bt_runlog_append_timing(r->log, step, L, lf, lb, err) < 0 ||
        bt_runlog_append_train(r->log, &rec, err) < 0 || bt_runlog_flush(r->log, err) < 0)
      rc = -1;
  }
  free(counts), free(displs), free(all), free(lf), free(lb), free(lc), free(ld);
  return rc;
}

/* Seconds to move the weights, momentum and state of the layers whose
 * device changes from the current stages (S_from stages with `from` cuts,
 * stage s on planner device s) to S_to stages with `to` cuts, stage s on
 * device[s], each over its link. */
static double migration_seconds(const cli_planner *pl, int S_from, const int *from, int S_to,
                                const int *to, const int *device, double *bytes_moved) {
  double t = 0, moved = 0;
  const int D = pl->n_devices;
  for (int l = 0, a = 0, b = 0; l < pl->n_layers; l++) {
    while (a + 1 < S_from && from[a + 1] <= l)
      a++;
    while (b + 1 < S_to && to[b + 1] <= l)
      b++;
    const bt_layer *y = &pl->model->layers[l];
    const double bytes = 4.0 * (2.0 * (double)y->n_params + (double)y->n_state);
    const int dst = device[b];
    if (a == dst || bytes == 0)
      continue;
    moved += bytes;
    t += pl->latency[a * D + dst] + bytes / pl->bandwidth[a * D + dst];
  }
  *bytes_moved = moved;
  return t;
}

/* The predictor's view against the measured layer times, before it learns
 * from them: one /predictor row per layer and pass. */
static int log_predictor(run *r, long step, const double *lf, const double *lb, bt_err *err) {
  const cli_planner *pl = r->planner;
  const int L = r->model.n_layers;
  bt_predictor_record *rec = calloc(2 * (size_t)L, sizeof *rec);
  if (!rec)
    return bt_err_set(err, "out of memory for predictor records");
  size_t n = 0;
  for (int d = 0; d < r->stages; d++)
    for (int l = r->cuts[d]; l < r->cuts[d + 1]; l++) {
      rec[n++] = (bt_predictor_record){step, r->log_rank[d], l, 0, pl->pred_fwd[d * L + l], lf[l]};
      rec[n++] = (bt_predictor_record){step, r->log_rank[d], l, 1, pl->pred_bwd[d * L + l], lb[l]};
    }
  int rc = bt_runlog_append_predictor(r->log, n, rec, err);
  free(rec);
  return rc;
}

/* One freedom of a re-plan: the partition module's device use, over the
 * first `devices` positions (0 = all). */
typedef struct freedom {
  bt_plan_device_use use;
  int devices;
} freedom;

/* Whether plan p already obeys freedom f (then f's search would give p). */
static int obeys(const bt_plan *p, freedom f, int n) {
  const int S = f.devices > 0 ? f.devices : n;
  if (f.use == BT_PLAN_ANY_DEVICES)
    return 1;
  if (p->n_stages != S)
    return 0;
  for (int k = 0; k < S; k++) /* distinct: exactly devices 0..S-1 */
    if (p->device[k] >= S)
      return 0;
  if (f.use == BT_PLAN_ALL_DEVICES)
    return 1;
  if (p->device[0] != 0)
    return 0;
  for (int k = 1; f.use == BT_PLAN_DEVICES_IN_ORDER && k < S; k++)
    if (p->device[k] != k)
      return 0;
  return 1;
}

/* The layers a plan would put on devices that never ran them: device
 * (position) d times layers [first[d][k], end[d][k]), k < n[d], before the
 * plans are weighed again; layers it has measured in between are skipped
 * (up to PROBE_RANGES runs; more are merged, see bt_plan_unmeasured_runs). */
enum { PROBE_RANGES = 4 };
typedef struct replan_probe {
  int n[BT_CONFIG_DEVICES_MAX];
  int first[BT_CONFIG_DEVICES_MAX][PROBE_RANGES], end[BT_CONFIG_DEVICES_MAX][PROBE_RANGES];
} replan_probe;

/* Fills `probe` with plan p's layer-device pairs that never ran (no
 * measured ratio); 1 when there are any, -1 on error. */
static int new_pairs(const cli_planner *pl, const bt_plan *p, replan_probe *probe, bt_err *err) {
  const int L = pl->n_layers, D = pl->n_devices;
  unsigned char *measured = malloc((size_t)D * L);
  if (!measured)
    return bt_err_set(err, "out of memory for the re-plan probe");
  for (size_t k = 0; k < (size_t)D * L; k++)
    measured[k] = isfinite(pl->ratio_fwd[k]) && isfinite(pl->ratio_bwd[k]);
  memset(probe, 0, sizeof *probe);
  const int pairs = bt_plan_unmeasured_runs(p, L, D, measured, PROBE_RANGES, probe->n,
                                            &probe->first[0][0], &probe->end[0][0], err);
  free(measured);
  return pairs < 0 ? -1 : pairs > 0;
}

/* Runs of each layer when a device times new layers: a warm-up and two
 * timed runs, the minimum kept (the runtime's own measurements refine it). */
enum { PROBE_RUNS = 3 };

/* The pause `probe` would take under the planner's view: its slowest
 * device's runs. */
static double probe_pause(const cli_planner *pl, const replan_probe *probe) {
  const int L = pl->n_layers;
  double pause = 0;
  for (int d = 0; d < pl->n_devices; d++) {
    double t = 0;
    for (int k = 0; k < probe->n[d]; k++)
      for (int l = probe->first[d][k]; l < probe->end[d][k]; l++)
        t += PROBE_RUNS * (pl->view_fwd[d * L + l] + pl->view_bwd[d * L + l]);
    pause = fmax(pause, t);
  }
  return pause;
}

/* Rank 0's re-planning decision after iteration `step`: the predictor
 * learns from the measured layer times (partition predicted) or the true
 * times move to the next iteration (oracle); a new search; re-cut when the
 * new plan beats the current one, under the same view, by more than
 * replan.threshold with the migration spread over the remaining iterations.
 * With device_order: plan the search may also reorder the stages (the
 * first too: the lead, which keeps the planner and the run file, may run any
 * stage); with subset it may also bring idle devices in or leave stages'
 * devices idle (never the lead's). The new plan runs stage s on the process
 * of current position order[s] (*n_stages stages; the rest of order are the
 * idle positions). Returns 1 to re-cut, 0 to keep the plan, and 2 (only
 * with `probe`, partition predicted) when the winning plan puts layers on
 * devices that never ran them: `probe` then says which, to be timed there
 * before a second call (lf = NULL: nothing new to learn) decides. */
static int decide_replan(run *r, long step, long remaining, const double *lf, const double *lb,
                         replan_probe *probe, int *n_stages, int *cuts, int *order, double *fig,
                         bt_err *err) {
  const bt_config *c = r->cfg;
  cli_planner *pl = r->planner;
  const int S = r->stages, N = r->size, predicted = strcmp(c->partition, "predicted") == 0;
  if (predicted && lf) {
    if (r->log && log_predictor(r, step, lf, lb, err) < 0)
      return -1;
    for (int d = 0; d < S; d++)
      if (cli_planner_learn(pl, d, r->cuts[d], r->cuts[d + 1] - r->cuts[d], lf + r->cuts[d],
                            lb + r->cuts[d], err) < 0)
        return -1;
  }
  /* The true times follow throttling: the oracle plans with them, and the
   * predicted plan's true figure (logged and printed) is taken under them. */
  cli_planner_truth_at(pl, step + 1);
  bt_plan cur, nxt;
  cli_plan_info info;
  memset(&nxt, 0, sizeof nxt);
  memset(&info, 0, sizeof info);
  if (cli_planner_evaluate(pl, predicted, S, r->cuts, &cur, err) < 0)
    return -1;
  /* The fastest plan may move much state (a new device order moves whole
   * stages): its migration over the remaining iterations can eat its gain
   * where a plan of fewer freedoms (stage 0 kept, or the order kept: cuts
   * only) still wins. Each freedom's best plan is a candidate; the largest
   * net gain is taken. */
  static const freedom reorder_f[] = {
      {BT_PLAN_ALL_DEVICES, 0}, {BT_PLAN_ALL_FIRST_FIXED, 0}, {BT_PLAN_DEVICES_IN_ORDER, 0}};
  static const freedom fixed_f[] = {{BT_PLAN_DEVICES_IN_ORDER, 0}};
  /* With subset: any subset that keeps the lead; every device (the idle
   * ones brought in) in any order, with stage 0 kept; the current stages'
   * devices in any order, with stage 0 kept, in their order. */
  const freedom subset_f[] = {{BT_PLAN_ANY_DEVICES, 0},     {BT_PLAN_ALL_DEVICES, 0},
                              {BT_PLAN_ALL_FIRST_FIXED, 0}, {BT_PLAN_ALL_DEVICES, S},
                              {BT_PLAN_ALL_FIRST_FIXED, S}, {BT_PLAN_DEVICES_IN_ORDER, S}};
  const freedom *fr = subsetting(c) ? subset_f : reordering(c) ? reorder_f : fixed_f;
  const int n_fr = subsetting(c) ? 6 : reordering(c) ? 3 : 1;
  double gain = -INFINITY, mig = 0, moved = 0;
  pl->required_devices = 1u << r->lead; /* the lead keeps a stage */
  for (int u = 0; u < n_fr; u++) {
    /* A freedom the best plan so far did not use gives that same optimum:
     * its search would repeat the last. */
    if (u > 0 && obeys(&nxt, fr[u], N))
      continue;
    int repeated = 0; /* with no idle device, "the current stages' devices" = all */
    for (int v = 0; v < u; v++)
      repeated |= fr[v].use == fr[u].use &&
                  (fr[v].devices ? fr[v].devices : N) == (fr[u].devices ? fr[u].devices : N);
    if (repeated)
      continue;
    bt_plan cand;
    cli_plan_info cinfo;
    pl->plan_devices = fr[u].devices;
    const int rc = cli_planner_plan(pl, c->partition, fr[u].use, &cand, &cinfo, err);
    pl->plan_devices = 0;
    if (rc < 0)
      return -1;
    /* A plan that puts layers on devices that never ran them rests on the
     * model there: count on it being slower by about the model's error
     * before learning (experiments/replan: stage sums 12.5% off on average
     * at the first check, 1.6% forty iterations later). 0.1 recovers as
     * much as 0 in experiments/replan/sweep.sh; 0.3 let a 6.7% loss stand. */
    bt_plan sure = cand;
    if (predicted && cli_planner_evaluate_cautious(pl, cand.n_stages, cand.device, cand.first,
                                                   c->replan_caution, &sure, err) < 0)
      return -1;
    double cmoved;
    const double cmig =
        migration_seconds(pl, S, r->cuts, cand.n_stages, cand.first, cand.device, &cmoved);
    const double cgain = cur.iter_time - sure.iter_time - cmig / (double)remaining;
    if (getenv("BATON_DEBUG_PLAN"))
      fprintf(stderr,
              "re-plan check after iteration %ld (device use %d over %d): current %.4f s, best "
              "%.4f s on %d stages (%.4f counting new pairs slower), migration %.4f s over %ld "
              "iterations: gain %.4f s, threshold %.4f s\n",
              step + 1, (int)fr[u].use, fr[u].devices ? fr[u].devices : N, cur.iter_time,
              cand.iter_time, cand.n_stages, sure.iter_time, cmig, remaining, cgain,
              c->replan_threshold * cur.iter_time);
    if (cgain > gain)
      gain = cgain, nxt = cand, info = cinfo, mig = cmig, moved = cmoved;
  }
  const freedom same = {BT_PLAN_DEVICES_IN_ORDER, S};
  const int same_order = obeys(&nxt, same, N);
  if ((same_order && memcmp(cur.first, nxt.first, sizeof(int) * (size_t)(S + 1)) == 0) ||
      !(gain > c->replan_threshold * cur.iter_time))
    return 0;
  /* Timing the new pairs first pays when the pause is small against what
   * the plan stakes over the remaining iterations. */
  if (predicted && probe) {
    const int fresh = new_pairs(pl, &nxt, probe, err);
    if (fresh < 0)
      return -1;
    if (fresh && probe_pause(pl, probe) < gain * (double)remaining)
      return 2;
  }
  *n_stages = nxt.n_stages;
  memcpy(cuts, nxt.first, sizeof(int) * (size_t)(nxt.n_stages + 1));
  complete_order(nxt.device, nxt.n_stages, N, order);
  fig[0] = nxt.iter_time;
  fig[1] = info.true_time;
  fig[2] = mig;
  for (int s = 0; s < nxt.n_stages; s++)
    fig[3 + s] = nxt.fwd[s] + nxt.bwd[s];
  char a[256], b[256], devs[1024] = "";
  format_cuts(r->cuts, S, a, sizeof a);
  format_cuts(cuts, nxt.n_stages, b, sizeof b);
  if (!same_order) {
    char list[900];
    format_stages(r, order, nxt.n_stages, list, sizeof list);
    snprintf(devs, sizeof devs, ", stages on [%s]", list);
  }
  printf("re-plan after iteration %ld: cuts %s -> %s%s, predicted %.4f -> %.4f s/iteration, "
         "migrating %.1f MiB (%.3f s)\n",
         step + 1, a, b, devs, cur.iter_time, nxt.iter_time, moved / 1048576.0, mig);
  fflush(stdout);
  return 1;
}

/* Every rank's measured per-layer device times of the last iteration, per
 * micro-batch, on the lead ([L] arrays). */
static int gather_layer_times(run *r, double *lf, double *lb, bt_err *err) {
  const double *f = NULL, *b = NULL;
  int first = 0, count = 0;
  if (r->pipe)
    bt_pipeline_layer_times(r->pipe, &f, &b, &first, &count);
  const int M = r->cfg->micro_batches;
  double *mine = malloc(2 * (size_t)count * sizeof(double) + 1);
  if (!mine)
    return bt_err_set(err, "rank %d: out of memory gathering layer times", r->rank);
  for (int k = 0; k < count; k++)
    mine[k] = f[k] / M, mine[count + k] = b[k] / M;
  int counts[BT_CONFIG_DEVICES_MAX], displs[BT_CONFIG_DEVICES_MAX];
  for (int s = 0; s < r->size; s++) /* idle positions send nothing */
    counts[s] = s < r->stages ? r->cuts[s + 1] - r->cuts[s] : 0,
    displs[s] = s < r->stages ? r->cuts[s] : 0;
  int rc = MPI_Gatherv(mine, count, MPI_DOUBLE, lf, counts, displs, MPI_DOUBLE, r->lead, r->comm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Gatherv(mine + count, count, MPI_DOUBLE, lb, counts, displs, MPI_DOUBLE, r->lead,
                     r->comm);
  free(mine);
  return rc == MPI_SUCCESS ? 0
                           : bt_err_set(err, "rank %d: MPI_Gatherv (layer times) failed", r->rank);
}

static int setup_pipeline(run *r, bt_err *err);

/* Puts the process of current position order[k] on position k (stages
 * positions 0..stages-1, the rest idle): a communicator split in the new
 * order, the stages' communicator split again, and every position-indexed
 * figure (devices, run-file ranks, the lead's position, the planner's rows)
 * follows. */
static int reorder_stages(run *r, const int *order, bt_err *err) {
  int identity = 1, mine = -1, lead = -1;
  for (int s = 0; s < r->size; s++) {
    identity = identity && order[s] == s;
    if (order[s] == r->rank)
      mine = s;
    if (order[s] == r->lead)
      lead = s;
  }
  if (mine < 0 || lead < 0 || lead >= r->stages)
    return bt_err_set(err, "rank %d: the new stage order is not a permutation keeping the lead",
                      r->rank);
  if (!identity) {
    MPI_Comm next;
    if (MPI_Comm_split(r->comm, 0, mine, &next) != MPI_SUCCESS)
      return bt_err_set(err, "rank %d: MPI_Comm_split (new stage order) failed", r->rank);
    if (r->own_pcomm)
      MPI_Comm_free(&r->pcomm);
    r->own_pcomm = 0;
    if (r->own_comm)
      MPI_Comm_free(&r->comm);
    r->comm = next;
    r->own_comm = 1;
    MPI_Comm_rank(r->comm, &r->rank);
    r->lead = lead;
    int dev[BT_CONFIG_DEVICES_MAX], logr[BT_CONFIG_DEVICES_MAX];
    for (int s = 0; s < r->size; s++)
      dev[s] = r->stage_device[order[s]], logr[s] = r->log_rank[order[s]];
    memcpy(r->stage_device, dev, sizeof(int) * (size_t)r->size);
    memcpy(r->log_rank, logr, sizeof(int) * (size_t)r->size);
  }
  if (split_pipeline(r, err) < 0)
    return -1;
  if (!identity && r->rank == r->lead && r->planner)
    return cli_planner_permute(r->planner, order, err);
  return 0;
}

/* Re-cuts the running pipeline into S stages: weights, momentum and state
 * travel through the lead (the pipelines' root before and after) into a
 * pipeline re-created with `cuts` (stage s on the process of current
 * position order[s]), whose clock continues from the slowest rank's plus the
 * migration time. */
static int migrate(run *r, int S, const int *cuts, const int *order, double migration_s,
                   bt_err *err) {
  const size_t np = r->model.n_params, ns = r->model.n_state;
  float *params = NULL, *momentum = NULL, *state = NULL;
  int ok = 1;
  if (r->rank == r->lead) {
    params = malloc((np + 1) * sizeof(float));
    momentum = malloc((np + 1) * sizeof(float));
    state = malloc((ns + 1) * sizeof(float));
    ok = params && momentum && state;
  }
  if (agree(r->comm, ok) < 0 ||
      agree(r->comm,
            !r->pipe || bt_pipeline_export_state(r->pipe, params, momentum, state, err) == 0) < 0) {
    free(params), free(momentum), free(state);
    return bt_err_set(err, "rank %d: migrating the weights failed: %s", r->rank,
                      ok ? "MPI" : "out of memory on the lead");
  }
  double now = r->pipe ? bt_pipeline_clock(r->pipe) : 0, t;
  MPI_Allreduce(&now, &t, 1, MPI_DOUBLE, MPI_MAX, r->comm);
  bt_pipeline_free(&r->pipe);
  memcpy(r->cuts, cuts, sizeof(int) * (size_t)(S + 1));
  r->stages = S;
  int rc = agree(r->comm, reorder_stages(r, order, err) == 0);
  if (rc == 0)
    rc = setup_pipeline(r, err);
  if (rc == 0 && r->pipe)
    rc = bt_pipeline_import_state(r->pipe, params, momentum, state, err);
  if (rc == 0 && r->pipe)
    bt_pipeline_set_clock(r->pipe, t + migration_s);
  free(params), free(momentum), free(state);
  return rc;
}

/* A re-plan probe's timings on rank d (layers [first, first + n)) to
 * /probes, with what the predictor said before learning from them. */
static int log_replan_probe(run *r, long step, int d, int first, int n, const double *fwd,
                            const double *bwd, bt_err *err) {
  const cli_planner *pl = r->planner;
  const int L = r->model.n_layers, raw = strcmp(r->cfg->clock, "none") == 0;
  bt_probe_record *rec = calloc(2 * (size_t)n, sizeof *rec);
  if (!rec)
    return bt_err_set(err, "out of memory for probe records");
  for (int k = 0; k < n; k++)
    for (int q = 0; q < 2; q++) {
      const int l = first + k;
      bt_probe_record *x = &rec[2 * k + q];
      *x = (bt_probe_record){step,
                             r->log_rank[d],
                             l,
                             pl->micro_batch,
                             q,
                             q ? pl->pred_bwd[d * L + l] : pl->pred_fwd[d * L + l],
                             q ? bwd[k] : fwd[k],
                             raw ? 0
                             : q ? pl->host_bwd[l]
                                 : pl->host_fwd[l],
                             ""};
      if (bt_layer_spec_format(&r->model.layers[l], x->spec, sizeof x->spec) < 0)
        snprintf(x->spec, sizeof x->spec, "%s", r->model.layers[l].name);
    }
  const int rc = bt_runlog_append_probes(r->log, 2 * (size_t)n, rec, err);
  free(rec);
  return rc;
}

/* The devices of `probe` time their new layers (one rank after the other:
 * ranks may share cores; PROBE_RUNS runs, as a device would), the
 * lead's predictor learns from the figures, and the pause (the slowest
 * device's runs) is charged to every rank's clock. */
static int run_probe(run *r, long step, const replan_probe *probe, bt_err *err) {
  const int L = r->model.n_layers, lead = r->rank == r->lead, runs = probe->n[r->rank];
  double *mine = calloc(2 * (size_t)L, sizeof(double));
  double *all = lead ? calloc(2 * (size_t)L * (size_t)r->size, sizeof(double)) : NULL;
  int ok = mine && (!lead || all);
  if (!ok)
    bt_err_set(err, "rank %d: out of memory for the re-plan probe", r->rank);
  double cost = 0, pause = 0;
  for (int t = 0; t < r->size; t++) {
    for (int k = 0; t == r->rank && ok && k < runs; k++) {
      const int a = probe->first[r->rank][k], count = probe->end[r->rank][k] - a;
      ok = time_layers(r, a, count, step + 1, PROBE_RUNS - 1, mine + a, mine + L + a, err) == 0;
      for (int l = a; ok && l < a + count; l++)
        cost += PROBE_RUNS * (mine[l] + mine[L + l]);
    }
    bt_mpi_quiet_barrier(r->comm);
  }
  if (agree(r->comm, ok) < 0) {
    free(mine), free(all);
    return -1;
  }
  MPI_Gather(mine, 2 * L, MPI_DOUBLE, all, 2 * L, MPI_DOUBLE, r->lead, r->comm);
  MPI_Allreduce(&cost, &pause, 1, MPI_DOUBLE, MPI_MAX, r->comm);
  free(mine);
  int rc = 0;
  if (lead) {
    printf("re-plan check after iteration %ld: the best plan puts layers on devices that never "
           "ran them; timing them there first (%.3f s of device time):",
           step + 1, pause);
    for (int d = 0; d < r->size; d++)
      for (int k = 0; k < probe->n[d]; k++)
        if (k == 0)
          printf(" %s layers %d-%d", r->cfg->devices[r->stage_device[d]], probe->first[d][k] + 1,
                 probe->end[d][k]);
        else
          printf(", %d-%d", probe->first[d][k] + 1, probe->end[d][k]);
    printf("\n");
    fflush(stdout);
    for (int d = 0; rc == 0 && d < r->size; d++)
      for (int k = 0; rc == 0 && k < probe->n[d]; k++) {
        const int a = probe->first[d][k], n = probe->end[d][k] - a;
        const double *f = all + (size_t)d * 2 * L;
        if (r->log)
          rc = log_replan_probe(r, step, d, a, n, f + a, f + L + a, err);
        if (rc == 0 && cli_planner_learn(r->planner, d, a, n, f + a, f + L + a, err) < 0)
          rc = -1;
      }
  }
  free(all);
  if (agree(r->comm, rc == 0) < 0)
    return -1;
  /* The emulated clocks are charged the pause; under `none` (real
   * hardware) the wall clock already holds it. */
  if (strcmp(r->cfg->clock, "none") != 0) {
    double now = r->pipe ? bt_pipeline_clock(r->pipe) : 0, t;
    MPI_Allreduce(&now, &t, 1, MPI_DOUBLE, MPI_MAX, r->comm);
    if (r->pipe)
      bt_pipeline_set_clock(r->pipe, t + pause);
    r->pending_migration += pause;
  }
  return 0;
}

/* Re-planning every replan.every iterations (partition predicted or oracle). */
static int maybe_replan(run *r, long step, long total_steps, bt_err *err) {
  const bt_config *c = r->cfg;
  const long remaining = total_steps - (step + 1);
  if (c->replan_every <= 0 || remaining <= 0 || (step + 1) % c->replan_every != 0 ||
      (strcmp(c->partition, "predicted") != 0 && strcmp(c->partition, "oracle") != 0))
    return 0;
  const int L = r->model.n_layers;
  double *lf = r->rank == r->lead ? calloc((size_t)L, sizeof(double)) : NULL;
  double *lb = r->rank == r->lead ? calloc((size_t)L, sizeof(double)) : NULL;
  if (gather_layer_times(r, lf, lb, err) < 0) {
    free(lf), free(lb);
    return -1;
  }
  int decision = 0, S = r->stages, cuts[BT_CONFIG_DEVICES_MAX + 1], order[BT_CONFIG_DEVICES_MAX];
  double fig[3 + BT_CONFIG_DEVICES_MAX];
  replan_probe probe;
  memset(&probe, 0, sizeof probe);
  bt_err derr = {{0}};
  /* Planning trouble keeps the current plan. */
  const char *trouble = "baton train: warning: re-planning after iteration %ld failed: %s\n";
  if (r->rank == r->lead && lf && lb) {
    decision = decide_replan(r, step, remaining, lf, lb, c->replan_probe ? &probe : NULL, &S, cuts,
                             order, fig, &derr);
    if (decision < 0)
      fprintf(stderr, trouble, step + 1, derr.msg), decision = 0;
  }
  free(lf), free(lb);
  MPI_Bcast(&decision, 1, MPI_INT, r->lead, r->comm);
  if (decision == 2) {
    MPI_Bcast(&probe, (int)sizeof probe, MPI_BYTE, r->lead, r->comm);
    if (run_probe(r, step, &probe, err) < 0)
      return -1;
    decision = 0;
    if (r->rank == r->lead) {
      decision = decide_replan(r, step, remaining, NULL, NULL, NULL, &S, cuts, order, fig, &derr);
      if (decision < 0)
        fprintf(stderr, trouble, step + 1, derr.msg), decision = 0;
    }
    MPI_Bcast(&decision, 1, MPI_INT, r->lead, r->comm);
  }
  if (!decision)
    return 0;
  MPI_Bcast(&S, 1, MPI_INT, r->lead, r->comm);
  MPI_Bcast(cuts, S + 1, MPI_INT, r->lead, r->comm);
  MPI_Bcast(order, r->size, MPI_INT, r->lead, r->comm);
  MPI_Bcast(fig, 3 + S, MPI_DOUBLE, r->lead, r->comm);
  int my_position = 0;
  for (int s = 0; s < r->size; s++)
    if (order[s] == r->rank)
      my_position = s;
  bt_err merr = {{0}};
  if (agree(r->comm, stage_fits(r, S, cuts, my_position, &merr)) < 0) {
    if (merr.msg[0])
      fprintf(stderr, "baton train: warning: re-plan after iteration %ld not applied: %s\n",
              step + 1, merr.msg);
    return 0;
  }
  if (migrate(r, S, cuts, order, fig[2], err) < 0)
    return -1;
  r->pending_migration += fig[2]; /* after any probe pause */
  r->plan_iter = fig[0];
  r->plan_true = fig[1];
  for (int s = 0; s < S; s++)
    r->plan_stage[s] = fig[3 + s];
  r->replans++;
  if (r->rank == r->lead && r->log) {
    bt_runlog_plan plan = {.iteration = step + 1,
                           .n_stages = S,
                           .first_layer = r->cuts,
                           .device_rank = r->log_rank,
                           .predicted_stage_time = r->plan_stage,
                           .predicted_iteration_time = r->plan_iter,
                           .partitioner = c->partition};
    if (bt_runlog_append_plan(r->log, &plan, err) < 0 || bt_runlog_flush(r->log, err) < 0)
      return -1;
  }
  return 0;
}

static void die(run *r, const bt_err *err) {
  fprintf(stderr, "baton train: %s\n", err->msg);
  fflush(stderr);
  MPI_Abort(r->comm, 1);
}

/* End-of-run figures: the iteration time the schedule's analytic model
 * predicts from the measured stage and link times, against the measured one
 * (pipeline efficiency), and the runtime's own host CPU time against the
 * compute it drives (framework overhead). */
static void summarize(run *r, long steps, double emu_total, double cpu_compute,
                      double cpu_overhead) {
  int cal[2] = {0, 0}, cal_all[2] = {0, 0};
  if (r->pipe)
    bt_pipeline_calibration_counts(r->pipe, &cal[0], &cal[1]);
  MPI_Reduce(cal, cal_all, 2, MPI_INT, MPI_SUM, r->lead, r->comm);
  if (r->rank == r->lead && strcmp(r->cfg->clock, "none") != 0) {
    if (r->calib_path[0])
      printf("calibration: %d layers from the store %s, %d measured now and added\n", cal_all[0],
             r->calib_path, cal_all[1]);
    else
      printf("calibration: %d layers measured now (fresh; nothing stored)\n", cal_all[1]);
  }
  bt_stage_costs mine = {0};
  if (r->pipe)
    mine = bt_pipeline_stage_costs(r->pipe);
  double v[7] = {mine.fwd,       mine.bwd,    mine.optim,  mine.act_comm,
                 mine.grad_comm, cpu_compute, cpu_overhead};
  double *all = r->rank == r->lead ? malloc(sizeof v * (size_t)r->size) : NULL;
  MPI_Gather(v, 7, MPI_DOUBLE, all, 7, MPI_DOUBLE, r->lead, r->comm);
  if (r->rank != r->lead || steps == 0 || !all) {
    free(all);
    return;
  }
  const int S = r->stages; /* positions from S on are idle */
  double fwd[BT_CONFIG_DEVICES_MAX], bwd[BT_CONFIG_DEVICES_MAX], opt[BT_CONFIG_DEVICES_MAX];
  double act[BT_CONFIG_DEVICES_MAX], grad[BT_CONFIG_DEVICES_MAX];
  double worst = 0; /* overhead CPU seconds of the worst rank, over the run */
  int worst_rank = 0;
  for (int k = 0; k < S; k++) {
    fwd[k] = all[7 * k], bwd[k] = all[7 * k + 1], opt[k] = all[7 * k + 2];
    act[k] = all[7 * k + 3];
    if (k + 1 < S)
      grad[k] = all[7 * (k + 1) + 4]; /* gradient k+1 -> k travels on rank k+1's link */
    if (all[7 * k + 6] > worst)
      worst = all[7 * k + 6], worst_rank = k;
  }
  bt_schedule sched;
  bt_schedule_kind kind;
  bt_err err;
  double bound = NAN;
  if (bt_schedule_parse_kind(r->cfg->schedule, &kind, &err) == 0 &&
      bt_schedule_build(&sched, kind, S, r->cfg->micro_batches, &err) == 0) {
    bt_sched_costs costs = {fwd, bwd, act, grad, opt};
    if (bt_schedule_makespan(&sched, &costs, &bound, &err) < 0)
      bound = NAN;
    bt_schedule_free(&sched);
  }
  const double measured = emu_total / (double)steps;
  /* The stage and link times are the last iteration's: compare with it (plans
   * and throttling may have changed the iteration time along the run). */
  const double last = r->last_iter_time > 0 ? r->last_iter_time : measured;
  printf("pipeline: %.4f s/iteration on the %s clock (mean of %ld); the last iteration took "
         "%.4f s and the %s schedule's analytic model of its stage and link times gives %.4f s "
         "(efficiency %.1f%%)\n",
         measured, r->cfg->clock, steps, last, r->cfg->schedule, bound, 100.0 * bound / last);
  if (isfinite(r->plan_iter) && strcmp(r->cfg->clock, "none") != 0)
    printf("plan: the %s partitioner predicted %.4f s/iteration (%+.1f%% of the measured), %.4f s "
           "with the true device times (%+.1f%%)\n",
           r->cfg->partition, r->plan_iter, 100 * (r->plan_iter / measured - 1), r->plan_true,
           100 * (r->plan_true / measured - 1));
  else if (isfinite(r->plan_iter))
    printf("plan: the %s partitioner predicted %.4f s/iteration (%+.1f%% of the measured)\n",
           r->cfg->partition, r->plan_iter, 100 * (r->plan_iter / measured - 1));
  const double per_iter = worst / (double)steps, compute = all[7 * worst_rank + 5] / steps;
  printf("framework overhead: at most %.2f ms of host CPU per iteration outside compute and "
         "message waits (rank %d) = %.2f%% of the iteration time (%.1f%% of that rank's host "
         "compute)\n",
         per_iter * 1e3, worst_rank, 100.0 * per_iter / measured,
         compute > 0 ? 100.0 * per_iter / compute : 0.0);
  free(all);
}

static int train_loop(run *r, bt_err *err) {
  const bt_config *c = r->cfg;
  const int batch = c->batch_size;
  const long steps_per_epoch = r->n_train / batch;
  long total_steps = c->epochs > 0 ? steps_per_epoch * c->epochs : c->iterations;
  if (c->iterations > 0 && c->iterations < total_steps)
    total_steps = c->iterations;
  const int epochs = (int)((total_steps + steps_per_epoch - 1) / steps_per_epoch);
  /* With device_order: plan a re-plan may move any process to the first or
   * the last stage: then every process keeps the batches at hand. */
  const int feeds = r->rank == 0 || r->rank == r->size - 1 || reordering(c);
  const int live =
      r->rank == r->lead && (strcmp(c->progress, "always") == 0 ||
                             (strcmp(c->progress, "auto") == 0 && isatty(STDOUT_FILENO)));
  const double run_start = bt_cli_now();
  double last_print = 0;
  const size_t in_elems = (size_t)r->model.input.h * r->model.input.w * r->model.input.c;
  if (feeds) {
    r->xb = malloc(sizeof(float) * in_elems * batch);
    r->yb = malloc(sizeof(int32_t) * batch);
    r->order = malloc(sizeof(long) * r->n_train);
    if (!r->xb || !r->yb || !r->order)
      die(r, &(bt_err){"out of memory for a batch"});
  }
  if (r->rank == r->lead)
    printf("baton train: model %s (%zu parameters) in %d stages on %d devices, %s, %d "
           "micro-batches, clock %s, %ld steps\n",
           r->model.name, r->model.n_params, r->stages, r->size, c->schedule, c->micro_batches,
           c->clock, total_steps);
  /* Fault injection for the tests of failure handling: BATON_FAIL_AT=R:I
   * makes rank R fail at iteration I. */
  int fail_rank = -1;
  long fail_step = -1;
  const char *inject = getenv("BATON_FAIL_AT");
  if (inject && sscanf(inject, "%d:%ld", &fail_rank, &fail_step) != 2)
    fail_rank = -1;
  long step = 0;
  double emu_total = 0, cpu_compute = 0, cpu_overhead = 0;
  for (int epoch = 0; epoch < epochs && step < total_steps; epoch++) {
    if (feeds)
      bt_data_permutation(r->n_train, c->seed, epoch, r->order);
    double loss_sum = 0, emu = 0;
    long correct = 0, seen = 0;
    const double t0 = bt_cli_now();
    for (long b = 0; b < steps_per_epoch && step < total_steps; b++, step++) {
      const int first = r->rank == 0, last = r->rank == r->stages - 1;
      if (feeds)
        bt_data_gather(&r->train, r->order + b * batch, batch, r->xb, r->yb);
      if (r->rank == fail_rank && step == fail_step) {
        bt_err_set(err, "rank %d: injected failure (BATON_FAIL_AT) at iteration %ld", r->rank,
                   step);
        die(r, err);
      }
      bt_pipeline_stats st;
      memset(&st, 0, sizeof st);
      if (r->pipe &&
          bt_pipeline_step(r->pipe, first ? r->xb : NULL, last ? r->yb : NULL, step, &st, err) < 0)
        die(r, err);
      /* Idle ranks sleep (not spin in the gathers below) while the stages
       * run: on shared cores a spinning rank would take their CPU. */
      if (r->stages < r->size) /* the same on every rank */
        bt_mpi_quiet_barrier(r->comm);
      st.iter_time += r->pending_migration; /* the iteration that waited for a migration */
      r->pending_migration = 0;
      if (log_iteration(r, step, &st, err) < 0 || maybe_replan(r, step, total_steps, err) < 0)
        die(r, err);
      loss_sum += st.loss * batch;
      cpu_compute += st.cpu_compute;
      cpu_overhead += st.cpu_overhead;
      correct += st.correct;
      seen += batch;
      /* The lead prints and logs the iteration as the slowest rank's clock
       * advance (log_iteration's maximum), not its own stage's. */
      emu += r->rank == r->lead ? r->last_iter_time : st.iter_time;
      const double now = bt_cli_now();
      if (live && (now - last_print > 0.2 || step + 1 == total_steps)) {
        const double eta = (now - run_start) / (step + 1) * (total_steps - step - 1);
        printf("\repoch %d/%d  iter %ld/%ld  loss %.4f  acc %5.1f%%  %.3f s/iter emulated  "
               "host ETA %.0f s ",
               epoch + 1, epochs, step + 1, total_steps, loss_sum / seen, 100.0 * correct / seen,
               emu / (b + 1), eta);
        fflush(stdout);
        last_print = now;
      }
    }
    if (live)
      printf("\n");
    emu_total += emu;
    double test_loss = NAN;
    long test_correct = 0;
    const int eval = epoch + 1 == epochs || step >= total_steps ||
                     (c->eval_every > 0 && (epoch + 1) % c->eval_every == 0);
    const int first = r->rank == 0, last = r->rank == r->stages - 1;
    if (eval && r->pipe &&
        bt_pipeline_evaluate(r->pipe, first ? r->test.x : NULL, last ? r->test.y : NULL, r->n_test,
                             &test_loss, &test_correct, err) < 0)
      die(r, err);
    if (r->rank == r->lead && eval && r->log) {
      bt_eval_record er = {step, epoch + 1, test_loss, (double)test_correct / r->n_test, r->n_test};
      if (bt_runlog_append_eval(r->log, &er, err) < 0 || bt_runlog_flush(r->log, err) < 0)
        die(r, err);
    }
    if (r->rank == r->lead) {
      printf("epoch %d/%d: train loss %.4f acc %.2f%%, emulated %.3f s/iteration (%.0f "
             "samples/s), host %.1f s",
             epoch + 1, epochs, loss_sum / seen, 100.0 * correct / seen, emu / (seen / batch),
             seen / emu, bt_cli_now() - t0);
      if (eval)
        printf(", test loss %.4f acc %.2f%%", test_loss, 100.0 * test_correct / r->n_test);
      printf("\n");
      if (eval && (epoch + 1 == epochs || step >= total_steps))
        printf("test accuracy %.1f%%\n", 100.0 * test_correct / r->n_test);
      fflush(stdout);
    }
  }
  summarize(r, step, emu_total, cpu_compute, cpu_overhead);
  return 0;
}

int bt_cli_train_pipeline(bt_config *cfg) {
  run r;
  memset(&r, 0, sizeof r);
  r.cfg = cfg;
  r.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(r.comm, &r.rank);
  MPI_Comm_size(r.comm, &r.size);
  r.stages = r.size;
  r.pcomm = r.comm;
  r.world_rank = r.rank;
  for (int s = 0; s < r.size && s < BT_CONFIG_DEVICES_MAX; s++)
    r.stage_device[s] = r.log_rank[s] = s;
  bt_err err = {{0}};
  int rc = 1;
  if (setup_data_and_model(&r, &err) < 0 || setup_calibration(&r, &err) < 0 ||
      setup_device(&r, &err) < 0 || setup_plan(&r, &err) < 0 || setup_memory(&r, &err) < 0 ||
      setup_pipeline(&r, &err) < 0 || open_runlog(&r, &err) < 0) {
    /* One line from the lowest rank that failed itself (others only know
     * that somebody failed). */
    int mine = err.msg[0] && !strstr(err.msg, "another rank failed") ? r.rank : r.size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, r.comm);
    if (first == r.rank)
      fprintf(stderr, "baton train: %s\n", err.msg);
    goto out;
  }
  /* What the partitioner measured before training (profiling, probes) is
   * time the devices spent: the run's clock starts after it. */
  if (r.pipe && r.profiling_s > 0 && strcmp(cfg->clock, "none") != 0)
    bt_pipeline_set_clock(r.pipe, r.profiling_s);
  rc = train_loop(&r, &err);
  bt_runlog_close(&r.log, &err);
  if (r.rank == r.lead && cfg->output[0])
    printf("run file: %s\n", cfg->output);
out:
  bt_pipeline_free(&r.pipe);
  bt_runlog_close(&r.log, NULL);
  if (r.planner)
    cli_planner_free(r.planner);
  free(r.planner);
  if (r.own_pcomm)
    MPI_Comm_free(&r.pcomm);
  if (r.own_comm)
    MPI_Comm_free(&r.comm);
  bt_model_free(&r.model);
  bt_dataset_free(&r.train);
  bt_dataset_free(&r.test);
  free(r.xb), free(r.yb), free(r.order), free(r.probes);
  return rc;
}
