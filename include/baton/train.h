/* train: single-process training steps with micro-batches and gradient
 * accumulation, and evaluation. This is the reference that the pipeline
 * runtime must reproduce: the same micro-batches, in the same order, give the
 * same gradients and weights. */
#ifndef BATON_TRAIN_H
#define BATON_TRAIN_H

#include <stdint.h>

#include "baton/model.h"
#include "baton/optim.h"

typedef struct bt_step_stats {
  double loss; /* mean cross-entropy over the batch */
  long correct;
  long samples;
} bt_step_stats;

/* One optimizer step on `batch` samples (x: NHWC, y: labels) split into
 * `micro_batches` equal micro-batches whose gradients accumulate; `s` holds
 * the whole model and was created with max_batch >= batch / micro_batches.
 * The loss is the mean over the whole batch, so the accumulated gradient
 * equals the full batch's (batch-norm statistics are per micro-batch). */
void bt_train_step(bt_stage *s, const bt_sgd *opt, const float *x, const int32_t *y, int batch,
                   int micro_batches, uint64_t seed, long step, bt_step_stats *out);

/* Forward passes in eval mode over n samples in chunks of the stage's
 * max_batch; returns mean loss and the number of correct predictions. */
void bt_evaluate(bt_stage *s, const float *x, const int32_t *y, long n, bt_step_stats *out);

#endif
