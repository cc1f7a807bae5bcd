/* Engine invariants: the GEMM seam against its reference, SGD against
 * torch.optim.SGD's update rule, weights that do not depend on the
 * partition, micro-batch gradient accumulation equal to the full batch, and
 * training that actually lowers the loss. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton/data.h"
#include "baton/gemm.h"
#include "baton/model.h"
#include "baton/optim.h"
#include "baton/rng.h"
#include "baton/train.h"

static float max_rel_diff(const float *a, const float *b, size_t n) {
  float scale = 0, diff = 0;
  for (size_t i = 0; i < n; i++) {
    scale = fmaxf(scale, fabsf(b[i]));
    diff = fmaxf(diff, fabsf(a[i] - b[i]));
  }
  return diff / (scale > 0 ? scale : 1);
}

Test(gemm, blis_matches_reference_all_transposes) {
  const int m = 37, n = 23, k = 51;
  bt_rng rng;
  bt_rng_seed(&rng, 1, 2);
  float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
  float *c1 = malloc(sizeof(float) * m * n), *c2 = malloc(sizeof(float) * m * n);
  for (int i = 0; i < m * k; i++)
    a[i] = bt_rng_normal(&rng);
  for (int i = 0; i < k * n; i++)
    b[i] = bt_rng_normal(&rng);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      for (int i = 0; i < m * n; i++)
        c1[i] = c2[i] = (float)(i % 3);
      bt_sgemm(ta, tb, m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 0.25f, c1, n);
      bt_sgemm_ref(ta, tb, m, n, k, 0.5f, a, ta ? m : k, b, tb ? k : n, 0.25f, c2, n);
      cr_expect_lt(max_rel_diff(c1, c2, (size_t)m * n), 1e-5f, "trans_a %d trans_b %d", ta, tb);
    }
  free(a), free(b), free(c1), free(c2);
}

/* The small products that skip BLIS (gemm.c): every register block shape,
 * ragged edges, both transposes, beta 0 and not, padded leading dimensions,
 * and sizes on both sides of the limit. */
Test(gemm, small_products_match_reference) {
  cr_assert_eq(bt_gemm_configure("auto", 1), 0);
  if (strcmp(bt_gemm_arch(), "skx") == 0)
    cr_assert_eq(bt_gemm_small_limit(), BT_GEMM_SMALL_MACS, "skx kernels: the small path is on");
  static const int ms[] = {1, 2, 3, 5, 8, 9, 17, 33}, ns[] = {1, 7, 16, 17, 40, 64, 100, 130};
  static const int ks[] = {1, 15, 16, 17, 64, 100, 300};
  bt_rng rng;
  bt_rng_seed(&rng, 3, 4);
  const int pad = 3, cap = (33 + pad) * (300 + pad) + (300 + pad) * (130 + pad);
  float *a = malloc(sizeof(float) * cap), *b = malloc(sizeof(float) * cap);
  float *c1 = malloc(sizeof(float) * 33 * (130 + pad)),
        *c2 = malloc(sizeof(float) * 33 * (130 + pad));
  for (int i = 0; i < cap; i++)
    a[i] = bt_rng_normal(&rng), b[i] = bt_rng_normal(&rng);
  int cases = 0;
  for (size_t im = 0; im < sizeof ms / sizeof *ms; im++)
    for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
      for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++)
        for (int t = 0; t < 4; t++) {
          const int m = ms[im], n = ns[in], k = ks[ik], ta = t & 1, tb = t >> 1;
          const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
          const float beta = (cases % 2) ? 0.0f : 0.5f;
          for (int i = 0; i < m * ldc; i++)
            c1[i] = c2[i] = (float)(i % 5) - 2.0f;
          bt_sgemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c1, ldc);
          bt_sgemm_ref(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c2, ldc);
          float worst = 0;
          for (int i = 0; i < m; i++)
            for (int j = 0; j < ldc; j++) {
              const float d = fabsf(c1[i * ldc + j] - c2[i * ldc + j]);
              worst = fmaxf(worst, j < n ? d / (1.0f + fabsf(c2[i * ldc + j])) : d);
            }
          cr_expect_lt(worst, 2e-5f, "m %d n %d k %d trans %d %d beta %g: %g", m, n, k, ta, tb,
                       beta, worst);
          cases++;
        }
  free(a), free(b), free(c1), free(c2);
}

/* Products with few rows of C and a B beyond L2, which the small path reads
 * in panels of B's rows (gemm.c): ragged last panels, rows of more than a
 * page, both B layouts, beta 0 and not. */
Test(gemm, small_products_in_panels_match_reference) {
  cr_assert_eq(bt_gemm_configure("auto", 1), 0);
  static const int ms[] = {1, 2, 3, 4, 5, 8};
  static const int nk[][2] = {{300, 1000}, {4100, 70}, {8000, 40}, {1100, 999}};
  bt_rng rng;
  bt_rng_seed(&rng, 5, 6);
  const size_t cap = 1100 * 999 + 64; /* the largest B */
  float *a = malloc(sizeof(float) * cap), *b = malloc(sizeof(float) * cap);
  float *c1 = malloc(sizeof(float) * 8 * 8000), *c2 = malloc(sizeof(float) * 8 * 8000);
  for (size_t i = 0; i < cap; i++)
    a[i] = bt_rng_normal(&rng), b[i] = bt_rng_normal(&rng);
  for (size_t im = 0; im < sizeof ms / sizeof *ms; im++)
    for (size_t s = 0; s < sizeof nk / sizeof *nk; s++)
      for (int tb = 0; tb < 2; tb++) {
        const int m = ms[im], n = nk[s][0], k = nk[s][1];
        const float beta = (im + s) % 2 ? 0.0f : -0.5f;
        for (int i = 0; i < m * n; i++)
          c1[i] = c2[i] = (float)(i % 3) - 1.0f;
        bt_sgemm(false, tb, m, n, k, 1.25f, a, k, b, tb ? k : n, beta, c1, n);
        bt_sgemm_ref(false, tb, m, n, k, 1.25f, a, k, b, tb ? k : n, beta, c2, n);
        float worst = 0;
        for (int i = 0; i < m * n; i++)
          worst = fmaxf(worst, fabsf(c1[i] - c2[i]) / (1.0f + fabsf(c2[i])));
        cr_expect_lt(worst, 5e-5f, "m %d n %d k %d trans_b %d beta %g: %g", m, n, k, tb, beta,
                     worst);
      }
  free(a), free(b), free(c1), free(c2);
}

/* The shape rule the predictor's features use is the one bt_sgemm applies:
 * under the limit any product but a doubly transposed one, beyond it up to
 * 8 rows of C with A not transposed, or a transposed A with k <= 2 and n >= 1024
 * (a wide weight gradient at batch 1-2); nothing at limit 0. */
Test(gemm, small_rule_is_the_path_choice) {
  const long L = BT_GEMM_SMALL_MACS;
  cr_expect(bt_gemm_small_rule(false, false, 8, 64, 64, L));
  cr_expect(bt_gemm_small_rule(true, false, 64, 64, 8, L));
  cr_expect(!bt_gemm_small_rule(true, true, 8, 8, 8, L));
  cr_expect(!bt_gemm_small_rule(false, false, 8, 64, 64, 0));
  cr_expect(bt_gemm_small_rule(false, false, 1, 4096, 4096, L), "one row of C");
  cr_expect(bt_gemm_small_rule(false, false, 8, 4096, 4096, L), "8 rows beyond the limit");
  cr_expect(!bt_gemm_small_rule(false, false, 9, 4096, 64, L), "9 rows beyond the limit: BLIS");
  cr_expect(bt_gemm_small_rule(false, true, 8, 4096, 1024, L), "transposed B, 8 rows");
  cr_expect(!bt_gemm_small_rule(false, true, 9, 4096, 1024, L));
  cr_expect(!bt_gemm_small_rule(true, false, 1, 4096, 4096, L), "transposed A, k = 4096: BLIS");
  cr_expect(bt_gemm_small_rule(true, false, 4096, 4096, 2, L), "a weight gradient at batch 2");
  cr_expect(!bt_gemm_small_rule(true, false, 4096, 4096, 3, L));
  cr_expect(!bt_gemm_small_rule(true, false, 4096, 512, 2, L), "narrow C: BLIS");
  cr_assert_eq(bt_gemm_configure("auto", 1), 0);
  const long now = bt_gemm_small_limit();
  static const int dims[] = {1, 2, 8, 9, 64, 1024, 4096};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < 7; i++)
      for (int j = 0; j < 7; j++)
        for (int k = 0; k < 7; k++) {
          const bool ta = t == 1, tb = t == 2;
          cr_expect_eq(bt_gemm_small_takes(ta, tb, dims[i], dims[j], dims[k]),
                       bt_gemm_small_rule(ta, tb, dims[i], dims[j], dims[k], now));
        }
}

Test(optim, sgd_matches_torch_rule) {
  /* torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01), two steps:
   * p=1, g=0.5: d=0.51, buf=0.51, p=0.949; then g=0.5 again:
   * d=0.5+0.00949=0.50949, buf=0.9*0.51+0.50949=0.96849, p=0.949-0.096849. */
  bt_sgd opt = {0.1, 0.9, 0.01, 0};
  float p = 1.0f, g = 0.5f, buf = 0.0f;
  bt_sgd_step(&opt, &p, &g, &buf, 1);
  cr_expect_float_eq(p, 0.949f, 1e-6f);
  bt_sgd_step(&opt, &p, &g, &buf, 1);
  cr_expect_float_eq(buf, 0.96849f, 1e-6f);
  cr_expect_float_eq(p, 0.949f - 0.096849f, 1e-6f);
}

Test(model, weights_do_not_depend_on_partition) {
  bt_model m;
  bt_err err;
  cr_assert_eq(bt_zoo_build("resnet18", (bt_shape){32, 32, 3}, 10, &m, &err), 0, "%s", err.msg);
  bt_stage whole, part;
  cr_assert_eq(bt_stage_init(&whole, &m, 0, m.n_layers, 1, 1, 42, &err), 0, "%s", err.msg);
  cr_assert_eq(bt_stage_init(&part, &m, 5, 9, 1, 1, 42, &err), 0, "%s", err.msg);
  cr_assert_eq(memcmp(part.params, whole.params + part.param_base, part.n_params * sizeof(float)),
               0);
  cr_assert_eq(memcmp(part.state, whole.state + part.state_base, part.n_state * sizeof(float)), 0);
  bt_stage other;
  cr_assert_eq(bt_stage_init(&other, &m, 0, m.n_layers, 1, 1, 43, &err), 0, "%s", err.msg);
  cr_expect_neq(memcmp(other.params, whole.params, whole.n_params * sizeof(float)), 0,
                "another seed must give other weights");
  bt_stage_free(&whole), bt_stage_free(&part), bt_stage_free(&other);
  bt_model_free(&m);
}

/* Gradients of one batch computed in 1 and in 4 micro-batches (a model
 * without batch-norm or dropout, whose result does not depend on the split). */
Test(train, micro_batches_accumulate_to_full_batch_gradient) {
  bt_model m;
  bt_err err;
  cr_assert_eq(bt_zoo_build("lenet5", (bt_shape){28, 28, 1}, 10, &m, &err), 0, "%s", err.msg);
  bt_dataset ds;
  cr_assert_eq(bt_data_synthetic(32, 28, 28, 1, 10, 3, &ds, &err), 0, "%s", err.msg);
  bt_stage full, micro;
  cr_assert_eq(bt_stage_init(&full, &m, 0, m.n_layers, 32, 1, 7, &err), 0);
  cr_assert_eq(bt_stage_init(&micro, &m, 0, m.n_layers, 8, 1, 7, &err), 0);
  bt_sgd opt = {0.05, 0.9, 1e-4, 0};
  for (long step = 0; step < 3; step++) {
    bt_step_stats a, b;
    bt_train_step(&full, &opt, ds.x, ds.y, 32, 1, 1, step, &a);
    bt_train_step(&micro, &opt, ds.x, ds.y, 32, 4, 1, step, &b);
    cr_expect_float_eq(a.loss, b.loss, 1e-5 * fabs(a.loss), "step %ld loss %g vs %g", step, a.loss,
                       b.loss);
    cr_expect_eq(a.correct, b.correct);
    cr_expect_lt(max_rel_diff(micro.grads, full.grads, full.n_params), 1e-5f, "step %ld", step);
  }
  cr_expect_lt(max_rel_diff(micro.params, full.params, full.n_params), 1e-5f);
  bt_stage_free(&full), bt_stage_free(&micro);
  bt_dataset_free(&ds);
  bt_model_free(&m);
}

Test(train, loss_falls_on_learnable_data) {
  bt_model m;
  bt_err err;
  cr_assert_eq(bt_zoo_build("mlp", (bt_shape){8, 8, 1}, 4, &m, &err), 0, "%s", err.msg);
  bt_dataset ds;
  cr_assert_eq(bt_data_synthetic(512, 8, 8, 1, 4, 5, &ds, &err), 0, "%s", err.msg);
  bt_stage s;
  cr_assert_eq(bt_stage_init(&s, &m, 0, m.n_layers, 64, 1, 1, &err), 0);
  bt_sgd opt = {0.05, 0.9, 0, 0};
  bt_step_stats first = {0}, st = {0};
  for (long step = 0; step < 80; step++) {
    long off = (step % 8) * 64;
    bt_train_step(&s, &opt, ds.x + off * 64, ds.y + off, 64, 2, 1, step, &st);
    if (step == 0)
      first = st;
  }
  bt_step_stats ev;
  bt_evaluate(&s, ds.x, ds.y, ds.n, &ev);
  cr_expect_lt(ev.loss, 0.5 * first.loss, "loss %g after training, %g at first", ev.loss,
               first.loss);
  cr_expect_gt((double)ev.correct / ev.samples, 0.8);
  bt_stage_free(&s);
  bt_dataset_free(&ds);
  bt_model_free(&m);
}

Test(model, zoo_parameter_counts_match_pytorch) {
  /* From bench/pytorch_step.py --list (PyTorch 1.13, same architectures). */
  static const struct {
    const char *name;
    size_t params;
  } want[] = {{"mlp", 1707274},    {"lenet5", 62006},      {"vgg11", 9750922},
              {"vgg16", 15245130}, {"resnet18", 11178762}, {"mobilenetv2", 2253738}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    bt_model m;
    bt_err err;
    cr_assert_eq(bt_zoo_build(want[i].name, (bt_shape){32, 32, 3}, 10, &m, &err), 0, "%s", err.msg);
    cr_expect_eq(m.n_params, want[i].params, "%s: %zu parameters, PyTorch has %zu", want[i].name,
                 m.n_params, want[i].params);
    bt_model_free(&m);
  }
}
