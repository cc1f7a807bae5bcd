/* Pipeline equivalence, run under mpirun: N ranks with a schedule give the
 * same per-iteration losses and final weights as the single-process run with
 * the same micro-batches (relative difference at most 1e-5 after the given
 * iterations). Rank 0 runs the reference itself.
 *
 * usage: mpirun -np N test_pipeline_mpi MODEL gpipe|1f1b MICRO ITERATIONS */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/data.h"
#include "baton/model.h"
#include "baton/pipeline.h"
#include "baton/train.h"

/* A small model with every kind that carries state or randomness across the
 * pipeline: batch-norm (running stats per micro-batch), a residual block,
 * dropout (masks keyed by step and micro-batch), max-pool. */
static int build_small_resnet(bt_model *m, bt_err *err) {
  bt_model_init(m, "small-resnet", (bt_shape){12, 12, 3}, 10);
  bt_model_push(m, bt_conv2d(8, 3, 1, 1));
  bt_model_push(m, bt_batchnorm());
  bt_model_push(m, bt_relu());
  bt_layer body[5] = {bt_conv2d(8, 3, 1, 1), bt_batchnorm(), bt_relu(), bt_conv2d(8, 3, 1, 1),
                      bt_batchnorm()};
  bt_model_push(m, bt_residual(body, 5, NULL, 0, 1));
  bt_model_push(m, bt_maxpool(2, 2, 0));
  bt_layer body2[4] = {bt_conv2d(16, 3, 2, 1), bt_batchnorm(), bt_relu(), bt_conv2d(16, 3, 1, 1)};
  bt_layer proj[1] = {bt_conv2d(16, 1, 2, 0)};
  bt_model_push(m, bt_residual(body2, 4, proj, 1, 1));
  bt_model_push(m, bt_global_avgpool());
  bt_model_push(m, bt_dense(32));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dropout(0.25f));
  bt_model_push(m, bt_dense(10));
  bt_model_push(m, bt_softmax_ce());
  return bt_model_finalize(m, err);
}

static double rel_diff(const float *a, const float *b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; i++) {
    diff = fmax(diff, fabs((double)a[i] - b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  return diff / (scale > 0 ? scale : 1);
}

static int fail(int rank, const char *msg) {
  fprintf(stderr, "rank %d: %s\n", rank, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5)
    return fail(rank, "usage: test_pipeline_mpi MODEL gpipe|1f1b MICRO ITERATIONS");
  const char *model_name = argv[1];
  const int micro = atoi(argv[3]), iterations = atoi(argv[4]);
  bt_err err = {{0}};
  bt_schedule_kind kind;
  if (bt_schedule_parse_kind(argv[2], &kind, &err) < 0)
    return fail(rank, err.msg);
  bt_model m;
  int rc = strcmp(model_name, "small-resnet") == 0
               ? build_small_resnet(&m, &err)
               : bt_zoo_build(model_name, (bt_shape){28, 28, 1}, 10, &m, &err);
  if (rc < 0)
    return fail(rank, err.msg);
  const int batch = 16;
  bt_dataset ds;
  if (bt_data_synthetic((long)batch * iterations, m.input.h, m.input.w, m.input.c, 10, 5, &ds,
                        &err) < 0)
    return fail(rank, err.msg);
  int cuts[65];
  if (bt_partition_even(m.n_layers, size, cuts, &err) < 0)
    return fail(rank, err.msg);
  const bt_sgd opt = {0.05, 0.9, 5e-4, 0};
  bt_pipeline_config cfg = {.model = &m,
                            .cuts = cuts,
                            .schedule = kind,
                            .batch_size = batch,
                            .micro_batches = micro,
                            .opt = opt,
                            .seed = 3,
                            .clock = BT_CLOCK_VIRTUAL,
                            .link_next = {1e9, 1e-4, 0}, .link_prev = {1e9, 1e-4, 0},
                            .calibration_repeats = 1};
  bt_pipeline *p;
  if (bt_pipeline_create(&p, MPI_COMM_WORLD, &cfg, &err) < 0)
    return fail(rank, err.msg);
  bt_stage ref;
  if (rank == 0 && bt_stage_init(&ref, &m, 0, m.n_layers, batch / micro, 1, 3, &err) < 0)
    return fail(rank, err.msg);
  const size_t in_elems = bt_shape_elems(m.input);
  double worst_loss = 0;
  for (int it = 0; it < iterations; it++) {
    const float *x = ds.x + (size_t)it * batch * in_elems;
    const int32_t *y = ds.y + (size_t)it * batch;
    bt_pipeline_stats st;
    if (bt_pipeline_step(p, rank == 0 ? x : NULL, rank == size - 1 ? y : NULL, it, &st, &err) < 0)
      return fail(rank, err.msg);
    if (rank == 0) {
      bt_step_stats rs;
      bt_train_step(&ref, &opt, x, y, batch, micro, 3, it, &rs);
      double d = fabs(st.loss - rs.loss) / fmax(fabs(rs.loss), 1e-12);
      worst_loss = fmax(worst_loss, d);
      if (d > 1e-5) {
        fprintf(stderr, "iteration %d: pipeline loss %.9g, single-process %.9g (rel %.2g)\n", it,
                st.loss, rs.loss, d);
        return fail(rank, "losses differ");
      }
    }
  }
  float *params = rank == 0 ? malloc(m.n_params * sizeof(float)) : NULL;
  float *state = rank == 0 ? malloc((m.n_state + 1) * sizeof(float)) : NULL;
  if (bt_pipeline_gather_params(p, params, state, &err) < 0)
    return fail(rank, err.msg);
  int status = 0;
  if (rank == 0) {
    double dp = rel_diff(params, ref.params, m.n_params);
    double ds_ = m.n_state ? rel_diff(state, ref.state, m.n_state) : 0;
    printf("%s, %d ranks, %s, %d micro-batches, %d iterations: max relative difference "
           "loss %.2g, weights %.2g, batch-norm state %.2g\n",
           model_name, size, argv[2], micro, iterations, worst_loss, dp, ds_);
    status = dp <= 1e-5 && ds_ <= 1e-5 ? 0 : 1;
    if (status)
      fprintf(stderr, "FAIL: final weights differ from the single-process run\n");
    bt_stage_free(&ref);
  }
  free(params), free(state);
  bt_pipeline_free(&p);
  bt_dataset_free(&ds);
  bt_model_free(&m);
  MPI_Finalize();
  return status;
}
