/* optim: SGD; see include/baton/optim.h. */
#include "baton/optim.h"

void bt_sgd_step(const bt_sgd *opt, float *params, const float *grads, float *momentum_buf,
                 size_t n) {
  const float lr = (float)opt->lr, mu = (float)opt->momentum, wd = (float)opt->weight_decay;
  for (size_t i = 0; i < n; i++) {
    float d = grads[i] + wd * params[i];
    float v = mu * momentum_buf[i] + d;
    momentum_buf[i] = v;
    params[i] -= lr * (opt->nesterov ? d + mu * v : v);
  }
}
