/* Finite-difference gradient checks for every layer kind, for inputs and
 * weights. The scalar checked is L = sum(out * r) for a fixed random r (so
 * dout = r), or the cross-entropy itself for softmax_ce. Central differences
 * in float need a scaled tolerance: |analytic - numeric| <= atol + rtol*|numeric|. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton/layers.h"
#include "baton/model.h"
#include "baton/rng.h"

typedef struct probe {
  bt_layer l;
  int batch;
  int training;
  float *P, *S, *in, *out, *aux, *ws, *r;
  int32_t *labels;
  size_t n_in, n_out;
} probe;

static void probe_make(probe *p, bt_layer l, bt_shape in, int batch, int training) {
  memset(p, 0, sizeof *p);
  p->l = l;
  p->l.in = in;
  p->l.stream = 7;
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&p->l, "test", &err), 0, "%s", err.msg);
  p->batch = batch;
  p->training = training;
  p->n_in = batch * bt_shape_elems(in);
  p->n_out = batch * bt_shape_elems(p->l.out);
  p->P = calloc(p->l.n_params + 1, sizeof(float));
  p->S = calloc(p->l.n_state + 1, sizeof(float));
  p->in = calloc(p->n_in, sizeof(float));
  p->out = calloc(p->n_out, sizeof(float));
  p->aux = calloc(bt_layer_aux_floats(&p->l, batch) + 1, sizeof(float));
  p->ws = calloc(bt_layer_ws_floats(&p->l, batch) + 1, sizeof(float));
  p->r = calloc(p->n_out, sizeof(float));
  p->labels = calloc(batch, sizeof(int32_t));
  bt_layer_init(&p->l, p->P, p->S, 3);
  bt_rng rng;
  bt_rng_seed(&rng, 11, 0);
  /* Inputs away from 0 so ReLU kinks are not straddled; distinct values so
   * max-pool has no ties. */
  for (size_t i = 0; i < p->n_in; i++) {
    float v = bt_rng_normal(&rng);
    p->in[i] = v + (v >= 0 ? 0.1f : -0.1f) + 1e-4f * (float)(i % 97);
  }
  for (size_t i = 0; i < p->l.n_params; i++) /* non-trivial batch-norm gamma/beta too */
    p->P[i] += 0.1f * bt_rng_normal(&rng);
  for (size_t i = 0; i < p->l.n_state; i++)
    p->S[i] = i < p->l.n_state / 2 ? 0.1f * bt_rng_normal(&rng) : 1.0f + bt_rng_uniform(&rng);
  for (size_t i = 0; i < p->n_out; i++)
    p->r[i] = bt_rng_normal(&rng);
  for (int b = 0; b < batch; b++)
    p->labels[b] = (int32_t)bt_rng_below(&rng, (uint64_t)p->l.out.c);
}

static bt_exec probe_exec(probe *p) {
  bt_exec x = {.training = p->training, .seed = 5, .step = 2, .micro = 1};
  x.ws = p->ws;
  x.ws_floats = bt_layer_ws_floats(&p->l, p->batch);
  x.labels = p->labels;
  x.loss_scale = 1.0f / (float)p->batch;
  return x;
}

static double probe_loss(probe *p) {
  bt_exec x = probe_exec(p);
  /* Running statistics must not drift between evaluations. */
  float *S = malloc((p->l.n_state + 1) * sizeof(float));
  memcpy(S, p->S, (p->l.n_state + 1) * sizeof(float));
  bt_layer_forward(&p->l, p->P, S, p->in, p->out, p->aux, p->batch, &x);
  free(S);
  if (p->l.kind == BT_SOFTMAX_CE)
    return x.loss_sum * x.loss_scale;
  double L = 0;
  for (size_t i = 0; i < p->n_out; i++)
    L += (double)p->out[i] * p->r[i];
  return L;
}

static int close_enough(double a, double n, double atol, double rtol) {
  return fabs(a - n) <= atol + rtol * fabs(n);
}

static double central_difference(probe *p, float *v, double eps) {
  float keep = *v;
  *v = keep + (float)eps;
  double lp = probe_loss(p);
  *v = keep - (float)eps;
  double lm = probe_loss(p);
  *v = keep;
  return (lp - lm) / (2 * eps);
}

/* A composite layer (a residual block) can move a hidden ReLU across its
 * kink within +-eps, where no derivative exists. Two step sizes that disagree
 * reveal that; such a point is skipped (and counted) rather than checked. */
static int numeric(probe *p, float *v, double eps, double atol, double rtol, double *out) {
  double n1 = central_difference(p, v, eps), n2 = central_difference(p, v, eps / 2);
  *out = n2;
  return close_enough(n1, n2, atol, rtol);
}

static void check(probe *p, double eps, double atol, double rtol) {
  int checked = 0, skipped = 0;
  float *dP = calloc(p->l.n_params + 1, sizeof(float));
  float *din = calloc(p->n_in, sizeof(float));
  probe_loss(p);
  bt_exec x = probe_exec(p);
  bt_layer_backward(&p->l, p->P, p->in, p->out, p->aux, p->r, din, dP, p->batch, &x);
  bt_rng rng;
  bt_rng_seed(&rng, 99, 1);
  for (int t = 0; t < 40 && p->n_in; t++) {
    size_t i = (size_t)bt_rng_below(&rng, p->n_in);
    double num;
    if (!numeric(p, &p->in[i], eps, atol, rtol, &num)) {
      skipped++;
      continue;
    }
    checked++;
    cr_expect(close_enough(din[i], num, atol, rtol), "%s: d/din[%zu] analytic %.6g numeric %.6g",
              bt_layer_kind_name(p->l.kind), i, din[i], num);
  }
  for (int t = 0; t < 40 && p->l.n_params; t++) {
    size_t i = (size_t)bt_rng_below(&rng, p->l.n_params);
    double num;
    if (!numeric(p, &p->P[i], eps, atol, rtol, &num)) {
      skipped++;
      continue;
    }
    checked++;
    cr_expect(close_enough(dP[i], num, atol, rtol), "%s: d/dP[%zu] analytic %.6g numeric %.6g",
              bt_layer_kind_name(p->l.kind), i, dP[i], num);
  }
  cr_expect(checked >= 3 * skipped, "%s: %d points skipped as non-smooth, %d checked",
            bt_layer_kind_name(p->l.kind), skipped, checked);
  free(dP);
  free(din);
  free(p->P), free(p->S), free(p->in), free(p->out), free(p->aux), free(p->ws), free(p->r);
  free(p->labels);
  bt_layer_release(&p->l);
}

static void run(bt_layer l, bt_shape in, int batch, int training) {
  probe p;
  probe_make(&p, l, in, batch, training);
  /* Blocks hide many ReLUs behind batch-norm, which couples every output to
   * every weight: a smaller step keeps the probe off their kinks. */
  check(&p, l.kind == BT_RESIDUAL ? 1e-3 : 1e-2, 2e-3, 2e-2);
}

Test(gradcheck, conv2d_3x3_pad1) { run(bt_conv2d(5, 3, 1, 1), (bt_shape){6, 7, 3}, 2, 1); }
Test(gradcheck, conv2d_5x5_stride2) { run(bt_conv2d(4, 5, 2, 2), (bt_shape){9, 8, 2}, 2, 1); }
Test(gradcheck, conv2d_1x1) { run(bt_conv2d(6, 1, 1, 0), (bt_shape){4, 4, 5}, 3, 1); }
Test(gradcheck, conv2d_1x1_stride2) { run(bt_conv2d(3, 1, 2, 0), (bt_shape){5, 5, 4}, 2, 1); }
Test(gradcheck, conv2d_nonsquare_input) { run(bt_conv2d(2, 3, 2, 0), (bt_shape){7, 5, 2}, 2, 1); }
Test(gradcheck, dwconv2d) { run(bt_dwconv2d(3, 1, 1), (bt_shape){5, 6, 4}, 2, 1); }
Test(gradcheck, dwconv2d_stride2) { run(bt_dwconv2d(3, 2, 1), (bt_shape){7, 7, 3}, 2, 1); }
Test(gradcheck, dense) { run(bt_dense(7), (bt_shape){1, 1, 9}, 4, 1); }
Test(gradcheck, dense_on_image) { run(bt_dense(3), (bt_shape){2, 3, 2}, 2, 1); }
Test(gradcheck, relu) { run(bt_relu(), (bt_shape){3, 3, 4}, 2, 1); }
Test(gradcheck, relu6) { run(bt_relu6(), (bt_shape){3, 3, 4}, 2, 1); }
Test(gradcheck, maxpool) { run(bt_maxpool(2, 2, 0), (bt_shape){6, 6, 3}, 2, 1); }
Test(gradcheck, maxpool_3x3_s2_pad1) { run(bt_maxpool(3, 2, 1), (bt_shape){7, 7, 2}, 2, 1); }
Test(gradcheck, avgpool) { run(bt_avgpool(2, 2, 0), (bt_shape){6, 6, 3}, 2, 1); }
Test(gradcheck, avgpool_pad) { run(bt_avgpool(3, 2, 1), (bt_shape){5, 5, 2}, 2, 1); }
Test(gradcheck, global_avgpool) { run(bt_global_avgpool(), (bt_shape){4, 3, 5}, 3, 1); }
Test(gradcheck, batchnorm_train) { run(bt_batchnorm(), (bt_shape){3, 3, 4}, 3, 1); }
Test(gradcheck, batchnorm_eval) { run(bt_batchnorm(), (bt_shape){3, 3, 4}, 3, 0); }
Test(gradcheck, flatten) { run(bt_flatten(), (bt_shape){2, 3, 4}, 2, 1); }
Test(gradcheck, dropout_train) { run(bt_dropout(0.3f), (bt_shape){2, 3, 4}, 2, 1); }
Test(gradcheck, dropout_eval) { run(bt_dropout(0.3f), (bt_shape){2, 3, 4}, 2, 0); }
Test(gradcheck, softmax_ce) { run(bt_softmax_ce(), (bt_shape){1, 1, 6}, 5, 1); }

Test(gradcheck, residual_identity) {
  bt_layer body[4] = {bt_conv2d(4, 3, 1, 1), bt_batchnorm(), bt_relu(), bt_conv2d(4, 3, 1, 1)};
  run(bt_residual(body, 4, NULL, 0, 1), (bt_shape){5, 5, 4}, 2, 1);
}

Test(gradcheck, residual_projection) {
  bt_layer body[3] = {bt_conv2d(6, 3, 2, 1), bt_relu(), bt_conv2d(6, 3, 1, 1)};
  bt_layer proj[2] = {bt_conv2d(6, 1, 2, 0), bt_batchnorm()};
  run(bt_residual(body, 3, proj, 2, 1), (bt_shape){6, 6, 3}, 2, 1);
}

Test(gradcheck, residual_inverted_no_post_relu) {
  bt_layer body[5] = {bt_conv2d(8, 1, 1, 0), bt_relu6(), bt_dwconv2d(3, 1, 1), bt_relu6(),
                      bt_conv2d(4, 1, 1, 0)};
  run(bt_residual(body, 5, NULL, 0, 0), (bt_shape){4, 4, 4}, 2, 1);
}
Test(gradcheck, residual_smooth) {
  bt_layer body[3] = {bt_conv2d(4, 3, 1, 1), bt_batchnorm(), bt_conv2d(4, 3, 1, 1)};
  run(bt_residual(body, 3, NULL, 0, 0), (bt_shape){5, 5, 4}, 2, 1);
}
Test(gradcheck, residual_smooth_nobn) {
  bt_layer body[2] = {bt_conv2d(4, 3, 1, 1), bt_conv2d(4, 3, 1, 1)};
  run(bt_residual(body, 2, NULL, 0, 0), (bt_shape){5, 5, 4}, 2, 1);
}
