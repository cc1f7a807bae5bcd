/* kernels: the direct AVX-512 convolution; see include/baton/kernels.h.
 *
 * Register block: up to 6 output pixels x up to 4 vectors of 16 channels
 * (24 accumulators). Per input channel of one tap the kernel loads the
 * weight row once (<= 4 vectors) and broadcasts one input value per pixel:
 * 24 FMAs per 10 loads, so it is FMA-bound, like BLIS's micro-kernel, but
 * without lowering or packing anything.
 *
 * Two ways to choose the 6 pixels of a block:
 *  - spatial (images larger than 4x4): 6 neighbours along one output row of
 *    one sample. The sample's rows are first copied with `pad` zero columns
 *    on both sides (a few hundred KiB, stays in L2) so every pixel of the
 *    block has the same taps; kernel rows that fall on padding are skipped.
 *  - batch (images up to 4x4, where padding taps are 30-56% of the work): the
 *    same output pixel in 6 samples. All of them see exactly the same valid
 *    taps, so no padding tap is ever multiplied and nothing is copied. */
#include "baton/kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define BT_HAVE_X86 1
#include <immintrin.h>
#else
#define BT_HAVE_X86 0
#endif

enum { MAX_NP = 8, MAX_NV = 4, BATCH_MODE_PIXELS = 16 };

/* Block shapes (pixels x vectors of 16 channels), 24 accumulators each.
 * Batch mode streams the weights of every tap for each block (they do not
 * fit in L2 for 512 channels), so it takes more pixels per weight load. */
enum { NP_SPATIAL = 6, NV_SPATIAL = 4, NP_BATCH = 8, NV_BATCH = 3 };

static int batch_mode(const bt_conv_geom *g) { return g->oh * g->ow <= BATCH_MODE_PIXELS; }

int bt_conv_direct_ok(const bt_conv_geom *g) {
#if BT_HAVE_X86
  static int have = -1;
  if (have < 0) {
    __builtin_cpu_init();
    have = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  /* Square kernels only: the input-gradient convolution then has one
   * padding for both axes. Channels in whole vectors. */
  return have && g->k % 16 == 0 && g->kh == g->kw && g->pad < g->kh &&
         g->oh == g->h + 2 * g->pad - g->kh + 1 && g->ow == g->w + 2 * g->pad - g->kw + 1;
#else
  (void)g;
  return 0;
#endif
}

size_t bt_conv_direct_ws(const bt_conv_geom *g) {
  if (batch_mode(g))
    return 0;
  return (size_t)g->h * (g->w + 2 * g->pad) * g->c;
}

/* 16x16 tiles through a local buffer: reads and writes are both whole
 * 64-byte rows (a direct strided copy of 9.4 MiB of 512x512 weights took
 * 4.5 ms per backward, a fifth of the layer's input-gradient time). */
void bt_conv_flip_weights(int kh, int kw, int c, int k, const float *w, float *wf) {
  float tile[16][16];
  for (int t = 0; t < kh * kw; t++) {
    const float *src = w + (size_t)(kh * kw - 1 - t) * c * k;
    float *dst = wf + (size_t)t * k * c;
    for (int c0 = 0; c0 < c; c0 += 16)
      for (int k0 = 0; k0 < k; k0 += 16) {
        const int nc = c - c0 < 16 ? c - c0 : 16, nk = k - k0 < 16 ? k - k0 : 16;
        if (nc == 16 && nk == 16) {
          for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
              tile[j][i] = src[(size_t)(c0 + i) * k + k0 + j];
          for (int j = 0; j < 16; j++)
            memcpy(dst + (size_t)(k0 + j) * c + c0, tile[j], sizeof tile[j]);
        } else {
          for (int i = 0; i < nc; i++)
            for (int j = 0; j < nk; j++)
              dst[(size_t)(k0 + j) * c + c0 + i] = src[(size_t)(c0 + i) * k + k0 + j];
        }
      }
  }
}

#if BT_HAVE_X86

/* Where one block's operands are. ip[p] points at pixel p's input for the
 * first valid tap; taps step by `rs` floats per kernel row and c per kernel
 * column. w points at the weights of that tap, channel block kb. */
typedef struct blk {
  const float *ip[MAX_NP];
  float *op[MAX_NP];
  ptrdiff_t rs;   /* input floats between kernel rows */
  ptrdiff_t wrs;  /* weight floats between kernel rows (kw*c*k) */
  int nky, nkx;   /* valid taps: rows, columns */
  int c, k;       /* input channels; output channels (weight row stride) */
  const float *w; /* weights at the first valid tap, channel block start */
  const float *bias;
} blk;

/* always_inline with constant np/nv: each instance keeps its np x nv
 * accumulators in registers (the loops over p and j unroll completely). */
__attribute__((target("avx512f"), always_inline)) static inline void ukr(const blk *b, const int np,
                                                                         const int nv) {
  __m512 acc[MAX_NP][MAX_NV];
  for (int p = 0; p < np; p++)
    for (int j = 0; j < nv; j++)
      acc[p][j] = b->bias ? _mm512_loadu_ps(b->bias + 16 * j) : _mm512_setzero_ps();
  const int C = b->c;
  const ptrdiff_t K = b->k;
  for (int ky = 0; ky < b->nky; ky++)
    for (int kx = 0; kx < b->nkx; kx++) {
      const ptrdiff_t off = ky * b->rs + (ptrdiff_t)kx * C;
      const float *wt = b->w + ky * b->wrs + (ptrdiff_t)kx * C * K;
      const float *ipt[MAX_NP];
      for (int p = 0; p < np; p++)
        ipt[p] = b->ip[p] + off;
      for (int c = 0; c < C; c++, wt += K) {
        __m512 wv[MAX_NV];
        for (int j = 0; j < nv; j++)
          wv[j] = _mm512_loadu_ps(wt + 16 * j);
        for (int p = 0; p < np; p++) {
          const __m512 a = _mm512_set1_ps(ipt[p][c]);
          for (int j = 0; j < nv; j++)
            acc[p][j] = _mm512_fmadd_ps(a, wv[j], acc[p][j]);
        }
      }
    }
  for (int p = 0; p < np; p++)
    for (int j = 0; j < nv; j++)
      _mm512_storeu_ps(b->op[p] + 16 * j, acc[p][j]);
}

#define UKR_NP(np)                                                                                 \
  __attribute__((target("avx512f"))) static void ukr_##np(const blk *b, int nv) {                  \
    /* 24 accumulators at most: 6x4 or 8x3 (np > 6 only comes with nv <= 3) */                     \
    if (nv >= 4)                                                                                   \
      ukr(b, np <= 6 ? np : 6, 4);                                                                 \
    else if (nv == 3)                                                                              \
      ukr(b, np, 3);                                                                               \
    else if (nv == 2)                                                                              \
      ukr(b, np, 2);                                                                               \
    else                                                                                           \
      ukr(b, np, 1);                                                                               \
  }
UKR_NP(1)
UKR_NP(2)
UKR_NP(3)
UKR_NP(4)
UKR_NP(5)
UKR_NP(6)
UKR_NP(7)
UKR_NP(8)

static void run_block(const blk *b, int np, int nv) {
  static void (*const fn[MAX_NP + 1])(const blk *, int) = {NULL,  ukr_1, ukr_2, ukr_3, ukr_4,
                                                           ukr_5, ukr_6, ukr_7, ukr_8};
  fn[np](b, nv);
}

/* Splits n into blocks of at most MAX_NP, as evenly as possible (32 ->
 * 6,6,5,5,5,5 rather than 6,6,6,6,6,2: a 2-pixel block runs at a third of
 * the FMA rate). Returns the size of block i of nblk. */
static int even_split(int n, int nblk, int i) { return n / nblk + (i < n % nblk); }

static void conv_batch(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                       float *out) {
  const int H = g->h, W = g->w, C = g->c, K = g->k, KH = g->kh, KW = g->kw, Pd = g->pad;
  const size_t in_s = (size_t)H * W * C, out_s = (size_t)g->oh * g->ow * K;
  const int npm = NP_BATCH, nvm = NV_BATCH;
  const int nblk = (g->n + npm - 1) / npm;
  blk b;
  b.rs = (ptrdiff_t)W * C;
  b.wrs = (ptrdiff_t)KW * C * K;
  b.c = C;
  b.k = K;
  for (int k0 = 0; k0 < K; k0 += 16 * nvm) {
    const int nv = (K - k0) / 16 < nvm ? (K - k0) / 16 : nvm;
    b.bias = bias ? bias + k0 : NULL;
    for (int oy = 0; oy < g->oh; oy++)
      for (int ox = 0; ox < g->ow; ox++) {
        const int ky0 = Pd - oy > 0 ? Pd - oy : 0, ky1 = H + Pd - oy < KH ? H + Pd - oy : KH;
        const int kx0 = Pd - ox > 0 ? Pd - ox : 0, kx1 = W + Pd - ox < KW ? W + Pd - ox : KW;
        b.nky = ky1 - ky0;
        b.nkx = kx1 - kx0;
        b.w = w + ((size_t)ky0 * KW + kx0) * C * K + k0;
        const size_t ioff = ((size_t)(oy - Pd + ky0) * W + (ox - Pd + kx0)) * C;
        const size_t ooff = ((size_t)oy * g->ow + ox) * K + k0;
        for (int i = 0, s = 0; i < nblk; i++) {
          const int np = even_split(g->n, nblk, i);
          for (int p = 0; p < np; p++) {
            b.ip[p] = in + (size_t)(s + p) * in_s + ioff;
            b.op[p] = out + (size_t)(s + p) * out_s + ooff;
          }
          run_block(&b, np, nv);
          s += np;
        }
      }
  }
}

static void conv_spatial(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                         float *out, float *ws) {
  const int H = g->h, W = g->w, C = g->c, K = g->k, KH = g->kh, KW = g->kw, Pd = g->pad;
  const int WP = W + 2 * Pd, OW = g->ow;
  const size_t in_s = (size_t)H * W * C, out_s = (size_t)g->oh * OW * K;
  const int npm = NP_SPATIAL, nvm = NV_SPATIAL;
  const int nblk = (OW + npm - 1) / npm;
  blk b;
  b.rs = (ptrdiff_t)WP * C;
  b.wrs = (ptrdiff_t)KW * C * K;
  b.c = C;
  b.k = K;
  b.nkx = KW;
  /* The padding columns stay zero: only the interior is rewritten. */
  memset(ws, 0, sizeof(float) * bt_conv_direct_ws(g));
  for (int n = 0; n < g->n; n++) {
    const float *img = in + (size_t)n * in_s;
    for (int y = 0; y < H; y++)
      memcpy(ws + ((size_t)y * WP + Pd) * C, img + (size_t)y * W * C, sizeof(float) * W * C);
    float *o = out + (size_t)n * out_s;
    for (int k0 = 0; k0 < K; k0 += 16 * nvm) {
      const int nv = (K - k0) / 16 < nvm ? (K - k0) / 16 : nvm;
      b.bias = bias ? bias + k0 : NULL;
      for (int oy = 0; oy < g->oh; oy++) {
        /* Kernel rows on the top/bottom padding are skipped, not multiplied. */
        const int ky0 = Pd - oy > 0 ? Pd - oy : 0, ky1 = H + Pd - oy < KH ? H + Pd - oy : KH;
        b.nky = ky1 - ky0;
        b.w = w + (size_t)ky0 * KW * C * K + k0;
        const float *row = ws + (size_t)(oy - Pd + ky0) * WP * C;
        for (int i = 0, ox = 0; i < nblk; i++) {
          const int np = even_split(OW, nblk, i);
          for (int p = 0; p < np; p++) {
            b.ip[p] = row + (size_t)(ox + p) * C;
            b.op[p] = o + ((size_t)oy * OW + ox + p) * K + k0;
          }
          run_block(&b, np, nv);
          ox += np;
        }
      }
    }
  }
}

/* ---- weight gradient ----------------------------------------------------
 * dW[tap][c][k] += sum over pixels of in[pixel + tap][c] * dout[pixel][k].
 * Register block: 6 input channels (broadcast) x 4 vectors of output
 * channels, summed over a list of pixel runs; the block of dW is loaded and
 * stored once per list, not once per pixel. A run is `n` pixels stepping by
 * istep/dstep floats (along a row of one sample, or across samples at one
 * pixel in batch mode); runs only cover pixels whose tap is inside the
 * image, so padding taps cost nothing. */

enum { DW_NC = 6, DW_NV = 4, DW_MAX_RUNS = 64, DW_CHUNK_PIXELS = 512 };

typedef struct runs {
  const float *in[DW_MAX_RUNS]; /* input at the run's first pixel, tap applied */
  const float *dy[DW_MAX_RUNS]; /* dout at the run's first pixel */
  int nruns, n;
  ptrdiff_t istep, dstep;
} runs;

__attribute__((target("avx512f"), always_inline)) static inline void
dw_ukr(const runs *r, int c0, int k0, float *dw, int K, const int nc, const int nv) {
  __m512 acc[DW_NC][DW_NV];
  for (int i = 0; i < nc; i++)
    for (int j = 0; j < nv; j++)
      acc[i][j] = _mm512_loadu_ps(dw + (size_t)i * K + 16 * j);
  for (int q = 0; q < r->nruns; q++) {
    const float *ip = r->in[q] + c0, *dp = r->dy[q] + k0;
    for (int t = 0; t < r->n; t++, ip += r->istep, dp += r->dstep) {
      __m512 gv[DW_NV];
      for (int j = 0; j < nv; j++)
        gv[j] = _mm512_loadu_ps(dp + 16 * j);
      for (int i = 0; i < nc; i++) {
        const __m512 a = _mm512_set1_ps(ip[i]);
        for (int j = 0; j < nv; j++)
          acc[i][j] = _mm512_fmadd_ps(a, gv[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < nc; i++)
    for (int j = 0; j < nv; j++)
      _mm512_storeu_ps(dw + (size_t)i * K + 16 * j, acc[i][j]);
}

#define DW_NC_FN(nc)                                                                               \
  __attribute__((target("avx512f"))) static void dw_##nc(const runs *r, int c0, int k0, float *dw, \
                                                         int K, int nv) {                          \
    switch (nv) {                                                                                  \
    case 4:                                                                                        \
      dw_ukr(r, c0, k0, dw, K, nc, 4);                                                             \
      break;                                                                                       \
    case 3:                                                                                        \
      dw_ukr(r, c0, k0, dw, K, nc, 3);                                                             \
      break;                                                                                       \
    case 2:                                                                                        \
      dw_ukr(r, c0, k0, dw, K, nc, 2);                                                             \
      break;                                                                                       \
    default:                                                                                       \
      dw_ukr(r, c0, k0, dw, K, nc, 1);                                                             \
      break;                                                                                       \
    }                                                                                              \
  }
DW_NC_FN(1)
DW_NC_FN(2)
DW_NC_FN(3)
DW_NC_FN(4)
DW_NC_FN(5)
DW_NC_FN(6)

/* All channel blocks of one tap over one list of runs. */
static void dw_runs(const runs *r, int C, int K, float *dw_tap) {
  static void (*const fn[DW_NC + 1])(const runs *, int, int, float *, int,
                                     int) = {NULL, dw_1, dw_2, dw_3, dw_4, dw_5, dw_6};
  if (r->nruns == 0 || r->n == 0)
    return;
  for (int c0 = 0; c0 < C; c0 += DW_NC) {
    const int nc = C - c0 < DW_NC ? C - c0 : DW_NC;
    for (int k0 = 0; k0 < K; k0 += 16 * DW_NV) {
      const int nv = (K - k0) / 16 < DW_NV ? (K - k0) / 16 : DW_NV;
      fn[nc](r, c0, k0, dw_tap + (size_t)c0 * K + k0, K, nv);
    }
  }
}

void bt_conv_direct_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw) {
  const int H = g->h, W = g->w, C = g->c, K = g->k, KH = g->kh, KW = g->kw, Pd = g->pad;
  const int OH = g->oh, OW = g->ow;
  const size_t in_s = (size_t)H * W * C, out_s = (size_t)OH * OW * K;
  runs r;
  if (batch_mode(g)) { /* runs across the samples, one per valid output pixel */
    r.n = g->n;
    r.istep = (ptrdiff_t)in_s;
    r.dstep = (ptrdiff_t)out_s;
    for (int ky = 0; ky < KH; ky++)
      for (int kx = 0; kx < KW; kx++) {
        r.nruns = 0;
        for (int oy = 0; oy < OH; oy++)
          for (int ox = 0; ox < OW; ox++) {
            const int iy = oy - Pd + ky, ix = ox - Pd + kx;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
              continue;
            r.in[r.nruns] = in + ((size_t)iy * W + ix) * C;
            r.dy[r.nruns] = dout + ((size_t)oy * OW + ox) * K;
            r.nruns++;
          }
        dw_runs(&r, C, K, dw + (size_t)(ky * KW + kx) * C * K);
      }
    return;
  }
  /* Runs along output rows, in chunks of rows small enough to stay in L2
   * while every tap and channel block passes over them. */
  r.istep = C;
  r.dstep = K;
  const long rows = (long)g->n * OH;
  int chunk = (DW_CHUNK_PIXELS + OW - 1) / OW;
  chunk = chunk < DW_MAX_RUNS ? chunk : DW_MAX_RUNS;
  for (long r0 = 0; r0 < rows; r0 += chunk) {
    const long r1 = r0 + chunk < rows ? r0 + chunk : rows;
    for (int ky = 0; ky < KH; ky++)
      for (int kx = 0; kx < KW; kx++) {
        const int ox0 = Pd - kx > 0 ? Pd - kx : 0;
        const int ox1 = W + Pd - kx < OW ? W + Pd - kx : OW;
        r.n = ox1 - ox0;
        r.nruns = 0;
        for (long q = r0; q < r1; q++) {
          const int b = (int)(q / OH), oy = (int)(q % OH), iy = oy - Pd + ky;
          if (iy < 0 || iy >= H)
            continue;
          r.in[r.nruns] = in + b * in_s + ((size_t)iy * W + (ox0 - Pd + kx)) * C;
          r.dy[r.nruns] = dout + b * out_s + ((size_t)oy * OW + ox0) * K;
          r.nruns++;
        }
        dw_runs(&r, C, K, dw + (size_t)(ky * KW + kx) * C * K);
      }
  }
}

void bt_conv_direct(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                    float *out, float *ws) {
  if (batch_mode(g))
    conv_batch(g, in, w, bias, out);
  else
    conv_spatial(g, in, w, bias, out, ws);
}

#else

void bt_conv_direct(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                    float *out, float *ws) {
  (void)g, (void)in, (void)w, (void)bias, (void)out, (void)ws;
}

void bt_conv_direct_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw) {
  (void)g, (void)in, (void)dout, (void)dw;
}

#endif
