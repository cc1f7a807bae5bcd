/* model: layer chains, the zoo and stages; see include/baton/model.h. */
#include "baton/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/rng.h"

/* ---- descriptors ------------------------------------------------------ */

static bt_layer layer_of(bt_layer_kind kind) {
  bt_layer l;
  memset(&l, 0, sizeof l);
  l.kind = kind;
  l.kh = l.kw = l.stride = 1;
  return l;
}

static bt_layer windowed(bt_layer_kind kind, int kernel, int stride, int pad) {
  bt_layer l = layer_of(kind);
  l.kh = l.kw = kernel;
  l.stride = stride;
  l.pad = pad;
  return l;
}

bt_layer bt_conv2d(int out_channels, int kernel, int stride, int pad) {
  bt_layer l = windowed(BT_CONV2D, kernel, stride, pad);
  l.units = out_channels;
  return l;
}
bt_layer bt_dwconv2d(int kernel, int stride, int pad) {
  return windowed(BT_DWCONV2D, kernel, stride, pad);
}
bt_layer bt_dense(int units) {
  bt_layer l = layer_of(BT_DENSE);
  l.units = units;
  return l;
}
bt_layer bt_relu(void) { return layer_of(BT_RELU); }
bt_layer bt_relu6(void) { return layer_of(BT_RELU6); }
bt_layer bt_maxpool(int kernel, int stride, int pad) {
  return windowed(BT_MAXPOOL, kernel, stride, pad);
}
bt_layer bt_avgpool(int kernel, int stride, int pad) {
  return windowed(BT_AVGPOOL, kernel, stride, pad);
}
bt_layer bt_global_avgpool(void) { return layer_of(BT_GLOBAL_AVGPOOL); }
bt_layer bt_batchnorm(void) { return layer_of(BT_BATCHNORM); }
bt_layer bt_flatten(void) { return layer_of(BT_FLATTEN); }
bt_layer bt_dropout(float p) {
  bt_layer l = layer_of(BT_DROPOUT);
  l.p = p;
  return l;
}
bt_layer bt_softmax_ce(void) { return layer_of(BT_SOFTMAX_CE); }

bt_layer bt_residual(const bt_layer *body, int n_body, const bt_layer *shortcut, int n_short,
                     int post_relu) {
  bt_layer l = layer_of(BT_RESIDUAL);
  l.n_body = n_body;
  l.n_short = n_short;
  l.post_relu = post_relu;
  l.sub = calloc((size_t)(n_body + n_short > 0 ? n_body + n_short : 1), sizeof *l.sub);
  if (!l.sub) {
    fprintf(stderr, "baton: out of memory building a residual block\n");
    abort();
  }
  for (int j = 0; j < n_body; j++)
    l.sub[j] = body[j];
  for (int j = 0; j < n_short; j++)
    l.sub[n_body + j] = shortcut[j];
  return l;
}

/* ---- models ----------------------------------------------------------- */

void bt_model_init(bt_model *m, const char *name, bt_shape input, int classes) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  m->input = input;
  m->classes = classes;
}

void bt_model_push(bt_model *m, bt_layer l) {
  if (m->n_layers == m->cap) {
    int cap = m->cap ? 2 * m->cap : 32;
    bt_layer *grown = realloc(m->layers, (size_t)cap * sizeof *grown);
    if (!grown) {
      fprintf(stderr, "baton: out of memory building model '%s'\n", m->name);
      abort();
    }
    m->layers = grown;
    m->cap = cap;
  }
  m->layers[m->n_layers++] = l;
}

static void name_layers(bt_model *m) {
  int count[BT_LAYER_KIND_COUNT] = {0};
  for (int i = 0; i < m->n_layers; i++) {
    bt_layer *l = &m->layers[i];
    if (l->name[0])
      continue;
    snprintf(l->name, sizeof l->name, "%s%d", bt_layer_kind_name(l->kind), ++count[l->kind]);
    for (int j = 0; j < l->n_body + l->n_short; j++)
      snprintf(l->sub[j].name, sizeof l->sub[j].name, "%.30s.%s%d", l->name,
               j < l->n_body ? "body" : "short", j < l->n_body ? j + 1 : j - l->n_body + 1);
  }
}

/* Shapes flow through layers [0, upto); fills shapes, sizes, offsets. */
static int finalize_prefix(bt_model *m, int upto, bt_err *err) {
  bt_shape shape = m->input;
  size_t poff = 0, soff = 0;
  for (int i = 0; i < upto; i++) {
    bt_layer *l = &m->layers[i];
    char where[96];
    snprintf(where, sizeof where, "model '%s', layer %d (%s)", m->name, i + 1,
             bt_layer_kind_name(l->kind));
    l->in = shape;
    l->stream = bt_rng_stream(0xba70, (uint64_t)i, 0);
    if (bt_layer_finalize(l, where, err) < 0)
      return -1;
    l->param_off = poff;
    l->state_off = soff;
    poff += l->n_params;
    soff += l->n_state;
    shape = l->out;
  }
  m->n_params = poff;
  m->n_state = soff;
  return 0;
}

bt_shape bt_model_tail_shape(const bt_model *m, bt_err *err) {
  if (finalize_prefix((bt_model *)m, m->n_layers, err) < 0)
    return (bt_shape){0, 0, 0};
  return m->n_layers ? m->layers[m->n_layers - 1].out : m->input;
}

int bt_model_finalize(bt_model *m, bt_err *err) {
  if (m->input.h < 1 || m->input.w < 1 || m->input.c < 1)
    return bt_err_set(err, "model '%s': input shape %dx%dx%d is empty", m->name, m->input.h,
                      m->input.w, m->input.c);
  if (m->n_layers < 1 || m->layers[m->n_layers - 1].kind != BT_SOFTMAX_CE)
    return bt_err_set(err, "model '%s': the last layer must be softmax_ce", m->name);
  for (int i = 0; i < m->n_layers - 1; i++)
    if (m->layers[i].kind == BT_SOFTMAX_CE)
      return bt_err_set(err, "model '%s': softmax_ce at layer %d must be the last layer", m->name,
                        i + 1);
  name_layers(m);
  if (finalize_prefix(m, m->n_layers, err) < 0)
    return -1;
  const bt_layer *last = &m->layers[m->n_layers - 1];
  if (last->in.c != m->classes)
    return bt_err_set(err,
                      "model '%s': the classifier gives %d scores but the data has %d "
                      "classes; make the last dense layer %d wide",
                      m->name, last->in.c, m->classes, m->classes);
  return 0;
}

void bt_model_free(bt_model *m) {
  for (int i = 0; i < m->n_layers; i++)
    bt_layer_release(&m->layers[i]);
  free(m->layers);
  memset(m, 0, sizeof *m);
}

double bt_model_flops_fwd(const bt_model *m) {
  double f = 0;
  for (int i = 0; i < m->n_layers; i++)
    f += bt_layer_flops_fwd(&m->layers[i]);
  return f;
}

double bt_model_flops_bwd(const bt_model *m) {
  double f = 0;
  for (int i = 0; i < m->n_layers; i++)
    f += bt_layer_flops_bwd(&m->layers[i]);
  return f;
}

/* ---- the zoo ---------------------------------------------------------- */

static void push_classifier_vgg(bt_model *m) {
  bt_model_push(m, bt_flatten());
  bt_model_push(m, bt_dense(512));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dropout(0.5f));
  bt_model_push(m, bt_dense(512));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dropout(0.5f));
  bt_model_push(m, bt_dense(m->classes));
}

/* VGG: 3x3 convolutions with ReLU (no batch-norm, as in the original); a
 * 2x2 max-pool ('M', 0 here) is skipped once the image is 1x1, so 28x28
 * inputs get four pools and 32x32 inputs five. */
static int build_vgg(bt_model *m, const int *cfg, int n, bt_err *err) {
  for (int i = 0; i < n; i++) {
    if (cfg[i] == 0) {
      bt_shape s = bt_model_tail_shape(m, err);
      if (s.h < 1)
        return -1;
      if (s.h >= 2 && s.w >= 2)
        bt_model_push(m, bt_maxpool(2, 2, 0));
      continue;
    }
    bt_model_push(m, bt_conv2d(cfg[i], 3, 1, 1));
    bt_model_push(m, bt_relu());
  }
  push_classifier_vgg(m);
  return 0;
}

static void push_basic_block(bt_model *m, int in_ch, int out_ch, int stride) {
  bt_layer body[5] = {bt_conv2d(out_ch, 3, stride, 1), bt_batchnorm(), bt_relu(),
                      bt_conv2d(out_ch, 3, 1, 1), bt_batchnorm()};
  bt_layer proj[2] = {bt_conv2d(out_ch, 1, stride, 0), bt_batchnorm()};
  int project = stride != 1 || in_ch != out_ch;
  bt_model_push(m, bt_residual(body, 5, proj, project ? 2 : 0, 1));
}

static int build_resnet18(bt_model *m) {
  bt_model_push(m, bt_conv2d(64, 3, 1, 1));
  bt_model_push(m, bt_batchnorm());
  bt_model_push(m, bt_relu());
  const int widths[4] = {64, 128, 256, 512};
  int ch = 64;
  for (int s = 0; s < 4; s++)
    for (int b = 0; b < 2; b++) {
      push_basic_block(m, ch, widths[s], s > 0 && b == 0 ? 2 : 1);
      ch = widths[s];
    }
  bt_model_push(m, bt_global_avgpool());
  bt_model_push(m, bt_dense(m->classes));
  return 0;
}

/* MobileNetV2 inverted residual: expand 1x1, depthwise 3x3, project 1x1;
 * identity shortcut when the shape is kept. Blocks that change the shape
 * have no shortcut, so they are plain layer runs, not residual units. */
static void push_inverted_residual(bt_model *m, int in_ch, int out_ch, int stride, int t) {
  bt_layer body[8];
  int n = 0;
  if (t != 1) {
    body[n++] = bt_conv2d(in_ch * t, 1, 1, 0);
    body[n++] = bt_batchnorm();
    body[n++] = bt_relu6();
  }
  body[n++] = bt_dwconv2d(3, stride, 1);
  body[n++] = bt_batchnorm();
  body[n++] = bt_relu6();
  body[n++] = bt_conv2d(out_ch, 1, 1, 0);
  body[n++] = bt_batchnorm();
  if (stride == 1 && in_ch == out_ch) {
    bt_model_push(m, bt_residual(body, n, NULL, 0, 0));
  } else {
    for (int j = 0; j < n; j++)
      bt_model_push(m, body[j]);
  }
}

static int build_mobilenetv2(bt_model *m) {
  static const int cfg[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  bt_model_push(m, bt_conv2d(32, 3, 1, 1));
  bt_model_push(m, bt_batchnorm());
  bt_model_push(m, bt_relu6());
  int ch = 32;
  for (int g = 0; g < 7; g++)
    for (int i = 0; i < cfg[g][2]; i++) {
      push_inverted_residual(m, ch, cfg[g][1], i == 0 ? cfg[g][3] : 1, cfg[g][0]);
      ch = cfg[g][1];
    }
  bt_model_push(m, bt_conv2d(1280, 1, 1, 0));
  bt_model_push(m, bt_batchnorm());
  bt_model_push(m, bt_relu6());
  bt_model_push(m, bt_global_avgpool());
  bt_model_push(m, bt_dense(m->classes));
  return 0;
}

static int build_lenet5(bt_model *m) {
  /* Pad 28x28 inputs so both input sizes reach the classic 5x5x16. */
  int pad = m->input.h == 28 && m->input.w == 28 ? 2 : 0;
  bt_model_push(m, bt_conv2d(6, 5, 1, pad));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_maxpool(2, 2, 0));
  bt_model_push(m, bt_conv2d(16, 5, 1, 0));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_maxpool(2, 2, 0));
  bt_model_push(m, bt_flatten());
  bt_model_push(m, bt_dense(120));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dense(84));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dense(m->classes));
  return 0;
}

static int build_mlp(bt_model *m) {
  bt_model_push(m, bt_flatten());
  bt_model_push(m, bt_dense(512));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dense(256));
  bt_model_push(m, bt_relu());
  bt_model_push(m, bt_dense(m->classes));
  return 0;
}

const char *const bt_zoo_names[] = {"mlp", "lenet5", "vgg11", "vgg16", "resnet18", "mobilenetv2"};
const int bt_zoo_count = sizeof bt_zoo_names / sizeof bt_zoo_names[0];

int bt_zoo_build(const char *name, bt_shape input, int classes, bt_model *m, bt_err *err) {
  static const int vgg11[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
  static const int vgg16[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                              0,  512, 512, 512, 0,   512, 512, 512, 0};
  bt_model_init(m, name, input, classes);
  int rc;
  if (strcmp(name, "mlp") == 0)
    rc = build_mlp(m);
  else if (strcmp(name, "lenet5") == 0)
    rc = build_lenet5(m);
  else if (strcmp(name, "vgg11") == 0)
    rc = build_vgg(m, vgg11, (int)(sizeof vgg11 / sizeof *vgg11), err);
  else if (strcmp(name, "vgg16") == 0)
    rc = build_vgg(m, vgg16, (int)(sizeof vgg16 / sizeof *vgg16), err);
  else if (strcmp(name, "resnet18") == 0)
    rc = build_resnet18(m);
  else if (strcmp(name, "mobilenetv2") == 0)
    rc = build_mobilenetv2(m);
  else {
    char list[256] = "";
    for (int i = 0; i < bt_zoo_count; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
               bt_zoo_names[i]);
    bt_model_free(m);
    return bt_err_set(err, "unknown model '%s'; the zoo has: %s (or give a model file path)", name,
                      list);
  }
  if (rc == 0) {
    bt_model_push(m, bt_softmax_ce());
    rc = bt_model_finalize(m, err);
  }
  if (rc < 0) {
    bt_model_free(m);
    return -1;
  }
  return 0;
}

/* ---- stages ----------------------------------------------------------- */

static void *zalloc_floats(size_t n) {
  /* 64-byte alignment for vector loads; calloc zeroes gradients/momentum. */
  size_t bytes = (n ? n : 1) * sizeof(float);
  bytes = (bytes + 63) & ~(size_t)63;
  float *p = aligned_alloc(64, bytes);
  if (p)
    memset(p, 0, bytes);
  return p;
}

size_t bt_stage_mem_total(const bt_stage_mem *mem) {
  return mem->params + mem->grads + mem->optim + mem->state + mem->acts + mem->grad_bufs +
         mem->workspace;
}

int bt_stage_init(bt_stage *s, const bt_model *m, int first, int last, int max_batch, int slots,
                  uint64_t seed, bt_err *err) {
  memset(s, 0, sizeof *s);
  if (first < 0 || last > m->n_layers || first >= last)
    return bt_err_set(err, "stage [%d, %d) is not a non-empty range of the model's %d layers",
                      first, last, m->n_layers);
  if (max_batch < 1 || slots < 1)
    return bt_err_set(err, "stage needs a micro-batch size and slot count >= 1");
  s->model = m;
  s->first = first;
  s->last = last;
  s->max_batch = max_batch;
  s->slots = slots;
  const bt_layer *L = m->layers;
  s->param_base = L[first].param_off;
  s->state_base = L[first].state_off;
  s->n_params = (last < m->n_layers ? L[last].param_off : m->n_params) - s->param_base;
  s->n_state = (last < m->n_layers ? L[last].state_off : m->n_state) - s->state_base;
  int n = last - first;
  s->out_off = calloc((size_t)n, sizeof *s->out_off);
  s->aux_off = calloc((size_t)n, sizeof *s->aux_off);
  size_t slot = 0, grad = bt_shape_elems(L[first].in), ws = 0;
  for (int i = first; i < last; i++) {
    /* Keep each tensor 64-byte aligned inside the slot. */
    s->out_off[i - first] = slot;
    slot += (bt_shape_elems(L[i].out) * max_batch + 15) & ~(size_t)15;
    s->aux_off[i - first] = slot;
    slot += (bt_layer_aux_floats(&L[i], max_batch) + 15) & ~(size_t)15;
    size_t e = bt_shape_elems(L[i].out);
    grad = e > grad ? e : grad;
    size_t w = bt_layer_ws_floats(&L[i], max_batch);
    ws = w > ws ? w : ws;
  }
  s->slot_floats = slot;
  s->grad_floats = grad * max_batch;
  s->ws_floats = ws;
  s->params = zalloc_floats(s->n_params);
  s->grads = zalloc_floats(s->n_params);
  s->momentum = zalloc_floats(s->n_params);
  s->state = zalloc_floats(s->n_state);
  s->acts = zalloc_floats(slot * slots);
  s->grad_buf[0] = zalloc_floats(s->grad_floats);
  s->grad_buf[1] = zalloc_floats(s->grad_floats);
  s->ws = zalloc_floats(ws);
  if (!s->out_off || !s->aux_off || !s->params || !s->grads || !s->momentum || !s->state ||
      !s->acts || !s->grad_buf[0] || !s->grad_buf[1] || !s->ws) {
    bt_stage_free(s);
    return bt_err_set(err, "out of memory allocating stage [%d, %d) of model '%s'", first, last,
                      m->name);
  }
  const size_t f = sizeof(float);
  s->mem = (bt_stage_mem){.params = s->n_params * f,
                          .grads = s->n_params * f,
                          .optim = s->n_params * f,
                          .state = s->n_state * f,
                          .acts = slot * slots * f,
                          .grad_bufs = 2 * s->grad_floats * f,
                          .workspace = ws * f};
  for (int i = first; i < last; i++)
    bt_layer_init(&L[i], s->params + (L[i].param_off - s->param_base),
                  s->state + (L[i].state_off - s->state_base), seed);
  return 0;
}

void bt_stage_free(bt_stage *s) {
  free(s->out_off);
  free(s->aux_off);
  free(s->params);
  free(s->grads);
  free(s->momentum);
  free(s->state);
  free(s->acts);
  free(s->grad_buf[0]);
  free(s->grad_buf[1]);
  free(s->ws);
  memset(s, 0, sizeof *s);
}

bt_shape bt_stage_out_shape(const bt_stage *s) { return s->model->layers[s->last - 1].out; }

static double clock_seconds(int clock) {
  struct timespec ts;
  clock_gettime((clockid_t)clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *layer_params(const bt_stage *s, const bt_layer *l, float *base) {
  return base + (l->param_off - s->param_base);
}

const float *bt_stage_forward(bt_stage *s, int slot, const float *in, int batch, bt_exec *x) {
  float *acts = s->acts + (size_t)slot * s->slot_floats;
  x->ws = s->ws;
  x->ws_floats = s->ws_floats;
  const float *h = in;
  for (int i = s->first; i < s->last; i++) {
    const bt_layer *l = &s->model->layers[i];
    float *out = acts + s->out_off[i - s->first];
    double t0 = s->layer_fwd_s ? clock_seconds(s->timing_clock) : 0.0;
    bt_layer_forward(l, layer_params(s, l, s->params), s->state + (l->state_off - s->state_base), h,
                     out, acts + s->aux_off[i - s->first], batch, x);
    if (s->layer_fwd_s)
      s->layer_fwd_s[i - s->first] += clock_seconds(s->timing_clock) - t0;
    h = out;
  }
  return h;
}

void bt_stage_backward(bt_stage *s, int slot, const float *in, const float *dout, float *din,
                       int batch, bt_exec *x) {
  float *acts = s->acts + (size_t)slot * s->slot_floats;
  x->ws = s->ws;
  x->ws_floats = s->ws_floats;
  const float *g = dout;
  int ping = 0;
  for (int i = s->last - 1; i >= s->first; i--) {
    const bt_layer *l = &s->model->layers[i];
    const float *src = i == s->first ? in : acts + s->out_off[i - 1 - s->first];
    float *dst = i == s->first ? din : s->grad_buf[ping];
    double t0 = s->layer_bwd_s ? clock_seconds(s->timing_clock) : 0.0;
    bt_layer_backward(l, layer_params(s, l, s->params), src, acts + s->out_off[i - s->first],
                      acts + s->aux_off[i - s->first], g, dst, layer_params(s, l, s->grads), batch,
                      x);
    if (s->layer_bwd_s)
      s->layer_bwd_s[i - s->first] += clock_seconds(s->timing_clock) - t0;
    g = dst;
    ping ^= 1;
  }
}

void bt_stage_zero_grad(bt_stage *s) { memset(s->grads, 0, s->n_params * sizeof(float)); }
