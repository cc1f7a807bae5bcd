/* codec_simd: AVX2 and AVX-512 kernels of the codec, compiled with per-
 * function target attributes (the build stays portable: no -march) and
 * chosen at run time from the CPU. Every kernel computes exactly what its
 * reference in codec.c computes, with the same IEEE operations in the same
 * order per element, so frames and decoded values are bit-identical
 * (tests/test_codec.c). Tails shorter than a vector go to the reference. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codec_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>

#define T_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt")))
#define T_AVX512                                                                                 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt")))

static const bt_codec_kernels *R = &bt_codec_ref_kernels;

static int has_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  return (c >> 29) & 1;
}

/* ----------------------------------------------------- shared BMI2 kernels */

/* Each group of 8 codes is k bytes at byte offset g*k. */
static uint64_t byte_mask(int k) { return 0x0101010101010101ull * ((1u << k) - 1); }

T_AVX2 static void bmi_pack(const uint8_t *codes, size_t n, int k, uint8_t *out) {
  const uint64_t mask = byte_mask(k);
  const size_t groups = n / 8, out_len = (n * (size_t)k + 7) / 8;
  size_t g = 0;
  for (; g < groups && g * (size_t)k + 8 <= out_len; g++) {
    uint64_t w;
    memcpy(&w, codes + 8 * g, 8);
    const uint64_t p = _pext_u64(w, mask);
    memcpy(out + g * (size_t)k, &p, 8); /* the next group overwrites the top bytes */
  }
  for (; g < groups; g++) {
    uint64_t w;
    memcpy(&w, codes + 8 * g, 8);
    const uint64_t p = _pext_u64(w, mask);
    memcpy(out + g * (size_t)k, &p, (size_t)k);
  }
  if (n % 8)
    R->pack(codes + 8 * groups, n % 8, k, out + groups * (size_t)k);
}

T_AVX2 static void bmi_unpack(const uint8_t *in, size_t n, int k, uint8_t *codes) {
  const uint64_t mask = byte_mask(k);
  const size_t groups = n / 8, in_len = (n * (size_t)k + 7) / 8;
  size_t g = 0;
  for (; g < groups && g * (size_t)k + 8 <= in_len; g++) {
    uint64_t w;
    memcpy(&w, in + g * (size_t)k, 8);
    const uint64_t c = _pdep_u64(w, mask);
    memcpy(codes + 8 * g, &c, 8);
  }
  for (; g < groups; g++) {
    uint64_t w = 0;
    memcpy(&w, in + g * (size_t)k, (size_t)k);
    const uint64_t c = _pdep_u64(w, mask);
    memcpy(codes + 8 * g, &c, 8);
  }
  if (n % 8)
    R->unpack(in + groups * (size_t)k, n % 8, k, codes + 8 * groups);
}

/* ------------------------------------------------------------------- AVX2 */

T_AVX2 static void avx2_f32_to_f16(const float *x, uint16_t *h, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(void *)(h + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  R->f32_to_f16(x + i, h + i, n - i);
}

T_AVX2 static void avx2_f16_to_f32(const uint16_t *h, float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
  R->f16_to_f32(h + i, x + i, n - i);
}

T_AVX2 static inline __m256i avx2_bf16_round(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, q, isnan);
}

T_AVX2 static void avx2_f32_to_bf16(const float *x, uint16_t *h, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = avx2_bf16_round(_mm256_loadu_ps(x + i));
    const __m256i b = avx2_bf16_round(_mm256_loadu_ps(x + i + 8));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256((__m256i *)(void *)(h + i), p);
  }
  R->f32_to_bf16(x + i, h + i, n - i);
}

T_AVX2 static void avx2_bf16_to_f32(const uint16_t *h, float *x, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(h + i)));
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  R->bf16_to_f32(h + i, x + i, n - i);
}

T_AVX2 static int avx2_minmax(const float *x, size_t n, float *mn, float *mx) {
  __m256 lo0 = _mm256_set1_ps(__builtin_inff()), lo1 = lo0;
  __m256 hi0 = _mm256_set1_ps(-__builtin_inff()), hi1 = hi0;
  __m256 un = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    lo0 = _mm256_min_ps(a, lo0), hi0 = _mm256_max_ps(a, hi0);
    lo1 = _mm256_min_ps(b, lo1), hi1 = _mm256_max_ps(b, hi1);
    un = _mm256_or_ps(un, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, _mm256_min_ps(lo0, lo1));
  _mm256_storeu_ps(h, _mm256_max_ps(hi0, hi1));
  int nan = _mm256_movemask_ps(un) != 0;
  float tl, th;
  nan |= R->minmax(x + i, n - i, &tl, &th);
  for (int j = 0; j < 8; j++) {
    tl = l[j] < tl ? l[j] : tl;
    th = h[j] > th ? h[j] : th;
  }
  *mn = tl, *mx = th;
  return nan;
}

/* 32 int32 codes (4 vectors) to 32 bytes in order. */
T_AVX2 static inline __m256i avx2_pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

T_AVX2 static inline __m256i avx2_q(const float *x, __m256 vmn, __m256 vinv, __m256 vq) {
  __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmn), vinv);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), vq);
  return _mm256_cvtps_epi32(v);
}

T_AVX2 static void avx2_quantize(const float *x, size_t n, float mn, float inv, int maxq,
                                 uint8_t *codes) {
  const __m256 vmn = _mm256_set1_ps(mn), vinv = _mm256_set1_ps(inv), vq = _mm256_set1_ps((float)maxq);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i p = avx2_pack32(avx2_q(x + i, vmn, vinv, vq), avx2_q(x + i + 8, vmn, vinv, vq),
                                  avx2_q(x + i + 16, vmn, vinv, vq),
                                  avx2_q(x + i + 24, vmn, vinv, vq));
    _mm256_storeu_si256((__m256i *)(void *)(codes + i), p);
  }
  R->quantize(x + i, n - i, mn, inv, maxq, codes + i);
}

T_AVX2 static inline __m256i avx2_hash(__m256i key, __m256i idx) {
  __m256i s = _mm256_xor_si256(key, _mm256_mullo_epi32(idx, _mm256_set1_epi32((int)0x9E3779B9u)));
  s = _mm256_xor_si256(s, _mm256_srli_epi32(s, 16));
  s = _mm256_mullo_epi32(s, _mm256_set1_epi32(0x7feb352d));
  s = _mm256_xor_si256(s, _mm256_srli_epi32(s, 15));
  s = _mm256_mullo_epi32(s, _mm256_set1_epi32((int)0x846ca68bu));
  return _mm256_xor_si256(s, _mm256_srli_epi32(s, 16));
}

T_AVX2 static inline __m256i avx2_qsr(const float *x, __m256 vmn, __m256 vinv, __m256 vq,
                                      __m256i key, __m256i idx, __m256i iq) {
  __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x), vmn), vinv);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), vq);
  const __m256 u = _mm256_mul_ps(
      _mm256_cvtepi32_ps(_mm256_srli_epi32(avx2_hash(key, idx), 8)), _mm256_set1_ps(0x1p-24f));
  return _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_add_ps(v, u)), iq);
}

T_AVX2 static void avx2_quantize_sr(const float *x, size_t n, float mn, float inv, int maxq,
                                    uint32_t key, uint32_t idx0, uint8_t *codes) {
  const __m256 vmn = _mm256_set1_ps(mn), vinv = _mm256_set1_ps(inv), vq = _mm256_set1_ps((float)maxq);
  const __m256i vkey = _mm256_set1_epi32((int)key), iq = _mm256_set1_epi32(maxq);
  const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)(idx0 + (uint32_t)i)), step);
    const __m256i a = avx2_qsr(x + i, vmn, vinv, vq, vkey, idx, iq);
    idx = _mm256_add_epi32(idx, eight);
    const __m256i b = avx2_qsr(x + i + 8, vmn, vinv, vq, vkey, idx, iq);
    idx = _mm256_add_epi32(idx, eight);
    const __m256i c = avx2_qsr(x + i + 16, vmn, vinv, vq, vkey, idx, iq);
    idx = _mm256_add_epi32(idx, eight);
    const __m256i d = avx2_qsr(x + i + 24, vmn, vinv, vq, vkey, idx, iq);
    _mm256_storeu_si256((__m256i *)(void *)(codes + i), avx2_pack32(a, b, c, d));
  }
  R->quantize_sr(x + i, n - i, mn, inv, maxq, key, idx0 + (uint32_t)i, codes + i);
}

T_AVX2 static void avx2_dequantize(const uint8_t *codes, size_t n, float scale, float mn,
                                   float *x) {
  const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(mn);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(codes + i)));
    const __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vs);
    _mm256_storeu_ps(x + i, _mm256_add_ps(p, vm));
  }
  R->dequantize(codes + i, n - i, scale, mn, x + i);
}

T_AVX2 static void avx2_cks_stripes(uint64_t a[4], uint64_t b[4], const uint8_t *p, size_t n) {
  __m256i va = _mm256_loadu_si256((const __m256i *)(void *)a);
  __m256i vb = _mm256_loadu_si256((const __m256i *)(void *)b);
  for (size_t i = 0; i < n; i += 32) {
    va = _mm256_add_epi64(va, _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
    vb = _mm256_add_epi64(vb, va);
  }
  _mm256_storeu_si256((__m256i *)(void *)a, va);
  _mm256_storeu_si256((__m256i *)(void *)b, vb);
}

static size_t ref_compact(const float *x, size_t n, uint8_t *bitmap, float *vals) {
  return R->compact(x, n, bitmap, vals);
}
static void ref_expand(const uint8_t *bitmap, size_t n, float *x) { R->expand(bitmap, n, x); }

static const bt_codec_kernels avx2_kernels = {
    .name = "avx2",
    .f32_to_f16 = avx2_f32_to_f16,
    .f16_to_f32 = avx2_f16_to_f32,
    .f32_to_bf16 = avx2_f32_to_bf16,
    .bf16_to_f32 = avx2_bf16_to_f32,
    .minmax = avx2_minmax,
    .quantize = avx2_quantize,
    .quantize_sr = avx2_quantize_sr,
    .dequantize = avx2_dequantize,
    .pack = bmi_pack,
    .unpack = bmi_unpack,
    .compact = ref_compact,
    .expand = ref_expand,
    .cks_stripes = avx2_cks_stripes,
};

static int avx2_ok(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") && has_f16c();
}

const bt_codec_kernels *bt_codec_avx2_kernels(void) { return avx2_ok() ? &avx2_kernels : NULL; }

/* ---------------------------------------------------------------- AVX-512 */

T_AVX512 static void avx512_f32_to_f16(const float *x, uint16_t *h, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(void *)(h + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  avx2_f32_to_f16(x + i, h + i, n - i);
}

T_AVX512 static void avx512_f16_to_f32(const uint16_t *h, float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + i))));
  avx2_f16_to_f32(h + i, x + i, n - i);
}

T_AVX512 static void avx512_f32_to_bf16(const float *x, uint16_t *h, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i qbit = _mm512_set1_epi32(0x40);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(hi, one), bias)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absm), inf);
    const __m512i v = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, qbit));
    _mm256_storeu_si256((__m256i *)(void *)(h + i), _mm512_cvtepi32_epi16(v));
  }
  avx2_f32_to_bf16(x + i, h + i, n - i);
}

T_AVX512 static void avx512_bf16_to_f32(const uint16_t *h, float *x, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(h + i)));
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  avx2_bf16_to_f32(h + i, x + i, n - i);
}

T_AVX512 static int avx512_minmax(const float *x, size_t n, float *mn, float *mx) {
  __m512 lo0 = _mm512_set1_ps(__builtin_inff()), lo1 = lo0;
  __m512 hi0 = _mm512_set1_ps(-__builtin_inff()), hi1 = hi0;
  __mmask16 un = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    lo0 = _mm512_min_ps(a, lo0), hi0 = _mm512_max_ps(a, hi0);
    lo1 = _mm512_min_ps(b, lo1), hi1 = _mm512_max_ps(b, hi1);
    un |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
  }
  float l[16], h[16];
  _mm512_storeu_ps(l, _mm512_min_ps(lo0, lo1));
  _mm512_storeu_ps(h, _mm512_max_ps(hi0, hi1));
  int nan = un != 0;
  float tl, th;
  nan |= avx2_minmax(x + i, n - i, &tl, &th);
  for (int j = 0; j < 16; j++) {
    tl = l[j] < tl ? l[j] : tl;
    th = h[j] > th ? h[j] : th;
  }
  *mn = tl, *mx = th;
  return nan;
}

T_AVX512 static void avx512_quantize(const float *x, size_t n, float mn, float inv, int maxq,
                                     uint8_t *codes) {
  const __m512 vmn = _mm512_set1_ps(mn), vinv = _mm512_set1_ps(inv);
  const __m512 vq = _mm512_set1_ps((float)maxq), z = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmn), vinv);
    v = _mm512_min_ps(_mm512_max_ps(v, z), vq);
    _mm_storeu_si128((__m128i *)(void *)(codes + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  avx2_quantize(x + i, n - i, mn, inv, maxq, codes + i);
}

T_AVX512 static void avx512_quantize_sr(const float *x, size_t n, float mn, float inv, int maxq,
                                        uint32_t key, uint32_t idx0, uint8_t *codes) {
  const __m512 vmn = _mm512_set1_ps(mn), vinv = _mm512_set1_ps(inv);
  const __m512 vq = _mm512_set1_ps((float)maxq), z = _mm512_setzero_ps();
  const __m512 ulp = _mm512_set1_ps(0x1p-24f);
  const __m512i vkey = _mm512_set1_epi32((int)key), iq = _mm512_set1_epi32(maxq);
  const __m512i step = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i g = _mm512_set1_epi32((int)0x9E3779B9u), c1 = _mm512_set1_epi32(0x7feb352d);
  const __m512i c2 = _mm512_set1_epi32((int)0x846ca68bu);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)(idx0 + (uint32_t)i)), step);
    __m512i s = _mm512_xor_si512(vkey, _mm512_mullo_epi32(idx, g));
    s = _mm512_xor_si512(s, _mm512_srli_epi32(s, 16));
    s = _mm512_mullo_epi32(s, c1);
    s = _mm512_xor_si512(s, _mm512_srli_epi32(s, 15));
    s = _mm512_mullo_epi32(s, c2);
    s = _mm512_xor_si512(s, _mm512_srli_epi32(s, 16));
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(s, 8)), ulp);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmn), vinv);
    v = _mm512_min_ps(_mm512_max_ps(v, z), vq);
    const __m512i q = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(v, u)), iq);
    _mm_storeu_si128((__m128i *)(void *)(codes + i), _mm512_cvtepi32_epi8(q));
  }
  avx2_quantize_sr(x + i, n - i, mn, inv, maxq, key, idx0 + (uint32_t)i, codes + i);
}

T_AVX512 static void avx512_dequantize(const uint8_t *codes, size_t n, float scale, float mn,
                                       float *x) {
  const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(mn);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(codes + i)));
    const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(c), vs);
    _mm512_storeu_ps(x + i, _mm512_add_ps(p, vm));
  }
  avx2_dequantize(codes + i, n - i, scale, mn, x + i);
}

T_AVX512 static size_t avx512_compact(const float *x, size_t n, uint8_t *bitmap, float *vals) {
  const __m512 z = _mm512_setzero_ps();
  size_t i = 0, c = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 m = _mm512_cmp_ps_mask(v, z, _CMP_NEQ_UQ);
    const uint16_t mb = (uint16_t)m;
    memcpy(bitmap + i / 8, &mb, 2);
    _mm512_storeu_ps(vals + c, _mm512_maskz_compress_ps(m, v)); /* vals has 16 floats of slack */
    c += (size_t)__builtin_popcount(mb);
  }
  return c + R->compact(x + i, n - i, bitmap + i / 8, vals + c);
}

T_AVX512 static void avx512_expand(const uint8_t *bitmap, size_t n, float *x) {
  size_t j = 0;
  const size_t bm = (n + 7) / 8;
  size_t i = 0;
  for (; i + 8 <= bm; i += 8) {
    uint64_t w;
    memcpy(&w, bitmap + i, 8);
    j += (size_t)_mm_popcnt_u64(w);
  }
  for (; i < bm; i++)
    j += (size_t)__builtin_popcount(bitmap[i]);
  const size_t n16 = n & ~(size_t)15;
  for (i = n; i-- > n16;) /* the tail first: expansion runs backwards */
    x[i] = (bitmap[i / 8] >> (i % 8) & 1) ? x[--j] : 0.0f;
  for (size_t g = n16 / 16; g-- > 0;) {
    uint16_t m;
    memcpy(&m, bitmap + 2 * g, 2);
    const unsigned cnt = (unsigned)__builtin_popcount(m);
    j -= cnt;
    const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1), x + j);
    _mm512_storeu_ps(x + 16 * g, _mm512_maskz_expand_ps((__mmask16)m, v));
  }
}

T_AVX512 static void avx512_cks_stripes(uint64_t a[4], uint64_t b[4], const uint8_t *p,
                                        size_t n) {
  avx2_cks_stripes(a, b, p, n);
}

static const bt_codec_kernels avx512_kernels = {
    .name = "avx512",
    .f32_to_f16 = avx512_f32_to_f16,
    .f16_to_f32 = avx512_f16_to_f32,
    .f32_to_bf16 = avx512_f32_to_bf16,
    .bf16_to_f32 = avx512_bf16_to_f32,
    .minmax = avx512_minmax,
    .quantize = avx512_quantize,
    .quantize_sr = avx512_quantize_sr,
    .dequantize = avx512_dequantize,
    .pack = bmi_pack,
    .unpack = bmi_unpack,
    .compact = avx512_compact,
    .expand = avx512_expand,
    .cks_stripes = avx512_cks_stripes,
};

const bt_codec_kernels *bt_codec_avx512_kernels(void) {
  return avx2_ok() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
             ? &avx512_kernels
             : NULL;
}

#else /* not x86-64: reference kernels only */

const bt_codec_kernels *bt_codec_avx2_kernels(void) { return NULL; }
const bt_codec_kernels *bt_codec_avx512_kernels(void) { return NULL; }

#endif
