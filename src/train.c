/* train: the single-process training step; see include/baton/train.h. */
#include "baton/train.h"

#include <string.h>

void bt_train_step(bt_stage *s, const bt_sgd *opt, const float *x, const int32_t *y, int batch,
                   int micro_batches, uint64_t seed, long step, bt_step_stats *out) {
  const int mb = batch / micro_batches;
  const size_t in_elems = bt_shape_elems(s->model->input);
  bt_exec ex = {.training = 1, .seed = seed, .step = step, .loss_scale = 1.0f / (float)batch};
  bt_stage_zero_grad(s);
  for (int m = 0; m < micro_batches; m++) {
    const float *xm = x + (size_t)m * mb * in_elems;
    ex.micro = m;
    ex.labels = y + (size_t)m * mb;
    bt_stage_forward(s, 0, xm, mb, &ex);
    bt_stage_backward(s, 0, xm, NULL, NULL, mb, &ex);
  }
  bt_sgd_step(opt, s->params, s->grads, s->momentum, s->n_params);
  out->loss = ex.loss_sum / batch;
  out->correct = ex.correct;
  out->samples = batch;
}

void bt_evaluate(bt_stage *s, const float *x, const int32_t *y, long n, bt_step_stats *out) {
  const size_t in_elems = bt_shape_elems(s->model->input);
  bt_exec ex = {.training = 0};
  for (long i = 0; i < n; i += s->max_batch) {
    int b = (int)(n - i < s->max_batch ? n - i : s->max_batch);
    ex.labels = y + i;
    bt_stage_forward(s, 0, x + (size_t)i * in_elems, b, &ex);
  }
  out->loss = n ? ex.loss_sum / (double)n : 0.0;
  out->correct = ex.correct;
  out->samples = n;
}
