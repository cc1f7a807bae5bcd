/* baton train: single-process training from an experiment file.
 *
 * Loads the configuration (file + --set overrides), the data and the model,
 * then runs epochs of SGD with micro-batches, printing progress and ending
 * with "test accuracy NN.N%". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "baton/config.h"
#include "baton/data.h"
#include "baton/gemm.h"
#include "baton/model.h"
#include "baton/modelfile.h"
#include "baton/runlog.h"
#include "baton/train.h"
#include "baton_build.h"
#include "cli.h"
#include "git_version.h"
#include "train_common.h"
#include <mpi.h>
#include <time.h>

static void train_usage(FILE *f) {
  fprintf(f, "usage: baton train [EXPERIMENT.yaml] [--set key=value]...\n\n"
             "Trains the model the experiment file describes (defaults for anything it leaves\n"
             "out) and ends with the line 'test accuracy NN.N%%'.\n\n"
             "options:\n"
             "  --set key=value  override a key, dotted for nested keys (repeatable),\n"
             "                   e.g. --set optimizer.lr=0.05 --set data.name=synthetic\n"
             "  --help-config    list every key with its type, allowed values and default\n"
             "  --print-config   print the effective configuration as YAML and exit\n"
             "  --help           this text\n");
}

typedef struct session {
  bt_config cfg;
  bt_dataset train, test;
  bt_model model;
  bt_stage stage;
  float *xb;
  int32_t *yb;
  long *order;
} session;

static void session_free(session *s) {
  bt_stage_free(&s->stage);
  bt_model_free(&s->model);
  bt_dataset_free(&s->train);
  bt_dataset_free(&s->test);
  free(s->xb);
  free(s->yb);
  free(s->order);
  bt_config_free(&s->cfg);
}

static int load_data(session *s, bt_err *err) {
  return bt_cli_load_data(&s->cfg, &s->train, &s->test, err);
}

static int build(session *s, bt_err *err) {
  const bt_config *c = &s->cfg;
  bt_shape input = {s->train.h, s->train.w, s->train.c};
  char data[4096], models[4200];
  snprintf(models, sizeof models, "%s/models", bt_cli_data_dir(data, sizeof data));
  if (bt_model_resolve(c->model, models, input, s->train.classes, &s->model, err) < 0)
    return -1;
  const int mb = c->batch_size / c->micro_batches;
  if (bt_stage_init(&s->stage, &s->model, 0, s->model.n_layers, mb, 1, c->seed, err) < 0)
    return -1;
  size_t in_elems = bt_shape_elems(input);
  s->xb = malloc(sizeof(float) * in_elems * c->batch_size);
  s->yb = malloc(sizeof(int32_t) * c->batch_size);
  s->order = malloc(sizeof(long) * s->train.n);
  if (!s->xb || !s->yb || !s->order)
    return bt_err_set(err, "out of memory for a batch of %d samples", c->batch_size);
  return 0;
}

static void format_eta(double seconds, char *buf, size_t len) {
  long t = seconds > 0 && isfinite(seconds) ? (long)seconds : 0;
  snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* Runs the epochs; returns 0. Progress goes to stdout: a live line on a
 * terminal, one line per epoch otherwise. */
/* The single-process run file: the same layout as a pipeline run's, with one
 * stage on the host, per-layer host times (thread CPU) and the loss curve. */
static int open_runlog(session *s, bt_runlog **log, bt_err *err) {
  const bt_config *c = &s->cfg;
  *log = NULL;
  if (!c->output[0])
    return 0;
  char *effective;
  bt_runlog_meta meta = bt_cli_runlog_meta(c, "none", "single-process", 1, &effective);
  const int first = 0, rank = 0;
  bt_runlog_plan plan = {.iteration = 0,
                         .n_stages = 1,
                         .first_layer = &first,
                         .device_rank = &rank,
                         .predicted_iteration_time = NAN,
                         .partitioner = "single-process"};
  bt_runlog_device host = {0, "host", 0, 0, 0};
  int rc = bt_runlog_create(log, c->output, &meta, err) == 0 &&
                   bt_runlog_write_devices(*log, 1, &host, err) == 0 &&
                   bt_runlog_write_layers(*log, &s->model, err) == 0 &&
                   bt_runlog_append_plan(*log, &plan, err) == 0 && bt_runlog_flush(*log, err) == 0
               ? 0
               : -1;
  free(effective);
  return rc;
}

static int run(session *s) {
  const bt_config *c = &s->cfg;
  const int batch = c->batch_size;
  const long steps_per_epoch = s->train.n / batch; /* the last partial batch is dropped */
  long total_steps = c->epochs > 0 ? steps_per_epoch * c->epochs : c->iterations;
  if (c->iterations > 0 && c->iterations < total_steps)
    total_steps = c->iterations;
  const int epochs = (int)((total_steps + steps_per_epoch - 1) / steps_per_epoch);
  const int live = strcmp(c->progress, "always") == 0 ||
                   (strcmp(c->progress, "auto") == 0 && isatty(STDOUT_FILENO));
  const bt_sgd opt = {c->optimizer_lr, c->optimizer_momentum, c->optimizer_weight_decay,
                      c->optimizer_nesterov};
  printf("baton train: model %s (%zu parameters), %s %ld train / %ld test samples, batch %d in "
         "%d micro-batches, %ld steps, BLIS %s x%d\n",
         s->model.name, s->model.n_params, c->data_name, s->train.n, s->test.n, batch,
         c->micro_batches, total_steps, bt_gemm_arch(), bt_gemm_threads());
  bt_runlog *log = NULL;
  bt_err lerr;
  if (open_runlog(s, &log, &lerr) < 0)
    return bt_cli_fail("train", "%s", lerr.msg);
  const int L = s->model.n_layers;
  double *lf = calloc((size_t)L, sizeof(double)), *lb = calloc((size_t)L, sizeof(double));
  if (log) { /* per-layer host times for the run file */
    s->stage.layer_fwd_s = lf, s->stage.layer_bwd_s = lb;
    s->stage.timing_clock = CLOCK_THREAD_CPUTIME_ID;
  }
  long step = 0;
  const double t_start = bt_cli_now();
  double last_print = 0;
  bt_step_stats test = {0};
  for (int epoch = 0; epoch < epochs && step < total_steps; epoch++) {
    bt_data_permutation(s->train.n, c->seed, epoch, s->order);
    double loss_sum = 0;
    long correct = 0, seen = 0;
    const double t_epoch = bt_cli_now();
    for (long b = 0; b < steps_per_epoch && step < total_steps; b++, step++) {
      bt_data_gather(&s->train, s->order + b * batch, batch, s->xb, s->yb);
      bt_step_stats st;
      const double t_step = bt_cli_now();
      if (log) {
        memset(lf, 0, sizeof(double) * L);
        memset(lb, 0, sizeof(double) * L);
      }
      bt_train_step(&s->stage, &opt, s->xb, s->yb, batch, c->micro_batches, c->seed, step, &st);
      if (log) {
        const double took = bt_cli_now() - t_step;
        bt_train_record rec = {step, st.loss, (double)st.correct / st.samples, took, took, 0};
        bt_err err;
        if (bt_runlog_append_timing(log, step, L, lf, lb, &err) < 0 ||
            bt_runlog_append_train(log, &rec, &err) < 0 || bt_runlog_flush(log, &err) < 0) {
          bt_cli_fail("train", "%s", err.msg);
          return 1;
        }
      }
      loss_sum += st.loss * st.samples;
      correct += st.correct;
      seen += st.samples;
      double now = bt_cli_now();
      if (live && (now - last_print > 0.2 || step + 1 == total_steps)) {
        double rate = (double)(step + 1) * batch / (now - t_start);
        char eta[32];
        format_eta((double)(total_steps - step - 1) * batch / rate, eta, sizeof eta);
        printf("\repoch %d/%d  iter %ld/%ld  loss %.4f  acc %5.1f%%  %.0f samples/s  ETA %s ",
               epoch + 1, epochs, step + 1, total_steps, loss_sum / seen, 100.0 * correct / seen,
               rate, eta);
        fflush(stdout);
        last_print = now;
      }
    }
    if (live)
      printf("\n");
    const int last_epoch = epoch + 1 == epochs || step >= total_steps;
    const double secs = bt_cli_now() - t_epoch;
    printf("epoch %d/%d: train loss %.4f acc %.2f%% (%.0f samples/s, %.1f s)", epoch + 1, epochs,
           loss_sum / seen, 100.0 * correct / seen, seen / secs, secs);
    if (last_epoch || (c->eval_every > 0 && (epoch + 1) % c->eval_every == 0)) {
      bt_evaluate(&s->stage, s->test.x, s->test.y, s->test.n, &test);
      bt_eval_record er = {step, epoch + 1, test.loss, (double)test.correct / test.samples,
                           test.samples};
      if (log && (bt_runlog_append_eval(log, &er, &lerr) < 0 || bt_runlog_flush(log, &lerr) < 0))
        return bt_cli_fail("train", "%s", lerr.msg);
      printf(", test loss %.4f acc %.2f%%", test.loss, 100.0 * test.correct / test.samples);
    }
    printf("\n");
    fflush(stdout);
  }
  printf("test accuracy %.1f%%\n", 100.0 * test.correct / (test.samples ? test.samples : 1));
  s->stage.layer_fwd_s = s->stage.layer_bwd_s = NULL;
  int rc = 0;
  if (log && bt_runlog_close(&log, &lerr) < 0)
    rc = bt_cli_fail("train", "%s", lerr.msg);
  else if (log || c->output[0])
    printf("run file: %s\n", c->output);
  free(lf), free(lb);
  return rc;
}

/* mpirun (Open MPI), srun/MPICH (PMI) or PMIx-based launchers set these. */
static int launched_by_mpirun(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* Pipeline mode: checks the launch against the experiment, then trains. */
static int train_with_mpi(bt_config *cfg) {
  const int n = cfg->n_devices;
  if (!launched_by_mpirun() && n > 1)
    return bt_cli_fail("train",
                       "the experiment names %d devices, one per MPI rank; start it with: "
                       "mpirun -np %d baton train ...",
                       n, n);
  MPI_Init(NULL, NULL);
  int rank, size, rc = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (n == 0 && rank == 0)
    bt_cli_fail("train",
                "started with %d MPI ranks but the experiment names no devices; list one "
                "device per rank, e.g. --set devices=rpi4,jetson-nano",
                size);
  else if (n != 0 && n != size && rank == 0)
    bt_cli_fail("train",
                "the experiment names %d devices but mpirun started %d ranks; use mpirun "
                "-np %d",
                n, size, n);
  if (n == size)
    rc = bt_cli_train_pipeline(cfg);
  MPI_Finalize();
  return rc;
}

int bt_cmd_train(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      train_usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--help-config") == 0) {
      bt_config_print_help(stdout);
      return 0;
    }
  }
  session s;
  memset(&s, 0, sizeof s);
  bt_err err = {{0}};
  int print_only = 0;
  int rc = 1;
  if (bt_cli_load_config(&s.cfg, "train", argc, argv, &print_only, &err) < 0) {
    bt_cli_fail("train", "%s", err.msg);
    goto out;
  }
  if (print_only) {
    bt_config_dump_yaml(&s.cfg, stdout);
    rc = 0;
    goto out;
  }
  if (bt_gemm_configure(s.cfg.blis_arch, s.cfg.threads) < 0) {
    bt_cli_fail("train", "blis_arch '%s' is not known", s.cfg.blis_arch);
    goto out;
  }
  if (launched_by_mpirun() || s.cfg.n_devices >= 1) {
    rc = train_with_mpi(&s.cfg);
    goto out;
  }
  if (load_data(&s, &err) < 0 || build(&s, &err) < 0) {
    bt_cli_fail("train", "%s", err.msg);
    goto out;
  }
  rc = run(&s);
out:
  session_free(&s);
  return rc;
}
