/* The codec: names, frame sizes, round-trip bounds, reference vs vector
 * kernels (bit-exact), error feedback, stochastic rounding, malformed frames. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/codec.h"
#include "baton/rng.h"
#include "src/codec_impl.h"

static const char *ALL[] = {"none",       "fp16",      "bf16",         "q1",          "q2",
                            "q3",         "q4",        "q5",           "q6",          "q7",
                            "q8",         "sparse-q1", "sparse-q4",    "sparse-q8",   "sparse-q3",
                            "q4:stochastic", "q8:block=64", "q3:block=24", "sparse-q5:block=40:stochastic",
                            "q4-ef", "fp16-ef", "sparse-q4-ef"};
enum { N_ALL = sizeof ALL / sizeof ALL[0] };

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static const char *ISAS[] = {"ref", "avx2", "avx512"};

static bt_codec_spec spec_of(const char *name) {
  bt_codec_spec s;
  bt_err err;
  cr_assert_eq(bt_codec_parse(name, &s, &err), 0, "%s: %s", name, err.msg);
  return s;
}

/* Gaussian data; every third element zero when relu. */
static float *make_data(size_t n, uint64_t seed, int relu) {
  float *x = malloc((n + 1) * sizeof(float));
  bt_rng r;
  bt_rng_seed(&r, seed, 7);
  for (size_t i = 0; i < n; i++) {
    float v = bt_rng_normal(&r) * 3.0f + 0.5f;
    x[i] = relu && v < 0.5f ? 0.0f : v;
  }
  return x;
}

/* Encodes with a fresh encoder; returns the frame (malloc'd), its length in *len. */
static uint8_t *encode(const char *name, const float *x, size_t n, size_t *len) {
  bt_codec_spec s = spec_of(name);
  bt_encoder *e;
  bt_err err;
  cr_assert_eq(bt_encoder_create(&s, &e, &err), 0, "%s", err.msg);
  const size_t cap = bt_codec_max_frame_bytes(&s, n);
  cr_assert_gt(cap, 0);
  uint8_t *f = malloc(cap);
  cr_assert_eq(bt_codec_encode(e, x, n, f, cap, len, &err), 0, "%s n=%zu: %s", name, n, err.msg);
  cr_assert_leq(*len, cap, "%s n=%zu: frame %zu > max %zu", name, n, *len, cap);
  bt_encoder_free(e);
  return f;
}

static int have_isa(const char *isa) {
  bt_err err;
  return bt_codec_set_isa(isa, &err) == 0;
}

Test(codec, parse_names) {
  bt_codec_spec s;
  bt_err err;
  char buf[128];
  const char *canon[] = {"none", "fp16", "bf16-ef", "q1", "q8", "q4-ef", "sparse-q8",
                         "q4:block=256", "q2:stochastic", "q3-ef:block=64:stochastic:seed=9"};
  for (size_t i = 0; i < sizeof canon / sizeof canon[0]; i++) {
    cr_assert_eq(bt_codec_parse(canon[i], &s, &err), 0, "%s: %s", canon[i], err.msg);
    cr_assert_str_eq(bt_codec_name(&s, buf, sizeof buf), canon[i]);
  }
  cr_assert_eq(bt_codec_parse("q4:ef", &s, &err), 0);
  cr_assert(s.error_feedback && s.kind == BT_CODEC_Q && s.bits == 4 && s.block == 512);
  cr_assert_eq(bt_codec_parse("sparse-q2-ef:block=8", &s, &err), 0);
  cr_assert(s.kind == BT_CODEC_SPARSE_Q && s.bits == 2 && s.block == 8 && s.error_feedback);
  const char *bad[] = {"", "q0", "q9", "q10", "sparse-q", "sparse", "fp32", "none-ef",
                       "fp16:block=64", "q4:block=12", "q4:block=0", "q4:block=4194304",
                       "q4:seed=-1", "q4:bogus", "q4:", "Q4", "q4-ef-ef:x", "bf16:stochastic"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err.msg[0] = 0;
    cr_assert_lt(bt_codec_parse(bad[i], &s, &err), 0, "'%s' accepted", bad[i]);
    cr_assert_neq(err.msg[0], 0);
  }
}

Test(codec, frame_size_bounds_and_ratios) {
  const size_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 63, 511, 512, 513, 1000, 4099};
  for (int c = 0; c < N_ALL; c++)
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
      float *x = make_data(ns[k], 3 + k, c % 2);
      size_t len;
      uint8_t *f = encode(ALL[c], x, ns[k], &len);
      free(f), free(x);
    }
  /* Exact sizes: q8 and q4 with the default block of 512 */
  bt_codec_spec s8 = spec_of("q8"), s4 = spec_of("q4"), sp = spec_of("sparse-q4");
  const size_t n = 1 << 20;
  cr_assert_eq(bt_codec_max_frame_bytes(&s8, n), 40 + (n / 512) * (8 + 512));
  cr_assert_eq(bt_codec_max_frame_bytes(&s4, n), 40 + (n / 512) * (8 + 256));
  const double r8 = 4.0 * n / (double)bt_codec_max_frame_bytes(&s8, n);
  const double r4 = 4.0 * n / (double)bt_codec_max_frame_bytes(&s4, n);
  cr_assert(r8 > 3.93 && r8 < 3.95, "q8 ratio %.3f", r8);
  cr_assert(r4 > 7.75 && r4 < 7.77, "q4 ratio %.3f", r4);
  /* sparse: bitmap + all values at worst */
  cr_assert_eq(bt_codec_max_frame_bytes(&sp, 1001), 40 + 126 + (8 + 256) + (8 + 245));
}

/* Per-element bound of deterministic k-bit rounding: scale/2 plus float
 * rounding of the block's values. */
static void check_q_bound(const float *x, const float *y, size_t n, int k, size_t B,
                          const char *what) {
  for (size_t b0 = 0; b0 < n; b0 += B) {
    size_t len = n - b0 < B ? n - b0 : B;
    float mn = INFINITY, mx = -INFINITY;
    for (size_t i = 0; i < len; i++)
      mn = fminf(mn, x[b0 + i]), mx = fmaxf(mx, x[b0 + i]);
    const float scale = (mx - mn) / (float)((1 << k) - 1);
    const float tol = scale * 0.5f * (1 + 1e-4f) + 4 * FLT_EPSILON * fmaxf(fabsf(mn), fabsf(mx));
    for (size_t i = 0; i < len; i++)
      cr_assert_leq(fabsf(x[b0 + i] - y[b0 + i]), tol, "%s: element %zu: %g -> %g, scale %g",
                    what, b0 + i, x[b0 + i], y[b0 + i], scale);
  }
}

Test(codec, round_trip_bounds) {
  const size_t ns[] = {1, 9, 100, 513, 5000};
  bt_err err;
  for (int isa = 0; isa < 3; isa++) {
    if (!have_isa(ISAS[isa]))
      continue;
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
      const size_t n = ns[t];
      float *x = make_data(n, 11 + t, 0), *y = malloc(n * sizeof(float));
      size_t len;
      /* none: exact */
      uint8_t *f = encode("none", x, n, &len);
      cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
      cr_assert_eq(memcmp(x, y, n * 4), 0);
      free(f);
      /* fp16 / bf16: relative error at most half an ulp */
      f = encode("fp16", x, n, &len);
      cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
      for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabsf(x[i] - y[i]), fabsf(x[i]) * 0x1p-11f + 0x1p-25f);
      free(f);
      f = encode("bf16", x, n, &len);
      cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
      for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabsf(x[i] - y[i]), fabsf(x[i]) * 0x1p-8f);
      free(f);
      for (int k = 1; k <= 8; k++) {
        char name[32];
        snprintf(name, sizeof name, "q%d:block=%d", k, k % 2 ? 512 : 64);
        f = encode(name, x, n, &len);
        cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
        check_q_bound(x, y, n, k, k % 2 ? 512 : 64, name);
        free(f);
      }
      free(x);
      /* sparse: zeros stay exactly zero; non-zeros within the bound of their
       * (compacted) block */
      x = make_data(n, 21 + t, 1);
      for (int k = 1; k <= 8; k += 3) {
        char name[32];
        snprintf(name, sizeof name, "sparse-q%d:block=16", k);
        f = encode(name, x, n, &len);
        cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
        float *cx = malloc(n * sizeof(float) + 4), *cy = malloc(n * sizeof(float) + 4);
        size_t c = 0;
        for (size_t i = 0; i < n; i++) {
          if (x[i] == 0.0f) {
            cr_assert_eq(y[i], 0.0f);
          } else {
            cx[c] = x[i], cy[c] = y[i], c++;
          }
        }
        check_q_bound(cx, cy, c, k, 16, name);
        free(cx), free(cy), free(f);
      }
      free(x), free(y);
    }
  }
  cr_assert_eq(bt_codec_set_isa("ref", &err), 0);
}

Test(codec, constant_and_tiny_blocks) {
  bt_err err;
  float x[40], y[40];
  for (int i = 0; i < 40; i++)
    x[i] = 1.25f;
  x[39] = -0.0f;
  size_t len;
  uint8_t *f = encode("q3:block=8", x, 40, &len);
  cr_assert_eq(bt_codec_decode(f, len, y, 40, &err), 0, "%s", err.msg);
  for (int i = 0; i < 32; i++)
    cr_assert_eq(y[i], 1.25f);
  free(f);
  /* NaN / infinity refused by the quantised codecs, passed by fp16 */
  x[5] = NAN;
  bt_codec_spec s = spec_of("q4");
  bt_encoder *e;
  cr_assert_eq(bt_encoder_create(&s, &e, &err), 0);
  uint8_t buf[256];
  cr_assert_lt(bt_codec_encode(e, x, 40, buf, sizeof buf, &len, &err), 0);
  cr_assert(strstr(err.msg, "non-finite"), "%s", err.msg);
  x[5] = INFINITY;
  cr_assert_lt(bt_codec_encode(e, x, 40, buf, sizeof buf, &len, &err), 0);
  /* frame buffer too small */
  x[5] = 1;
  cr_assert_lt(bt_codec_encode(e, x, 40, buf, 50, &len, &err), 0);
  cr_assert(strstr(err.msg, "bytes"), "%s", err.msg);
  bt_encoder_free(e);
  x[5] = NAN;
  f = encode("fp16", x, 40, &len);
  cr_assert_eq(bt_codec_decode(f, len, y, 40, &err), 0);
  cr_assert(isnan(y[5]));
  free(f);
}

/* Every kernel set produces the same frame bytes and the same decoded bits. */
Test(codec, reference_vs_vector_bit_exact) {
  const size_t ns[] = {1, 5, 8, 17, 31, 33, 100, 511, 512, 777, 4096 + 13, 70000};
  bt_err err;
  for (int c = 0; c < N_ALL; c++)
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
      const size_t n = ns[t];
      float *x = make_data(n, 100 + t, c % 3 == 0);
      uint8_t *ref = NULL;
      size_t ref_len = 0;
      float *yref = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
      for (int isa = 0; isa < 3; isa++) {
        if (!have_isa(ISAS[isa]))
          continue;
        size_t len;
        uint8_t *f = encode(ALL[c], x, n, &len);
        cr_assert_eq(bt_codec_decode(f, len, isa ? y : yref, n, &err), 0, "%s", err.msg);
        if (isa == 0) {
          ref = f, ref_len = len;
          continue;
        }
        cr_assert_eq(len, ref_len, "%s n=%zu %s: %zu vs %zu bytes", ALL[c], n, ISAS[isa], len,
                     ref_len);
        for (size_t i = 0; i < len; i++)
          cr_assert_eq(f[i], ref[i], "%s n=%zu %s: byte %zu differs", ALL[c], n, ISAS[isa], i);
        cr_assert_eq(memcmp(y, yref, n * 4), 0, "%s n=%zu %s: decoded values differ", ALL[c], n,
                     ISAS[isa]);
        /* and the reference decodes the vector frame identically */
        cr_assert_eq(bt_codec_set_isa("ref", &err), 0);
        cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s", err.msg);
        cr_assert_eq(memcmp(y, yref, n * 4), 0);
        free(f);
      }
      cr_assert_eq(bt_codec_set_isa("ref", &err), 0);
      free(ref), free(x), free(y), free(yref);
    }
}

/* Kernel level: conversions on special values, every half, random bits. */
Test(codec, conversions_special_values) {
  const bt_codec_kernels *ks[3] = {&bt_codec_ref_kernels, bt_codec_avx2_kernels(),
                                   bt_codec_avx512_kernels()};
  enum { N = 1 << 16 };
  static uint16_t h[N], h2[N];
  static float f[N], g[N];
  for (int i = 0; i < N; i++)
    h[i] = (uint16_t)i;
  ks[0]->f16_to_f32(h, f, N);
  for (int k = 1; k < 3; k++) {
    if (!ks[k])
      continue;
    ks[k]->f16_to_f32(h, g, N);
    cr_assert_eq(memcmp(f, g, sizeof f), 0, "%s: f16 -> f32 differs", ks[k]->name);
    ks[k]->bf16_to_f32(h, g, N);
    ks[0]->bf16_to_f32(h, f, N);
    cr_assert_eq(memcmp(f, g, sizeof f), 0, "%s: bf16 -> f32 differs", ks[k]->name);
    ks[0]->f16_to_f32(h, f, N);
  }
  /* floats: random bit patterns plus the edges */
  bt_rng r;
  bt_rng_seed(&r, 5, 5);
  uint32_t edges[] = {0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
                      0xffbfffffu, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u,
                      0x38800000u, 0x387fffffu, 0x33800000u, 0x33000000u, 0x33000001u,
                      0x7f7fffffu, 0x3f7fffffu, 0x3f808000u, 0x3f818000u, 0x00000001u};
  for (int i = 0; i < N; i++) {
    uint32_t u = i < (int)(sizeof edges / 4) ? edges[i] : (uint32_t)bt_rng_u64(&r);
    if (i % 4 == 1) /* near the half range */
      u = 0x30000000u + (uint32_t)(bt_rng_u64(&r) % 0x18000000u);
    memcpy(&f[i], &u, 4);
  }
  ks[0]->f32_to_f16(f, h, N);
  for (int k = 1; k < 3; k++)
    if (ks[k]) {
      ks[k]->f32_to_f16(f, h2, N);
      for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], h2[i], "%s: f32 %08x -> f16 %04x, reference %04x", ks[k]->name,
                     bits_of(f[i]), h2[i], h[i]);
    }
  ks[0]->f32_to_bf16(f, h, N);
  for (int k = 1; k < 3; k++)
    if (ks[k]) {
      ks[k]->f32_to_bf16(f, h2, N);
      for (int i = 0; i < N; i++)
        cr_assert_eq(h[i], h2[i], "%s: f32 %08x -> bf16", ks[k]->name, bits_of(f[i]));
    }
  /* rounding: 1 + 2^-8 is a tie between bf16 neighbours -> even (1.0) */
  float one_tie = 1.0f + 0x1p-8f, t;
  uint16_t b;
  ks[0]->f32_to_bf16(&one_tie, &b, 1);
  cr_assert_eq(b, 0x3f80);
  ks[0]->f32_to_f16(&(float){65520.0f}, &b, 1);
  cr_assert_eq(b, 0x7c00);
  ks[0]->f32_to_f16(&(float){65519.0f}, &b, 1);
  cr_assert_eq(b, 0x7bff);
  ks[0]->f32_to_f16(&(float){0x1p-25f}, &b, 1); /* tie to even: 0 */
  cr_assert_eq(b, 0);
  ks[0]->f32_to_f16(&(float){0x1.8p-24f}, &b, 1); /* tie to even: 2 * 2^-24 */
  cr_assert_eq(b, 2);
  ks[0]->f16_to_f32(&(uint16_t){0x0001}, &t, 1);
  cr_assert_eq(t, 0x1p-24f);
}

Test(codec, pack_unpack_all_widths) {
  const bt_codec_kernels *ks[3] = {&bt_codec_ref_kernels, bt_codec_avx2_kernels(),
                                   bt_codec_avx512_kernels()};
  uint8_t codes[203], back[203], p0[203], p1[210];
  bt_rng r;
  bt_rng_seed(&r, 9, 9);
  for (int k = 1; k <= 8; k++)
    for (size_t n = 0; n <= 203; n += 1 + n / 8) {
      for (size_t i = 0; i < n; i++)
        codes[i] = (uint8_t)(bt_rng_u64(&r) & ((1u << k) - 1));
      const size_t bytes = (n * (size_t)k + 7) / 8;
      ks[0]->pack(codes, n, k, p0);
      for (int s = 1; s < 3; s++) {
        if (!ks[s])
          continue;
        memset(p1, 0xAA, sizeof p1);
        ks[s]->pack(codes, n, k, p1);
        cr_assert_eq(memcmp(p0, p1, bytes), 0, "%s pack k=%d n=%zu", ks[s]->name, k, n);
        cr_assert_eq(p1[bytes], 0xAA, "%s pack k=%d n=%zu wrote past the end", ks[s]->name, k, n);
        ks[s]->unpack(p0, n, k, back);
        cr_assert_eq(memcmp(codes, back, n), 0, "%s unpack k=%d n=%zu", ks[s]->name, k, n);
      }
      ks[0]->unpack(p0, n, k, back);
      cr_assert_eq(memcmp(codes, back, n), 0, "ref unpack k=%d n=%zu", k, n);
    }
}

/* Error feedback: the sum of what was received tracks the sum of what was
 * sent; the difference is the residual, bounded by one transfer's error. */
Test(codec, error_feedback_tracks_sum) {
  enum { N = 1000, T = 200 };
  bt_err err;
  for (int isa = 0; isa < 3; isa++) {
    if (!have_isa(ISAS[isa]))
      continue;
    bt_codec_spec s_ef = spec_of("q2-ef:block=64"), s_no = spec_of("q2:block=64");
    bt_encoder *ef, *no;
    cr_assert_eq(bt_encoder_create(&s_ef, &ef, &err), 0);
    cr_assert_eq(bt_encoder_create(&s_no, &no, &err), 0);
    const size_t cap = bt_codec_max_frame_bytes(&s_ef, N);
    uint8_t *f = malloc(cap);
    static double sx[N], sy_ef[N], sy_no[N];
    memset(sx, 0, sizeof sx), memset(sy_ef, 0, sizeof sy_ef), memset(sy_no, 0, sizeof sy_no);
    float x[N], y[N];
    bt_rng r;
    bt_rng_seed(&r, 77, 1);
    double worst_ef = 0, final_no = 0;
    for (int t = 0; t < T; t++) {
      for (int i = 0; i < N; i++) {
        x[i] = bt_rng_uniform(&r) * 2 - 1;
        sx[i] += x[i];
      }
      size_t len;
      cr_assert_eq(bt_codec_encode(ef, x, N, f, cap, &len, &err), 0, "%s", err.msg);
      cr_assert_eq(bt_codec_decode(f, len, y, N, &err), 0, "%s", err.msg);
      for (int i = 0; i < N; i++) {
        sy_ef[i] += y[i];
        worst_ef = fmax(worst_ef, fabs(sx[i] - sy_ef[i]));
      }
      cr_assert_eq(bt_codec_encode(no, x, N, f, cap, &len, &err), 0, "%s", err.msg);
      cr_assert_eq(bt_codec_decode(f, len, y, N, &err), 0, "%s", err.msg);
      for (int i = 0; i < N; i++)
        sy_no[i] += y[i];
    }
    for (int i = 0; i < N; i++)
      final_no = fmax(final_no, fabs(sx[i] - sy_no[i]));
    /* |x + r| <= 1 + 0.4, so a q2 step is at most 2.8 / 3: residual <= 0.47 */
    cr_assert_lt(worst_ef, 0.5, "%s: EF residual reached %g", ISAS[isa], worst_ef);
    cr_assert_gt(final_no, 1.0, "without EF the error should accumulate (%g)", final_no);
    /* a different n on the same stream is refused */
    size_t len;
    cr_assert_lt(bt_codec_encode(ef, x, N - 1, f, cap, &len, &err), 0);
    bt_encoder_reset(ef);
    cr_assert_eq(bt_codec_encode(ef, x, N, f, cap, &len, &err), 0, "%s", err.msg);
    bt_encoder_free(ef), bt_encoder_free(no);
    free(f);
  }
  cr_assert_eq(bt_codec_set_isa("ref", &err), 0);
}

/* Stochastic rounding: unbiased on average; deterministic rounding is not. */
Test(codec, stochastic_rounding_unbiased) {
  enum { N = 4096, T = 20 };
  bt_err err;
  float x[N], y[N];
  for (int i = 0; i < N; i++)
    x[i] = i % 64 == 0 ? 0.0f : i % 64 == 1 ? 1.0f : 0.3f + 0.001f * (float)(i % 7);
  for (int isa = 0; isa < 3; isa++) {
    if (!have_isa(ISAS[isa]))
      continue;
    bt_codec_spec s = spec_of("q1:block=64:stochastic:seed=5"), d = spec_of("q1:block=64");
    bt_encoder *e, *de;
    cr_assert_eq(bt_encoder_create(&s, &e, &err), 0);
    cr_assert_eq(bt_encoder_create(&d, &de, &err), 0);
    uint8_t f[2048];
    double sum_x = 0, sum_y = 0, sum_d = 0;
    size_t len;
    for (int t = 0; t < T; t++) {
      cr_assert_eq(bt_codec_encode(e, x, N, f, sizeof f, &len, &err), 0, "%s", err.msg);
      cr_assert_eq(bt_codec_decode(f, len, y, N, &err), 0, "%s", err.msg);
      for (int i = 0; i < N; i++)
        if (i % 64 > 1)
          sum_x += x[i], sum_y += y[i];
    }
    cr_assert_eq(bt_codec_encode(de, x, N, f, sizeof f, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(bt_codec_decode(f, len, y, N, &err), 0, "%s", err.msg);
    for (int i = 0; i < N; i++)
      if (i % 64 > 1)
        sum_d += y[i] - x[i];
    const double cnt = (double)T * N * 62 / 64;
    cr_assert_lt(fabs(sum_y - sum_x) / cnt, 0.005, "%s: stochastic bias %g", ISAS[isa],
                 (sum_y - sum_x) / cnt);
    cr_assert_gt(fabs(sum_d) / (N * 62.0 / 64), 0.25, "deterministic q1 should be biased");
    /* same seed, same calls: same frames */
    bt_encoder *e2;
    cr_assert_eq(bt_encoder_create(&s, &e2, &err), 0);
    uint8_t f2[2048];
    size_t len2;
    bt_encoder_reset(e);
    cr_assert_eq(bt_codec_encode(e, x, N, f, sizeof f, &len, &err), 0);
    cr_assert_eq(bt_codec_encode(e2, x, N, f2, sizeof f2, &len2, &err), 0);
    cr_assert_eq(len, len2);
    cr_assert_eq(memcmp(f, f2, len), 0);
    bt_encoder_free(e), bt_encoder_free(e2), bt_encoder_free(de);
  }
  cr_assert_eq(bt_codec_set_isa("ref", &err), 0);
}

static void put64le(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* Truncations, single-bit flips, wrong fields: all rejected. */
Test(codec, malformed_frames_rejected) {
  const char *names[] = {"none", "fp16", "bf16", "q1", "q4", "q8:block=16", "sparse-q4:block=8",
                         "q3-ef:stochastic"};
  bt_err err;
  for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
    const size_t n = 37;
    float *x = make_data(n, 40 + c, 1), y[37];
    size_t len;
    uint8_t *f = encode(names[c], x, n, &len);
    cr_assert_eq(bt_codec_decode(f, len, y, n, &err), 0, "%s: %s", names[c], err.msg);
    /* every truncation, each in a buffer of exactly that size (ASan checks) */
    for (size_t l = 0; l < len; l++) {
      uint8_t *t = malloc(l ? l : 1);
      memcpy(t, f, l);
      cr_assert_lt(bt_codec_decode(t, l, y, n, &err), 0, "%s: truncated to %zu accepted",
                   names[c], l);
      free(t);
    }
    /* trailing bytes */
    uint8_t *longer = malloc(len + 3);
    memcpy(longer, f, len);
    cr_assert_lt(bt_codec_decode(longer, len + 3, y, n, &err), 0);
    free(longer);
    /* every single bit flip */
    for (size_t bit = 0; bit < len * 8; bit++) {
      f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      cr_assert_lt(bt_codec_decode(f, len, y, n, &err), 0, "%s: flip of bit %zu accepted",
                   names[c], bit);
      f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* wrong element count for the buffer */
    cr_assert_lt(bt_codec_decode(f, len, y, n - 1, &err), 0);
    cr_assert(strstr(err.msg, "elements"), "%s", err.msg);
    free(f), free(x);
  }
  /* named fields, each with a message */
  float x[64], y[64];
  for (int i = 0; i < 64; i++)
    x[i] = (float)i;
  size_t len;
  uint8_t *f = encode("q4:block=16", x, 64, &len);
  struct {
    size_t off;
    uint8_t val;
    const char *msg;
  } bad[] = {{0, 'X', "magic"}, {4, 2, "version"}, {5, 9, "codec"},  {6, 9, "not valid"},
             {6, 0, "not valid"}, {7, 4, "flags"},  {8, 12, "not valid"}, {12, 1, "reserved"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint8_t *g = malloc(len);
    memcpy(g, f, len);
    g[bad[i].off] = bad[i].val;
    cr_assert_lt(bt_codec_decode(g, len, y, 64, &err), 0);
    cr_assert(strstr(err.msg, bad[i].msg), "offset %zu: '%s'", bad[i].off, err.msg);
    free(g);
  }
  /* lengths that disagree: payload field vs frame; element count vs payload */
  uint8_t *g = malloc(len);
  memcpy(g, f, len);
  put64le(g + 24, len - 40 - 1);
  cr_assert_lt(bt_codec_decode(g, len, y, 64, &err), 0);
  cr_assert(strstr(err.msg, "payload"), "%s", err.msg);
  memcpy(g, f, len);
  put64le(g + 16, 60);
  cr_assert_lt(bt_codec_decode(g, len, y, 60, &err), 0);
  cr_assert(strstr(err.msg, "need"), "%s", err.msg);
  memcpy(g, f, len);
  put64le(g + 16, 63); /* same payload size: only the checksum catches it */
  cr_assert_lt(bt_codec_decode(g, len, y, 63, &err), 0);
  cr_assert(strstr(err.msg, "checksum"), "%s", err.msg);
  memcpy(g, f, len);
  put64le(g + 16, UINT64_MAX);
  cr_assert_lt(bt_codec_decode(g, len, y, 64, &err), 0);
  /* block size that changes the layout (16 -> 32): sizes disagree */
  memcpy(g, f, len);
  g[8] = 32;
  cr_assert_lt(bt_codec_decode(g, len, y, 64, &err), 0);
  free(g), free(f);
  /* a sparse bitmap with bits beyond n */
  float z[13] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7};
  float w[13];
  f = encode("sparse-q8", z, 13, &len);
  cr_assert_eq(bt_codec_decode(f, len, w, 13, &err), 0, "%s", err.msg);
  for (int i = 0; i < 13; i++)
    cr_assert_float_eq(w[i], z[i], 0.05f);
  f[40 + 1] |= 0x80;
  cr_assert_lt(bt_codec_decode(f, len, w, 13, &err), 0);
  cr_assert(strstr(err.msg, "beyond"), "%s", err.msg);
  free(f);
  cr_assert_lt(bt_codec_decode(NULL, 0, w, 13, &err), 0);
}

Test(codec, frame_info_and_odd_alignment) {
  bt_err err;
  float x[100], y[100];
  for (int i = 0; i < 100; i++)
    x[i] = (float)i * 0.25f;
  size_t len;
  uint8_t *f = encode("sparse-q6-ef:block=32", x, 100, &len);
  bt_codec_frame_info fi;
  cr_assert_eq(bt_codec_frame_info_get(f, len, &fi, &err), 0, "%s", err.msg);
  cr_assert(fi.spec.kind == BT_CODEC_SPARSE_Q && fi.spec.bits == 6 && fi.spec.block == 32 &&
            fi.spec.error_feedback && fi.n == 100 && fi.payload == len - 40);
  free(f);
  /* a frame at an odd address, both directions */
  bt_codec_spec s = spec_of("fp16");
  bt_encoder *e;
  cr_assert_eq(bt_encoder_create(&s, &e, &err), 0);
  uint8_t *buf = malloc(bt_codec_max_frame_bytes(&s, 100) + 1);
  cr_assert_eq(bt_codec_encode(e, x, 100, buf + 1, bt_codec_max_frame_bytes(&s, 100), &len, &err),
               0);
  cr_assert_eq(bt_codec_decode(buf + 1, len, y, 100, &err), 0, "%s", err.msg);
  for (int i = 0; i < 100; i++)
    cr_assert_eq(x[i], y[i]);
  free(buf);
  bt_encoder_free(e);
}
