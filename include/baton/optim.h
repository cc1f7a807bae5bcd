/* optim: SGD with momentum and weight decay over flat buffers.
 * Matches torch.optim.SGD (dampening 0): d = g + wd*p; buf = mu*buf + d
 * (buf starts at 0, so the first step gives buf = d); p -= lr * (nesterov ?
 * d + mu*buf : buf). */
#ifndef BATON_OPTIM_H
#define BATON_OPTIM_H

#include <stddef.h>

typedef struct bt_sgd {
  double lr, momentum, weight_decay;
  int nesterov;
} bt_sgd;

void bt_sgd_step(const bt_sgd *opt, float *params, const float *grads, float *momentum_buf,
                 size_t n);

#endif
