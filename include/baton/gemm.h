/* gemm: the one seam between baton and BLAS.
 *
 * All matrix products in the engine go through bt_sgemm, row-major with
 * leading dimensions, so that a transposed operand is just a stride choice.
 * The BLIS implementation is the fast path; bt_sgemm_ref is a naive triple
 * loop used by tests as the reference. */
#ifndef BATON_GEMM_H
#define BATON_GEMM_H

#include <stdbool.h>

/* C[m x n] = alpha * op(A) * op(B) + beta * C, all row-major.
 * op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when
 * trans_b). lda/ldb/ldc are row strides in elements. */
void bt_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);

/* Products of at most this many multiply-adds (and a few shapes beyond,
 * bt_gemm_small_takes) skip BLIS when it runs its skx kernels (which have
 * no small-matrix path; gemm.c). The environment
 * variable BATON_GEMM_SMALL overrides it (0: always BLIS). */
#define BT_GEMM_SMALL_MACS 262144L

/* The limit in effect (0 when BLIS runs another kernel set), and a new one
 * (0: always BLIS; ignored where the small path cannot run): benchmarks. */
long bt_gemm_small_limit(void);
/* Whether bt_sgemm gives this product to the small path: under the limit,
 * and beyond it a product with at most 8 rows of C and A not transposed, or
 * a transposed A with k <= 2 and n >= 1024 (where BLIS's packing costs more
 * than it saves; gemm.c). */
int bt_gemm_small_takes(bool trans_a, bool trans_b, int m, int n, int k);
/* The same rule under a given limit, whatever kernels the host runs: the
 * path's choice from a shape alone (pure; bt_gemm_small_takes applies it with
 * the limit in effect). */
int bt_gemm_small_rule(bool trans_a, bool trans_b, int m, int n, int k, long limit);
void bt_gemm_set_small_limit(long macs);

/* Naive reference with the same contract (double accumulation). */
void bt_sgemm_ref(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* Configures BLIS before first use. `arch` is one of "auto", "skx",
 * "haswell", "sandybridge", "generic"; "auto" picks skx when the CPU has
 * AVX-512F (BLIS 0.9 itself picks its AVX2 haswell kernels there, about 1.5x
 * slower) unless BLIS_ARCH_TYPE is already set in the environment, which
 * always wins. `threads` sets BLIS's thread count. Returns 0, or -1 for an
 * unknown arch name. Must be called before any bt_sgemm call to take effect. */
int bt_gemm_configure(const char *arch, int threads);

/* The kernel set BLIS actually uses ("skx", "haswell", ...), and its threads. */
const char *bt_gemm_arch(void);
int bt_gemm_threads(void);

#endif
