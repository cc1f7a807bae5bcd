/* Compares baton's layers, and a short training run, with PyTorch.
 *
 * The references are written by tests/gen_fixtures.py (PyTorch, float64,
 * converted to baton's NHWC layouts) into tests/fixtures/torch/ (one .bin per case); the
 * layer set-ups below must match the ones there. A tensor matches when
 * max|baton - torch| <= atol + rtol * max|torch| (scaled by the tensor's
 * largest reference value, as float32 rounding errors are). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/layers.h"
#include "baton/model.h"
#include "baton/optim.h"
#include "baton/train.h"

#ifndef BT_TEST_FIXTURES
#define BT_TEST_FIXTURES "tests/fixtures"
#endif

static const double RTOL = 1e-4, ATOL = 1e-5;

/* ---- fixture loader --------------------------------------------------- */

enum { FX_MAX_TENSORS = 64, FX_MAX_DIMS = 8, FX_NAME_MAX = 64 };
static const size_t FX_MAX_BYTES = (size_t)1 << 20;
static const uint32_t FX_VERSION = 1;

typedef struct fx_tensor {
  char name[FX_NAME_MAX];
  int ndim;
  size_t dims[FX_MAX_DIMS];
  size_t n;
  float *data;
} fx_tensor;

typedef struct fixture {
  char file[64];
  int count;
  fx_tensor t[FX_MAX_TENSORS];
} fixture;

typedef struct reader {
  const unsigned char *p;
  size_t left;
} reader;

static int read_u32(reader *r, uint32_t *v) {
  if (r->left < 4)
    return -1;
  *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
       (uint32_t)r->p[3] << 24;
  r->p += 4;
  r->left -= 4;
  return 0;
}

static void fx_free(fixture *fx) {
  for (int i = 0; i < fx->count; i++)
    free(fx->t[i].data);
  fx->count = 0;
}

/* Parses a BTFX image; returns 0, or -1 with the reason in `why`. */
static int fx_parse(const unsigned char *buf, size_t len, fixture *fx, char *why, size_t why_len) {
  reader r = {buf, len};
  uint32_t version, count;
  fx->count = 0;
  if (len < 4 || memcmp(buf, "BTFX", 4) != 0) {
    snprintf(why, why_len, "bad magic (not a BTFX file)");
    return -1;
  }
  r.p += 4;
  r.left -= 4;
  if (read_u32(&r, &version) < 0 || read_u32(&r, &count) < 0) {
    snprintf(why, why_len, "truncated header");
    return -1;
  }
  if (version != FX_VERSION) {
    snprintf(why, why_len, "version %u, expected %u", version, FX_VERSION);
    return -1;
  }
  if (count > FX_MAX_TENSORS) {
    snprintf(why, why_len, "%u tensors, at most %d supported", count, FX_MAX_TENSORS);
    return -1;
  }
  for (uint32_t i = 0; i < count; i++) {
    fx_tensor *t = &fx->t[i];
    uint32_t name_len, ndim;
    if (read_u32(&r, &name_len) < 0 || name_len == 0 || name_len >= FX_NAME_MAX ||
        name_len > r.left) {
      snprintf(why, why_len, "tensor %u: bad or truncated name", i);
      goto fail;
    }
    memcpy(t->name, r.p, name_len);
    t->name[name_len] = '\0';
    r.p += name_len;
    r.left -= name_len;
    if (strlen(t->name) != name_len) {
      snprintf(why, why_len, "tensor %u: NUL inside the name", i);
      goto fail;
    }
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(fx->t[j].name, t->name) == 0) {
        snprintf(why, why_len, "tensor '%s' appears twice", t->name);
        goto fail;
      }
    if (read_u32(&r, &ndim) < 0 || ndim < 1 || ndim > FX_MAX_DIMS) {
      snprintf(why, why_len, "tensor '%s': bad or truncated rank", t->name);
      goto fail;
    }
    t->ndim = (int)ndim;
    t->n = 1;
    for (uint32_t j = 0; j < ndim; j++) {
      uint32_t d;
      if (read_u32(&r, &d) < 0 || d == 0 || d > r.left / 4 || t->n > r.left / 4 / d) {
        snprintf(why, why_len, "tensor '%s': dimension %u is bad or exceeds the file", t->name, j);
        goto fail;
      }
      t->dims[j] = d;
      t->n *= d;
    }
    if (t->n * 4 > r.left) {
      snprintf(why, why_len, "tensor '%s': data truncated", t->name);
      goto fail;
    }
    t->data = malloc(t->n * sizeof(float));
    if (!t->data) {
      snprintf(why, why_len, "out of memory");
      goto fail;
    }
    fx->count = (int)i + 1;
    for (size_t k = 0; k < t->n; k++) {
      uint32_t bits = 0;
      read_u32(&r, &bits);
      memcpy(&t->data[k], &bits, sizeof bits);
    }
  }
  if (r.left != 0) {
    snprintf(why, why_len, "%zu bytes of trailing garbage", r.left);
    goto fail;
  }
  return 0;
fail:
  fx_free(fx);
  return -1;
}

/* Loads tests/fixtures/torch/<stem>.bin; a missing or bad file fails the
 * test, telling how to regenerate it. */
static void fx_load(fixture *fx, const char *stem) {
  char path[1024], why[160];
  memset(fx, 0, sizeof *fx);
  snprintf(fx->file, sizeof fx->file, "%s", stem);
  snprintf(path, sizeof path, "%s/torch/%s.bin", BT_TEST_FIXTURES, stem);
  FILE *f = fopen(path, "rb");
  if (!f)
    cr_assert_fail("fixture %s is missing: run /usr/bin/python3 tests/gen_fixtures.py "
                   "(PyTorch) from the repository root to generate tests/fixtures/torch",
                   path);
  unsigned char *buf = malloc(FX_MAX_BYTES + 1);
  cr_assert_not_null(buf);
  size_t len = fread(buf, 1, FX_MAX_BYTES + 1, f);
  fclose(f);
  if (len > FX_MAX_BYTES) {
    free(buf);
    cr_assert_fail("fixture %s is larger than %zu bytes", path, FX_MAX_BYTES);
  }
  int rc = fx_parse(buf, len, fx, why, sizeof why);
  free(buf);
  if (rc < 0)
    cr_assert_fail("fixture %s: %s; regenerate it with /usr/bin/python3 tests/gen_fixtures.py",
                   path, why);
}

static const fx_tensor *fx_find(const fixture *fx, const char *name) {
  for (int i = 0; i < fx->count; i++)
    if (strcmp(fx->t[i].name, name) == 0)
      return &fx->t[i];
  return NULL;
}

static const fx_tensor *fx_get(const fixture *fx, const char *name) {
  const fx_tensor *t = fx_find(fx, name);
  if (!t)
    cr_assert_fail("fixture %s has no tensor '%s'", fx->file, name);
  return t;
}

/* Requires `n` elements (whatever the dims). */
static const fx_tensor *fx_get_n(const fixture *fx, const char *name, size_t n) {
  const fx_tensor *t = fx_get(fx, name);
  cr_assert_eq(t->n, n, "fixture %s: tensor '%s' has %zu values, baton expects %zu", fx->file, name,
               t->n, n);
  return t;
}

/* Requires an NHWC tensor of `batch` samples of shape `s`. */
static const fx_tensor *fx_get_nhwc(const fixture *fx, const char *name, int batch, bt_shape s) {
  const fx_tensor *t = fx_get(fx, name);
  cr_assert(t->ndim == 4 && t->dims[0] == (size_t)batch && t->dims[1] == (size_t)s.h &&
                t->dims[2] == (size_t)s.w && t->dims[3] == (size_t)s.c,
            "fixture %s: tensor '%s' is not [%d,%d,%d,%d]", fx->file, name, batch, s.h, s.w, s.c);
  return t;
}

/* Labels are stored as floats; they must be class indices below `classes`. */
static int32_t *fx_labels(const fx_tensor *t, int classes) {
  int32_t *y = malloc(t->n * sizeof *y);
  cr_assert_not_null(y);
  for (size_t i = 0; i < t->n; i++) {
    float v = t->data[i];
    cr_assert(v >= 0.0f && v < (float)classes && v == floorf(v), "label %zu is %g, not a class", i,
              v);
    y[i] = (int32_t)v;
  }
  return y;
}

/* ---- comparison ------------------------------------------------------- */

/* Expects max|a - ref| <= atol + rtol * max|ref| (subtracting `offset` from
 * a first); NaN in `a` always fails. */
static void expect_close_off(const char *fixture_name, const char *what, const float *a,
                             const float *ref, size_t n, double offset, double rtol, double atol) {
  double worst = 0.0, scale = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - offset - (double)ref[i]);
    if (isnan(d))
      d = INFINITY;
    if (d > worst)
      worst = d, at = i;
    scale = fmax(scale, fabs((double)ref[i]));
  }
  double allowed = atol + rtol * scale;
  cr_expect(worst <= allowed,
            "%s: %s differs from PyTorch: max |baton - torch| = %.3g at [%zu] (baton %.9g, "
            "torch %.9g), allowed %.3g = %g + %g * max|torch| %.4g (ratio %.2f)",
            fixture_name, what, worst, at, n ? (double)a[at] - offset : 0.0,
            n ? (double)ref[at] : 0.0, allowed, atol, rtol, scale, worst / allowed);
}

static void expect_close(const char *fixture_name, const char *what, const float *a,
                         const fx_tensor *ref, double rtol, double atol) {
  expect_close_off(fixture_name, what, a, ref->data, ref->n, 0.0, rtol, atol);
}

/* ---- per-layer fixtures ----------------------------------------------- */

/* dP is pre-filled with this before backward, which must add to it. */
static const float DP_PRESET = 0.25f;
/* din is pre-filled with this garbage, which backward must overwrite. */
static const float DIN_GARBAGE = 1e3f;

static float *alloc_floats(size_t n, float fill) {
  float *p = malloc((n + 1) * sizeof(float));
  cr_assert_not_null(p);
  for (size_t i = 0; i < n + 1; i++)
    p[i] = fill;
  return p;
}

/* Runs layer `l` forward and backward on fixture `stem` and compares output,
 * updated state, loss (softmax_ce), input and parameter gradients. */
static void run_layer(const char *stem, bt_layer l, int training) {
  fixture fx;
  fx_load(&fx, stem);
  const fx_tensor *x = fx_get(&fx, "x");
  cr_assert_eq(x->ndim, 4, "fixture %s: x must be NHWC", stem);
  const int batch = (int)x->dims[0];
  l.in = (bt_shape){(int)x->dims[1], (int)x->dims[2], (int)x->dims[3]};
  l.stream = 1;
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, stem, &err), 0, "%s", err.msg);
  const size_t n_in = (size_t)batch * bt_shape_elems(l.in);
  const size_t n_out = (size_t)batch * bt_shape_elems(l.out);
  const fx_tensor *y = fx_get_nhwc(&fx, "y", batch, l.out);
  const fx_tensor *dx = fx_get_nhwc(&fx, "dx", batch, l.in);

  float *P = alloc_floats(l.n_params, 0.0f), *S = alloc_floats(l.n_state, 0.0f);
  if (l.n_params)
    memcpy(P, fx_get_n(&fx, "params", l.n_params)->data, l.n_params * sizeof(float));
  else
    cr_assert_null(fx_find(&fx, "params"), "%s: fixture has params, the layer none", stem);
  if (l.n_state)
    memcpy(S, fx_get_n(&fx, "state", l.n_state)->data, l.n_state * sizeof(float));
  float *out = alloc_floats(n_out, NAN), *din = alloc_floats(n_in, DIN_GARBAGE);
  float *dP = alloc_floats(l.n_params, DP_PRESET);
  float *aux = alloc_floats(bt_layer_aux_floats(&l, batch), 0.0f);
  const size_t ws_floats = bt_layer_ws_floats(&l, batch);
  float *ws = alloc_floats(ws_floats, 0.0f);
  int32_t *labels = NULL;
  const fx_tensor *dy = NULL;
  if (l.kind == BT_SOFTMAX_CE) {
    labels = fx_labels(fx_get_n(&fx, "labels", (size_t)batch), l.in.c);
  } else {
    dy = fx_get_nhwc(&fx, "dy", batch, l.out);
  }

  bt_exec ex = {.training = training, .seed = 1, .ws = ws, .ws_floats = ws_floats};
  ex.labels = labels;
  ex.loss_scale = 1.0f / (float)batch;
  bt_layer_forward(&l, P, S, x->data, out, aux, batch, &ex);
  expect_close(stem, "forward output", out, y, RTOL, ATOL);
  if (l.n_state)
    expect_close(stem, "running statistics", S, fx_get_n(&fx, "state_out", l.n_state), RTOL, ATOL);
  if (l.kind == BT_SOFTMAX_CE) {
    float loss = (float)(ex.loss_sum / batch);
    expect_close(stem, "mean loss", &loss, fx_get_n(&fx, "loss", 1), RTOL, ATOL);
  }

  bt_layer_backward(&l, P, x->data, out, aux, dy ? dy->data : NULL, din, dP, batch, &ex);
  expect_close(stem, "input gradient", din, dx, RTOL, ATOL);
  if (l.n_params) {
    const fx_tensor *ref = fx_get_n(&fx, "dparams", l.n_params);
    expect_close_off(stem, "parameter gradient (accumulated onto a preset)", dP, ref->data, ref->n,
                     DP_PRESET, RTOL, ATOL);
  }

  free(P), free(S), free(out), free(din), free(dP), free(aux), free(ws), free(labels);
  bt_layer_release(&l);
  fx_free(&fx);
}

Test(torch_fixtures, conv2d_3x3_pad1) { run_layer("conv2d_3x3_pad1", bt_conv2d(4, 3, 1, 1), 1); }
Test(torch_fixtures, conv2d_5x5_s2_pad2) {
  run_layer("conv2d_5x5_s2_pad2", bt_conv2d(3, 5, 2, 2), 1);
}
Test(torch_fixtures, conv2d_1x1) { run_layer("conv2d_1x1", bt_conv2d(6, 1, 1, 0), 1); }
Test(torch_fixtures, dwconv2d_3x3_s2) { run_layer("dwconv2d_3x3_s2", bt_dwconv2d(3, 2, 1), 1); }
Test(torch_fixtures, dense) { run_layer("dense", bt_dense(7), 1); }
/* relu and relu6 inputs include exact kinks (0, and 6), whose gradient is 0. */
Test(torch_fixtures, relu) { run_layer("relu", bt_relu(), 1); }
Test(torch_fixtures, relu6) { run_layer("relu6", bt_relu6(), 1); }
Test(torch_fixtures, maxpool_2x2) { run_layer("maxpool_2x2", bt_maxpool(2, 2, 0), 1); }
Test(torch_fixtures, maxpool_3x3_s2_p1) { run_layer("maxpool_3x3_s2_p1", bt_maxpool(3, 2, 1), 1); }
/* Inputs in {-1, 0, 1}: the gradient of a tied window goes to its first
 * maximum, as in PyTorch. */
Test(torch_fixtures, maxpool_ties) { run_layer("maxpool_ties", bt_maxpool(3, 2, 1), 1); }
Test(torch_fixtures, avgpool_2x2) { run_layer("avgpool_2x2", bt_avgpool(2, 2, 0), 1); }
Test(torch_fixtures, avgpool_3x3_s2_p1) { run_layer("avgpool_3x3_s2_p1", bt_avgpool(3, 2, 1), 1); }
Test(torch_fixtures, global_avgpool) { run_layer("global_avgpool", bt_global_avgpool(), 1); }
Test(torch_fixtures, batchnorm_train) { run_layer("batchnorm_train", bt_batchnorm(), 1); }
Test(torch_fixtures, batchnorm_eval) { run_layer("batchnorm_eval", bt_batchnorm(), 0); }
Test(torch_fixtures, flatten) { run_layer("flatten", bt_flatten(), 1); }
Test(torch_fixtures, softmax_ce) { run_layer("softmax_ce", bt_softmax_ce(), 1); }

Test(torch_fixtures, residual_projection) {
  bt_layer body[5] = {bt_conv2d(6, 3, 2, 1), bt_batchnorm(), bt_relu(), bt_conv2d(6, 3, 1, 1),
                      bt_batchnorm()};
  bt_layer proj[2] = {bt_conv2d(6, 1, 2, 0), bt_batchnorm()};
  run_layer("residual_projection", bt_residual(body, 5, proj, 2, 1), 1);
}

/* nn.Flatten + nn.Linear on an NCHW image against baton's flatten + dense on
 * the NHWC image (the fixture's dense weight has its input rows permuted). */
Test(torch_fixtures, flatten_dense) {
  const char *stem = "flatten_dense";
  fixture fx;
  fx_load(&fx, stem);
  const fx_tensor *x = fx_get(&fx, "x");
  cr_assert_eq(x->ndim, 4);
  const int batch = (int)x->dims[0];
  bt_layer fl = bt_flatten(), dn = bt_dense(5);
  fl.in = (bt_shape){(int)x->dims[1], (int)x->dims[2], (int)x->dims[3]};
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&fl, "flatten", &err), 0, "%s", err.msg);
  dn.in = fl.out;
  cr_assert_eq(bt_layer_finalize(&dn, "dense", &err), 0, "%s", err.msg);
  const size_t n_in = (size_t)batch * bt_shape_elems(fl.in);
  const size_t n_out = (size_t)batch * bt_shape_elems(dn.out);
  const fx_tensor *y = fx_get_nhwc(&fx, "y", batch, dn.out);
  const fx_tensor *dy = fx_get_nhwc(&fx, "dy", batch, dn.out);
  const fx_tensor *dx = fx_get_nhwc(&fx, "dx", batch, fl.in);
  const fx_tensor *P = fx_get_n(&fx, "params", dn.n_params);
  float *h = alloc_floats(n_in, NAN), *out = alloc_floats(n_out, NAN);
  float *dh = alloc_floats(n_in, DIN_GARBAGE), *din = alloc_floats(n_in, DIN_GARBAGE);
  float *dP = alloc_floats(dn.n_params, DP_PRESET);
  bt_exec ex = {.training = 1};
  bt_layer_forward(&fl, NULL, NULL, x->data, h, NULL, batch, &ex);
  bt_layer_forward(&dn, P->data, NULL, h, out, NULL, batch, &ex);
  expect_close(stem, "forward output", out, y, RTOL, ATOL);
  bt_layer_backward(&dn, P->data, h, out, NULL, dy->data, dh, dP, batch, &ex);
  bt_layer_backward(&fl, NULL, x->data, h, NULL, dh, din, NULL, batch, &ex);
  expect_close(stem, "input gradient", din, dx, RTOL, ATOL);
  const fx_tensor *ref = fx_get_n(&fx, "dparams", dn.n_params);
  expect_close_off(stem, "parameter gradient", dP, ref->data, ref->n, DP_PRESET, RTOL, ATOL);
  free(h), free(out), free(dh), free(din), free(dP);
  fx_free(&fx);
}

/* ---- whole-model training --------------------------------------------- */

/* The model of gen_fixtures.py's model_train, from baton's builders. */
static void build_fixture_model(bt_model *m) {
  bt_model_init(m, "torch_fixture_cnn", (bt_shape){8, 8, 3}, 10);
  bt_model_push(m, bt_conv2d(8, 3, 1, 1));
  bt_model_push(m, bt_batchnorm());
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_maxpool(2, 2, 0));
  bt_layer body[5] = {bt_conv2d(8, 3, 1, 1), bt_batchnorm(), bt_relu(), bt_conv2d(8, 3, 1, 1),
                      bt_batchnorm()};
  bt_model_push(m, bt_residual(body, 5, NULL, 0, 1));
  bt_model_push(m, bt_global_avgpool());
  bt_model_push(m, bt_dense(10));
  bt_model_push(m, bt_softmax_ce());
  bt_err err;
  cr_assert_eq(bt_model_finalize(m, &err), 0, "%s", err.msg);
}

/* Copies the fixture's "<prefix>.<i>" tensors into the stage's parameters
 * (and "state_<prefix>.<i>" into its state) at each layer's offset. */
static void load_stage(bt_stage *s, const fixture *fx, const char *prefix) {
  int loaded = 0;
  for (int i = 0; i < s->model->n_layers; i++) {
    const bt_layer *l = &s->model->layers[i];
    char name[FX_NAME_MAX];
    snprintf(name, sizeof name, "%s.%d", prefix, i);
    if (l->n_params) {
      memcpy(s->params + l->param_off, fx_get_n(fx, name, l->n_params)->data,
             l->n_params * sizeof(float));
      loaded++;
    } else {
      cr_assert_null(fx_find(fx, name), "%s: %s given for a layer without parameters", fx->file,
                     name);
    }
    snprintf(name, sizeof name, "state_%s.%d", prefix, i);
    if (l->n_state)
      memcpy(s->state + l->state_off, fx_get_n(fx, name, l->n_state)->data,
             l->n_state * sizeof(float));
  }
  cr_assert_gt(loaded, 0);
}

static void expect_stage(const bt_stage *s, const fixture *fx, const char *prefix) {
  for (int i = 0; i < s->model->n_layers; i++) {
    const bt_layer *l = &s->model->layers[i];
    char name[FX_NAME_MAX], what[128];
    if (l->n_params) {
      snprintf(name, sizeof name, "%s.%d", prefix, i);
      snprintf(what, sizeof what, "parameters of layer %d (%s) after training", i, l->name);
      expect_close(fx->file, what, s->params + l->param_off, fx_get_n(fx, name, l->n_params), RTOL,
                   ATOL);
    }
    if (l->n_state) {
      snprintf(name, sizeof name, "state_%s.%d", prefix, i);
      snprintf(what, sizeof what, "running statistics of layer %d (%s) after training", i, l->name);
      expect_close(fx->file, what, s->state + l->state_off, fx_get_n(fx, name, l->n_state), RTOL,
                   ATOL);
    }
  }
}

Test(torch_fixtures, model_train) {
  enum { STEPS = 5, BATCH = 8, MICRO = 2 };
  fixture fx;
  fx_load(&fx, "model_train");
  bt_model m;
  build_fixture_model(&m);
  const size_t in_elems = bt_shape_elems(m.input);
  const fx_tensor *x = fx_get(&fx, "x");
  cr_assert(x->ndim == 5 && x->dims[0] == STEPS && x->dims[1] == BATCH &&
                x->dims[2] == (size_t)m.input.h && x->dims[3] == (size_t)m.input.w &&
                x->dims[4] == (size_t)m.input.c,
            "model_train: x is not [%d,%d,8,8,3]", STEPS, BATCH);
  int32_t *labels = fx_labels(fx_get_n(&fx, "labels", STEPS * BATCH), m.classes);
  const fx_tensor *losses = fx_get_n(&fx, "losses", STEPS);

  bt_stage s;
  bt_err err;
  cr_assert_eq(bt_stage_init(&s, &m, 0, m.n_layers, BATCH / MICRO, 1, 1, &err), 0, "%s", err.msg);
  load_stage(&s, &fx, "init");
  const bt_sgd opt = {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = 0};
  float got[STEPS];
  for (int step = 0; step < STEPS; step++) {
    bt_step_stats st;
    bt_train_step(&s, &opt, x->data + (size_t)step * BATCH * in_elems, labels + step * BATCH, BATCH,
                  MICRO, 1, step, &st);
    got[step] = (float)st.loss;
    cr_assert_eq(st.samples, BATCH);
  }
  expect_close("model_train", "losses of the 5 steps", got, losses, RTOL, ATOL);
  expect_stage(&s, &fx, "final");

  free(labels);
  bt_stage_free(&s);
  bt_model_free(&m);
  fx_free(&fx);
}

/* ---- the loader itself ------------------------------------------------ */

/* A valid image: "a" [2,3] = 0..5 and "bc" [1] = -1.5. */
static size_t build_image(unsigned char *b) {
  size_t n = 0;
#define PUT32(v)                                                                                   \
  do {                                                                                             \
    uint32_t v_ = (uint32_t)(v);                                                                   \
    for (int k_ = 0; k_ < 4; k_++)                                                                 \
      b[n++] = (unsigned char)(v_ >> (8 * k_));                                                    \
  } while (0)
#define PUTF(f)                                                                                    \
  do {                                                                                             \
    float f_ = (f);                                                                                \
    uint32_t u_;                                                                                   \
    memcpy(&u_, &f_, 4);                                                                           \
    PUT32(u_);                                                                                     \
  } while (0)
  memcpy(b, "BTFX", 4);
  n = 4;
  PUT32(1);
  PUT32(2);
  PUT32(1);
  b[n++] = 'a';
  PUT32(2);
  PUT32(2);
  PUT32(3);
  for (int i = 0; i < 6; i++)
    PUTF((float)i);
  PUT32(2);
  b[n++] = 'b';
  b[n++] = 'c';
  PUT32(1);
  PUT32(1);
  PUTF(-1.5f);
#undef PUTF
#undef PUT32
  return n;
}

Test(torch_fixtures, loader_checks) {
  unsigned char img[256], bad[256];
  char why[160];
  fixture fx;
  memset(&fx, 0, sizeof fx);
  snprintf(fx.file, sizeof fx.file, "in-memory");
  size_t len = build_image(img);
  cr_assert_eq(fx_parse(img, len, &fx, why, sizeof why), 0, "%s", why);
  cr_assert_eq(fx.count, 2);
  const fx_tensor *a = fx_get_n(&fx, "a", 6), *bc = fx_get_n(&fx, "bc", 1);
  cr_expect(a->ndim == 2 && a->dims[0] == 2 && a->dims[1] == 3);
  cr_expect(a->data[5] == 5.0f && bc->data[0] == -1.5f);
  fx_free(&fx);

  for (size_t cut = 0; cut < len; cut++) /* every truncation is caught */
    cr_expect_eq(fx_parse(img, cut, &fx, why, sizeof why), -1, "truncated to %zu accepted", cut);
  memcpy(bad, img, len);
  bad[len] = 0;
  cr_expect_eq(fx_parse(bad, len + 1, &fx, why, sizeof why), -1, "trailing byte accepted");
  memcpy(bad, img, len);
  bad[0] = 'X';
  cr_expect_eq(fx_parse(bad, len, &fx, why, sizeof why), -1, "bad magic accepted");
  memcpy(bad, img, len);
  bad[4] = 2;
  cr_expect_eq(fx_parse(bad, len, &fx, why, sizeof why), -1, "version 2 accepted");
  /* Offsets: 12 name length, 16 name "a", 17 rank, 21 and 25 dims, 29 data. */
  memcpy(bad, img, len);
  bad[17] = 0xff; /* rank of "a" huge */
  cr_expect_eq(fx_parse(bad, len, &fx, why, sizeof why), -1, "huge rank accepted");
  memcpy(bad, img, len);
  bad[24] = 0xff; /* first dimension of "a" huge */
  cr_expect_eq(fx_parse(bad, len, &fx, why, sizeof why), -1, "huge dimension accepted");
  memcpy(bad, img, len);
  bad[len - 14] = 'a'; /* the second name "bc" becomes "a\0" */
  bad[len - 13] = '\0';
  cr_expect_eq(fx_parse(bad, len, &fx, why, sizeof why), -1, "NUL in a name accepted");
}
