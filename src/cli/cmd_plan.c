/* baton plan: the pipeline plan an experiment would run, and the predicted
 * and true iteration time of every partitioner side by side. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/calib.h"
#include "baton/config.h"
#include "baton/gemm.h"
#include "baton/modelfile.h"
#include "cli.h"
#include "git_version.h"
#include "planner.h"
#include "train_common.h"

static void plan_usage(FILE *f) {
  fprintf(
      f,
      "usage: baton plan EXPERIMENT.yaml [--set key=value]... [--devices MODE] [--iteration N]\n\n"
      "Prints the plan `baton train` would run for the experiment (partition: ...): per\n"
      "stage the device, its layers, predicted compute, link times and memory against\n"
      "capacity; then every partitioner's plan with its predicted iteration time and its\n"
      "true one (the emulated devices' times from the host calibration).\n\n"
      "  --devices in-order  every device runs one stage, in the experiment's order (what\n"
      "                      baton train runs with device_order: experiment)\n"
      "  --devices first     every device runs one stage, the first device stage 1,\n"
      "                      the others in the best order\n"
      "  --devices all       every device runs one stage, in the best order (what baton\n"
      "                      train runs with device_order: plan, the default)\n"
      "  --devices subset    any subset that keeps the first device, in the best order\n"
      "                      (what baton train runs with device_order: subset)\n"
      "  --devices any       any subset of the devices, in the best order\n"
      "  --iteration N       plan for the device speeds at iteration N (throttling, from\n"
      "                      the profiles and `throttle:`), and show what the plan of\n"
      "                      iteration 0 costs then\n");
}

/* *keep_first: the plan must use device 0 (baton train's lead). */
static int parse_use(const char *v, bt_plan_device_use *use, int *keep_first) {
  *keep_first = 0;
  if (strcmp(v, "subset") == 0)
    *use = BT_PLAN_ANY_DEVICES, *keep_first = 1;
  else if (strcmp(v, "in-order") == 0)
    *use = BT_PLAN_DEVICES_IN_ORDER;
  else if (strcmp(v, "all") == 0)
    *use = BT_PLAN_ALL_DEVICES;
  else if (strcmp(v, "any") == 0)
    *use = BT_PLAN_ANY_DEVICES;
  else if (strcmp(v, "first") == 0)
    *use = BT_PLAN_ALL_FIRST_FIXED;
  else
    return -1;
  return 0;
}

static void print_stages(const cli_planner *pl, const bt_plan *p, const cli_plan_info *info) {
  printf("%-5s %-18s %-16s %9s %9s %10s %9s %9s %21s\n", "stage", "device", "layers", "fwd ms",
         "bwd ms", "true f+b", "act ms", "grad ms", "memory / capacity MiB");
  const double scale = pl->cfg->memory_scale > 0 ? pl->cfg->memory_scale : 1;
  for (int s = 0; s < p->n_stages; s++) {
    char layers[64];
    snprintf(layers, sizeof layers, "%d-%d (%d)", p->first[s] + 1, p->first[s + 1],
             p->first[s + 1] - p->first[s]);
    const int d = p->device[s];
    char act[16] = "-", grad[16] = "-";
    if (s + 1 < p->n_stages) {
      snprintf(act, sizeof act, "%.2f", 1e3 * p->act_comm[s]);
      snprintf(grad, sizeof grad, "%.2f", 1e3 * p->grad_comm[s]);
    }
    printf("%-5d %-18s %-16s %9.2f %9.2f %10.2f %9s %9s %10.1f / %8.1f\n", s + 1, pl->dev[d].name,
           layers, 1e3 * p->fwd[s], 1e3 * p->bwd[s], 1e3 * info->true_stage[s], act, grad,
           p->mem[s] / 1048576.0, pl->mem_cap[d] * scale / 1048576.0);
  }
}

static void format_cuts(const bt_plan *p, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "[");
  for (int s = 1; s < p->n_stages && used < n; s++)
    used += (size_t)snprintf(buf + used, n - used, "%s%d", s > 1 ? ", " : "", p->first[s] + 1);
  if (used < n)
    snprintf(buf + used, n - used, "]");
}

static void format_order(const cli_planner *pl, const bt_plan *p, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = 0;
  for (int s = 0; s < p->n_stages && used < n; s++)
    used += (size_t)snprintf(buf + used, n - used, "%s%d", s ? "," : "", p->device[s]);
  (void)pl;
}

/* Every partitioner side by side; the oracle's true time is the reference. */
static int compare_all(cli_planner *pl, bt_plan_device_use use, bt_err *err) {
  bt_plan plans[8];
  cli_plan_info info[8];
  int ok[8] = {0};
  double oracle = NAN;
  for (int k = 0; cli_partitioners[k]; k++) {
    const char *name = cli_partitioners[k];
    if (strcmp(name, "explicit") == 0 && pl->cfg->n_cuts == 0)
      continue;
    bt_err e;
    ok[k] = cli_planner_plan(pl, name, use, &plans[k], &info[k], &e) == 0;
    if (!ok[k])
      printf("%-10s failed: %s\n", name, e.msg);
    else if (strcmp(name, "oracle") == 0)
      oracle = info[k].true_time;
  }
  (void)err;
  printf("\n%-10s %-22s %-14s %13s %12s %10s %10s %13s\n", "partition", "cuts (first layers)",
         "devices", "predicted s/it", "true s/it", "vs oracle", "search ms", "profiling s");
  for (int k = 0; cli_partitioners[k]; k++) {
    if (!ok[k])
      continue;
    char cuts[128], order[64], pred[32] = "-", prof[32] = "-";
    format_cuts(&plans[k], cuts, sizeof cuts);
    format_order(pl, &plans[k], order, sizeof order);
    if (isfinite(info[k].predicted))
      snprintf(pred, sizeof pred, "%.4f%s", info[k].predicted, info[k].exact ? "" : "*");
    if (info[k].profiling_s > 0)
      snprintf(prof, sizeof prof, "%.2f", info[k].profiling_s);
    printf("%-10s %-22s %-14s %13s %12.4f %+9.1f%% %10.1f %13s\n", cli_partitioners[k], cuts, order,
           pred, info[k].true_time, 100 * (info[k].true_time / oracle - 1),
           1e3 * info[k].plan_seconds, prof);
  }
  printf("(true = the plan's iteration time under the emulated devices' calibrated times; "
         "* = the search hit its node budget: best plan found, not proven optimal; profiling = "
         "device seconds the partitioner measures before it can plan, on the slowest device)\n");
  return 0;
}

int bt_cmd_plan(int argc, char **argv) {
  bt_plan_device_use use = BT_PLAN_DEVICES_IN_ORDER;
  int use_given = 0; /* else what baton train would do (device_order) */
  int keep_first = 0;
  long at_iteration = 0;
  char **rest = calloc((size_t)argc + 1, sizeof *rest);
  int n_rest = 0;
  if (!rest)
    return bt_cli_fail("plan", "out of memory");
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      plan_usage(stdout);
      free(rest);
      return 0;
    }
    if (strcmp(argv[i], "--iteration") == 0) {
      char *end = NULL;
      at_iteration = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
      if (!end || *end || at_iteration < 0) {
        free(rest);
        return bt_cli_fail("plan", "--iteration takes an iteration number >= 0") + 1;
      }
      i++;
      continue;
    }
    if (strcmp(argv[i], "--devices") == 0) {
      use_given = 1;
      if (i + 1 >= argc || parse_use(argv[i + 1], &use, &keep_first) < 0) {
        free(rest);
        return bt_cli_fail("plan", "--devices takes in-order, first, all, subset or any") + 1;
      }
      i++;
      continue;
    }
    rest[n_rest++] = argv[i];
  }
  bt_config cfg;
  bt_err err = {{0}};
  int print_only = 0, rc = 1;
  bt_model model;
  memset(&model, 0, sizeof model);
  bt_dataset train, test;
  memset(&train, 0, sizeof train);
  memset(&test, 0, sizeof test);
  cli_planner pl;
  memset(&pl, 0, sizeof pl);
  if (bt_cli_load_config(&cfg, "plan", n_rest, rest, &print_only, &err) < 0)
    goto fail;
  if (!use_given)
    parse_use(strcmp(cfg.device_order, "plan") == 0     ? "all"
              : strcmp(cfg.device_order, "subset") == 0 ? "subset"
                                                        : "in-order",
              &use, &keep_first);
  if (bt_gemm_configure(cfg.blis_arch, cfg.threads) < 0) {
    bt_err_set(&err, "blis_arch '%s' is not known", cfg.blis_arch);
    goto fail;
  }
  if (cfg.n_devices < 1) {
    bt_err_set(&err, "the experiment names no devices; set devices: [rpi4, jetson-nano, ...]");
    goto fail;
  }
  char data[4096], models[4200];
  snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
  if (bt_cli_load_data(&cfg, &train, &test, &err) < 0 ||
      bt_model_resolve(cfg.model, models, (bt_shape){train.h, train.w, train.c}, train.classes,
                       &model, &err) < 0)
    goto fail;
  char store[4096] = "", host[512] = "";
  if (strcmp(cfg.calibration, "fresh") != 0) {
    if (strcmp(cfg.calibration, "auto") == 0)
      bt_calib_default_path(store, sizeof store);
    else
      snprintf(store, sizeof store, "%s", cfg.calibration);
  }
  bt_cli_host_key(host, sizeof host);
  if (cli_planner_init(&pl, &cfg, &model, store[0] ? store : NULL, host, &err) < 0)
    goto fail;
  pl.required_devices = keep_first ? 1u : 0u;
  printf("baton plan: %s (%d layers) on %d devices, %s, %d micro-batches of %d, memory scale %g\n",
         model.name, model.n_layers, cfg.n_devices, cfg.schedule, cfg.micro_batches, pl.micro_batch,
         cfg.memory_scale);
  printf("calibration: %d layers from the store %s, %d measured now (%.1f s)\n", pl.calib_stored,
         store[0] ? store : "(fresh)", pl.calib_measured, pl.calib_seconds);
  bt_plan plan;
  cli_plan_info info;
  if (at_iteration > 0) {
    /* What the plan of iteration 0 costs at iteration N, next to the plan
     * made for iteration N (device order as planned at iteration 0). */
    bt_plan first;
    cli_plan_info first_info;
    if (cli_planner_plan(&pl, cfg.partition, use, &first, &first_info, &err) < 0)
      goto fail;
    cli_planner_truth_at(&pl, at_iteration);
    bt_plan again = first;
    if (cli_planner_evaluate_order(&pl, 0, first.n_stages, first.device, first.first, &again,
                                   &err) < 0)
      goto fail;
    char cuts[128];
    format_cuts(&first, cuts, sizeof cuts);
    printf("the plan of iteration 0 (cuts %s): true %.4f s/iteration then, %.4f s at "
           "iteration %ld\n",
           cuts, first_info.true_time, again.iter_time, at_iteration);
  }
  if (cli_planner_plan(&pl, cfg.partition, use, &plan, &info, &err) < 0)
    goto fail;
  if (pl.pred_fwd)
    printf("predictor: sets %s%s, %s in %.2f s; predicted in %.2f s in all (%d devices "
           "adapted from probes; in-model context %s)\n",
           pl.sets_dir, pl.per_host_sets ? " (this host's sets)" : "",
           bt_cli_cache_state_name(pl.fit_info.state), pl.fit_seconds, pl.predict_seconds,
           pl.n_adapted, pl.in_model ? "on" : "off");
  if (pl.pred_fwd && pl.fit_info.note[0])
    printf("predictor: note: %s\n", pl.fit_info.note);
  if (pl.pred_fwd && pl.host_note[0])
    printf("predictor: note: %s; emulated devices follow this host's kernels, so predicted "
           "plans miss by more (docs/partition.md, \"Another host\"); "
           "OUT=data/predictor/hosts/NAME experiments/predictor/profile-all.sh makes this host's "
           "sets\n",
           pl.host_note);
  printf("\nplan (partition: %s), stage times per micro-batch:\n", cfg.partition);
  print_stages(&pl, &plan, &info);
  printf("iteration: predicted %.4f s, true %.4f s\n", plan.iter_time, info.true_time);
  compare_all(&pl, use, &err);
  rc = 0;
  goto out;
fail:
  bt_cli_fail("plan", "%s", err.msg);
out:
  cli_planner_free(&pl);
  bt_model_free(&model);
  bt_dataset_free(&train);
  bt_dataset_free(&test);
  bt_config_free(&cfg);
  free(rest);
  return rc;
}
