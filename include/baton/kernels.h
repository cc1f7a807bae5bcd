/* kernels: hand-written compute kernels behind the layers (internal).
 *
 * A direct stride-1 convolution with AVX-512 register blocking. im2col + GEMM
 * moves every input value through two extra copies (the lowered matrix and
 * BLIS's packed panels) and multiplies the zero taps of the padding; for the
 * narrow (64-channel) and tiny-image (4x4, 2x2) convolutions of ResNet and
 * VGG on 32x32 inputs those costs rival the arithmetic. The direct kernel
 * reads the input in place, skips padding taps and keeps 6 output pixels x
 * 64 channels in registers. It is compiled for AVX-512F only and chosen at
 * run time (the binary stays portable); callers fall back to im2col + GEMM
 * when bt_conv_direct_ok() says no. */
#ifndef BATON_KERNELS_H
#define BATON_KERNELS_H

#include <stddef.h>

/* One stride-1 convolution: n samples of h x w x c (NHWC) -> oh x ow x k with
 * a kh x kw kernel W[kh][kw][c][k] and `pad` zeros on every side. */
typedef struct bt_conv_geom {
  int n, h, w, c, k, kh, kw, pad, oh, ow;
} bt_conv_geom;

/* 1 when the CPU has AVX-512F and the generic paths are not forced. */
int bt_kernels_avx512(void);

/* Tests: on = 1 makes every *_ok() say no and every dispatcher take its
 * portable C path, so both paths can be compared on one machine. */
void bt_kernels_force_generic(int on);

/* 1 when the direct kernel runs on this CPU and supports the geometry. */
int bt_conv_direct_ok(const bt_conv_geom *g);

/* Scratch floats bt_conv_direct needs for `g`. */
size_t bt_conv_direct_ws(const bt_conv_geom *g);

/* out = bias + conv(in, W) (bias may be NULL: out = conv(in, W)). Overwrites
 * out; needs bt_conv_direct_ok(g). */
void bt_conv_direct(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                    float *out, float *ws);

/* dw += dL/dW of that convolution for upstream gradient dout (no bias). */
void bt_conv_direct_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw);

/* The weights of the input-gradient convolution of a stride-1 convolution:
 * wf[ky][kx][k][c] = w[kh-1-ky][kw-1-kx][c][k]. dL/din is then the
 * convolution of dL/dout with wf, padding kh-1-pad (see layers.c). */
void bt_conv_flip_weights(int kh, int kw, int c, int k, const float *w, float *wf);

/* Thin stride-1 convolutions: fewer than 16 output channels (LeNet's 6;
 * the input gradient of a convolution with few input channels). Output rows
 * are computed as flat vectors of OW*K floats over an input expanded K times
 * per channel, so no lane is wasted; see kernels.c. */
int bt_conv_thin_ok(const bt_conv_geom *g);
size_t bt_conv_thin_ws(const bt_conv_geom *g);
/* out = bias + conv(in, W) (bias may be NULL). */
void bt_conv_thin(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                  float *out, float *ws);
/* dw += dL/dW for upstream gradient dout (no bias). */
void bt_conv_thin_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw,
                     float *ws);

/* Batch-norm passes over `rows` rows of C channels (NHWC), one pass each.
 * bt_bn_stats without y: s1 = sum(x - shift), s2 = sum((x - shift)^2);
 * with y (the upstream gradient): s1 = sum(y), s2 = sum(y (x - shift)).
 * Float sums over blocks of 64 rows, added up in double. */
void bt_bn_stats(const float *x, size_t rows, int C, const float *shift, double *s1, double *s2,
                 const float *y);
/* Without y: out = a x + c0; with y: out = a y + b (x - m) + c0 (per
 * channel; b and m are unused without y). */
void bt_bn_apply(const float *x, size_t rows, int C, const float *a, const float *y,
                 const float *b, const float *m, const float *c0, float *out);

/* Depthwise 3x3 convolution, NHWC, W[3][3][c] then bias: n samples of
 * h x w x c -> oh x ow x c with `stride` and `pad`. */
typedef struct bt_dw_geom {
  int n, h, w, c, stride, pad, oh, ow;
} bt_dw_geom;

/* 1 when the AVX-512 depthwise 3x3 kernels run here (stride 1 or 2). */
int bt_dwconv3x3_ok(const bt_dw_geom *g);
/* out = bias + dwconv(in, W). */
void bt_dwconv3x3(const bt_dw_geom *g, const float *in, const float *w, const float *bias,
                  float *out);
/* dw += dL/dW, db += dL/db; din = dL/din (overwritten; skipped when NULL). */
void bt_dwconv3x3_bwd(const bt_dw_geom *g, const float *in, const float *w, const float *dout,
                      float *din, float *dw, float *db);

#endif
