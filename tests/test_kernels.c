/* The special convolution paths (direct AVX-512 kernel, input gradient as a
 * convolution with flipped weights, balanced im2col chunks) against naive
 * loops, on shapes that trigger each of them: the spatial and the batch
 * blocking, remainders of pixel and channel blocks, 2x2 and 1x1 images where
 * most taps fall on padding, 5x5 kernels and padding 0. On a CPU without
 * AVX-512 the layer tests still check the im2col path. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton/kernels.h"
#include "baton/layers.h"
#include "baton/model.h"
#include "baton/rng.h"

static void fill_normal(float *p, size_t n, uint64_t stream) {
  bt_rng rng;
  bt_rng_seed(&rng, 42, stream);
  for (size_t i = 0; i < n; i++)
    p[i] = bt_rng_normal(&rng);
}

/* out[n][oy][ox][k] = bias[k] + sum in[n][oy*s-pad+ky][ox*s-pad+kx][c] w[ky][kx][c][k] */
static void ref_forward(const bt_layer *l, int batch, const float *in, const float *P,
                        double *out) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, K = l->out.c, OH = l->out.h, OW = l->out.w;
  const float *bias = P + (size_t)l->kh * l->kw * C * K;
  for (int n = 0; n < batch; n++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int k = 0; k < K; k++) {
          double s = bias[k];
          for (int ky = 0; ky < l->kh; ky++)
            for (int kx = 0; kx < l->kw; kx++) {
              const int iy = oy * l->stride - l->pad + ky, ix = ox * l->stride - l->pad + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                continue;
              for (int c = 0; c < C; c++)
                s += (double)in[(((size_t)n * H + iy) * W + ix) * C + c] *
                     P[((size_t)(ky * l->kw + kx) * C + c) * K + k];
            }
          out[(((size_t)n * OH + oy) * OW + ox) * K + k] = s;
        }
}

/* din and dP (weights then bias) of the same convolution for upstream g. */
static void ref_backward(const bt_layer *l, int batch, const float *in, const float *P,
                         const float *g, double *din, double *dP) {
  const int H = l->in.h, W = l->in.w, C = l->in.c, K = l->out.c, OH = l->out.h, OW = l->out.w;
  const size_t nw = (size_t)l->kh * l->kw * C * K;
  memset(din, 0, sizeof(double) * batch * H * W * C);
  memset(dP, 0, sizeof(double) * (nw + K));
  for (int n = 0; n < batch; n++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int k = 0; k < K; k++) {
          const double gv = g[(((size_t)n * OH + oy) * OW + ox) * K + k];
          dP[nw + k] += gv;
          for (int ky = 0; ky < l->kh; ky++)
            for (int kx = 0; kx < l->kw; kx++) {
              const int iy = oy * l->stride - l->pad + ky, ix = ox * l->stride - l->pad + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                continue;
              for (int c = 0; c < C; c++) {
                const size_t ii = (((size_t)n * H + iy) * W + ix) * C + c;
                const size_t wi = ((size_t)(ky * l->kw + kx) * C + c) * K + k;
                din[ii] += gv * P[wi];
                dP[wi] += gv * in[ii];
              }
            }
        }
}

static void expect_close(const float *got, const double *want, size_t n, const char *what) {
  double scale = 0;
  for (size_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= 1e-5 * (1.0 + scale), "%s[%zu]: got %.7g want %.7g", what,
              i, got[i], want[i]);
}

/* Runs the layer's forward and backward (the paths the engine picks) and
 * compares output, input gradient and parameter gradients to the loops. */
static void check_conv_once(int units, int kernel, int stride, int pad, bt_shape in, int batch) {
  bt_layer l = bt_conv2d(units, kernel, stride, pad);
  l.in = in;
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, "test", &err), 0, "%s", err.msg);
  const size_t n_in = (size_t)batch * bt_shape_elems(l.in);
  const size_t n_out = (size_t)batch * bt_shape_elems(l.out);
  const size_t n_ws = bt_layer_ws_floats(&l, batch);
  float *P = malloc(sizeof(float) * l.n_params), *x = malloc(sizeof(float) * n_in);
  float *y = malloc(sizeof(float) * n_out), *g = malloc(sizeof(float) * n_out);
  float *dx = malloc(sizeof(float) * n_in), *dP = malloc(sizeof(float) * l.n_params);
  float *ws = malloc(sizeof(float) * (n_ws + 1));
  double *ry = malloc(sizeof(double) * n_out), *rdx = malloc(sizeof(double) * n_in);
  double *rdP = malloc(sizeof(double) * l.n_params);
  fill_normal(P, l.n_params, 1);
  fill_normal(x, n_in, 2);
  fill_normal(g, n_out, 3);
  for (size_t i = 0; i < l.n_params; i++) /* backward adds into dP */
    dP[i] = 0.0f;
  bt_exec ex = {.training = 1, .ws = ws, .ws_floats = n_ws};
  bt_layer_forward(&l, P, NULL, x, y, NULL, batch, &ex);
  bt_layer_backward(&l, P, x, y, NULL, g, dx, dP, batch, &ex);
  ref_forward(&l, batch, x, P, ry);
  ref_backward(&l, batch, x, P, g, rdx, rdP);
  expect_close(y, ry, n_out, "out");
  expect_close(dx, rdx, n_in, "din");
  expect_close(dP, rdP, l.n_params, "dP");
  free(P), free(x), free(y), free(g), free(dx), free(dP), free(ws), free(ry), free(rdx), free(rdP);
}

/* Both the paths this CPU picks and the portable ones (im2col + GEMM). */
static void check_conv(int units, int kernel, int stride, int pad, bt_shape in, int batch) {
  check_conv_once(units, kernel, stride, pad, in, batch);
  bt_kernels_force_generic(1);
  check_conv_once(units, kernel, stride, pad, in, batch);
  bt_kernels_force_generic(0);
}

/* Spatial blocking: 9-wide rows (6 + 3 pixels), 48 and 80 output channels
 * (3 vectors; 4 + 1 vectors), 16 and 32 input channels (weight-gradient
 * blocks of 6 + remainders), top/bottom kernel rows skipped; 13-wide rows x
 * 7 rows x 12 samples spans several weight-gradient row chunks. */
Test(kernels, conv_spatial_many_rows) { check_conv(16, 3, 1, 1, (bt_shape){7, 13, 16}, 12); }
Test(kernels, conv_spatial_remainders) { check_conv(48, 3, 1, 1, (bt_shape){6, 9, 16}, 2); }
Test(kernels, conv_spatial_k80) { check_conv(80, 3, 1, 1, (bt_shape){7, 13, 32}, 2); }
Test(kernels, conv_spatial_5x5_pad2) { check_conv(32, 5, 1, 2, (bt_shape){8, 7, 16}, 2); }
Test(kernels, conv_spatial_pad0) { check_conv(16, 3, 1, 0, (bt_shape){7, 8, 16}, 3); }
Test(kernels, conv_batch_5x5_pad1) { check_conv(16, 5, 1, 1, (bt_shape){6, 5, 16}, 2); }

/* Batch blocking (images of at most 16 pixels): 11 and 19 samples (uneven
 * blocks), 4x4, 2x2 and 1x1 images where most taps are on the padding. */
Test(kernels, conv_batch_4x4) { check_conv(64, 3, 1, 1, (bt_shape){4, 4, 32}, 11); }
Test(kernels, conv_batch_2x2) { check_conv(80, 3, 1, 1, (bt_shape){2, 2, 16}, 19); }
Test(kernels, conv_batch_1x1) { check_conv(32, 3, 1, 1, (bt_shape){1, 1, 48}, 5); }
Test(kernels, conv_batch_3x2_5x5) { check_conv(16, 5, 1, 2, (bt_shape){3, 2, 16}, 7); }

/* Shapes that stay on im2col + GEMM: stride 2, few input channels, output
 * channels not a multiple of 16 (input gradient via col2im), 1x1. */
Test(kernels, conv_im2col_stride2) { check_conv(32, 3, 2, 1, (bt_shape){8, 8, 16}, 3); }
Test(kernels, conv_im2col_thin_input) { check_conv(32, 3, 1, 1, (bt_shape){6, 6, 3}, 3); }
Test(kernels, conv_im2col_odd_units) { check_conv(20, 3, 1, 1, (bt_shape){5, 5, 16}, 3); }
/* Forward direct, input gradient lowered (24 input channels are not whole
 * vectors for the flipped convolution). */
Test(kernels, conv_direct_fwd_only) { check_conv(32, 3, 1, 1, (bt_shape){6, 7, 24}, 3); }
Test(kernels, conv_direct_fwd_only_small) { check_conv(32, 3, 1, 1, (bt_shape){2, 2, 24}, 3); }
Test(kernels, conv_pointwise) { check_conv(32, 1, 1, 0, (bt_shape){4, 4, 16}, 3); }

/* Thin kernels (fewer than 16 output channels; input gradients of layers
 * with fewer than 16 input channels): LeNet's 1 -> 6 5x5 pad 2 and
 * 6 -> 16 5x5 pad 0 (direct forward with 6 input channels, thin input
 * gradient), 1 and 3 phases of weight patterns with rows that end inside a
 * vector (7x6 = 42 floats), more than 12 vectors per row (block
 * remainders), the generic phase count (K = 5, 7), K = 12 and K = 1, and a
 * 3-channel input (forward lowered, input gradient thin). */
Test(kernels, conv_thin_lenet1) { check_conv(6, 5, 1, 2, (bt_shape){12, 9, 1}, 3); }
Test(kernels, conv_thin_lenet2) { check_conv(16, 5, 1, 0, (bt_shape){9, 8, 6}, 3); }
Test(kernels, conv_thin_tail) { check_conv(6, 3, 1, 1, (bt_shape){5, 7, 2}, 2); }
Test(kernels, conv_thin_long_rows) { check_conv(8, 3, 1, 1, (bt_shape){3, 40, 3}, 2); }
Test(kernels, conv_thin_k5) { check_conv(5, 3, 1, 0, (bt_shape){6, 9, 4}, 2); }
Test(kernels, conv_thin_k7_long) { check_conv(7, 5, 1, 2, (bt_shape){4, 33, 3}, 2); }
Test(kernels, conv_thin_k12) { check_conv(12, 3, 1, 1, (bt_shape){5, 6, 16}, 2); }
Test(kernels, conv_thin_k1) { check_conv(1, 3, 1, 2, (bt_shape){5, 6, 1}, 2); }
Test(kernels, conv_thin_din_c3) { check_conv(32, 3, 1, 1, (bt_shape){5, 6, 3}, 2); }

/* Balanced im2col chunks: 10 samples of a 64x64 image do not fit one chunk. */
Test(kernels, conv_im2col_chunks) { check_conv(8, 3, 2, 1, (bt_shape){64, 64, 3}, 10); }

Test(kernels, flip_weights) {
  const int kh = 3, kw = 3, c = 20, k = 36;
  const size_t n = (size_t)kh * kw * c * k;
  float *w = malloc(sizeof(float) * n), *wf = malloc(sizeof(float) * n);
  fill_normal(w, n, 9);
  bt_conv_flip_weights(kh, kw, c, k, w, wf);
  for (int ky = 0; ky < kh; ky++)
    for (int kx = 0; kx < kw; kx++)
      for (int ci = 0; ci < c; ci++)
        for (int ki = 0; ki < k; ki++)
          cr_assert_eq(wf[((size_t)(ky * kw + kx) * k + ki) * c + ci],
                       w[((size_t)((kh - 1 - ky) * kw + (kw - 1 - kx)) * c + ci) * k + ki]);
  free(w), free(wf);
}

/* Says in the log which path the tests above exercised; the direct kernel
 * refuses output channels that do not fill whole vectors. */
Test(kernels, direct_path_reported) {
  bt_conv_geom g = {2, 4, 4, 16, 32, 3, 3, 1, 4, 4};
  int ok = bt_conv_direct_ok(&g);
  cr_log_info("direct AVX-512 convolution %s on this CPU", ok ? "used" : "not available");
  g.k = 20; /* output channels must fill whole vectors */
  cr_assert_eq(bt_conv_direct_ok(&g), 0);
}

/* Batch-norm (one-pass statistics, AVX-512 and portable) against two-pass
 * double loops: training forward, running statistics, input and parameter
 * gradients; channel counts that end inside a vector (20), more than one
 * register group (72 = 64 + 8), row counts that are not multiples of the
 * float blocks, and an offset mean (the one-pass variance needs its shift). */
static void check_bn_once(int C, bt_shape in, int batch, float offset) {
  bt_layer l = bt_batchnorm();
  in.c = C;
  l.in = in;
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, "test", &err), 0, "%s", err.msg);
  const size_t R = (size_t)batch * in.h * in.w, n = R * C;
  float *P = malloc(sizeof(float) * 2 * C), *S = malloc(sizeof(float) * 2 * C);
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
  float *g = malloc(sizeof(float) * n), *dx = malloc(sizeof(float) * n);
  float *dP = calloc(2 * C, sizeof(float)), *aux = malloc(sizeof(float) * 2 * C);
  double *ry = malloc(sizeof(double) * n), *rdx = malloc(sizeof(double) * n);
  double *rdP = calloc(2 * C, sizeof(double)), *rS = malloc(sizeof(double) * 2 * C);
  fill_normal(P, 2 * C, 4);
  fill_normal(x, n, 5);
  fill_normal(g, n, 6);
  for (size_t i = 0; i < n; i++)
    x[i] = offset + x[i] * (1.0f + (float)(i % C) / C);
  for (int c = 0; c < C; c++)
    S[c] = 0.0f, S[C + c] = 1.0f;
  bt_exec ex = {.training = 1};
  bt_layer_forward(&l, P, S, x, y, aux, batch, &ex);
  bt_layer_backward(&l, P, x, y, aux, g, dx, dP, batch, &ex);
  for (int c = 0; c < C; c++) {
    double m = 0, v = 0, sg = 0, sgx = 0;
    for (size_t r = 0; r < R; r++)
      m += x[r * C + c];
    m /= (double)R;
    for (size_t r = 0; r < R; r++)
      v += (x[r * C + c] - m) * (x[r * C + c] - m);
    v /= (double)R;
    const double is = 1.0 / sqrt(v + 1e-5);
    for (size_t r = 0; r < R; r++) {
      const double xh = (x[r * C + c] - m) * is;
      ry[r * C + c] = P[c] * xh + P[C + c];
      sg += g[r * C + c];
      sgx += g[r * C + c] * xh;
    }
    for (size_t r = 0; r < R; r++) {
      const double xh = (x[r * C + c] - m) * is;
      rdx[r * C + c] = P[c] * is * (g[r * C + c] - sg / R - xh * sgx / R);
    }
    rdP[c] = sgx;
    rdP[C + c] = sg;
    rS[c] = 0.1 * m;
    rS[C + c] = 0.9 + 0.1 * v * R / (R - 1);
  }
  expect_close(y, ry, n, "bn out");
  expect_close(dx, rdx, n, "bn din");
  expect_close(dP, rdP, 2 * C, "bn dP");
  expect_close(S, rS, 2 * C, "bn running stats");
  free(P), free(S), free(x), free(y), free(g), free(dx), free(dP), free(aux);
  free(ry), free(rdx), free(rdP), free(rS);
}

static void check_bn(int C, bt_shape in, int batch, float offset) {
  check_bn_once(C, in, batch, offset);
  bt_kernels_force_generic(1);
  check_bn_once(C, in, batch, offset);
  bt_kernels_force_generic(0);
}

Test(kernels, bn_c16) { check_bn(16, (bt_shape){5, 5, 0}, 3, 0.0f); }
Test(kernels, bn_c20_offset) { check_bn(20, (bt_shape){3, 7, 0}, 5, 3.0f); }
Test(kernels, bn_c72_many_rows) { check_bn(72, (bt_shape){17, 9, 0}, 2, -1.5f); }
Test(kernels, bn_c3) { check_bn(3, (bt_shape){4, 4, 0}, 2, 0.5f); }

/* Depthwise 3x3 (AVX-512 and portable loops) against double loops: output,
 * input gradient (gathered by the fast path), weight and bias gradients;
 * strides 1 and 2, odd sizes, channel counts ending inside a vector. */
static void check_dw_once(int stride, int pad, bt_shape in, int batch) {
  bt_layer l = bt_dwconv2d(3, stride, pad);
  l.in = in;
  bt_err err;
  cr_assert_eq(bt_layer_finalize(&l, "test", &err), 0, "%s", err.msg);
  const int H = in.h, W = in.w, C = in.c, OH = l.out.h, OW = l.out.w;
  const size_t n_in = (size_t)batch * H * W * C, n_out = (size_t)batch * OH * OW * C;
  float *P = malloc(sizeof(float) * l.n_params), *x = malloc(sizeof(float) * n_in);
  float *y = malloc(sizeof(float) * n_out), *g = malloc(sizeof(float) * n_out);
  float *dx = malloc(sizeof(float) * n_in), *dP = calloc(l.n_params, sizeof(float));
  double *ry = calloc(n_out, sizeof(double)), *rdx = calloc(n_in, sizeof(double));
  double *rdP = calloc(l.n_params, sizeof(double));
  fill_normal(P, l.n_params, 7);
  fill_normal(x, n_in, 8);
  fill_normal(g, n_out, 9);
  bt_exec ex = {.training = 1};
  bt_layer_forward(&l, P, NULL, x, y, NULL, batch, &ex);
  bt_layer_backward(&l, P, x, y, NULL, g, dx, dP, batch, &ex);
  for (int n = 0; n < batch; n++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int c = 0; c < C; c++) {
          const size_t o = (((size_t)n * OH + oy) * OW + ox) * C + c;
          double s = P[9 * C + c];
          rdP[9 * C + c] += g[o];
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                continue;
              const size_t i = (((size_t)n * H + iy) * W + ix) * C + c;
              s += (double)x[i] * P[(ky * 3 + kx) * C + c];
              rdx[i] += (double)g[o] * P[(ky * 3 + kx) * C + c];
              rdP[(ky * 3 + kx) * C + c] += (double)g[o] * x[i];
            }
          ry[o] = s;
        }
  expect_close(y, ry, n_out, "dw out");
  expect_close(dx, rdx, n_in, "dw din");
  expect_close(dP, rdP, l.n_params, "dw dP");
  free(P), free(x), free(y), free(g), free(dx), free(dP), free(ry), free(rdx), free(rdP);
}

static void check_dw(int stride, int pad, bt_shape in, int batch) {
  check_dw_once(stride, pad, in, batch);
  bt_kernels_force_generic(1);
  check_dw_once(stride, pad, in, batch);
  bt_kernels_force_generic(0);
}

Test(kernels, dwconv_s1_c20) { check_dw(1, 1, (bt_shape){7, 6, 20}, 2); }
Test(kernels, dwconv_s2_c40) { check_dw(2, 1, (bt_shape){7, 8, 40}, 2); }
Test(kernels, dwconv_s2_even_c16) { check_dw(2, 1, (bt_shape){8, 8, 16}, 3); }
Test(kernels, dwconv_s1_pad0_c3) { check_dw(1, 0, (bt_shape){5, 4, 3}, 2); }
Test(kernels, dwconv_s2_pad2_1x1) { check_dw(2, 2, (bt_shape){1, 2, 17}, 2); }
