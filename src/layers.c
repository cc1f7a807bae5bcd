/* layers: forward and backward of every layer kind, NHWC float32.
 * See include/baton/layers.h for the buffer contract. Convolutions lower to
 * GEMM through im2col on chunks of samples (bounded scratch); 1x1 stride-1
 * convolutions need no lowering at all in NHWC. */
#include "baton/layers.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/gemm.h"
#include "baton/kernels.h"
#include "baton/rng.h"

enum { MAX_SUB = 16 };
/* im2col lowers a chunk of samples at a time: enough rows for BLIS to run
 * near its peak, never more than 8 MiB of scratch. */
static const size_t IM2COL_ROWS = 4096;
static const size_t IM2COL_CAP = (size_t)1 << 21;
static const float BN_EPS = 1e-5f;
static const float BN_MOMENTUM = 0.1f;

static const char *const kind_names[BT_LAYER_KIND_COUNT] = {
    [BT_CONV2D] = "conv2d",        [BT_DWCONV2D] = "dwconv2d",
    [BT_DENSE] = "dense",          [BT_RELU] = "relu",
    [BT_RELU6] = "relu6",          [BT_MAXPOOL] = "maxpool",
    [BT_AVGPOOL] = "avgpool",      [BT_GLOBAL_AVGPOOL] = "global_avgpool",
    [BT_BATCHNORM] = "batchnorm",  [BT_FLATTEN] = "flatten",
    [BT_DROPOUT] = "dropout",      [BT_RESIDUAL] = "residual",
    [BT_SOFTMAX_CE] = "softmax_ce"};

const char *bt_layer_kind_name(bt_layer_kind kind) {
  return (unsigned)kind < BT_LAYER_KIND_COUNT ? kind_names[kind] : "?";
}

int bt_layer_kind_parse(const char *name) {
  for (int k = 0; k < BT_LAYER_KIND_COUNT; k++)
    if (strcmp(name, kind_names[k]) == 0)
      return k;
  return -1;
}

/* ---- shapes and sizes ------------------------------------------------- */

static int has_window(bt_layer_kind k) {
  return k == BT_CONV2D || k == BT_DWCONV2D || k == BT_MAXPOOL || k == BT_AVGPOOL;
}

static int window_out(int in, int k, int stride, int pad) {
  int span = in + 2 * pad - k;
  return span < 0 ? 0 : span / stride + 1;
}

static int finalize_window(bt_layer *l, const char *where, bt_err *err) {
  if (l->kh < 1 || l->kw < 1 || l->stride < 1 || l->pad < 0)
    return bt_err_set(err,
                      "%s: kernel %dx%d, stride %d, padding %d: kernel and stride must be >= 1 "
                      "and padding >= 0",
                      where, l->kh, l->kw, l->stride, l->pad);
  if (l->pad >= l->kh || l->pad >= l->kw)
    return bt_err_set(err, "%s: padding %d must be smaller than the kernel %dx%d", where, l->pad,
                      l->kh, l->kw);
  int oh = window_out(l->in.h, l->kh, l->stride, l->pad);
  int ow = window_out(l->in.w, l->kw, l->stride, l->pad);
  if (oh < 1 || ow < 1)
    return bt_err_set(err,
                      "%s: kernel %dx%d with padding %d on a %dx%d input gives no output "
                      "pixel; use a smaller kernel, more padding, or a larger input",
                      where, l->kh, l->kw, l->pad, l->in.h, l->in.w);
  l->out.h = oh;
  l->out.w = ow;
  return 0;
}

static int finalize_residual(bt_layer *l, const char *where, bt_err *err) {
  if (l->n_body < 1 || l->n_short < 0 || l->n_body + l->n_short > MAX_SUB)
    return bt_err_set(err, "%s: a residual block needs 1..%d layers in body and shortcut", where,
                      MAX_SUB);
  size_t poff = 0, soff = 0;
  bt_shape body_out = l->in, short_out = l->in;
  for (int j = 0; j < l->n_body + l->n_short; j++) {
    bt_layer *s = &l->sub[j];
    if (s->kind == BT_RESIDUAL || s->kind == BT_SOFTMAX_CE)
      return bt_err_set(err, "%s: a %s cannot sit inside a residual block", where,
                        bt_layer_kind_name(s->kind));
    s->in = j == l->n_body ? l->in : (j == 0 ? l->in : l->sub[j - 1].out);
    s->stream = bt_rng_stream(l->stream, (uint64_t)j + 1, 0x5b);
    char sub_where[160];
    snprintf(sub_where, sizeof sub_where, "%s, %s %d (%s)", where,
             j < l->n_body ? "body layer" : "shortcut layer",
             j < l->n_body ? j + 1 : j - l->n_body + 1, bt_layer_kind_name(s->kind));
    if (bt_layer_finalize(s, sub_where, err) < 0)
      return -1;
    s->param_off = poff;
    s->state_off = soff;
    poff += s->n_params;
    soff += s->n_state;
    if (j < l->n_body)
      body_out = s->out;
    else
      short_out = s->out;
  }
  if (body_out.h != short_out.h || body_out.w != short_out.w || body_out.c != short_out.c)
    return bt_err_set(err,
                      "%s: body gives %dx%dx%d but the shortcut gives %dx%dx%d; add a "
                      "projection (conv2d 1x1 with the body's stride) to the shortcut",
                      where, body_out.h, body_out.w, body_out.c, short_out.h, short_out.w,
                      short_out.c);
  l->out = body_out;
  l->n_params = poff;
  l->n_state = soff;
  return 0;
}

int bt_layer_finalize(bt_layer *l, const char *where, bt_err *err) {
  if (l->in.h < 1 || l->in.w < 1 || l->in.c < 1)
    return bt_err_set(err, "%s: input shape %dx%dx%d is empty", where, l->in.h, l->in.w, l->in.c);
  l->out = l->in;
  l->n_params = 0;
  l->n_state = 0;
  if (has_window(l->kind) && finalize_window(l, where, err) < 0)
    return -1;
  const size_t c = (size_t)l->in.c, kk = (size_t)l->kh * l->kw;
  switch (l->kind) {
  case BT_CONV2D:
    if (l->units < 1)
      return bt_err_set(err, "%s: needs at least 1 output channel", where);
    l->out.c = l->units;
    l->n_params = kk * c * l->units + l->units;
    break;
  case BT_DWCONV2D:
    l->n_params = kk * c + c;
    break;
  case BT_DENSE:
    if (l->units < 1)
      return bt_err_set(err, "%s: needs at least 1 output feature", where);
    l->out = (bt_shape){1, 1, l->units};
    l->n_params = bt_shape_elems(l->in) * l->units + l->units;
    break;
  case BT_BATCHNORM:
    l->n_params = 2 * c;
    l->n_state = 2 * c;
    break;
  case BT_GLOBAL_AVGPOOL:
  case BT_FLATTEN:
    l->out = l->kind == BT_FLATTEN ? (bt_shape){1, 1, (int)bt_shape_elems(l->in)}
                                   : (bt_shape){1, 1, l->in.c};
    break;
  case BT_DROPOUT:
    if (!(l->p >= 0.0f && l->p < 1.0f))
      return bt_err_set(err, "%s: probability %g must be in [0, 1)", where, l->p);
    break;
  case BT_SOFTMAX_CE:
    if (l->in.h != 1 || l->in.w != 1 || l->in.c < 2)
      return bt_err_set(err,
                        "%s: expects a vector of at least 2 class scores, got %dx%dx%d; put "
                        "a dense layer before it",
                        where, l->in.h, l->in.w, l->in.c);
    break;
  case BT_RESIDUAL:
    return finalize_residual(l, where, err);
  case BT_RELU:
  case BT_RELU6:
  case BT_MAXPOOL:
  case BT_AVGPOOL:
    break;
  default:
    return bt_err_set(err, "%s: unknown layer kind %d", where, (int)l->kind);
  }
  return 0;
}

/* Samples per im2col chunk. Chunks are balanced (32 = 2 x 16, not 28 + 4):
 * a small last chunk is a GEMM that BLIS runs at half speed. */
static size_t conv_chunk(const bt_layer *l, int batch) {
  const size_t pix = (size_t)l->out.h * l->out.w;
  const size_t per_sample = pix * l->kh * l->kw * l->in.c;
  size_t n = (IM2COL_ROWS + pix - 1) / pix;
  if (n * per_sample > IM2COL_CAP)
    n = IM2COL_CAP / per_sample;
  if (n < 1)
    n = 1;
  if (n >= (size_t)batch)
    return (size_t)batch;
  const size_t chunks = ((size_t)batch + n - 1) / n;
  return ((size_t)batch + chunks - 1) / chunks;
}

static int conv_is_pointwise(const bt_layer *l) {
  return l->kh == 1 && l->kw == 1 && l->stride == 1 && l->pad == 0;
}

/* The direct kernel's view of a stride-1 convolution (forward), and of its
 * input gradient: the convolution of dout with the flipped, transposed
 * weights and the complementary padding kh-1-pad. */
static bt_conv_geom conv_geom(const bt_layer *l, int batch) {
  return (bt_conv_geom){batch, l->in.h, l->in.w, l->in.c,  l->out.c,
                        l->kh, l->kw,   l->pad,  l->out.h, l->out.w};
}

static bt_conv_geom conv_geom_back(const bt_layer *l, int batch) {
  return (bt_conv_geom){batch, l->out.h, l->out.w,           l->out.c, l->in.c,
                        l->kh, l->kw,    l->kh - 1 - l->pad, l->in.h,  l->in.w};
}

/* Direct convolution when the CPU has AVX-512 and the layer is stride 1 with
 * at least 4 input channels (on 3-channel images each tap has too little
 * work; im2col + GEMM handles those) and whole vectors of output channels.
 * The same condition picks the direct weight gradient. */
enum { DIRECT_MIN_C = 4 };

static int conv_stride1(const bt_layer *l) {
  return l->kind == BT_CONV2D && l->stride == 1 && !conv_is_pointwise(l);
}

static int conv_direct_fwd(const bt_layer *l, int batch) {
  const bt_conv_geom g = conv_geom(l, batch);
  return conv_stride1(l) && l->in.c >= DIRECT_MIN_C && bt_conv_direct_ok(&g);
}

static int conv_direct_bwd(const bt_layer *l, int batch) {
  const bt_conv_geom g = conv_geom_back(l, batch);
  return conv_stride1(l) && l->out.c >= 16 && bt_conv_direct_ok(&g);
}

/* Thin kernels: fewer than 16 output channels (forward and weight
 * gradient), fewer than 16 input channels (input gradient). */
static int conv_thin_fwd(const bt_layer *l, int batch) {
  const bt_conv_geom g = conv_geom(l, batch);
  return conv_stride1(l) && !conv_direct_fwd(l, batch) && bt_conv_thin_ok(&g);
}

static int conv_thin_bwd(const bt_layer *l, int batch) {
  const bt_conv_geom g = conv_geom_back(l, batch);
  return conv_stride1(l) && !conv_direct_bwd(l, batch) && bt_conv_thin_ok(&g);
}

/* Forward, weight and input gradients all without im2col scratch. */
static int conv_unlowered(const bt_layer *l, int batch) {
  return (conv_direct_fwd(l, batch) || conv_thin_fwd(l, batch)) &&
         (conv_direct_bwd(l, batch) || conv_thin_bwd(l, batch));
}

static size_t residual_max_elems(const bt_layer *l) {
  size_t m = bt_shape_elems(l->in);
  for (int j = 0; j < l->n_body + l->n_short; j++) {
    size_t e = bt_shape_elems(l->sub[j].out);
    m = e > m ? e : m;
  }
  return m;
}

size_t bt_layer_aux_floats(const bt_layer *l, int batch) {
  switch (l->kind) {
  case BT_MAXPOOL:
    return (size_t)batch * bt_shape_elems(l->out); /* int32 argmax */
  case BT_BATCHNORM:
    return 2 * (size_t)l->in.c; /* mean, 1/std */
  case BT_DROPOUT:
    return (size_t)batch * bt_shape_elems(l->in); /* scaled mask */
  case BT_RESIDUAL: {
    size_t n = 0;
    for (int j = 0; j < l->n_body + l->n_short; j++)
      n += (size_t)batch * bt_shape_elems(l->sub[j].out) + bt_layer_aux_floats(&l->sub[j], batch);
    return n;
  }
  default:
    return 0;
  }
}

size_t bt_layer_ws_floats(const bt_layer *l, int batch) {
  if (l->kind == BT_CONV2D && !conv_is_pointwise(l)) {
    /* im2col chunk (unless every pass is direct), the direct kernel's
     * padded rows (forward), the flipped weights plus padded rows (input
     * gradient); they are used one after the other. */
    size_t n = conv_unlowered(l, batch)
                   ? 0
                   : conv_chunk(l, batch) * l->out.h * l->out.w * l->kh * l->kw * l->in.c;
    const bt_conv_geom g = conv_geom(l, batch), gb = conv_geom_back(l, batch);
    const size_t wf = (size_t)l->kh * l->kw * l->in.c * l->out.c;
    size_t d = 0;
    if (conv_direct_fwd(l, batch))
      d = bt_conv_direct_ws(&g);
    else if (conv_thin_fwd(l, batch))
      d = bt_conv_thin_ws(&g);
    n = n > d ? n : d;
    d = 0;
    if (conv_direct_bwd(l, batch))
      d = wf + bt_conv_direct_ws(&gb);
    else if (conv_thin_bwd(l, batch))
      d = wf + bt_conv_thin_ws(&gb);
    n = n > d ? n : d;
    return n;
  }
  if (l->kind == BT_RESIDUAL) {
    size_t inner = 0;
    for (int j = 0; j < l->n_body + l->n_short; j++) {
      size_t w = bt_layer_ws_floats(&l->sub[j], batch);
      inner = w > inner ? w : inner;
    }
    return 4 * (size_t)batch * residual_max_elems(l) + inner;
  }
  return 0;
}

double bt_layer_flops_fwd(const bt_layer *l) {
  const double in = (double)bt_shape_elems(l->in), out = (double)bt_shape_elems(l->out);
  const double kk = (double)l->kh * l->kw;
  switch (l->kind) {
  case BT_CONV2D:
    return 2.0 * out * kk * l->in.c;
  case BT_DWCONV2D:
    return 2.0 * out * kk;
  case BT_DENSE:
    return 2.0 * in * l->units;
  case BT_MAXPOOL:
  case BT_AVGPOOL:
    return out * kk;
  case BT_GLOBAL_AVGPOOL:
    return in;
  case BT_BATCHNORM:
    return 4.0 * in;
  case BT_SOFTMAX_CE:
    return 5.0 * in;
  case BT_RESIDUAL: {
    double f = out * (l->post_relu ? 2.0 : 1.0);
    for (int j = 0; j < l->n_body + l->n_short; j++)
      f += bt_layer_flops_fwd(&l->sub[j]);
    return f;
  }
  case BT_RELU:
  case BT_RELU6:
  case BT_DROPOUT:
    return in;
  default:
    return 0.0;
  }
}

double bt_layer_flops_bwd(const bt_layer *l) {
  switch (l->kind) {
  case BT_CONV2D:
  case BT_DWCONV2D:
  case BT_DENSE:
  case BT_BATCHNORM:
    return 2.0 * bt_layer_flops_fwd(l);
  case BT_RESIDUAL: {
    double f = (double)bt_shape_elems(l->out) * 2.0;
    for (int j = 0; j < l->n_body + l->n_short; j++)
      f += bt_layer_flops_bwd(&l->sub[j]);
    return f;
  }
  default:
    return bt_layer_flops_fwd(l);
  }
}

/* ---- initialisation --------------------------------------------------- */

static void fill_uniform(float *p, size_t n, float bound, bt_rng *rng) {
  for (size_t i = 0; i < n; i++)
    p[i] = (2.0f * bt_rng_uniform(rng) - 1.0f) * bound;
}

void bt_layer_init(const bt_layer *l, float *P, float *S, uint64_t seed) {
  bt_rng rng;
  bt_rng_seed(&rng, seed, l->stream);
  const size_t c = (size_t)l->in.c, kk = (size_t)l->kh * l->kw;
  size_t fan_in = 0, n_weights = 0;
  switch (l->kind) {
  case BT_CONV2D:
    fan_in = kk * c;
    n_weights = fan_in * l->units;
    break;
  case BT_DWCONV2D:
    fan_in = kk;
    n_weights = kk * c;
    break;
  case BT_DENSE:
    fan_in = bt_shape_elems(l->in);
    n_weights = fan_in * l->units;
    break;
  case BT_BATCHNORM:
    for (size_t i = 0; i < c; i++) {
      P[i] = 1.0f, P[c + i] = 0.0f;
      S[i] = 0.0f, S[c + i] = 1.0f;
    }
    return;
  case BT_RESIDUAL:
    for (int j = 0; j < l->n_body + l->n_short; j++)
      bt_layer_init(&l->sub[j], P + l->sub[j].param_off, S + l->sub[j].state_off, seed);
    return;
  default:
    return;
  }
  float bound = 1.0f / sqrtf((float)fan_in);
  fill_uniform(P, l->n_params, bound, &rng); /* weights then biases */
  (void)n_weights;
}

/* ---- convolution ------------------------------------------------------ */

/* memcpy for long runs; a plain loop for the few floats of a thin input
 * (c = 1 or 3), where a library call per run would dominate. */
static inline void copy_floats(float *restrict dst, const float *restrict src, int n) {
  if (n >= 16) {
    memcpy(dst, src, sizeof(float) * (size_t)n);
    return;
  }
  for (int i = 0; i < n; i++)
    dst[i] = src[i];
}

/* Lowers `nb` samples to rows of kh*kw*c values, one row per output pixel.
 * In NHWC the kw*c values of one kernel row are contiguous in the input
 * whenever the row lies inside the image, so most rows are one memcpy. */
static void im2col(const bt_layer *l, const float *in, int nb, float *col) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const int KH = l->kh, KW = l->kw, S = l->stride, Pd = l->pad;
  float *dst = col;
  for (int b = 0; b < nb; b++) {
    const float *img = in + (size_t)b * H * W * C;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        const int ix0 = ox * S - Pd;
        for (int ky = 0; ky < KH; ky++) {
          const int iy = oy * S - Pd + ky;
          if (iy < 0 || iy >= H) {
            memset(dst, 0, sizeof(float) * KW * C);
          } else if (ix0 >= 0 && ix0 + KW <= W) {
            copy_floats(dst, img + ((size_t)iy * W + ix0) * C, KW * C);
          } else {
            for (int kx = 0; kx < KW; kx++) {
              const int ix = ix0 + kx;
              if (ix < 0 || ix >= W)
                memset(dst + kx * C, 0, sizeof(float) * C);
              else
                copy_floats(dst + kx * C, img + ((size_t)iy * W + ix) * C, C);
            }
          }
          dst += KW * C;
        }
      }
  }
}

/* Adds the rows of `col` back onto the (zeroed) input gradient. */
static void col2im(const bt_layer *l, const float *col, int nb, float *din) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const int KH = l->kh, KW = l->kw, S = l->stride, Pd = l->pad;
  memset(din, 0, sizeof(float) * (size_t)nb * H * W * C);
  const float *src = col;
  for (int b = 0; b < nb; b++) {
    float *img = din + (size_t)b * H * W * C;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int ky = 0; ky < KH; ky++) {
          const int iy = oy * S - Pd + ky;
          for (int kx = 0; kx < KW; kx++, src += C) {
            const int ix = ox * S - Pd + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
              continue;
            float *d = img + ((size_t)iy * W + ix) * C;
            for (int c = 0; c < C; c++)
              d[c] += src[c];
          }
        }
  }
}

static void fill_bias_rows(float *out, const float *bias, size_t rows, int n) {
  for (size_t r = 0; r < rows; r++)
    memcpy(out + r * n, bias, sizeof(float) * n);
}

static void add_column_sums(float *acc, const float *m, size_t rows, int n) {
  for (size_t r = 0; r < rows; r++)
    for (int k = 0; k < n; k++)
      acc[k] += m[r * n + k];
}

static void conv_forward(const bt_layer *l, const float *P, const float *in, float *out, int batch,
                         bt_exec *x) {
  const int C = l->in.c, K = l->out.c, KKC = l->kh * l->kw * C;
  const int pix = l->out.h * l->out.w;
  const float *w = P, *bias = P + (size_t)KKC * K;
  const bt_conv_geom g = conv_geom(l, batch);
  if (conv_direct_fwd(l, batch)) {
    bt_conv_direct(&g, in, w, bias, out, x->ws);
    return;
  }
  if (conv_thin_fwd(l, batch)) {
    bt_conv_thin(&g, in, w, bias, out, x->ws);
    return;
  }
  fill_bias_rows(out, bias, (size_t)batch * pix, K);
  if (conv_is_pointwise(l)) {
    bt_sgemm(false, false, batch * pix, K, C, 1.0f, in, C, w, K, 1.0f, out, K);
    return;
  }
  const int chunk = (int)conv_chunk(l, batch);
  const size_t in_s = bt_shape_elems(l->in), out_s = bt_shape_elems(l->out);
  for (int b0 = 0; b0 < batch; b0 += chunk) {
    int nb = batch - b0 < chunk ? batch - b0 : chunk;
    im2col(l, in + b0 * in_s, nb, x->ws);
    bt_sgemm(false, false, nb * pix, K, KKC, 1.0f, x->ws, KKC, w, K, 1.0f, out + b0 * out_s, K);
  }
}

static void conv_backward(const bt_layer *l, const float *P, const float *in, const float *dout,
                          float *din, float *dP, int batch, bt_exec *x) {
  const int C = l->in.c, K = l->out.c, KKC = l->kh * l->kw * C;
  const int pix = l->out.h * l->out.w;
  const float *w = P;
  float *dw = dP, *db = dP + (size_t)KKC * K;
  add_column_sums(db, dout, (size_t)batch * pix, K);
  if (conv_is_pointwise(l)) {
    bt_sgemm(true, false, C, K, batch * pix, 1.0f, in, C, dout, K, 1.0f, dw, K);
    if (din)
      bt_sgemm(false, true, batch * pix, C, K, 1.0f, dout, K, w, K, 0.0f, din, C);
    return;
  }
  const bt_conv_geom g = conv_geom(l, batch);
  const int dw_direct = conv_direct_fwd(l, batch), dw_thin = conv_thin_fwd(l, batch);
  const int din_direct = din && conv_direct_bwd(l, batch);
  const int din_thin = din && conv_thin_bwd(l, batch);
  const int dw_lowered = !dw_direct && !dw_thin, din_lowered = din && !din_direct && !din_thin;
  if (dw_direct)
    bt_conv_direct_dw(&g, in, dout, dw);
  else if (dw_thin)
    bt_conv_thin_dw(&g, in, dout, dw, x->ws);
  if (dw_lowered || din_lowered) {
    const int chunk = (int)conv_chunk(l, batch);
    const size_t in_s = bt_shape_elems(l->in), out_s = bt_shape_elems(l->out);
    for (int b0 = 0; b0 < batch; b0 += chunk) {
      int nb = batch - b0 < chunk ? batch - b0 : chunk;
      const float *gy = dout + b0 * out_s;
      if (dw_lowered) {
        im2col(l, in + b0 * in_s, nb, x->ws);
        bt_sgemm(true, false, KKC, K, nb * pix, 1.0f, x->ws, KKC, gy, K, 1.0f, dw, K);
      }
      if (din_lowered) { /* the lowered input is spent: reuse its scratch for dcol */
        bt_sgemm(false, true, nb * pix, KKC, K, 1.0f, gy, K, w, K, 0.0f, x->ws, KKC);
        col2im(l, x->ws, nb, din + b0 * in_s);
      }
    }
  }
  if (din_direct || din_thin) { /* din = conv(dout, flipped W): no dcol, no scatter */
    const bt_conv_geom gb = conv_geom_back(l, batch);
    float *wf = x->ws;
    bt_conv_flip_weights(l->kh, l->kw, C, K, w, wf);
    if (din_direct)
      bt_conv_direct(&gb, dout, wf, NULL, din, wf + (size_t)KKC * K);
    else
      bt_conv_thin(&gb, dout, wf, NULL, din, wf + (size_t)KKC * K);
  }
}

/* ---- depthwise convolution (direct; vectorises over channels) ---------- */

/* 3x3 kernels (MobileNet's) run on AVX-512 kernels when the CPU has it. */
static int dwconv_fast(const bt_layer *l, int batch, bt_dw_geom *g) {
  *g = (bt_dw_geom){batch, l->in.h, l->in.w, l->in.c, l->stride, l->pad, l->out.h, l->out.w};
  return l->kh == 3 && l->kw == 3 && bt_dwconv3x3_ok(g);
}

static void dwconv_forward(const bt_layer *l, const float *P, const float *in, float *out,
                           int batch) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const float *w = P, *bias = P + (size_t)l->kh * l->kw * C;
  bt_dw_geom g;
  if (dwconv_fast(l, batch, &g)) {
    bt_dwconv3x3(&g, in, w, bias, out);
    return;
  }
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        float *o = out + (((size_t)b * OH + oy) * OW + ox) * C;
        memcpy(o, bias, sizeof(float) * C);
        for (int ky = 0; ky < l->kh; ky++) {
          const int iy = oy * l->stride - l->pad + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < l->kw; kx++) {
            const int ix = ox * l->stride - l->pad + kx;
            if (ix < 0 || ix >= W)
              continue;
            const float *i = in + (((size_t)b * H + iy) * W + ix) * C;
            const float *k = w + ((size_t)ky * l->kw + kx) * C;
            for (int c = 0; c < C; c++)
              o[c] += i[c] * k[c];
          }
        }
      }
}

static void dwconv_backward(const bt_layer *l, const float *P, const float *in, const float *dout,
                            float *din, float *dP, int batch) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const float *w = P;
  float *dw = dP, *db = dP + (size_t)l->kh * l->kw * C;
  bt_dw_geom gd;
  if (dwconv_fast(l, batch, &gd)) {
    bt_dwconv3x3_bwd(&gd, in, w, dout, din, dw, db);
    return;
  }
  if (din)
    memset(din, 0, sizeof(float) * (size_t)batch * H * W * C);
  add_column_sums(db, dout, (size_t)batch * OH * OW, C);
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        const float *g = dout + (((size_t)b * OH + oy) * OW + ox) * C;
        for (int ky = 0; ky < l->kh; ky++) {
          const int iy = oy * l->stride - l->pad + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < l->kw; kx++) {
            const int ix = ox * l->stride - l->pad + kx;
            if (ix < 0 || ix >= W)
              continue;
            const size_t at = (((size_t)b * H + iy) * W + ix) * C;
            const size_t kat = ((size_t)ky * l->kw + kx) * C;
            for (int c = 0; c < C; c++)
              dw[kat + c] += g[c] * in[at + c];
            if (din)
              for (int c = 0; c < C; c++)
                din[at + c] += g[c] * w[kat + c];
          }
        }
      }
}

/* ---- dense ------------------------------------------------------------ */

static void dense_forward(const bt_layer *l, const float *P, const float *in, float *out,
                          int batch) {
  const int I = (int)bt_shape_elems(l->in), O = l->units;
  fill_bias_rows(out, P + (size_t)I * O, batch, O);
  bt_sgemm(false, false, batch, O, I, 1.0f, in, I, P, O, 1.0f, out, O);
}

static void dense_backward(const bt_layer *l, const float *P, const float *in, const float *dout,
                           float *din, float *dP, int batch) {
  const int I = (int)bt_shape_elems(l->in), O = l->units;
  bt_sgemm(true, false, I, O, batch, 1.0f, in, I, dout, O, 1.0f, dP, O);
  add_column_sums(dP + (size_t)I * O, dout, batch, O);
  if (din)
    bt_sgemm(false, true, batch, I, O, 1.0f, dout, O, P, O, 0.0f, din, I);
}

/* ---- pooling ---------------------------------------------------------- */

/* Strict >: the first maximum wins, as in PyTorch. Branch-free selects on
 * non-aliasing rows let the compiler vectorise over channels. */
static void max_update(float *restrict o, int32_t *restrict a, const float *restrict v, int base,
                       int C) {
  for (int c = 0; c < C; c++) {
    const float ov = o[c], vv = v[c];
    const int32_t av = a[c];
    const int32_t mask = -(int32_t)(vv > ov);
    o[c] = vv > ov ? vv : ov;
    a[c] = ((base + c) & mask) | (av & ~mask);
  }
}

static void maxpool_forward(const bt_layer *l, const float *in, float *out, int32_t *arg,
                            int batch) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  for (int b = 0; b < batch; b++) {
    const float *img = in + (size_t)b * H * W * C;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        float *o = out + (((size_t)b * OH + oy) * OW + ox) * C;
        int32_t *a = arg + (((size_t)b * OH + oy) * OW + ox) * C;
        for (int c = 0; c < C; c++)
          o[c] = -INFINITY, a[c] = -1;
        for (int ky = 0; ky < l->kh; ky++) {
          const int iy = oy * l->stride - l->pad + ky;
          if (iy < 0 || iy >= H)
            continue;
          for (int kx = 0; kx < l->kw; kx++) {
            const int ix = ox * l->stride - l->pad + kx;
            if (ix < 0 || ix >= W)
              continue;
            const int base = (iy * W + ix) * C;
            max_update(o, a, img + base, base, C);
          }
        }
      }
  }
}

static void maxpool_backward(const bt_layer *l, const int32_t *arg, const float *dout, float *din,
                             int batch) {
  const size_t in_s = bt_shape_elems(l->in), out_s = bt_shape_elems(l->out);
  memset(din, 0, sizeof(float) * batch * in_s);
  for (int b = 0; b < batch; b++)
    for (size_t i = 0; i < out_s; i++) {
      int32_t a = arg[b * out_s + i];
      if (a >= 0)
        din[b * in_s + a] += dout[b * out_s + i];
    }
}

/* Average pooling divides by the full window (padding counts as zeros), as
 * PyTorch's default count_include_pad=True does. */
static void avgpool_forward(const bt_layer *l, const float *in, float *out, int batch) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const float scale = 1.0f / (float)(l->kh * l->kw);
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        float *o = out + (((size_t)b * OH + oy) * OW + ox) * C;
        memset(o, 0, sizeof(float) * C);
        for (int ky = 0; ky < l->kh; ky++) {
          const int iy = oy * l->stride - l->pad + ky;
          for (int kx = 0; kx < l->kw; kx++) {
            const int ix = ox * l->stride - l->pad + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
              continue;
            const float *i = in + (((size_t)b * H + iy) * W + ix) * C;
            for (int c = 0; c < C; c++)
              o[c] += i[c];
          }
        }
        for (int c = 0; c < C; c++)
          o[c] *= scale;
      }
}

static void avgpool_backward(const bt_layer *l, const float *dout, float *din, int batch) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, OH = l->out.h, OW = l->out.w;
  const float scale = 1.0f / (float)(l->kh * l->kw);
  memset(din, 0, sizeof(float) * (size_t)batch * H * W * C);
  for (int b = 0; b < batch; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        const float *g = dout + (((size_t)b * OH + oy) * OW + ox) * C;
        for (int ky = 0; ky < l->kh; ky++) {
          const int iy = oy * l->stride - l->pad + ky;
          for (int kx = 0; kx < l->kw; kx++) {
            const int ix = ox * l->stride - l->pad + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
              continue;
            float *d = din + (((size_t)b * H + iy) * W + ix) * C;
            for (int c = 0; c < C; c++)
              d[c] += g[c] * scale;
          }
        }
      }
}

static void gap_forward(const bt_layer *l, const float *in, float *out, int batch) {
  const int C = l->in.c, HW = l->in.h * l->in.w;
  for (int b = 0; b < batch; b++) {
    float *o = out + (size_t)b * C;
    memset(o, 0, sizeof(float) * C);
    for (int p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        o[c] += in[((size_t)b * HW + p) * C + c];
    for (int c = 0; c < C; c++)
      o[c] /= (float)HW;
  }
}

static void gap_backward(const bt_layer *l, const float *dout, float *din, int batch) {
  const int C = l->in.c, HW = l->in.h * l->in.w;
  for (int b = 0; b < batch; b++)
    for (int p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        din[((size_t)b * HW + p) * C + c] = dout[(size_t)b * C + c] / (float)HW;
}

/* ---- batch normalisation ---------------------------------------------- */

/* One pass for the statistics (sums of x - x[0] and its square, see
 * bt_bn_stats), one for the normalisation; backward likewise. */
static void bn_forward(const bt_layer *l, const float *P, float *S, const float *in, float *out,
                       float *aux, int batch, const bt_exec *x) {
  const int C = l->in.c;
  const size_t R = (size_t)batch * l->in.h * l->in.w;
  const float *gamma = P, *beta = P + C;
  float *mean = aux, *invstd = aux + C;
  float *run_mean = S, *run_var = S + C;
  if (x->training) {
    double s1[C], s2[C];
    bt_bn_stats(in, R, C, in, s1, s2, NULL);
    for (int c = 0; c < C; c++) {
      const double dm = s1[c] / (double)R;
      double var = s2[c] / (double)R - dm * dm;
      var = var > 0.0 ? var : 0.0;
      mean[c] = (float)(in[c] + dm);
      invstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
      double unbiased = R > 1 ? var * (double)R / (double)(R - 1) : var;
      run_mean[c] = (1.0f - BN_MOMENTUM) * run_mean[c] + BN_MOMENTUM * mean[c];
      run_var[c] = (1.0f - BN_MOMENTUM) * run_var[c] + BN_MOMENTUM * (float)unbiased;
    }
  } else {
    for (int c = 0; c < C; c++) {
      mean[c] = run_mean[c];
      invstd[c] = 1.0f / sqrtf(run_var[c] + BN_EPS);
    }
  }
  float scale[C], shift[C];
  for (int c = 0; c < C; c++) {
    scale[c] = gamma[c] * invstd[c];
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  bt_bn_apply(in, R, C, scale, NULL, NULL, NULL, shift, out);
}

static void bn_backward(const bt_layer *l, const float *P, const float *in, const float *aux,
                        const float *dout, float *din, float *dP, int batch, const bt_exec *x) {
  const int C = l->in.c;
  const size_t R = (size_t)batch * l->in.h * l->in.w;
  const float *gamma = P, *mean = aux, *invstd = aux + C;
  float *dgamma = dP, *dbeta = dP + C;
  double sg[C], sgx[C]; /* sum dout, sum dout * xhat */
  bt_bn_stats(in, R, C, mean, sg, sgx, dout);
  for (int c = 0; c < C; c++) {
    sgx[c] *= invstd[c];
    dgamma[c] += (float)sgx[c];
    dbeta[c] += (float)sg[c];
  }
  if (!din)
    return;
  float k[C], zero[C];
  for (int c = 0; c < C; c++) {
    k[c] = gamma[c] * invstd[c];
    zero[c] = 0.0f;
  }
  if (!x->training) { /* statistics are constants in eval mode */
    bt_bn_apply(dout, R, C, k, NULL, NULL, NULL, zero, din);
    return;
  }
  /* din = k (dout - mean(dout) - xhat mean(dout xhat))
   *     = k dout - k invstd mean(dout xhat) (x - mean) - k mean(dout) */
  float b[C], c0[C];
  for (int c = 0; c < C; c++) {
    b[c] = -k[c] * invstd[c] * (float)(sgx[c] / (double)R);
    c0[c] = -k[c] * (float)(sg[c] / (double)R);
  }
  bt_bn_apply(in, R, C, k, dout, b, mean, c0, din);
}

/* ---- element-wise ----------------------------------------------------- */

/* ReLU clipped at `cap` (INFINITY for plain ReLU, 6 for ReLU6). Loads are
 * unconditional so the selects vectorise instead of branching on data. */
static void relu_forward(const float *restrict in, float *restrict out, size_t n, float cap) {
  for (size_t i = 0; i < n; i++) {
    const float v = in[i] > 0.0f ? in[i] : 0.0f;
    out[i] = v < cap ? v : cap;
  }
}

/* The gradient passes where the output is strictly inside (0, cap). */
static void relu_backward(const float *restrict out, const float *restrict dout,
                          float *restrict din, size_t n, float cap) {
  for (size_t i = 0; i < n; i++) {
    const float o = out[i], g = dout[i];
    din[i] = o > 0.0f && o < cap ? g : 0.0f;
  }
}

static void dropout_forward(const bt_layer *l, const float *in, float *out, float *mask, size_t n,
                            const bt_exec *x) {
  if (!x->training || l->p == 0.0f) {
    memcpy(out, in, sizeof(float) * n);
    return;
  }
  bt_rng rng;
  bt_rng_seed(&rng, x->seed, bt_rng_stream(l->stream, (uint64_t)x->step, (uint64_t)x->micro));
  const float keep = 1.0f / (1.0f - l->p);
  for (size_t i = 0; i < n; i++) {
    mask[i] = bt_rng_uniform(&rng) >= l->p ? keep : 0.0f;
    out[i] = in[i] * mask[i];
  }
}

static void softmax_ce_forward(const bt_layer *l, const float *in, float *out, int batch,
                               bt_exec *x) {
  const int K = l->in.c;
  for (int b = 0; b < batch; b++) {
    const float *z = in + (size_t)b * K;
    float *p = out + (size_t)b * K;
    float zmax = z[0];
    int best = 0;
    for (int k = 1; k < K; k++)
      if (z[k] > zmax)
        zmax = z[k], best = k;
    double sum = 0;
    for (int k = 0; k < K; k++)
      sum += p[k] = expf(z[k] - zmax);
    for (int k = 0; k < K; k++)
      p[k] = (float)(p[k] / sum);
    if (x->labels) {
      int y = x->labels[b];
      x->loss_sum += log(sum) - (double)(z[y] - zmax);
      x->correct += best == y;
    }
  }
}

static void softmax_ce_backward(const bt_layer *l, const float *out, float *din, int batch,
                                const bt_exec *x) {
  const int K = l->in.c;
  for (int b = 0; b < batch; b++) {
    for (int k = 0; k < K; k++)
      din[(size_t)b * K + k] = out[(size_t)b * K + k] * x->loss_scale;
    din[(size_t)b * K + x->labels[b]] -= x->loss_scale;
  }
}

/* ---- residual block --------------------------------------------------- */

/* Where each sub-layer's output and saved state live inside the block's aux. */
static void residual_layout(const bt_layer *l, float *aux, int batch, float **outs, float **auxs) {
  float *a = aux;
  for (int j = 0; j < l->n_body + l->n_short; j++) {
    outs[j] = a;
    a += (size_t)batch * bt_shape_elems(l->sub[j].out);
    auxs[j] = a;
    a += bt_layer_aux_floats(&l->sub[j], batch);
  }
}

static void residual_forward(const bt_layer *l, const float *P, float *S, const float *in,
                             float *out, float *aux, int batch, bt_exec *x) {
  float *outs[MAX_SUB], *auxs[MAX_SUB];
  residual_layout(l, aux, batch, outs, auxs);
  const float *h = in, *s = in;
  for (int j = 0; j < l->n_body + l->n_short; j++) {
    const bt_layer *sl = &l->sub[j];
    const float *src = j < l->n_body ? h : (j == l->n_body ? in : s);
    bt_layer_forward(sl, P + sl->param_off, S + sl->state_off, src, outs[j], auxs[j], batch, x);
    if (j < l->n_body)
      h = outs[j];
    else
      s = outs[j];
  }
  const size_t n = (size_t)batch * bt_shape_elems(l->out);
  for (size_t i = 0; i < n; i++) {
    float v = h[i] + s[i];
    out[i] = l->post_relu && v < 0.0f ? 0.0f : v;
  }
}

/* Back-propagates g through sub-layers [first, last) of the block, whose
 * first layer reads `in`; the gradient for `in` goes to `din` (or nowhere). */
static void residual_chain_backward(const bt_layer *l, int first, int last, const float *P,
                                    const float *in, float **outs, float **auxs, const float *g,
                                    float *din, float *dP, float *ping, float *pong, int batch,
                                    bt_exec *x) {
  const float *cur = g;
  for (int j = last - 1; j >= first; j--) {
    const bt_layer *sl = &l->sub[j];
    const float *src = j == first ? in : outs[j - 1];
    float *dst = j == first ? din : (cur == ping ? pong : ping);
    bt_layer_backward(sl, P + sl->param_off, src, outs[j], auxs[j], cur, dst, dP + sl->param_off,
                      batch, x);
    cur = dst;
  }
}

static void residual_backward(const bt_layer *l, const float *P, const float *in, const float *out,
                              const float *aux, const float *dout, float *din, float *dP, int batch,
                              bt_exec *x) {
  float *outs[MAX_SUB], *auxs[MAX_SUB];
  residual_layout(l, (float *)aux, batch, outs, auxs);
  const size_t m = (size_t)batch * residual_max_elems(l);
  const size_t n_out = (size_t)batch * bt_shape_elems(l->out);
  const size_t n_in = (size_t)batch * bt_shape_elems(l->in);
  float *g = x->ws, *ping = g + m, *pong = ping + m, *dshort = pong + m;
  bt_exec inner = *x;
  inner.ws = dshort + m;
  inner.ws_floats = x->ws_floats - 4 * m;
  if (l->post_relu)
    relu_backward(out, dout, g, n_out, INFINITY);
  else
    memcpy(g, dout, sizeof(float) * n_out);
  residual_chain_backward(l, 0, l->n_body, P, in, outs, auxs, g, din, dP, ping, pong, batch,
                          &inner);
  if (!din && l->n_short == 0)
    return;
  if (l->n_short == 0) {
    for (size_t i = 0; i < n_in; i++)
      din[i] += g[i];
    return;
  }
  residual_chain_backward(l, l->n_body, l->n_body + l->n_short, P, in, outs, auxs, g,
                          din ? dshort : NULL, dP, ping, pong, batch, &inner);
  if (din)
    for (size_t i = 0; i < n_in; i++)
      din[i] += dshort[i];
}

/* ---- dispatch --------------------------------------------------------- */

void bt_layer_forward(const bt_layer *l, const float *P, float *S, const float *in, float *out,
                      float *aux, int batch, bt_exec *x) {
  const size_t n_in = (size_t)batch * bt_shape_elems(l->in);
  switch (l->kind) {
  case BT_CONV2D:
    conv_forward(l, P, in, out, batch, x);
    break;
  case BT_DWCONV2D:
    dwconv_forward(l, P, in, out, batch);
    break;
  case BT_DENSE:
    dense_forward(l, P, in, out, batch);
    break;
  case BT_RELU:
    relu_forward(in, out, n_in, INFINITY);
    break;
  case BT_RELU6:
    relu_forward(in, out, n_in, 6.0f);
    break;
  case BT_MAXPOOL:
    maxpool_forward(l, in, out, (int32_t *)aux, batch);
    break;
  case BT_AVGPOOL:
    avgpool_forward(l, in, out, batch);
    break;
  case BT_GLOBAL_AVGPOOL:
    gap_forward(l, in, out, batch);
    break;
  case BT_BATCHNORM:
    bn_forward(l, P, S, in, out, aux, batch, x);
    break;
  case BT_FLATTEN:
    memcpy(out, in, sizeof(float) * n_in);
    break;
  case BT_DROPOUT:
    dropout_forward(l, in, out, aux, n_in, x);
    break;
  case BT_RESIDUAL:
    residual_forward(l, P, S, in, out, aux, batch, x);
    break;
  case BT_SOFTMAX_CE:
    softmax_ce_forward(l, in, out, batch, x);
    break;
  default:
    break;
  }
}

void bt_layer_backward(const bt_layer *l, const float *P, const float *in, const float *out,
                       const float *aux, const float *dout, float *din, float *dP, int batch,
                       bt_exec *x) {
  const size_t n_in = (size_t)batch * bt_shape_elems(l->in);
  switch (l->kind) {
  case BT_CONV2D:
    conv_backward(l, P, in, dout, din, dP, batch, x);
    return;
  case BT_DWCONV2D:
    dwconv_backward(l, P, in, dout, din, dP, batch);
    return;
  case BT_DENSE:
    dense_backward(l, P, in, dout, din, dP, batch);
    return;
  case BT_BATCHNORM:
    bn_backward(l, P, in, aux, dout, din, dP, batch, x);
    return;
  case BT_RESIDUAL:
    residual_backward(l, P, in, out, aux, dout, din, dP, batch, x);
    return;
  default:
    break;
  }
  if (!din)
    return;
  switch (l->kind) {
  case BT_RELU:
    relu_backward(out, dout, din, n_in, INFINITY);
    break;
  case BT_RELU6:
    relu_backward(out, dout, din, n_in, 6.0f);
    break;
  case BT_MAXPOOL:
    maxpool_backward(l, (const int32_t *)aux, dout, din, batch);
    break;
  case BT_AVGPOOL:
    avgpool_backward(l, dout, din, batch);
    break;
  case BT_GLOBAL_AVGPOOL:
    gap_backward(l, dout, din, batch);
    break;
  case BT_FLATTEN:
    memcpy(din, dout, sizeof(float) * n_in);
    break;
  case BT_DROPOUT:
    if (x->training && l->p > 0.0f)
      for (size_t i = 0; i < n_in; i++)
        din[i] = dout[i] * aux[i];
    else
      memcpy(din, dout, sizeof(float) * n_in);
    break;
  case BT_SOFTMAX_CE:
    softmax_ce_backward(l, out, din, batch, x);
    break;
  default:
    break;
  }
}

void bt_layer_release(bt_layer *l) {
  if (l->kind != BT_RESIDUAL || !l->sub)
    return;
  for (int j = 0; j < l->n_body + l->n_short; j++)
    bt_layer_release(&l->sub[j]);
  free(l->sub);
  l->sub = NULL;
}
