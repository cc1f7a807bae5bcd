/* cli/planner: the inputs of plan search for an experiment, and the
 * partitioners; see planner.h. */
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/calib.h"
#include "baton/codec.h"
#include "baton/predictor.h"
#include "baton/profile.h"
#include "cli.h"

const char *const cli_partitioners[] = {"even",      "params", "flops",    "profiled",
                                        "predicted", "oracle", "explicit", NULL};

/* Repeats a profiling partitioner (PipeDream) spends per layer and device:
 * the runtime's own calibration count plus its warm-up. */
enum { PROFILE_PASSES = 21 };

int cli_link_params(const bt_config *c, int n, const bt_device *src_dev, int src, int dst,
                    bt_link_params *out, bt_err *err) {
  out->bandwidth_bps =
      (c->links_bandwidth_mbps > 0 ? c->links_bandwidth_mbps : src_dev->link_bandwidth_mbps) * 1e6;
  out->latency_s =
      (c->links_latency_ms >= 0 ? c->links_latency_ms : src_dev->link_latency_ms) * 1e-3;
  out->jitter_s = c->links_jitter_ms * 1e-3;
  for (int i = 0; i < c->n_link_pairs; i++) {
    int a, b;
    double mbps, ms;
    char tail;
    if (sscanf(c->link_pairs[i], "%d-%d:%lf:%lf%c", &a, &b, &mbps, &ms, &tail) != 4 || a < 0 ||
        b < 0 || a >= n || b >= n || !(mbps > 0) || !(ms >= 0))
      return bt_err_set(err,
                        "links.pairs entry '%s': expected SRC-DST:MBPS:MS with ranks in "
                        "0..%d, bandwidth > 0 and latency >= 0, e.g. 0-1:100:5",
                        c->link_pairs[i], n - 1);
    if (a == src && b == dst) {
      out->bandwidth_bps = mbps * 1e6;
      out->latency_s = ms * 1e-3;
    }
  }
  if (c->links_shared_medium && n > 1)
    out->bandwidth_bps /= 2.0 * (n - 1);
  return 0;
}

int cli_apply_throttle(const bt_config *c, int n, int rank, bt_device *d, bt_err *err) {
  for (int i = 0; i < c->n_throttle; i++) {
    int r;
    long after;
    double factor;
    char tail;
    if (sscanf(c->throttle[i], "%d:%ld:%lf%c", &r, &after, &factor, &tail) != 3 || r < 0 ||
        r >= n || after < 0 || !(factor > 0) || !isfinite(factor))
      return bt_err_set(err,
                        "throttle entry '%s': expected RANK:ITERATION:FACTOR with a rank in "
                        "0..%d, an iteration >= 0 and a factor > 0, e.g. 2:20:2",
                        c->throttle[i], n - 1);
    if (r != rank)
      continue;
    if (d->n_throttle >= BT_DEVICE_THROTTLE_MAX)
      return bt_err_set(err, "throttle entry '%s': device %s already has %d throttle steps",
                        c->throttle[i], d->name, BT_DEVICE_THROTTLE_MAX);
    int k = d->n_throttle;
    while (k > 0 && d->throttle[k - 1].after_iteration > after) {
      d->throttle[k] = d->throttle[k - 1];
      k--;
    }
    d->throttle[k].after_iteration = after;
    for (int cl = 0; cl < BT_OP_CLASS_COUNT; cl++)
      d->throttle[k].factor[cl] = factor;
    d->n_throttle++;
  }
  return 0;
}

void cli_planner_free(cli_planner *pl) {
  free(pl->host_fwd), free(pl->host_bwd), free(pl->true_fwd), free(pl->true_bwd);
  free(pl->pred_fwd), free(pl->pred_bwd), free(pl->param_prefix);
  free(pl->codec_act), free(pl->codec_grad), free(pl->true_codec_act), free(pl->true_codec_grad);
  free(pl->view_fwd), free(pl->view_bwd), free(pl->ratio_fwd), free(pl->ratio_bwd);
  free(pl->act_bytes), free(pl->state_bytes), free(pl->stash_bytes), free(pl->flops);
  free(pl->bandwidth), free(pl->latency), free(pl->sub_bandwidth), free(pl->sub_latency);
  bt_predictor_free(pl->predictor);
  free(pl->probe_log);
  memset(pl, 0, sizeof *pl);
}

/* Host calibration of every layer: the whole model as one stage. */
static int calibrate_model(cli_planner *pl, const char *store, const char *host, bt_err *err) {
  snprintf(pl->store, sizeof pl->store, "%s", store ? store : "");
  snprintf(pl->host_key, sizeof pl->host_key, "%s", host ? host : "");
  double sgemm, mem;
  if (bt_calib_host_rates(store, host, &sgemm, &mem, err) < 0)
    return -1;
  bt_host_rates h;
  memset(&h, 0, sizeof h);
  h.sgemm_gflops = sgemm;
  h.mem_gbs = mem;
  if (bt_host_as_device(&h, &pl->host, err) < 0)
    return -1;
  pl->host_ref_s = BT_CALIB_REFERENCE_FLOPS / (sgemm * 1e9);
  pl->host_sgemm_gflops = sgemm;
  pl->host_rates = h;
  bt_stage st;
  if (bt_stage_init(&st, pl->model, 0, pl->n_layers, pl->micro_batch, 1, pl->cfg->seed, err) < 0)
    return -1;
  const bt_calib_options o = {.repeats = 20,
                              .ref_seconds = pl->host_ref_s,
                              .seed = pl->cfg->seed,
                              .batch_size = pl->cfg->batch_size,
                              .store = store,
                              .host = host};
  bt_calib_result res;
  const double t0 = bt_cli_now();
  int rc =
      bt_calib_stage(&st, pl->model, pl->micro_batch, &o, pl->host_fwd, pl->host_bwd, &res, err);
  bt_stage_free(&st);
  pl->calib_seconds = res.measured ? bt_cli_now() - t0 : 0;
  pl->calib_stored = res.stored;
  pl->calib_measured = res.measured;
  return rc;
}

static int alloc_all(cli_planner *pl) {
  const size_t L = (size_t)pl->n_layers, DL = (size_t)pl->n_devices * L;
  const size_t DD = (size_t)pl->n_devices * (size_t)pl->n_devices;
  pl->host_fwd = calloc(L, sizeof(double));
  pl->host_bwd = calloc(L, sizeof(double));
  pl->true_fwd = calloc(DL, sizeof(double));
  pl->true_bwd = calloc(DL, sizeof(double));
  double **side[] = {&pl->codec_act, &pl->codec_grad, &pl->true_codec_act, &pl->true_codec_grad};
  int ok = 1;
  for (size_t k = 0; k < sizeof side / sizeof side[0]; k++)
    ok = (*side[k] = calloc(DL, sizeof(double))) != NULL && ok;
  pl->param_prefix = calloc(L + 1, sizeof(double));
  pl->act_bytes = calloc(L, sizeof(double));
  pl->state_bytes = calloc(L, sizeof(double));
  pl->stash_bytes = calloc(L, sizeof(double));
  pl->flops = calloc(L, sizeof(double));
  pl->bandwidth = calloc(DD, sizeof(double));
  pl->latency = calloc(DD, sizeof(double));
  pl->sub_bandwidth = calloc(DD, sizeof(double));
  pl->sub_latency = calloc(DD, sizeof(double));
  return ok && pl->param_prefix && pl->host_fwd && pl->host_bwd && pl->true_fwd && pl->true_bwd &&
                 pl->act_bytes && pl->state_bytes && pl->stash_bytes && pl->flops &&
                 pl->bandwidth && pl->latency && pl->sub_bandwidth && pl->sub_latency
             ? 0
             : -1;
}

/* Memory, FLOPs and activation figures of every layer. */
static void layer_figures(cli_planner *pl) {
  const int mb = pl->micro_batch;
  for (int l = 0; l < pl->n_layers; l++) {
    const bt_layer *y = &pl->model->layers[l];
    const double out = (double)bt_shape_elems(y->out) * mb;
    pl->act_bytes[l] = 4.0 * out;
    /* weights, gradients, momentum; batch-norm statistics */
    pl->state_bytes[l] = 4.0 * (3.0 * (double)y->n_params + (double)y->n_state);
    pl->stash_bytes[l] = 4.0 * (out + (double)bt_layer_aux_floats(y, mb));
    pl->flops[l] = (bt_layer_flops_fwd(y) + bt_layer_flops_bwd(y)) * mb;
    pl->param_prefix[l + 1] = pl->param_prefix[l] + (double)y->n_params;
  }
}

/* Rows of a [D*L] array (NULL: skipped) permuted: new row s = old row order[s]. */
static int permute_rows(double *a, const int *order, int D, int L) {
  if (!a)
    return 0;
  double *tmp = malloc((size_t)D * L * sizeof(double));
  if (!tmp)
    return -1;
  for (int s = 0; s < D; s++)
    memcpy(tmp + (size_t)s * L, a + (size_t)order[s] * L, (size_t)L * sizeof(double));
  memcpy(a, tmp, (size_t)D * L * sizeof(double));
  free(tmp);
  return 0;
}

int cli_planner_permute(cli_planner *pl, const int *order, bt_err *err) {
  const int D = pl->n_devices, L = pl->n_layers;
  int seen[BT_PLAN_MAX_DEVICES] = {0};
  for (int s = 0; s < D; s++) {
    if (order[s] < 0 || order[s] >= D || seen[order[s]]++)
      return bt_err_set(err, "device order: entry %d (%d) is not a permutation of 0..%d", s,
                        order[s], D - 1);
  }
  double *rows[] = {pl->true_fwd,  pl->true_bwd,   pl->pred_fwd,       pl->pred_bwd,
                    pl->view_fwd,  pl->view_bwd,   pl->ratio_fwd,      pl->ratio_bwd,
                    pl->codec_act, pl->codec_grad, pl->true_codec_act, pl->true_codec_grad};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
    if (permute_rows(rows[k], order, D, L) < 0)
      return bt_err_set(err, "out of memory permuting the planner");
  bt_device dev[BT_PLAN_MAX_DEVICES];
  double cap[BT_PLAN_MAX_DEVICES], peak[BT_PLAN_MAX_DEVICES];
  char head[BT_PLAN_MAX_DEVICES][96];
  double *bw = malloc((size_t)D * D * sizeof(double)),
         *lat = malloc((size_t)D * D * sizeof(double));
  if (!bw || !lat) {
    free(bw), free(lat);
    return bt_err_set(err, "out of memory permuting the planner");
  }
  for (int s = 0; s < D; s++) {
    dev[s] = pl->dev[order[s]];
    cap[s] = pl->mem_cap[order[s]];
    peak[s] = pl->peak[order[s]];
    memcpy(head[s], pl->head[order[s]], sizeof head[s]);
    for (int t = 0; t < D; t++) {
      bw[s * D + t] = pl->bandwidth[order[s] * D + order[t]];
      lat[s * D + t] = pl->latency[order[s] * D + order[t]];
    }
  }
  memcpy(pl->dev, dev, sizeof(bt_device) * (size_t)D);
  memcpy(pl->mem_cap, cap, sizeof(double) * (size_t)D);
  memcpy(pl->peak, peak, sizeof(double) * (size_t)D);
  memcpy(pl->head, head, sizeof head[0] * (size_t)D);
  memcpy(pl->bandwidth, bw, (size_t)D * D * sizeof(double));
  memcpy(pl->latency, lat, (size_t)D * D * sizeof(double));
  free(bw), free(lat);
  return 0;
}

void cli_planner_set_truth(cli_planner *pl, const double *measured) {
  const int D = pl->n_devices, L = pl->n_layers;
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      pl->true_fwd[d * L + l] = measured[(size_t)d * 2 * L + l];
      pl->true_bwd[d * L + l] = measured[(size_t)d * 2 * L + L + l];
    }
}

/* The optimizer step of stage [first, end) on device d, as the runtime
 * charges it (train_pipeline.c, device_time): one memory-bound sweep over
 * the stage's p, g and momentum. At the truth's iteration or at 0. */
static double optim_stage(const void *ctx, int d, int first, int end) {
  const struct cli_optim_ctx *o = ctx;
  const cli_planner *pl = o->pl;
  const double p = pl->param_prefix[end] - pl->param_prefix[first];
  const bt_device_op op = {BT_OP_ELEMENTWISE, 3.0 * p, 20.0 * p};
  return p > 0 ? bt_device_op_analytic(&pl->dev[d], &op, o->truth ? pl->truth_iteration : 0) : 0;
}

/* One encode or decode of every cut's frame on every device at `iteration`,
 * as the runtime charges it (train_pipeline.c, codec_time): a sweep over the
 * frame and the float tensor. */
static void codec_costs(const cli_planner *pl, long iteration, double *act, double *grad) {
  const int D = pl->n_devices, L = pl->n_layers, mb = pl->micro_batch;
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      const bt_layer *y = &pl->model->layers[l];
      const size_t elems = bt_shape_elems(y->out) * (size_t)mb;
      const double floats = 4.0 * (double)elems;
      const bt_device_op a = {BT_OP_ELEMENTWISE, 0,
                              floats + (double)bt_codec_max_frame_bytes(&pl->act_codec, elems)};
      const bt_device_op g = {BT_OP_ELEMENTWISE, 0,
                              floats + (double)bt_codec_max_frame_bytes(&pl->grad_codec, elems)};
      act[d * L + l] = bt_device_op_analytic(&pl->dev[d], &a, iteration);
      grad[d * L + l] = bt_device_op_analytic(&pl->dev[d], &g, iteration);
    }
}

void cli_planner_truth_at(cli_planner *pl, long iteration) {
  const int D = pl->n_devices, L = pl->n_layers, mb = pl->micro_batch;
  pl->truth_iteration = iteration;
  codec_costs(pl, iteration, pl->true_codec_act, pl->true_codec_grad);
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      const bt_layer *y = &pl->model->layers[l];
      pl->true_fwd[d * L + l] = bt_device_layer_mapped(&pl->dev[d], &pl->host, y, mb, BT_PASS_FWD,
                                                       pl->host_fwd[l], iteration)
                                    .total;
      pl->true_bwd[d * L + l] =
          bt_device_layer_mapped(&pl->dev[d], &pl->host, y, mb, bt_pass_backward_of(y, l),
                                 pl->host_bwd[l], iteration)
              .total;
    }
}

int cli_planner_init(cli_planner *pl, const bt_config *c, const bt_model *m, const char *store,
                     const char *host, bt_err *err) {
  memset(pl, 0, sizeof *pl);
  pl->cfg = c;
  pl->model = m;
  pl->n_devices = c->n_devices;
  pl->n_layers = m->n_layers;
  pl->micro_batch = c->batch_size / c->micro_batches;
  const int D = pl->n_devices, L = pl->n_layers;
  if (D < 1)
    return bt_err_set(err,
                      "the experiment names no devices; set devices: [rpi4, jetson-nano, ...]");
  if (D > BT_PLAN_MAX_DEVICES)
    return bt_err_set(err, "planning handles at most %d devices, the experiment names %d",
                      BT_PLAN_MAX_DEVICES, D);
  if (alloc_all(pl) < 0)
    return bt_err_set(err, "out of memory for the planner (%d layers, %d devices)", L, D);
  char data[4096];
  bt_cli_data_dir(data, sizeof data);
  for (int d = 0; d < D; d++)
    if (bt_device_find(c->devices[d], data, &pl->dev[d], err) < 0 ||
        cli_apply_throttle(c, D, d, &pl->dev[d], err) < 0)
      return -1;
  if (calibrate_model(pl, store, host, err) < 0)
    return -1;
  layer_figures(pl);
  for (int d = 0; d < D; d++) {
    pl->mem_cap[d] = pl->dev[d].capacity_mib * 1048576.0;
    pl->peak[d] = pl->dev[d].rate[BT_OP_CONV] * 1e9;
    for (int e = 0; e < D; e++) {
      bt_link_params lp;
      if (cli_link_params(c, D, &pl->dev[d], d, e, &lp, err) < 0)
        return -1;
      pl->bandwidth[d * D + e] = lp.bandwidth_bps / 8.0;
      pl->latency[d * D + e] = d == e ? 0 : lp.latency_s;
    }
  }
  if (bt_codec_parse(c->codec_activations, &pl->act_codec, err) < 0 ||
      bt_codec_parse(c->codec_gradients, &pl->grad_codec, err) < 0)
    return -1;
  /* payload only: frames add a few bytes */
  pl->codec_ratio = (pl->act_codec.bits + pl->grad_codec.bits) / 64.0;
  codec_costs(pl, 0, pl->codec_act, pl->codec_grad);
  pl->optim_view = (struct cli_optim_ctx){pl, 0};
  pl->optim_true = (struct cli_optim_ctx){pl, 1};
  cli_planner_truth_at(pl, 0);
  return 0;
}

/* ---- the predictor's view ---- */

/* The predictor's row of device d (its head). */
static void predict_row(const cli_planner *pl, int d, double *fwd, double *bwd) {
  const int dev = bt_predictor_device(pl->predictor, pl->head[d]);
  for (int l = 0; l < pl->n_layers; l++) {
    const bt_layer *y = &pl->model->layers[l];
    fwd[l] = bt_predictor_predict_dev(pl->predictor, dev, y, pl->micro_batch, BT_PASS_FWD);
    bwd[l] =
        bt_predictor_predict_dev(pl->predictor, dev, y, pl->micro_batch, bt_pass_backward_of(y, l));
  }
}

/* Geometric mean of the finite ratios[d * L + l] over the devices d in
 * [d0, d1) and the layers l that are `layer` (>= 0) or of `kind` (>= 0);
 * NAN when there are none. */
static double mean_ratio(const cli_planner *pl, const double *ratio, int d0, int d1, int layer,
                         int kind) {
  const int L = pl->n_layers;
  double sum = 0;
  int n = 0;
  for (int d = d0; d < d1; d++)
    for (int l = layer >= 0 ? layer : 0; l < (layer >= 0 ? layer + 1 : L); l++)
      if (isfinite(ratio[d * L + l]) && (kind < 0 || (int)pl->model->layers[l].kind == kind))
        sum += log(ratio[d * L + l]), n++;
  return n ? exp(sum / n) : NAN;
}

/* One pass of the planning view: the model times a measured / model ratio:
 * the layer's own on this device when it ran there; else the layer's on the
 * devices that ran it (the model's error is mostly in its host-time part,
 * which all devices share); else that of the device's, then every device's,
 * layers of the same kind; else 1. */
static void refresh_view(const cli_planner *pl, const double *pred, const double *ratio,
                         double *view) {
  const int D = pl->n_devices, L = pl->n_layers;
  for (int d = 0; d < D; d++)
    for (int l = 0; l < L; l++) {
      const int kind = (int)pl->model->layers[l].kind;
      double r = ratio[d * L + l];
      if (!isfinite(r))
        r = mean_ratio(pl, ratio, 0, D, l, -1);
      if (!isfinite(r))
        r = mean_ratio(pl, ratio, d, d + 1, -1, kind);
      if (!isfinite(r))
        r = mean_ratio(pl, ratio, 0, D, -1, kind);
      view[d * L + l] = pred[d * L + l] * (isfinite(r) ? r : 1);
    }
}

int cli_planner_learn(cli_planner *pl, int d, int first, int count, const double *fwd,
                      const double *bwd, bt_err *err) {
  if (!pl->predictor)
    return bt_err_set(err, "the planner has no predictor to update");
  bt_pred_sample *s = calloc(2 * (size_t)count + 1, sizeof *s);
  if (!s)
    return bt_err_set(err, "out of memory for predictor samples");
  int n = 0;
  for (int k = 0; k < count; k++) {
    const bt_layer *y = &pl->model->layers[first + k];
    if (fwd[k] > 0 && isfinite(fwd[k]))
      s[n++] = (bt_pred_sample){y, pl->micro_batch, BT_PASS_FWD, fwd[k]};
    if (bwd[k] > 0 && isfinite(bwd[k]))
      s[n++] = (bt_pred_sample){y, pl->micro_batch, bt_pass_backward_of(y, first + k), bwd[k]};
  }
  int rc = n ? bt_predictor_update(pl->predictor, pl->head[d], s, n, err) : 0;
  free(s);
  if (rc < 0)
    return -1;
  const size_t row = (size_t)d * pl->n_layers;
  predict_row(pl, d, pl->pred_fwd + row, pl->pred_bwd + row);
  for (int k = 0; k < count; k++) {
    if (fwd[k] > 0 && isfinite(fwd[k]) && pl->pred_fwd[row + first + k] > 0)
      pl->ratio_fwd[row + first + k] = fwd[k] / pl->pred_fwd[row + first + k];
    if (bwd[k] > 0 && isfinite(bwd[k]) && pl->pred_bwd[row + first + k] > 0)
      pl->ratio_bwd[row + first + k] = bwd[k] / pl->pred_bwd[row + first + k];
  }
  refresh_view(pl, pl->pred_fwd, pl->ratio_fwd, pl->view_fwd);
  refresh_view(pl, pl->pred_bwd, pl->ratio_bwd, pl->view_bwd);
  return 0;
}

/* A probe's key in the calibration store. */
static void probe_key(const bt_profile_entry *e, char *key, size_t n) {
  memcpy(key, "probe ", 6);
  bt_calib_layer_key(&e->layer, e->batch, 0, key + 6, n - 6);
}

/* The probe set's host times: from the calibration store when it holds them
 * (so that a run's plan does not depend on the host's mood), else measured
 * (minimum of 5) and added to it. */
static int probe_host_times(const char *path, const char *host_key, const bt_device *host,
                            bt_profile *probe, bt_err *err) {
  bt_calib_store *store = NULL;
  if (path && path[0] && bt_calib_load(path, host_key, &store, err) < 0)
    return -1;
  char key[1200];
  int found = 0;
  for (int i = 0; i < probe->n; i++) {
    bt_profile_entry *e = &probe->e[i];
    probe_key(e, key, sizeof key);
    found += bt_calib_lookup(store, key, &e->host_fwd, &e->host_bwd);
  }
  bt_calib_free(store);
  if (found == probe->n)
    return 0;
  if (bt_profile_measure(probe, NULL, host, 5, 0, NULL, NULL, err) < 0)
    return -1;
  for (int i = 0; path && path[0] && i < probe->n; i++) {
    const bt_profile_entry *e = &probe->e[i];
    probe_key(e, key, sizeof key);
    if (bt_calib_append(path, host_key, key, e->host_fwd, e->host_bwd, err) < 0)
      return -1;
  }
  return 0;
}

/* Probe i's device seconds on dev (NULL: the host time, raw). */
static void probe_device_times(const bt_profile *probe, const bt_device *host, const bt_device *dev,
                               double *fwd, double *bwd) {
  for (int i = 0; i < probe->n; i++) {
    const bt_profile_entry *e = &probe->e[i];
    fwd[i] =
        dev ? bt_device_layer_mapped(dev, host, &e->layer, e->batch, BT_PASS_FWD, e->host_fwd, 0)
                  .total
            : e->host_fwd;
    bwd[i] =
        dev ? bt_device_layer_mapped(dev, host, &e->layer, e->batch, BT_PASS_BWD, e->host_bwd, 0)
                  .total
            : e->host_bwd;
  }
}

int cli_probe_times(const char *store, const char *host_key, const bt_device *host,
                    const bt_device *dev, double *fwd, double *bwd, double *host_fwd,
                    double *host_bwd, int *n, bt_err *err) {
  bt_profile probe;
  memset(&probe, 0, sizeof probe);
  int rc = bt_profile_probe_set(&probe, err);
  if (rc == 0 && probe.n > CLI_PROBES_MAX)
    rc = bt_err_set(err, "the probe set has %d layers, more than %d", probe.n, CLI_PROBES_MAX);
  if (rc == 0)
    rc = probe_host_times(store, host_key, host, &probe, err);
  if (rc == 0) {
    probe_device_times(&probe, host, dev, fwd, bwd);
    for (int i = 0; i < probe.n; i++) /* raw: the device's own times, no host time */
      host_fwd[i] = dev ? probe.e[i].host_fwd : 0, host_bwd[i] = dev ? probe.e[i].host_bwd : 0;
    *n = probe.n;
  }
  bt_profile_free(&probe);
  return rc;
}

/* Device d's probe samples: measured by its rank (probe_given) or the probe
 * set's host times mapped through d's model, as the emulated device would
 * time them; host[2 * i + pass] gets the host time each maps (0 under
 * clock none: cli_probe_times), for the run file. The predictor learns from the device times
 * alone: given the host times too, a head stops absorbing how far this
 * session's host runs from the profiling sets' (measured: `experiments/
 * partition/run.sh in-order` fell from 36 to 31 of 36 cases within 5%). */
static int probe_samples(cli_planner *pl, const bt_profile *probe, int d, bt_pred_sample *s,
                         double *host) {
  double f[CLI_PROBES_MAX], b[CLI_PROBES_MAX], hf[CLI_PROBES_MAX], hb[CLI_PROBES_MAX];
  const size_t n = (size_t)probe->n, bytes = sizeof(double) * n;
  if (pl->probe_given && pl->probe_given_n == probe->n) {
    const double *mine = pl->probe_given + (size_t)d * 4 * n;
    memcpy(f, mine, bytes), memcpy(b, mine + n, bytes);
    memcpy(hf, mine + 2 * n, bytes), memcpy(hb, mine + 3 * n, bytes);
  } else {
    probe_device_times(probe, &pl->host, &pl->dev[d], f, b);
    for (size_t i = 0; i < n; i++)
      hf[i] = probe->e[i].host_fwd, hb[i] = probe->e[i].host_bwd;
  }
  double device_s = 0;
  for (int i = 0; i < probe->n; i++) {
    const bt_profile_entry *e = &probe->e[i];
    s[2 * i] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_FWD, f[i]};
    s[2 * i + 1] = (bt_pred_sample){&e->layer, e->batch, BT_PASS_BWD, b[i]};
    host[2 * i] = hf[i], host[2 * i + 1] = hb[i];
    device_s += 6 * (f[i] + b[i]); /* 5 repeats + warm-up */
  }
  /* The devices probe at once: the slowest one's time is what the run waits
   * for (as profiling_seconds for the profiled partitioner). */
  pl->probe_device_s = fmax(pl->probe_device_s, device_s);
  return 2 * probe->n;
}

/* Whether the sets were timed on this host: by their host key when they
 * carry one, and by the sgemm rate (sets made before 4 December have no
 * key; a VM may name several CPU generations alike, which one key then
 * covers). */
static void note_other_host(cli_planner *pl, const bt_profile *sets, int n) {
  pl->host_note[0] = 0;
  double lo = INFINITY, hi = 0; /* sgemm rates of the single-thread sets */
  for (int k = 0; k < n; k++) {
    if (sets[k].host_key[0] && strcmp(sets[k].host_key, pl->host_key) != 0) {
      snprintf(pl->host_note, sizeof pl->host_note,
               "the profiling sets were timed on another host or build ('%.600s'; this host "
               "'%.600s')",
               sets[k].host_key, pl->host_key);
      return;
    }
    if (sets[k].threads <= 1)
      lo = fmin(lo, sets[k].host.sgemm_gflops), hi = fmax(hi, sets[k].host.sgemm_gflops);
  }
  const double here = pl->host_sgemm_gflops;
  if (hi > 0 && (here > 1.3 * hi || here < lo / 1.3))
    snprintf(pl->host_note, sizeof pl->host_note,
             "the profiling sets were timed at sgemm %.0f-%.0f GFLOP/s, this host runs %.0f: "
             "probably another CPU",
             lo, hi, here);
}

int cli_planner_predict(cli_planner *pl, bt_err *err) {
  if (pl->pred_fwd)
    return 0;
  const int D = pl->n_devices, L = pl->n_layers;
  const double t0 = bt_cli_now();
  char *dir = pl->sets_dir;
  bt_cli_predictor_dir(pl->host_key, dir, sizeof pl->sets_dir, &pl->per_host_sets);
  /* The device sets and the base host fit heads; host corpora add rows to
   * the host-time model; real host variants are left out. */
  bt_profile_dir sd;
  int rc = bt_profile_dir_read(dir, &sd, err);
  bt_predictor *pr = NULL;
  bt_predictor_free(pl->predictor);
  pl->predictor = NULL;
  bt_predictor_options opt;
  bt_predictor_default_options(&opt);
  if (rc == 0) {
    bt_profile *sets = calloc((size_t)sd.n, sizeof *sets);
    bt_profile *corpora = calloc((size_t)sd.n, sizeof *corpora);
    const char **names = calloc((size_t)sd.n, sizeof *names);
    if (!sets || !corpora || !names)
      rc = bt_err_set(err, "out of memory loading profiling sets");
    if (rc == 0) {
      const int n = bt_profile_dir_select(&sd, BT_PROFILE_DEVICE, sets, names, sd.n);
      const int nc = bt_profile_dir_select(&sd, BT_PROFILE_CORPUS, corpora, NULL, sd.n);
      note_other_host(pl, sets, n);
      rc = bt_cli_fit_cached(dir, &sd, sets, names, n, corpora, nc, &opt, &pr, &pl->fit_info, err);
      pl->fit_seconds = bt_cli_now() - t0;
    }
    free(sets), free(corpora), free(names);
    bt_profile_dir_free(&sd);
  }
  double *pf = calloc((size_t)D * L, sizeof(double)), *pb = calloc((size_t)D * L, sizeof(double));
  if (rc == 0 && (!pf || !pb))
    rc = bt_err_set(err, "out of memory for predictions");
  /* Probes: the probe set timed once on the host, then per device through
   * its model. A device the sets know gets one online round from them (the
   * sets were timed in other sessions of the host); an unknown one is
   * adapted from them alone. */
  bt_profile probe;
  memset(&probe, 0, sizeof probe);
  bt_pred_sample *samples = NULL;
  if (rc == 0 && (rc = bt_profile_probe_set(&probe, err)) == 0 && probe.n > CLI_PROBES_MAX)
    rc = bt_err_set(err, "the probe set has %d layers, more than %d", probe.n, CLI_PROBES_MAX);
  if (rc == 0 && !pl->probe_given)
    rc = probe_host_times(pl->store, pl->host_key, &pl->host, &probe, err);
  if (rc == 0 && !(samples = calloc(2 * (size_t)probe.n + 1, sizeof *samples)))
    rc = bt_err_set(err, "out of memory for probe samples");
  free(pl->probe_log);
  pl->n_probe_log = 0;
  if (rc == 0 &&
      !(pl->probe_log = calloc(2 * (size_t)probe.n * (size_t)D + 1, sizeof *pl->probe_log)))
    rc = bt_err_set(err, "out of memory for probe records");
  for (int d = 0; rc == 0 && d < D; d++) {
    /* One head per rank, so that each rank's throttling is followed apart. */
    snprintf(pl->head[d], sizeof pl->head[d], "rank%d:%s", d, pl->dev[d].name);
    double host[2 * CLI_PROBES_MAX];
    const int ns = probe_samples(pl, &probe, d, samples, host);
    const int known = bt_predictor_device(pr, pl->dev[d].name) >= 0;
    /* A device the sets know starts from their head, another one from the
     * population prior. */
    const int h = known ? bt_predictor_clone_device(pr, pl->dev[d].name, pl->head[d], err)
                        : bt_predictor_adapt(pr, pl->head[d], NULL, 0, err);
    /* A clone keeps the rates of the set its head was fitted on (the
     * store's instead, tried: mobilenetv2 mix 3 +0.0% -> +6.7% of the
     * oracle, docs/predictor.md); a new head learns from probes of this
     * session, which map host times with the calibration store's rates. */
    if (h < 0 || (pl->raw_heads && bt_predictor_set_raw(pr, h, 1) < 0) ||
        (!known && bt_predictor_set_host_rates(pr, h, &pl->host_rates, err) < 0)) {
      rc = -1;
      break;
    }
    for (int j = 0; j < ns; j++) {
      const bt_pred_sample *q = &samples[j];
      bt_probe_record *rec = &pl->probe_log[pl->n_probe_log++];
      *rec = (bt_probe_record){-1,
                               d,
                               -1,
                               q->batch,
                               q->pass == BT_PASS_FWD ? 0 : 1,
                               bt_predictor_predict_dev(pr, h, q->layer, q->batch, q->pass),
                               q->seconds,
                               host[j],
                               ""};
      snprintf(rec->spec, sizeof rec->spec, "%s", probe.e[j / 2].spec);
    }
    if (known)
      rc = bt_predictor_update(pr, pl->head[d], samples, ns, err) < 0 ? -1 : 0;
    else if (bt_predictor_adapt(pr, pl->head[d], samples, ns, err) < 0)
      rc = -1;
    else
      pl->n_adapted++;
  }
  free(samples);
  bt_profile_free(&probe);
  pl->predictor = pr;
  /* The probes were timed back to back and learned so; every prediction
   * from here on, and every runtime measurement the heads learn from, is of
   * a layer inside its model. BATON_PREDICTOR_CONTEXT=0: the ablation. */
  const char *ctx = getenv("BATON_PREDICTOR_CONTEXT");
  pl->in_model = rc == 0 && bt_predictor_set_in_model(pr, !(ctx && strcmp(ctx, "0") == 0));
  for (int d = 0; rc == 0 && d < D; d++)
    predict_row(pl, d, pf + (size_t)d * L, pb + (size_t)d * L);
  if (rc == 0 && getenv("BATON_DEBUG_PLAN"))
    for (int d = 0; d < D; d++)
      for (int l = 0; l < L; l++)
        fprintf(stderr, "%s %2d %-10s pred %8.3f %8.3f true %8.3f %8.3f host %8.3f %8.3f ms\n",
                pl->dev[d].name, l + 1, pl->model->layers[l].name, 1e3 * pf[d * L + l],
                1e3 * pb[d * L + l], 1e3 * pl->true_fwd[d * L + l], 1e3 * pl->true_bwd[d * L + l],
                1e3 * pl->host_fwd[l], 1e3 * pl->host_bwd[l]);
  if (rc < 0) {
    free(pf), free(pb);
    return -1;
  }
  pl->view_fwd = malloc((size_t)D * L * sizeof(double));
  pl->view_bwd = malloc((size_t)D * L * sizeof(double));
  pl->ratio_fwd = malloc((size_t)D * L * sizeof(double));
  pl->ratio_bwd = malloc((size_t)D * L * sizeof(double));
  for (size_t i = 0; pl->ratio_fwd && pl->ratio_bwd && i < (size_t)D * L; i++)
    pl->ratio_fwd[i] = pl->ratio_bwd[i] = NAN; /* never measured */
  if (!pl->view_fwd || !pl->view_bwd || !pl->ratio_fwd || !pl->ratio_bwd) {
    free(pf), free(pb);
    return bt_err_set(err, "out of memory for predictions");
  }
  memcpy(pl->view_fwd, pf, (size_t)D * L * sizeof(double));
  memcpy(pl->view_bwd, pb, (size_t)D * L * sizeof(double));
  pl->pred_fwd = pf, pl->pred_bwd = pb;
  pl->predict_seconds = bt_cli_now() - t0;
  return 0;
}

/* ---- partitioners ---- */

static const char *const bounds_names[] = {"auto", "scalar", "pareto", "stair"};
static const bt_plan_bounds bounds_kinds[] = {BT_PLAN_BOUNDS_AUTO, BT_PLAN_BOUNDS_SCALAR,
                                              BT_PLAN_BOUNDS_PARETO, BT_PLAN_BOUNDS_STAIR};

int cli_plan_bounds(const char *name, bt_plan_bounds *out) {
  for (size_t k = 0; k < sizeof bounds_names / sizeof bounds_names[0]; k++)
    if (strcmp(name, bounds_names[k]) == 0) {
      *out = bounds_kinds[k];
      return 0;
    }
  return -1;
}

const char *cli_plan_bounds_name(bt_plan_bounds b) {
  for (size_t k = 0; k < sizeof bounds_kinds / sizeof bounds_kinds[0]; k++)
    if (bounds_kinds[k] == b)
      return bounds_names[k];
  return "?";
}

/* plan.bounds as the search's enum (the config accepts only those names). */
static bt_plan_bounds plan_bounds_of(const char *name) {
  bt_plan_bounds b = BT_PLAN_BOUNDS_AUTO;
  cli_plan_bounds(name, &b);
  return b;
}

/* The planning problem over the given compute times; `truth` picks the side
 * costs at the truth's iteration, else the profiles' at iteration 0. With
 * devices = n > 0 only devices 0..n-1 take part (the device-major tables'
 * first rows; the pair tables are packed into n x n); 0 = all. */
static bt_plan_problem problem(cli_planner *pl, const double *fwd, const double *bwd, int truth,
                               bt_plan_device_use use, int devices, bt_err *err, int *ok) {
  const int D = pl->n_devices;
  const int n = devices > 0 && devices < D ? devices : D;
  const double *bw = pl->bandwidth, *lat = pl->latency;
  if (n < D) {
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        pl->sub_bandwidth[a * n + b] = pl->bandwidth[a * D + b];
        pl->sub_latency[a * n + b] = pl->latency[a * D + b];
      }
    bw = pl->sub_bandwidth, lat = pl->sub_latency;
  }
  bt_plan_problem p = {.n_layers = pl->n_layers,
                       .n_devices = n,
                       .fwd = fwd,
                       .bwd = bwd,
                       .optim_stage = optim_stage,
                       .optim_ctx = truth ? &pl->optim_true : &pl->optim_view,
                       .codec_act = truth ? pl->true_codec_act : pl->codec_act,
                       .codec_grad = truth ? pl->true_codec_grad : pl->codec_grad,
                       .act_bytes = pl->act_bytes,
                       .state_bytes = pl->state_bytes,
                       .stash_bytes = pl->stash_bytes,
                       .mem_cap = pl->mem_cap,
                       .bandwidth = bw,
                       .latency = lat,
                       .codec_ratio = pl->codec_ratio,
                       .micro = pl->cfg->micro_batches,
                       .mem_scale = pl->cfg->memory_scale,
                       .device_use = use,
                       .bounds = plan_bounds_of(pl->cfg->plan_bounds),
                       .max_nodes = (long)pl->cfg->plan_max_nodes,
                       .required_devices = pl->required_devices & ((1u << n) - 1),
                       .layer_flops = pl->flops,
                       .device_peak = pl->peak};
  *ok = bt_schedule_parse_kind(pl->cfg->schedule, &p.kind, err) == 0;
  return p;
}

int cli_config_cuts(const bt_config *c, int n_layers, int stages, int *cuts, bt_err *err) {
  if (stages < 1 || stages > n_layers)
    return bt_err_set(err, "cannot cut %d layers into %d stages; use at most %d devices", n_layers,
                      stages, n_layers);
  if (strcmp(c->partition, "even") == 0) {
    for (int s = 0; s <= stages; s++)
      cuts[s] = (int)((long)n_layers * s / stages);
    return 0;
  }
  if (c->n_cuts != stages - 1)
    return bt_err_set(err,
                      "partition explicit needs %d cuts (first layer of stages 2..%d), got "
                      "%d; set cuts: [...]",
                      stages - 1, stages, c->n_cuts);
  cuts[0] = 0;
  cuts[stages] = n_layers;
  for (int s = 1; s < stages; s++) {
    char *end;
    long v = strtol(c->cuts[s - 1], &end, 10);
    if (*end || v < 2 || v > n_layers)
      return bt_err_set(err,
                        "cut %d ('%s') must be a layer number in 2..%d (see baton models "
                        "--layers)",
                        s, c->cuts[s - 1], n_layers);
    cuts[s] = (int)v - 1;
    if (cuts[s] <= cuts[s - 1])
      return bt_err_set(err,
                        "cut %d (%ld) must be greater than the one before it; cuts are "
                        "increasing first layers of stages 2..%d",
                        s, v, stages);
  }
  return 0;
}

/* Plans are evaluated over every device (a stage may sit on any). */
static bt_plan_problem eval_problem(cli_planner *pl, const double *fwd, const double *bwd,
                                    int truth, bt_err *err, int *ok) {
  bt_plan_problem p = problem(pl, fwd, bwd, truth, BT_PLAN_ANY_DEVICES, 0, err, ok);
  p.required_devices = 0;
  return p;
}

static int evaluate_stages(const bt_plan_problem *p, int n_stages, const int *device,
                           const int *cuts, bt_plan *out, bt_err *err) {
  if (n_stages < 1 || n_stages > p->n_devices)
    return bt_err_set(err, "a plan of %d stages on %d devices", n_stages, p->n_devices);
  memset(out, 0, sizeof *out);
  out->n_stages = n_stages;
  for (int s = 0; s < n_stages; s++)
    out->device[s] = device ? device[s] : s;
  memcpy(out->first, cuts, sizeof(int) * (size_t)(n_stages + 1));
  return bt_plan_evaluate(p, out, err);
}

int cli_planner_evaluate_order(cli_planner *pl, int predicted, int n_stages, const int *device,
                               const int *cuts, bt_plan *out, bt_err *err) {
  if (predicted && cli_planner_predict(pl, err) < 0)
    return -1;
  int ok;
  bt_plan_problem p = eval_problem(pl, predicted ? pl->view_fwd : pl->true_fwd,
                                   predicted ? pl->view_bwd : pl->true_bwd, !predicted, err, &ok);
  return ok ? evaluate_stages(&p, n_stages, device, cuts, out, err) : -1;
}

int cli_planner_evaluate_cautious(cli_planner *pl, int n_stages, const int *device, const int *cuts,
                                  double margin, bt_plan *out, bt_err *err) {
  if (cli_planner_predict(pl, err) < 0)
    return -1;
  const size_t n = (size_t)pl->n_devices * pl->n_layers;
  double *f = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
  if (!f || !b) {
    free(f), free(b);
    return bt_err_set(err, "out of memory for the cautious view");
  }
  for (size_t i = 0; i < n; i++) {
    f[i] = pl->view_fwd[i] * (isfinite(pl->ratio_fwd[i]) ? 1 : 1 + margin);
    b[i] = pl->view_bwd[i] * (isfinite(pl->ratio_bwd[i]) ? 1 : 1 + margin);
  }
  int ok;
  bt_plan_problem p = eval_problem(pl, f, b, 0, err, &ok);
  int rc = ok ? evaluate_stages(&p, n_stages, device, cuts, out, err) : -1;
  free(f), free(b);
  return rc;
}

int cli_planner_evaluate(cli_planner *pl, int predicted, int n_stages, const int *cuts,
                         bt_plan *out, bt_err *err) {
  return cli_planner_evaluate_order(pl, predicted, n_stages, NULL, cuts, out, err);
}

/* The slowest device's profiling time when every layer is timed on every
 * device (devices profile in parallel). */
static double profiling_seconds(const cli_planner *pl) {
  double worst = 0;
  for (int d = 0; d < pl->n_devices; d++) {
    double t = 0;
    for (int l = 0; l < pl->n_layers; l++)
      t += pl->true_fwd[d * pl->n_layers + l] + pl->true_bwd[d * pl->n_layers + l];
    worst = fmax(worst, PROFILE_PASSES * t);
  }
  return worst;
}

int cli_planner_plan(cli_planner *pl, const char *partitioner, bt_plan_device_use use, bt_plan *out,
                     cli_plan_info *info, bt_err *err) {
  memset(info, 0, sizeof *info);
  info->predicted = NAN;
  info->exact = 1;
  int ok;
  bt_plan_problem truth =
      problem(pl, pl->true_fwd, pl->true_bwd, 1, use, pl->plan_devices, err, &ok);
  if (!ok)
    return -1;
  const int S = truth.n_devices;
  /* The predictor is fitted (once) before the clock starts: search ms is the
   * search alone, predict_seconds the fit and the predictions. */
  if (strcmp(partitioner, "predicted") == 0 && cli_planner_predict(pl, err) < 0)
    return -1;
  const double t0 = bt_cli_cpu_now();
  int rc;
  bt_plan_stats st = {0};
  if (strcmp(partitioner, "even") == 0)
    rc = bt_plan_even(&truth, S, out, err);
  else if (strcmp(partitioner, "params") == 0)
    rc = bt_plan_params(&truth, S, out, err);
  else if (strcmp(partitioner, "flops") == 0)
    rc = bt_plan_flops(&truth, S, out, err);
  else if (strcmp(partitioner, "explicit") == 0) {
    int cuts[BT_PLAN_MAX_DEVICES + 1];
    rc = cli_config_cuts(pl->cfg, pl->n_layers, S, cuts, err);
    if (rc == 0)
      rc = bt_plan_explicit(&truth, S, cuts + 1, NULL, out, err);
  } else if (strcmp(partitioner, "oracle") == 0 || strcmp(partitioner, "profiled") == 0) {
    rc = bt_plan_search(&truth, out, &st, err);
    info->exact = st.exact;
    info->predicted = out->iter_time;
    if (partitioner[0] == 'p')
      info->profiling_s = profiling_seconds(pl);
  } else if (strcmp(partitioner, "predicted") == 0) {
    bt_plan_problem view =
        problem(pl, pl->view_fwd, pl->view_bwd, 0, use, pl->plan_devices, err, &ok);
    rc = bt_plan_search(&view, out, &st, err);
    info->exact = st.exact;
    info->predicted = out->iter_time;
    info->profiling_s = pl->probe_device_s;
  } else
    return bt_err_set(err,
                      "unknown partitioner '%s'; one of even, params, flops, profiled, "
                      "predicted, oracle, explicit",
                      partitioner);
  info->plan_seconds = bt_cli_cpu_now() - t0;
  if (rc < 0)
    return -1;
  /* What the plan really costs: the same cuts under the true times. */
  bt_plan real;
  memset(&real, 0, sizeof real);
  real.n_stages = out->n_stages;
  memcpy(real.device, out->device, sizeof real.device);
  memcpy(real.first, out->first, sizeof real.first);
  if (bt_plan_evaluate(&truth, &real, err) < 0)
    return -1;
  info->true_time = real.iter_time;
  for (int k = 0; k < real.n_stages; k++)
    info->true_stage[k] = real.fwd[k] + real.bwd[k];
  if (strcmp(partitioner, "predicted") != 0)
    *out = real;
  else
    out->iter_time = info->predicted; /* keep the predictor's stage figures */
  return 0;
}
