/* gemm: BLIS behind one function; see include/baton/gemm.h.
 * This file includes blis.h and must never include GSL's matrix headers
 * (their cblas symbols clash). */
#include "baton/gemm.h"

#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small products ------------------------------------------------------
 *
 * BLIS 0.9's skx kernels have no small-matrix ("sup") path: every product is
 * packed into 32 x 12 register blocks, so a dense layer of 64 x 64 at batch
 * 1 takes 6-9 us where the haswell kernels' sup path takes 1.3 us, and its
 * time jumps between levels from one timing to the next (5.9-8.8 us, 7
 * December). For the products bt_gemm_small_takes picks (at most
 * BT_GEMM_SMALL_MACS multiply-adds, and a few shapes beyond) an AVX-512 loop
 * of our own does the product instead: 16 accumulators of C in registers,
 * shaped to the product (R rows x V 16-column vectors), B's rows streamed and
 * op(A)'s entries broadcast; with B transposed and long rows, 4 x 4 dot
 * products along the rows of A and B. Only when BLIS runs its skx kernels:
 * the other kernel sets have their own sup path. BATON_GEMM_SMALL=N sets the
 * limit (0: never). */

static long small_limit = -1; /* multiply-adds; set on first use */

static int cpu_has_avx512f(void);

static long small_limit_now(void) {
  if (small_limit < 0) {
    const char *env = getenv("BATON_GEMM_SMALL");
    long lim = BT_GEMM_SMALL_MACS;
    if (env && *env)
      lim = strtol(env, NULL, 10);
    if (lim > 0 && (!cpu_has_avx512f() || strcmp(bt_gemm_arch(), "skx") != 0))
      lim = 0;
    small_limit = lim > 0 ? lim : 0;
  }
  return small_limit;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_SMALL_KERNEL 1

/* Both kernels work on fixed blocks, so that the compiler keeps every
 * accumulator in a register: rows past the edge read the last row again and
 * are not stored, columns past it are masked. */

/* B row-major k x n: C[R rows x 16 V cols] from op(A)'s broadcast entries
 * (op(A)(i, p) = a[i * sr + p * sc]) times B's rows; mask[v] selects the
 * columns of vector v. R and V are constants in each caller below. */
__attribute__((target("avx512f"), always_inline)) static inline void
block_nn(const int R, const int V, int rows, const __mmask16 *mask, int k, float alpha,
         const float *a, int sr, int sc, const float *b, int ldb, float beta, float *c, int ldc) {
  __m512 acc[16][8];
  size_t off[16];
  for (int x = 0; x < R; x++) {
    off[x] = (size_t)(x < rows ? x : rows - 1) * sr;
    for (int v = 0; v < V; v++)
      acc[x][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < k; p++) {
    const float *br = b + (size_t)p * ldb, *ap = a + (size_t)p * sc;
    __m512 bv[8];
    for (int v = 0; v < V; v++)
      bv[v] = _mm512_maskz_loadu_ps(mask[v], br + 16 * v);
    for (int x = 0; x < R; x++) {
      const __m512 av = _mm512_set1_ps(ap[off[x]]);
      for (int v = 0; v < V; v++)
        acc[x][v] = _mm512_fmadd_ps(av, bv[v], acc[x][v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
  for (int x = 0; x < R && x < rows; x++)
    for (int v = 0; v < V; v++) {
      float *cp = c + (size_t)x * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(al, acc[x][v]);
      if (beta != 0.0f)
        out = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(mask[v], cp), out);
      _mm512_mask_storeu_ps(cp, mask[v], out);
    }
}

/* Register blocks of R x V vectors, at most 16 accumulators. */
typedef void (*nn_block)(int rows, const __mmask16 *mask, int k, float alpha, const float *a,
                         int sr, int sc, const float *b, int ldb, float beta, float *c, int ldc);
#define BLOCK_NN(R, V)                                                                             \
  __attribute__((target("avx512f"))) static void block_nn_##R##x##V(                               \
      int rows, const __mmask16 *mask, int k, float alpha, const float *a, int sr, int sc,         \
      const float *b, int ldb, float beta, float *c, int ldc) {                                    \
    block_nn(R, V, rows, mask, k, alpha, a, sr, sc, b, ldb, beta, c, ldc);                         \
  }
BLOCK_NN(1, 1)
BLOCK_NN(1, 2)
BLOCK_NN(1, 4)
BLOCK_NN(1, 8)
BLOCK_NN(2, 1)
BLOCK_NN(2, 2)
BLOCK_NN(2, 4)
BLOCK_NN(2, 8)
BLOCK_NN(4, 1)
BLOCK_NN(4, 2)
BLOCK_NN(4, 4)
BLOCK_NN(8, 1)
BLOCK_NN(8, 2)
BLOCK_NN(16, 1)
/* [log2 R][log2 V] */
static const nn_block nn_blocks[5][4] = {{block_nn_1x1, block_nn_1x2, block_nn_1x4, block_nn_1x8},
                                         {block_nn_2x1, block_nn_2x2, block_nn_2x4, block_nn_2x8},
                                         {block_nn_4x1, block_nn_4x2, block_nn_4x4, NULL},
                                         {block_nn_8x1, block_nn_8x2, NULL, NULL},
                                         {block_nn_16x1, NULL, NULL, NULL}};

/* B's size above which small_nn reads it in panels (half this VM's 2 MiB
 * L2), and a panel's size (256 KiB measured best of 256 KiB, 512 KiB and
 * whole columns at m = 2, 4, 8). */
#define SMALL_NN_STREAM_BYTES (1 << 20)
#define SMALL_NN_PANEL_BYTES (256 << 10)

static int log2_up(int x) {
  int l = 0;
  while ((1 << l) < x)
    l++;
  return l;
}

static __mmask16 first_lanes(int n) {
  return (__mmask16)(n >= 16 ? 0xFFFF : n > 0 ? (1u << n) - 1 : 0);
}

/* C = alpha op(A) B + beta C with B row-major k x n, in blocks of 16
 * accumulators shaped to what is left: as many 16-column vectors as n needs
 * (up to 8), as many rows as fit, so that a vector-matrix product does not
 * compute 16 rows and a 16-column product not 32 columns. */
static void small_nn(int m, int n, int k, float alpha, const float *a, int sr, int sc,
                     const float *b, int ldb, float beta, float *c, int ldc) {
  int lv = log2_up((n + 15) / 16) < 3 ? log2_up((n + 15) / 16) : 3;
  /* B beyond L2: all of C's rows (up to 8) in one block, with fewer columns
   * each, so that each panel of B below is read once. */
  if ((double)k * n * sizeof(float) > SMALL_NN_STREAM_BYTES && log2_up(m) + lv > 4)
    lv = 4 - (log2_up(m) < 3 ? log2_up(m) : 3);
  const int V = 1 << lv;
  /* A large B goes in panels of rows that fit in L2, each panel across all
   * of C's columns: a column strip of B over all k rows touches one page per
   * row, more pages than the TLB holds once rows are 4 KiB or longer (m = 4,
   * 4096 x 4096: 8.9 ms in strips, 3.3 ms in panels; `baton bench gemm
   * --small`, 7 December). */
  int kc = k;
  if ((double)k * n * sizeof(float) > SMALL_NN_STREAM_BYTES) {
    kc = (int)(SMALL_NN_PANEL_BYTES / (sizeof(float) * (size_t)n));
    kc = kc < 8 ? 8 : kc;
  }
  for (int p0 = 0; p0 < k; p0 += kc) {
    const int kp = k - p0 < kc ? k - p0 : kc;
    const float be = p0 == 0 ? beta : 1.0f, *ap = a + (size_t)p0 * sc, *bp = b + (size_t)p0 * ldb;
    for (int i = 0; i < m;) {
      int lr = log2_up(m - i);
      if (lr > 4 - lv)
        lr = 4 - lv;
      const int R = 1 << lr, rows = m - i < R ? m - i : R;
      const nn_block f = nn_blocks[lr][lv];
      for (int j = 0; j < n; j += 16 * V) {
        __mmask16 mask[8];
        for (int v = 0; v < V; v++)
          mask[v] = first_lanes(n - j - 16 * v);
        f(rows, mask, kp, alpha, ap + (size_t)i * sr, sr, sc, bp + j, ldb, be,
          c + (size_t)i * ldc + j, ldc);
      }
      i += rows;
    }
  }
}

/* B is n x k (trans_b), A row-major m x k: C[4 x 4] as dot products along
 * the rows of both, 16 entries at a time. */
__attribute__((target("avx512f"))) static void block_nt(int rows, int cols, int k, float alpha,
                                                        const float *a, int lda, const float *b,
                                                        int ldb, float beta, float *c, int ldc) {
  __m512 acc[4][4];
  const float *ar[4], *br[4];
  for (int x = 0; x < 4; x++) {
    ar[x] = a + (size_t)(x < rows ? x : rows - 1) * lda;
    br[x] = b + (size_t)(x < cols ? x : cols - 1) * ldb;
    for (int y = 0; y < 4; y++)
      acc[x][y] = _mm512_setzero_ps();
  }
  for (int p = 0; p < k; p += 16) {
    const __mmask16 m = (__mmask16)(k - p >= 16 ? 0xFFFF : (1u << (k - p)) - 1);
    __m512 av[4], bv[4];
    for (int x = 0; x < 4; x++)
      av[x] = _mm512_maskz_loadu_ps(m, ar[x] + p), bv[x] = _mm512_maskz_loadu_ps(m, br[x] + p);
    for (int x = 0; x < 4; x++)
      for (int y = 0; y < 4; y++)
        acc[x][y] = _mm512_fmadd_ps(av[x], bv[y], acc[x][y]);
  }
  for (int x = 0; x < rows; x++)
    for (int y = 0; y < cols; y++) {
      float *cp = c + (size_t)x * ldc + y;
      const float v = alpha * _mm512_reduce_add_ps(acc[x][y]);
      *cp = beta != 0.0f ? v + beta * *cp : v;
    }
}

/* The whole product with the blocks above (never both operands transposed:
 * bt_gemm_small_takes leaves that to BLIS); 0, or -1 without memory for the
 * copy below, then BLIS does it. B transposed
 * (n x k) with a short k is first copied into k x n rows: dot products of
 * fewer than 64 entries spend more on their horizontal sums than on the
 * multiply-adds. */
static int small_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (trans_b && k >= 64) {
    for (int i = 0; i < m; i += 4)
      for (int j = 0; j < n; j += 4)
        block_nt(m - i < 4 ? m - i : 4, n - j < 4 ? n - j : 4, k, alpha, a + (size_t)i * lda, lda,
                 b + (size_t)j * ldb, ldb, beta, c + (size_t)i * ldc + j, ldc);
    return 0;
  }
  if (trans_b) {
    static _Thread_local float *rows;
    static _Thread_local size_t cap;
    const size_t need = (size_t)k * n;
    if (need > cap) {
      float *g = realloc(rows, need * sizeof *g);
      if (!g)
        return -1;
      rows = g, cap = need;
    }
    for (int j = 0; j < n; j++)
      for (int p = 0; p < k; p++)
        rows[(size_t)p * n + j] = b[(size_t)j * ldb + p];
    b = rows, ldb = n;
  }
  small_nn(m, n, k, alpha, a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, beta, c, ldc);
  return 0;
}
#endif

void bt_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  if (m <= 0 || n <= 0)
    return;
#ifdef HAVE_SMALL_KERNEL
  if (bt_gemm_small_takes(trans_a, trans_b, m, n, k) &&
      small_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
    return;
#endif
  /* Row-major operand: row stride = ld, column stride = 1. BLIS takes both
   * strides, so row-major needs no transposition trick. */
  bli_sgemm(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
            trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k, &alpha, (float *)a, lda, 1,
            (float *)b, ldb, 1, &beta, c, ldc, 1);
}

void bt_sgemm_ref(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double acc = 0;
      for (int p = 0; p < k; p++) {
        float av = trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        float bv = trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        acc += (double)av * bv;
      }
      float *cij = &c[(size_t)i * ldc + j];
      *cij = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *cij));
    }
}

static int cpu_has_avx512f(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}

int bt_gemm_configure(const char *arch, int threads) {
  static const struct {
    const char *name;
    arch_t id;
  } archs[] = {{"skx", BLIS_ARCH_SKX},
               {"haswell", BLIS_ARCH_HASWELL},
               {"sandybridge", BLIS_ARCH_SANDYBRIDGE},
               {"generic", BLIS_ARCH_GENERIC}};
  int id = -1;
  if (!arch || strcmp(arch, "auto") == 0) {
    if (!getenv("BLIS_ARCH_TYPE") && cpu_has_avx512f())
      id = BLIS_ARCH_SKX;
  } else {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
      if (strcmp(arch, archs[i].name) == 0)
        id = (int)archs[i].id;
    if (id < 0)
      return -1;
  }
  /* BLIS reads BLIS_ARCH_TYPE once, when it initialises on first use. */
  if (id >= 0) {
    char code[16];
    snprintf(code, sizeof code, "%d", id);
    setenv("BLIS_ARCH_TYPE", code, 1);
  }
  bli_thread_set_num_threads(threads > 0 ? threads : 1);
  return 0;
}

const char *bt_gemm_arch(void) {
  bli_init(); /* idempotent; the query reads BLIS's kernel table, set up by it */
  arch_t id = bli_arch_query_id();
  return bli_arch_string(id);
}

int bt_gemm_threads(void) { return (int)bli_thread_get_num_threads(); }

/* Measured with `baton bench gemm --small` (7 December, Intel Xeon VM, 210
 * dense-layer products at batch 1, 2, 4, 8 and 32): the 157 products this
 * rule takes run 4.29x faster than on BLIS alone (geometric mean), none
 * slower. Beyond the limit BLIS's packing still costs more than it saves for
 * up to 8 rows of C: forwards and input gradients at batch <= 8 run 1.3-3.5x
 * faster on the path at every size up to 4096 x 4096 (B read in panels,
 * small_nn), and so do weight gradients at batch 1-2 with at least 1024
 * outputs (1.3-1.8x; narrower ones are a tie). At batch 32 beyond a few 10^5
 * multiply-adds BLIS is faster (0.2-0.8x). */
int bt_gemm_small_takes(bool trans_a, bool trans_b, int m, int n, int k) {
  return bt_gemm_small_rule(trans_a, trans_b, m, n, k, small_limit_now());
}

int bt_gemm_small_rule(bool trans_a, bool trans_b, int m, int n, int k, long limit) {
  if (limit <= 0 || k <= 0 || m <= 0 || n <= 0 || (trans_a && trans_b))
    return 0;
  if ((double)m * n * k <= (double)limit)
    return 1;
  return trans_a ? k <= 2 && n >= 1024 : m <= 8;
}

void bt_gemm_set_small_limit(long macs) {
  small_limit = -1;
  small_limit_now();
  if (small_limit > 0) /* only where the small path may run at all */
    small_limit = macs > 0 ? macs : 0;
}

long bt_gemm_small_limit(void) {
#ifdef HAVE_SMALL_KERNEL
  return small_limit_now();
#else
  return 0;
#endif
}
