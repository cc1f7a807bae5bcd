/* make_runlog: writes a small synthetic 2-rank GPipe run through the runlog
 * API, for the trace/report CLI test and for trying the plot script.
 *
 * usage: make_runlog OUT.h5 [ITERATIONS]
 *
 * Every iteration is the same hand-made GPipe schedule (2 stages, 2
 * micro-batches, forward 1 s, backward 2 s, 0.5 s per transfer, optimizer
 * 0.5 s on rank 0 and 0.25 s on rank 1), shifted by the 10.5 s iteration
 * span. As in a real run, rank 1 finishes early (8 s) and its first receive
 * of the next iteration starts waiting right then, 2.5 s before that
 * iteration's first forward: consecutive iterations overlap. Over 5
 * iterations (52.5 s) the report's figures are known exactly:
 *   rank 0: compute 32.5 s = 61.9%, idle 20 s = 38.1%, comm 22.5 s = 42.9%
 *   rank 1: compute 31.25 s = 59.5%, idle 21.25 s = 40.5%,
 *           comm 2.5 + 4 x 5 = 22.5 s = 42.9%
 *   iterations 1..4 alone span 44.5 s (from 8 s): rank 0 computes 26 s = 58.4%
 *   throughput 8 samples / 10.5 s = 0.762 samples/s; loss 2.3 - 0.1 i. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "baton/runlog.h"

enum { F = BT_EV_FORWARD, B = BT_EV_BACKWARD, S = BT_EV_SEND, R = BT_EV_RECV, O = BT_EV_OPTIM };

/* rank, micro, kind, peer, t_start, t_end, bytes (within one iteration) */
static const bt_event one_iteration[] = {
    {0, 0, 0, F, -1, 0.0, 1.0, 0},    {0, 0, 0, S, 1, 1.0, 1.5, 4096},
    {0, 0, 1, F, -1, 1.0, 2.0, 0},    {0, 0, 1, S, 1, 2.0, 2.5, 4096},
    {0, 0, 1, R, 1, 2.0, 6.0, 4096},  {0, 0, 1, B, -1, 6.0, 8.0, 0},
    {0, 0, 0, R, 1, 8.0, 8.0, 4096},  {0, 0, 0, B, -1, 8.0, 10.0, 0},
    {0, 0, -1, O, -1, 10.0, 10.5, 0}, {0, 1, 0, R, 0, 0.0, 1.5, 4096},
    {0, 1, 0, F, -1, 1.5, 2.5, 0},    {0, 1, 1, R, 0, 2.5, 2.5, 4096},
    {0, 1, 1, F, -1, 2.5, 3.5, 0},    {0, 1, 1, B, -1, 3.5, 5.5, 0},
    {0, 1, 1, S, 0, 5.5, 6.0, 4096},  {0, 1, 0, B, -1, 5.5, 7.5, 0},
    {0, 1, 0, S, 0, 7.5, 8.0, 4096},  {0, 1, -1, O, -1, 7.5, 7.75, 0},
};
enum { N_EV = sizeof one_iteration / sizeof one_iteration[0] };
static const double span = 10.5;
enum { rank1_first_recv = 9 };

static int fail(const bt_err *err) {
  fprintf(stderr, "make_runlog: %s\n", err->msg);
  return 1;
}

static int write_header(bt_runlog **log, const char *path, const bt_model *m, bt_err *err) {
  bt_runlog_meta meta = {.baton_version = "0.1.0",
                         .git_describe = "synthetic",
                         .config_yaml = "# synthetic run\nmodel: mlp\n",
                         .effective_config_yaml = "model: mlp\nbatch_size: 8\nmicro_batches: 2\n",
                         .mode = "sim",
                         .clock = "virtual",
                         .world_size = 2,
                         .seed = 42,
                         .blis_arch = "haswell",
                         .blis_threads = 1,
                         .schedule = "gpipe",
                         .micro_batches = 2,
                         .batch_size = 8};
  bt_runlog_device dev[2] = {{0, "jetson-nano", 4e9, 100e6, 0.002},
                             {1, "raspberry-pi-4", 2e9, 50e6, 0.005}};
  int cut = m->n_layers / 2;
  int first[2] = {0, cut}, ranks[2] = {0, 1};
  double pred[2] = {3.2, 3.1};
  bt_runlog_plan plan = {0, 2, first, ranks, pred, 10.0, "even"};
  if (bt_runlog_create(log, path, &meta, err) < 0 ||
      bt_runlog_write_devices(*log, 2, dev, err) < 0 || bt_runlog_write_layers(*log, m, err) < 0 ||
      bt_runlog_append_plan(*log, &plan, err) < 0)
    return -1;
  return 0;
}

static int write_iteration(bt_runlog *log, int it, int n_layers, bt_err *err) {
  bt_event ev[N_EV];
  for (int k = 0; k < N_EV; k++) {
    ev[k] = one_iteration[k];
    ev[k].iteration = it;
    ev[k].t_start += it * span;
    ev[k].t_end += it * span;
    if (it > 0 && k == rank1_first_recv)
      ev[k].t_start = (it - 1) * span + 8.0; /* rank 1's previous iteration ended at 8 s */
  }
  double fwd[256], bwd[256];
  for (int l = 0; l < n_layers && l < 256; l++) {
    fwd[l] = 1e-3 * (l + 1) * (1 + 0.01 * it);
    bwd[l] = 2 * fwd[l];
  }
  bt_train_record tr = {it, 2.3 - 0.1 * it, 0.1 + 0.05 * it, span, 0.01, 8 * 4096};
  if (bt_runlog_append_events(log, N_EV, ev, err) < 0 ||
      bt_runlog_append_timing(log, it, n_layers, fwd, bwd, err) < 0 ||
      bt_runlog_append_train(log, &tr, err) < 0 || bt_runlog_flush(log, err) < 0)
    return -1;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: make_runlog OUT.h5 [ITERATIONS]\n");
    return 2;
  }
  int iterations = argc == 3 ? atoi(argv[2]) : 5;
  bt_err err;
  bt_model m;
  if (bt_zoo_build("mlp", (bt_shape){8, 8, 1}, 10, &m, &err) < 0)
    return fail(&err);
  bt_runlog *log = NULL;
  int rc = write_header(&log, argv[1], &m, &err);
  for (int it = 0; it < iterations && rc == 0; it++)
    rc = write_iteration(log, it, m.n_layers, &err);
  if (rc == 0)
    rc = bt_runlog_close(&log, &err);
  else
    bt_runlog_close(&log, NULL);
  bt_model_free(&m);
  return rc < 0 ? fail(&err) : 0;
}
