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

static int force_generic;

void bt_kernels_force_generic(int on) { force_generic = on; }

int bt_kernels_avx512(void) {
#if BT_HAVE_X86
  static int have = -1;
  if (have < 0) {
    __builtin_cpu_init();
    have = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return have && !force_generic;
#else
  return 0;
#endif
}

/* Square kernels only: the input-gradient convolution then has one padding
 * for both axes. */
static int stride1_square(const bt_conv_geom *g) {
  return g->kh == g->kw && g->pad < g->kh && g->oh == g->h + 2 * g->pad - g->kh + 1 &&
         g->ow == g->w + 2 * g->pad - g->kw + 1;
}

int bt_conv_direct_ok(const bt_conv_geom *g) {
  /* Output channels in whole vectors. */
  return bt_kernels_avx512() && g->k % 16 == 0 && stride1_square(g);
}

int bt_conv_thin_ok(const bt_conv_geom *g) {
  return bt_kernels_avx512() && g->k < 16 && stride1_square(g);
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

#endif

/* ---- thin convolutions (fewer than 16 output channels) -------------------
 * An output row of one sample is OW*K contiguous floats (NHWC); it is
 * computed 16 floats at a time whatever K is. Lane l of vector v is pixel
 * (16v+l)/K, channel (16v+l)%K. Each input row is first expanded per input
 * channel into `rep`, every pixel repeated K times (rep[x*K+k] = in[x]),
 * with the padding as zero pixels: the input a lane needs for tap (ky, kx)
 * is then rep[ky][16v + l + K*kx], one unaligned load per vector. The
 * weights a lane needs depend on (16v+l)%K only, i.e. on v mod P with
 * P = K/gcd(K,16) phases (1 for K = 1, 2, 4, 8; 3 for K = 3, 6, 12), so the
 * kernel keeps P weight vectors per tap and channel. No lane is wasted on
 * channel padding, which is what makes 1..15 output channels (LeNet's 6,
 * the 6-channel input gradient of its second convolution) cheap; BLIS with
 * n = 6 runs at a few GFLOP/s. */

enum { THIN_NB = 12 };

static int gcd16(int k) {
  int g = 16;
  while (k % g)
    g >>= 1;
  return g;
}

static int thin_phases(int k) { return k / gcd16(k); }

static size_t thin_rw(const bt_conv_geom *g) {
  const size_t rw = (size_t)(g->w + 2 * g->pad) * g->k + 16;
  return (rw + 15) & ~(size_t)15;
}

size_t bt_conv_thin_ws(const bt_conv_geom *g) {
  const size_t P = (size_t)thin_phases(g->k), taps = (size_t)g->kh * g->kw;
  return P * taps * g->c * 16 + P * 16 + (size_t)(g->h + 2 * g->pad) * g->c * thin_rw(g);
}

#if BT_HAVE_X86

/* One sample's input rows, channel by channel, each pixel repeated K times
 * (the zero padding around them is left as it is). */
static void thin_rep(const bt_conv_geom *g, const float *img, float *rep, size_t rw) {
  const int C = g->c, K = g->k, Pd = g->pad;
  for (int y = 0; y < g->h; y++)
    for (int x = 0; x < g->w; x++) {
      const float *src = img + ((size_t)y * g->w + x) * C;
      float *d = rep + (size_t)(y + Pd) * C * rw + (size_t)(x + Pd) * K;
      for (int c = 0; c < C; c++, d += rw)
        for (int k = 0; k < K; k++)
          d[k] = src[c];
    }
}

typedef struct thin_blk {
  const float *rep; /* rep at the block's first kernel row, channel 0, vector v0 */
  float *w;         /* forward: weight patterns at that kernel row; dw: accumulators */
  const float *bp;  /* bias patterns (forward) */
  float *out;       /* forward: output at vector v0; dw: dout there */
  size_t rw;
  ptrdiff_t ps; /* floats between phases of w */
  int c, k, kw, nky, p, j0;
  __mmask16 tail; /* lanes of the block's last vector that are inside the row */
} thin_blk;

/* P = 1 or 3: phases known at compile time, their weight vectors stay in
 * registers (blocks start at multiples of 12, so vector i has phase i % P).
 * P = 0: any phase count, one weight load per vector. */
__attribute__((target("avx512f"), always_inline)) static inline void thin_ukr(const thin_blk *b,
                                                                              const int nb,
                                                                              const int P) {
  __m512 acc[THIN_NB];
  ptrdiff_t po[THIN_NB];
  for (int i = 0; i < nb; i++) {
    const int j = P ? i % P : (b->j0 + i) % b->p;
    po[i] = j * b->ps;
    acc[i] = _mm512_loadu_ps(b->bp + 16 * j);
  }
  const int C = b->c, K = b->k, KW = b->kw;
  for (int ky = 0; ky < b->nky; ky++)
    for (int c = 0; c < C; c++) {
      const float *r = b->rep + ((size_t)ky * C + c) * b->rw;
      const float *wt = b->w + ((ptrdiff_t)ky * KW * C + c) * 16;
      for (int kx = 0; kx < KW; kx++, r += K, wt += (ptrdiff_t)C * 16) {
        if (P) {
          __m512 wv[3];
          for (int j = 0; j < P; j++)
            wv[j] = _mm512_loadu_ps(wt + j * b->ps);
          for (int i = 0; i < nb; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * i), wv[i % P], acc[i]);
        } else {
          for (int i = 0; i < nb; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * i), _mm512_loadu_ps(wt + po[i]),
                                     acc[i]);
        }
      }
    }
  for (int i = 0; i < nb - 1; i++)
    _mm512_storeu_ps(b->out + 16 * i, acc[i]);
  _mm512_mask_storeu_ps(b->out + 16 * (nb - 1), b->tail, acc[nb - 1]);
}

/* Weight gradient: acc[phase][tap][c] += rep * dout over the block's
 * vectors (dout of lanes past the row end loads as zero). */
__attribute__((target("avx512f"), always_inline)) static inline void
thin_dw_ukr(const thin_blk *b, const int nb, const int P) {
  __m512 d[THIN_NB];
  ptrdiff_t po[THIN_NB];
  for (int i = 0; i < nb; i++) {
    po[i] = (P ? i % P : (b->j0 + i) % b->p) * b->ps;
    d[i] = i == nb - 1 ? _mm512_maskz_loadu_ps(b->tail, b->out + 16 * i)
                       : _mm512_loadu_ps(b->out + 16 * i);
  }
  const int C = b->c, K = b->k, KW = b->kw;
  for (int ky = 0; ky < b->nky; ky++)
    for (int c = 0; c < C; c++) {
      const float *r = b->rep + ((size_t)ky * C + c) * b->rw;
      float *a = b->w + ((ptrdiff_t)ky * KW * C + c) * 16;
      for (int kx = 0; kx < KW; kx++, r += K, a += (ptrdiff_t)C * 16) {
        if (P) {
          __m512 t[3];
          for (int j = 0; j < P; j++)
            t[j] = _mm512_loadu_ps(a + j * b->ps);
          for (int i = 0; i < nb; i++)
            t[i % P] = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * i), d[i], t[i % P]);
          for (int j = 0; j < P; j++)
            _mm512_storeu_ps(a + j * b->ps, t[j]);
        } else {
          for (int i = 0; i < nb; i++)
            _mm512_storeu_ps(a + po[i], _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * i), d[i],
                                                        _mm512_loadu_ps(a + po[i])));
        }
      }
    }
}

#define THIN_FN(nb)                                                                                \
  __attribute__((target("avx512f"))) static void thin_##nb(const thin_blk *b, int dw) {           \
    if (dw)                                                                                        \
      b->p == 1 ? thin_dw_ukr(b, nb, 1) : b->p == 3 ? thin_dw_ukr(b, nb, 3) : thin_dw_ukr(b, nb, 0); \
    else                                                                                           \
      b->p == 1 ? thin_ukr(b, nb, 1) : b->p == 3 ? thin_ukr(b, nb, 3) : thin_ukr(b, nb, 0);        \
  }
THIN_FN(1)
THIN_FN(2)
THIN_FN(3)
THIN_FN(4)
THIN_FN(5)
THIN_FN(6)
THIN_FN(7)
THIN_FN(8)
THIN_FN(9)
THIN_FN(10)
THIN_FN(11)
THIN_FN(12)

/* Every block of every output row of every sample; dw selects the kernel. */
static void thin_sweep(const bt_conv_geom *g, const float *in, float *out_or_dout, float *w,
                       const float *bp, float *rep, int dw) {
  static void (*const fn[THIN_NB + 1])(const thin_blk *, int) = {
      NULL, thin_1, thin_2, thin_3, thin_4, thin_5, thin_6, thin_7, thin_8, thin_9, thin_10,
      thin_11, thin_12};
  const int C = g->c, K = g->k, KH = g->kh, KW = g->kw, Pd = g->pad, H = g->h;
  const size_t rw = thin_rw(g), in_s = (size_t)H * g->w * C;
  const int row = g->ow * K, nvec = (row + 15) / 16, last = row - 16 * (nvec - 1);
  thin_blk b;
  b.w = w;
  b.bp = bp;
  b.rw = rw;
  b.ps = (ptrdiff_t)KH * KW * C * 16;
  b.c = C;
  b.k = K;
  b.kw = KW;
  b.p = thin_phases(K);
  memset(rep, 0, sizeof(float) * (size_t)(H + 2 * Pd) * C * rw);
  for (int n = 0; n < g->n; n++) {
    thin_rep(g, in + n * in_s, rep, rw);
    for (int oy = 0; oy < g->oh; oy++) {
      const int ky0 = Pd - oy > 0 ? Pd - oy : 0, ky1 = H + Pd - oy < KH ? H + Pd - oy : KH;
      b.nky = ky1 - ky0;
      float *o = out_or_dout + ((size_t)n * g->oh + oy) * row;
      const float *r = rep + (size_t)(oy + ky0) * C * rw;
      float *wk = w + (size_t)ky0 * KW * C * 16;
      for (int v0 = 0; v0 < nvec; v0 += THIN_NB) {
        const int nb = nvec - v0 < THIN_NB ? nvec - v0 : THIN_NB;
        b.rep = r + 16 * v0;
        b.w = wk;
        b.out = o + 16 * v0;
        b.j0 = v0 % b.p;
        b.tail = v0 + nb == nvec ? (__mmask16)((1u << last) - 1) : (__mmask16)0xffff;
        fn[nb](&b, dw);
      }
    }
  }
}

void bt_conv_thin(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                  float *out, float *ws) {
  const int C = g->c, K = g->k, P = thin_phases(K), taps = g->kh * g->kw;
  float *wpat = ws, *bpat = wpat + (size_t)P * taps * C * 16, *rep = bpat + (size_t)P * 16;
  for (int j = 0; j < P; j++) {
    for (int l = 0; l < 16; l++)
      bpat[16 * j + l] = bias ? bias[(16 * j + l) % K] : 0.0f;
    for (int t = 0; t < taps; t++)
      for (int c = 0; c < C; c++)
        for (int l = 0; l < 16; l++)
          wpat[(((size_t)j * taps + t) * C + c) * 16 + l] = w[((size_t)t * C + c) * K + (16 * j + l) % K];
  }
  thin_sweep(g, in, out, wpat, bpat, rep, 0);
}

void bt_conv_thin_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw,
                     float *ws) {
  const int C = g->c, K = g->k, P = thin_phases(K), taps = g->kh * g->kw;
  const size_t na = (size_t)P * taps * C * 16;
  float *acc = ws, *rep = acc + na + (size_t)P * 16;
  memset(acc, 0, sizeof(float) * na);
  thin_sweep(g, in, (float *)dout, acc, NULL, rep, 1);
  for (int j = 0; j < P; j++)
    for (int t = 0; t < taps; t++)
      for (int c = 0; c < C; c++)
        for (int l = 0; l < 16; l++)
          dw[((size_t)t * C + c) * K + (16 * j + l) % K] +=
              acc[(((size_t)j * taps + t) * C + c) * 16 + l];
}

#endif

#if !BT_HAVE_X86

void bt_conv_direct(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                    float *out, float *ws) {
  (void)g, (void)in, (void)w, (void)bias, (void)out, (void)ws;
}

void bt_conv_direct_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw) {
  (void)g, (void)in, (void)dout, (void)dw;
}

void bt_conv_thin(const bt_conv_geom *g, const float *in, const float *w, const float *bias,
                  float *out, float *ws) {
  (void)g, (void)in, (void)w, (void)bias, (void)out, (void)ws;
}

void bt_conv_thin_dw(const bt_conv_geom *g, const float *in, const float *dout, float *dw,
                     float *ws) {
  (void)g, (void)in, (void)dout, (void)dw, (void)ws;
}

#endif

/* ---- batch normalisation ------------------------------------------------
 * Rows of C channels (NHWC). Statistics are one pass over the data: sums of
 * x - shift and of its square in float over blocks of BN_FLUSH rows (the
 * shift, a sample of the data, keeps E[d^2] - E[d]^2 well conditioned),
 * the blocks summed in double. Short float blocks matter: the statistics
 * couple every output to every input, and longer float sums made the
 * rounding noise visible in finite-difference gradient checks. The AVX-512
 * versions keep up to 4 vectors of channels in registers and visit all
 * channel groups of BN_ROWS rows while those are in cache; the portable
 * versions do the same arithmetic in plain C. */

enum { BN_FLUSH = 8, BN_ROWS = 128 };

static void bn_stats_generic(const float *x, size_t rows, int C, const float *shift, double *s1,
                             double *s2, const float *y) {
  float a[C], b[C];
  for (size_t r0 = 0; r0 < rows; r0 += BN_FLUSH) {
    const size_t r1 = r0 + BN_FLUSH < rows ? r0 + BN_FLUSH : rows;
    for (int c = 0; c < C; c++)
      a[c] = b[c] = 0.0f;
    for (size_t r = r0; r < r1; r++) {
      const float *xr = x + r * C;
      if (y) {
        const float *yr = y + r * C;
        for (int c = 0; c < C; c++) {
          a[c] += yr[c];
          b[c] += yr[c] * (xr[c] - shift[c]);
        }
      } else {
        for (int c = 0; c < C; c++) {
          const float d = xr[c] - shift[c];
          a[c] += d;
          b[c] += d * d;
        }
      }
    }
    for (int c = 0; c < C; c++) {
      s1[c] += a[c];
      s2[c] += b[c];
    }
  }
}

static void bn_apply_generic(const float *x, size_t rows, int C, const float *a, const float *y,
                             const float *b, const float *m, const float *c0, float *out) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * C;
    float *o = out + r * C;
    if (y) {
      const float *yr = y + r * C;
      for (int c = 0; c < C; c++)
        o[c] = a[c] * yr[c] + b[c] * (xr[c] - m[c]) + c0[c];
    } else {
      for (int c = 0; c < C; c++)
        o[c] = xr[c] * a[c] + c0[c];
    }
  }
}

#if BT_HAVE_X86

static __mmask16 tail_mask(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

__attribute__((target("avx512f"), always_inline)) static inline __m256 hi8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* One group of nv vectors of channels (starting at channel c0) over rows
 * [r0, r1): with y, s1 += y and s2 += y (x - shift); else s1 += x - shift
 * and s2 += (x - shift)^2. */
__attribute__((target("avx512f"), always_inline)) static inline void
bn_stats_group(const float *x, const float *y, size_t r0, size_t r1, int C, int c0,
               const float *shift, double *s1, double *s2, const int nv) {
  __m512 a[4], b[4], sh[4];
  __mmask16 m[4];
  for (int j = 0; j < nv; j++) {
    m[j] = tail_mask(C - c0 - 16 * j);
    sh[j] = _mm512_maskz_loadu_ps(m[j], shift + c0 + 16 * j);
  }
  for (size_t f0 = r0; f0 < r1; f0 += BN_FLUSH) {
    const size_t f1 = f0 + BN_FLUSH < r1 ? f0 + BN_FLUSH : r1;
    for (int j = 0; j < nv; j++)
      a[j] = b[j] = _mm512_setzero_ps();
    for (size_t r = f0; r < f1; r++) {
      const float *xr = x + r * C + c0;
      for (int j = 0; j < nv; j++) {
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m[j], xr + 16 * j), sh[j]);
        if (y) {
          const __m512 g = _mm512_maskz_loadu_ps(m[j], y + r * C + c0 + 16 * j);
          a[j] = _mm512_add_ps(a[j], g);
          b[j] = _mm512_fmadd_ps(g, d, b[j]);
        } else {
          a[j] = _mm512_add_ps(a[j], d);
          b[j] = _mm512_fmadd_ps(d, d, b[j]);
        }
      }
    }
    for (int j = 0; j < nv; j++) { /* s1, s2 have a multiple of 16 doubles */
      double *p1 = s1 + c0 + 16 * j, *p2 = s2 + c0 + 16 * j;
      _mm512_storeu_pd(p1, _mm512_add_pd(_mm512_loadu_pd(p1),
                                         _mm512_cvtps_pd(_mm512_castps512_ps256(a[j]))));
      _mm512_storeu_pd(p1 + 8, _mm512_add_pd(_mm512_loadu_pd(p1 + 8),
                                             _mm512_cvtps_pd(hi8(a[j]))));
      _mm512_storeu_pd(p2, _mm512_add_pd(_mm512_loadu_pd(p2),
                                         _mm512_cvtps_pd(_mm512_castps512_ps256(b[j]))));
      _mm512_storeu_pd(p2 + 8, _mm512_add_pd(_mm512_loadu_pd(p2 + 8),
                                             _mm512_cvtps_pd(hi8(b[j]))));
    }
  }
}

__attribute__((target("avx512f"))) static void bn_stats_avx512(const float *x, size_t rows, int C,
                                                                const float *shift, double *s1,
                                                                double *s2, const float *y) {
  for (size_t r0 = 0; r0 < rows; r0 += BN_ROWS) {
    const size_t r1 = r0 + BN_ROWS < rows ? r0 + BN_ROWS : rows;
    for (int c0 = 0; c0 < C; c0 += 64) {
      const int nv = (C - c0 + 15) / 16;
      if (y) {
        if (nv >= 4)
          bn_stats_group(x, y, r0, r1, C, c0, shift, s1, s2, 4);
        else if (nv == 3)
          bn_stats_group(x, y, r0, r1, C, c0, shift, s1, s2, 3);
        else if (nv == 2)
          bn_stats_group(x, y, r0, r1, C, c0, shift, s1, s2, 2);
        else
          bn_stats_group(x, y, r0, r1, C, c0, shift, s1, s2, 1);
      } else {
        if (nv >= 4)
          bn_stats_group(x, NULL, r0, r1, C, c0, shift, s1, s2, 4);
        else if (nv == 3)
          bn_stats_group(x, NULL, r0, r1, C, c0, shift, s1, s2, 3);
        else if (nv == 2)
          bn_stats_group(x, NULL, r0, r1, C, c0, shift, s1, s2, 2);
        else
          bn_stats_group(x, NULL, r0, r1, C, c0, shift, s1, s2, 1);
      }
    }
  }
}

__attribute__((target("avx512f"))) static void bn_apply_avx512(const float *x, size_t rows, int C,
                                                                const float *a, const float *y,
                                                                const float *b, const float *mu,
                                                                const float *c0, float *out) {
  const int nv = (C + 15) / 16;
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * C;
    float *o = out + r * C;
    for (int j = 0; j < nv; j++) {
      const __mmask16 m = tail_mask(C - 16 * j);
      const __m512 xv = _mm512_maskz_loadu_ps(m, xr + 16 * j);
      const __m512 av = _mm512_maskz_loadu_ps(m, a + 16 * j);
      const __m512 cv = _mm512_maskz_loadu_ps(m, c0 + 16 * j);
      __m512 v;
      if (y) {
        const __m512 yv = _mm512_maskz_loadu_ps(m, y + r * C + 16 * j);
        const __m512 bv = _mm512_maskz_loadu_ps(m, b + 16 * j);
        const __m512 d = _mm512_sub_ps(xv, _mm512_maskz_loadu_ps(m, mu + 16 * j));
        v = _mm512_fmadd_ps(av, yv, _mm512_fmadd_ps(bv, d, cv));
      } else {
        v = _mm512_fmadd_ps(xv, av, cv);
      }
      _mm512_mask_storeu_ps(o + 16 * j, m, v);
    }
  }
}

#endif

void bt_bn_stats(const float *x, size_t rows, int C, const float *shift, double *s1, double *s2,
                 const float *y) {
  for (int c = 0; c < C; c++)
    s1[c] = s2[c] = 0.0;
#if BT_HAVE_X86
  if (bt_kernels_avx512()) { /* whole vectors of doubles, the tail lanes summing zeros */
    const int cp = (C + 15) & ~15;
    double t1[cp], t2[cp];
    memset(t1, 0, sizeof t1);
    memset(t2, 0, sizeof t2);
    bn_stats_avx512(x, rows, C, shift, t1, t2, y);
    memcpy(s1, t1, sizeof(double) * C);
    memcpy(s2, t2, sizeof(double) * C);
    return;
  }
#endif
  bn_stats_generic(x, rows, C, shift, s1, s2, y);
}

void bt_bn_apply(const float *x, size_t rows, int C, const float *a, const float *y,
                 const float *b, const float *m, const float *c0, float *out) {
#if BT_HAVE_X86
  if (bt_kernels_avx512()) {
    bn_apply_avx512(x, rows, C, a, y, b, m, c0, out);
    return;
  }
#endif
  bn_apply_generic(x, rows, C, a, y, b, m, c0, out);
}

/* ---- depthwise 3x3 convolutions ------------------------------------------
 * NHWC: vectors of 16 channels, the 9 taps' weights of a channel vector in
 * registers for a whole output row, one load and one FMA per tap and pixel.
 * The input gradient is gathered (each input pixel sums the output pixels
 * that read it), so it is written once, without zeroing and scattering. */

int bt_dwconv3x3_ok(const bt_dw_geom *g) { return bt_kernels_avx512() && g->stride <= 2 && g->pad <= 2; }

#if BT_HAVE_X86

__attribute__((target("avx512f"))) void bt_dwconv3x3(const bt_dw_geom *g, const float *in,
                                                     const float *w, const float *bias,
                                                     float *out) {
  const int H = g->h, W = g->w, C = g->c, S = g->stride, Pd = g->pad, OH = g->oh, OW = g->ow;
  const ptrdiff_t CC = C;
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < OH; oy++) {
      const float *rows[3];
      int vy[3];
      for (int ky = 0; ky < 3; ky++) {
        const int iy = oy * S - Pd + ky;
        vy[ky] = iy >= 0 && iy < H;
        rows[ky] = in + ((size_t)n * H + (vy[ky] ? iy : 0)) * W * CC;
      }
      float *orow = out + ((size_t)n * OH + oy) * OW * CC;
      for (int c0 = 0; c0 < C; c0 += 16) {
        const __mmask16 m = tail_mask(C - c0);
        __m512 wv[9];
        for (int t = 0; t < 9; t++)
          wv[t] = _mm512_maskz_loadu_ps(m, w + t * CC + c0);
        const __m512 bv = _mm512_maskz_loadu_ps(m, bias + c0);
        for (int ox = 0; ox < OW; ox++) {
          const int ix0 = ox * S - Pd;
          __m512 acc[3] = {bv, _mm512_setzero_ps(), _mm512_setzero_ps()};
          for (int ky = 0; ky < 3; ky++) {
            if (!vy[ky])
              continue;
            const float *p = rows[ky] + (ptrdiff_t)ix0 * CC + c0;
            for (int kx = 0; kx < 3; kx++)
              if (ix0 + kx >= 0 && ix0 + kx < W)
                acc[kx] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p + kx * CC), wv[ky * 3 + kx],
                                          acc[kx]);
          }
          _mm512_mask_storeu_ps(orow + (ptrdiff_t)ox * CC + c0, m,
                                _mm512_add_ps(acc[0], _mm512_add_ps(acc[1], acc[2])));
        }
      }
    }
}

__attribute__((target("avx512f"))) void bt_dwconv3x3_bwd(const bt_dw_geom *g, const float *in,
                                                         const float *w, const float *dout,
                                                         float *din, float *dw, float *db) {
  const int H = g->h, W = g->w, C = g->c, S = g->stride, Pd = g->pad, OH = g->oh, OW = g->ow;
  const ptrdiff_t CC = C;
  /* Weight and bias gradients: 10 accumulators per channel vector and row. */
  for (int n = 0; n < g->n; n++)
    for (int oy = 0; oy < OH; oy++) {
      const float *rows[3];
      int vy[3];
      for (int ky = 0; ky < 3; ky++) {
        const int iy = oy * S - Pd + ky;
        vy[ky] = iy >= 0 && iy < H;
        rows[ky] = in + ((size_t)n * H + (vy[ky] ? iy : 0)) * W * CC;
      }
      const float *grow = dout + ((size_t)n * OH + oy) * OW * CC;
      for (int c0 = 0; c0 < C; c0 += 16) {
        const __mmask16 m = tail_mask(C - c0);
        __m512 acc[9], ab = _mm512_maskz_loadu_ps(m, db + c0);
        for (int t = 0; t < 9; t++)
          acc[t] = _mm512_maskz_loadu_ps(m, dw + t * CC + c0);
        for (int ox = 0; ox < OW; ox++) {
          const int ix0 = ox * S - Pd;
          const __m512 gv = _mm512_maskz_loadu_ps(m, grow + (ptrdiff_t)ox * CC + c0);
          ab = _mm512_add_ps(ab, gv);
          for (int ky = 0; ky < 3; ky++) {
            if (!vy[ky])
              continue;
            const float *p = rows[ky] + (ptrdiff_t)ix0 * CC + c0;
            for (int kx = 0; kx < 3; kx++)
              if (ix0 + kx >= 0 && ix0 + kx < W)
                acc[ky * 3 + kx] =
                    _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p + kx * CC), gv, acc[ky * 3 + kx]);
          }
        }
        for (int t = 0; t < 9; t++)
          _mm512_mask_storeu_ps(dw + t * CC + c0, m, acc[t]);
        _mm512_mask_storeu_ps(db + c0, m, ab);
      }
    }
  if (!din)
    return;
  /* din[iy][ix] = sum over taps with (iy + pad - ky) = oy * S (and x alike)
   * of dout[oy][ox] w[ky][kx]. */
  for (int n = 0; n < g->n; n++)
    for (int iy = 0; iy < H; iy++) {
      const float *grows[3];
      int vy[3];
      for (int ky = 0; ky < 3; ky++) {
        const int t = iy + Pd - ky, oy = t / S;
        vy[ky] = t >= 0 && t % S == 0 && oy < OH;
        grows[ky] = dout + ((size_t)n * OH + (vy[ky] ? oy : 0)) * OW * CC;
      }
      float *drow = din + ((size_t)n * H + iy) * W * CC;
      for (int c0 = 0; c0 < C; c0 += 16) {
        const __mmask16 m = tail_mask(C - c0);
        __m512 wv[9];
        for (int t = 0; t < 9; t++)
          wv[t] = _mm512_maskz_loadu_ps(m, w + t * CC + c0);
        for (int ix = 0; ix < W; ix++) {
          __m512 acc[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
          for (int kx = 0; kx < 3; kx++) {
            const int t = ix + Pd - kx, ox = t / S;
            if (t < 0 || t % S != 0 || ox >= OW)
              continue;
            for (int ky = 0; ky < 3; ky++)
              if (vy[ky])
                acc[ky] = _mm512_fmadd_ps(
                    _mm512_maskz_loadu_ps(m, grows[ky] + (ptrdiff_t)ox * CC + c0), wv[ky * 3 + kx],
                    acc[ky]);
          }
          _mm512_mask_storeu_ps(drow + (ptrdiff_t)ix * CC + c0, m,
                                _mm512_add_ps(acc[0], _mm512_add_ps(acc[1], acc[2])));
        }
      }
    }
}

#else

void bt_dwconv3x3(const bt_dw_geom *g, const float *in, const float *w, const float *bias,
                  float *out) {
  (void)g, (void)in, (void)w, (void)bias, (void)out;
}

void bt_dwconv3x3_bwd(const bt_dw_geom *g, const float *in, const float *w, const float *dout,
                      float *din, float *dw, float *db) {
  (void)g, (void)in, (void)w, (void)dout, (void)din, (void)dw, (void)db;
}

#endif
