/* gemm: BLIS behind one function; see include/baton/gemm.h.
 * This file includes blis.h and must never include GSL's matrix headers
 * (their cblas symbols clash). */
#include "baton/gemm.h"

#include <blis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bt_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  if (m <= 0 || n <= 0)
    return;
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
  arch_t id = bli_arch_query_id();
  return bli_arch_string(id);
}

int bt_gemm_threads(void) { return (int)bli_thread_get_num_threads(); }
