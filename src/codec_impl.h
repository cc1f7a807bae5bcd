/* codec_impl: the codec's kernel table, shared by src/codec.c (reference
 * kernels, frames) and src/codec_simd.c (AVX2 / AVX-512 kernels). Internal:
 * tests include it to compare kernel sets with each other. */
#ifndef BATON_CODEC_IMPL_H
#define BATON_CODEC_IMPL_H

#include <stddef.h>
#include <stdint.h>

typedef struct bt_codec_kernels {
  const char *name;
  void (*f32_to_f16)(const float *x, uint16_t *h, size_t n);
  void (*f16_to_f32)(const uint16_t *h, float *x, size_t n);
  void (*f32_to_bf16)(const float *x, uint16_t *h, size_t n);
  void (*bf16_to_f32)(const uint16_t *h, float *x, size_t n);
  /* Minimum and maximum of x[0..n) (n > 0), NaNs skipped; returns 1 if a NaN
   * was seen. */
  int (*minmax)(const float *x, size_t n, float *mn, float *mx);
  /* codes[i] = clamp(rne((x[i] - mn) * inv), 0, maxq). */
  void (*quantize)(const float *x, size_t n, float mn, float inv, int maxq, uint8_t *codes);
  /* Stochastic: codes[i] = min((int)(v + u), maxq), v clamped as above,
   * u = (hash(key, idx0 + i) >> 8) * 2^-24. */
  void (*quantize_sr)(const float *x, size_t n, float mn, float inv, int maxq, uint32_t key,
                      uint32_t idx0, uint8_t *codes);
  /* x[i] = codes[i] * scale + mn (multiply, then add: no fused multiply-add). */
  void (*dequantize)(const uint8_t *codes, size_t n, float scale, float mn, float *x);
  /* k-bit codes (bytes) <-> LSB-first bit stream; n a multiple of 8. */
  void (*pack)(const uint8_t *codes, size_t n, int k, uint8_t *out);
  void (*unpack)(const uint8_t *in, size_t n, int k, uint8_t *codes);
  /* bitmap bit i = (x[i] != 0), vals = the non-zero x in order; n a multiple
   * of 8; vals needs room for the count + 16. Returns the count. */
  size_t (*compact)(const float *x, size_t n, uint8_t *bitmap, float *vals);
  /* In place: x[0..nnz) holds the non-zero values; spreads them to their
   * bitmap positions, zeros elsewhere (n a multiple of 8). */
  void (*expand)(const uint8_t *bitmap, size_t n, float *x);
  /* Adds the 32-byte stripes of p[0..n) (n a multiple of 32) into the
   * checksum lanes. */
  void (*cks_stripes)(uint64_t a[4], uint64_t b[4], const uint8_t *p, size_t n);
} bt_codec_kernels;

extern const bt_codec_kernels bt_codec_ref_kernels;
/* NULL where the compiler or the CPU lacks the instructions. */
const bt_codec_kernels *bt_codec_avx2_kernels(void);
const bt_codec_kernels *bt_codec_avx512_kernels(void);

/* Recomputes the checksum of a frame of len bytes (header + len - 40
 * payload bytes), whatever its fields say: lets tests and the fuzzer reach
 * the checks behind the checksum. Returns -1 if len < 40. */
int bt_codec_reseal(void *frame, size_t len);

/* The stochastic-rounding hash (lowbias32 of key ^ idx * golden). */
static inline uint32_t bt_codec_hash(uint32_t key, uint32_t idx) {
  uint32_t s = key ^ (idx * 0x9E3779B9u);
  s ^= s >> 16;
  s *= 0x7feb352du;
  s ^= s >> 15;
  s *= 0x846ca68bu;
  s ^= s >> 16;
  return s;
}

#endif
