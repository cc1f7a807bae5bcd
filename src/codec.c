/* codec: names, frames, the encoder object and the portable reference
 * kernels. The vector kernels are in codec_simd.c; both produce identical
 * bytes (tests/test_codec.c checks). Frame format: docs/codec.md. */
#include "baton/codec.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"

/* ---------------------------------------------------------------- helpers */

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static void putf(uint8_t *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put32(p, u);
}
static float getf(const uint8_t *p) {
  uint32_t u = get32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Set bits of p[0..n) (SWAR: no popcnt instruction needed). */
static size_t bitmap_count(const uint8_t *p, size_t n) {
  size_t c = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    w = w - ((w >> 1) & 0x5555555555555555ull);
    w = (w & 0x3333333333333333ull) + ((w >> 2) & 0x3333333333333333ull);
    w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full;
    c += (size_t)((w * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++)
    c += (size_t)__builtin_popcount(p[i]);
  return c;
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ------------------------------------------------------ reference kernels */

static uint16_t f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet, top mantissa bits kept */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* rounds to 65520 or more: infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) /* normal half */
    return (uint16_t)(sign | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13));
  /* subnormal half (or zero): adding 0.5 aligns the half's ulp (2^-24) with
   * the float's, so the addition rounds to nearest even */
  float t;
  memcpy(&t, &a, 4);
  t += 0.5f;
  uint32_t v;
  memcpy(&v, &t, 4);
  return (uint16_t)(sign | (v - 0x3f000000u));
}

static float h2f(uint16_t h) {
  const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f)
    u = s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0); /* NaNs come out quiet */
  else if (e == 0) {
    float f = (float)m * 0x1p-24f;
    return s ? -f : f;
  } else
    u = s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void ref_f32_to_f16(const float *x, uint16_t *h, size_t n) {
  for (size_t i = 0; i < n; i++)
    h[i] = f2h(x[i]);
}
static void ref_f16_to_f32(const uint16_t *h, float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = h2f(h[i]);
}
static void ref_f32_to_bf16(const float *x, uint16_t *h, size_t n) {
  for (size_t i = 0; i < n; i++)
    h[i] = f2bf(x[i]);
}
static void ref_bf16_to_f32(const uint16_t *h, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&x[i], &u, 4);
  }
}

static int ref_minmax(const float *x, size_t n, float *mn, float *mx) {
  float lo = INFINITY, hi = -INFINITY;
  int nan = 0;
  for (size_t i = 0; i < n; i++) {
    const float v = x[i];
    nan |= v != v;
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  *mn = lo, *mx = hi;
  return nan;
}

static inline float clampq(float v, float maxq) {
  v = v > 0.0f ? v : 0.0f; /* NaN -> 0, like vmaxps(v, 0) */
  return v < maxq ? v : maxq;
}

static void ref_quantize(const float *x, size_t n, float mn, float inv, int maxq, uint8_t *codes) {
  const float fq = (float)maxq;
  for (size_t i = 0; i < n; i++)
    codes[i] = (uint8_t)lrintf(clampq((x[i] - mn) * inv, fq));
}

static void ref_quantize_sr(const float *x, size_t n, float mn, float inv, int maxq, uint32_t key,
                            uint32_t idx0, uint8_t *codes) {
  const float fq = (float)maxq;
  for (size_t i = 0; i < n; i++) {
    const float v = clampq((x[i] - mn) * inv, fq);
    const float u = (float)(bt_codec_hash(key, idx0 + (uint32_t)i) >> 8) * 0x1p-24f;
    int q = (int)(v + u);
    codes[i] = (uint8_t)(q < maxq ? q : maxq);
  }
}

static void ref_dequantize(const uint8_t *codes, size_t n, float scale, float mn, float *x) {
  for (size_t i = 0; i < n; i++) {
    const float p = (float)codes[i] * scale;
    x[i] = p + mn;
  }
}

static void ref_pack(const uint8_t *codes, size_t n, int k, uint8_t *out) {
  uint64_t buf = 0;
  int nb = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    buf |= (uint64_t)codes[i] << nb;
    nb += k;
    while (nb >= 8) {
      out[o++] = (uint8_t)buf;
      buf >>= 8;
      nb -= 8;
    }
  }
  if (nb > 0)
    out[o] = (uint8_t)buf;
}

static void ref_unpack(const uint8_t *in, size_t n, int k, uint8_t *codes) {
  uint64_t buf = 0;
  int nb = 0;
  size_t o = 0;
  const uint32_t mask = (1u << k) - 1;
  for (size_t i = 0; i < n; i++) {
    if (nb < k) {
      buf |= (uint64_t)in[o++] << nb;
      nb += 8;
    }
    codes[i] = (uint8_t)(buf & mask);
    buf >>= k;
    nb -= k;
  }
}

static size_t ref_compact(const float *x, size_t n, uint8_t *bitmap, float *vals) {
  size_t c = 0;
  for (size_t i = 0; i < n; i += 8) {
    unsigned byte = 0;
    for (size_t j = 0; j < 8 && i + j < n; j++)
      if (x[i + j] != 0.0f) {
        byte |= 1u << j;
        vals[c++] = x[i + j];
      }
    bitmap[i / 8] = (uint8_t)byte;
  }
  return c;
}

static void ref_expand(const uint8_t *bitmap, size_t n, float *x) {
  size_t j = 0;
  for (size_t i = 0; i < (n + 7) / 8; i++)
    j += (size_t)__builtin_popcount(bitmap[i]);
  for (size_t i = n; i-- > 0;)
    x[i] = (bitmap[i / 8] >> (i % 8) & 1) ? x[--j] : 0.0f;
}

static void ref_cks_stripes(uint64_t a[4], uint64_t b[4], const uint8_t *p, size_t n) {
  uint64_t a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
  uint64_t b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
  for (size_t i = 0; i < n; i += 32) {
    uint64_t w[4];
    memcpy(w, p + i, 32); /* little-endian hosts only (x86, arm64) */
    a0 += w[0], a1 += w[1], a2 += w[2], a3 += w[3];
    b0 += a0, b1 += a1, b2 += a2, b3 += a3;
  }
  a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3;
  b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3;
}

const bt_codec_kernels bt_codec_ref_kernels = {
    .name = "ref",
    .f32_to_f16 = ref_f32_to_f16,
    .f16_to_f32 = ref_f16_to_f32,
    .f32_to_bf16 = ref_f32_to_bf16,
    .bf16_to_f32 = ref_bf16_to_f32,
    .minmax = ref_minmax,
    .quantize = ref_quantize,
    .quantize_sr = ref_quantize_sr,
    .dequantize = ref_dequantize,
    .pack = ref_pack,
    .unpack = ref_unpack,
    .compact = ref_compact,
    .expand = ref_expand,
    .cks_stripes = ref_cks_stripes,
};

/* ------------------------------------------------------- kernel selection */

static const bt_codec_kernels *g_kernels;

static const bt_codec_kernels *kernels_for(const char *isa) {
  if (strcmp(isa, "ref") == 0)
    return &bt_codec_ref_kernels;
  if (strcmp(isa, "avx2") == 0)
    return bt_codec_avx2_kernels();
  if (strcmp(isa, "avx512") == 0)
    return bt_codec_avx512_kernels();
  return NULL;
}

static const bt_codec_kernels *kernels(void) {
  if (!g_kernels) {
    const char *cap = getenv("BATON_CODEC_ISA");
    const bt_codec_kernels *k = NULL;
    if (cap && strcmp(cap, "ref") == 0)
      k = &bt_codec_ref_kernels;
    if (!k && !(cap && strcmp(cap, "avx2") == 0))
      k = bt_codec_avx512_kernels();
    if (!k)
      k = bt_codec_avx2_kernels();
    g_kernels = k ? k : &bt_codec_ref_kernels;
  }
  return g_kernels;
}

const char *bt_codec_isa(void) { return kernels()->name; }

int bt_codec_set_isa(const char *isa, bt_err *err) {
  const bt_codec_kernels *k = kernels_for(isa);
  if (!k)
    return bt_err_set(err, "codec kernels '%s': %s", isa,
                      strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0
                          ? "not supported by this CPU or compiler"
                          : "choose ref, avx2 or avx512");
  g_kernels = k;
  return 0;
}

/* --------------------------------------------------------------- checksum */

typedef struct cks {
  uint64_t a[4], b[4];
  uint8_t pend[32];
  size_t npend;
} cks;

static void cks_init(cks *c) { memset(c, 0, sizeof *c); }

static void cks_update(const bt_codec_kernels *K, cks *c, const uint8_t *p, size_t n) {
  if (c->npend) {
    size_t t = 32 - c->npend < n ? 32 - c->npend : n;
    memcpy(c->pend + c->npend, p, t);
    c->npend += t, p += t, n -= t;
    if (c->npend < 32)
      return;
    K->cks_stripes(c->a, c->b, c->pend, 32);
    c->npend = 0;
  }
  const size_t full = n & ~(size_t)31;
  if (full)
    K->cks_stripes(c->a, c->b, p, full);
  memcpy(c->pend, p + full, n - full);
  c->npend = n - full;
}

/* Payload stripes (zero-padded), then header bytes 0..31, mixed to 64 bits. */
static uint64_t cks_final(const bt_codec_kernels *K, cks *c, const uint8_t *header) {
  if (c->npend) {
    memset(c->pend + c->npend, 0, 32 - c->npend);
    K->cks_stripes(c->a, c->b, c->pend, 32);
    c->npend = 0;
  }
  K->cks_stripes(c->a, c->b, header, 32);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int l = 0; l < 4; l++) {
    h = mix64(h ^ c->a[l]);
    h = mix64(h ^ c->b[l]);
  }
  return h;
}

int bt_codec_reseal(void *frame, size_t len) {
  if (len < BT_CODEC_HEADER_BYTES)
    return -1;
  const bt_codec_kernels *K = kernels();
  uint8_t *f = frame;
  cks c;
  cks_init(&c);
  cks_update(K, &c, f + BT_CODEC_HEADER_BYTES, len - BT_CODEC_HEADER_BYTES);
  put64(f + 32, cks_final(K, &c, f));
  return 0;
}

/* -------------------------------------------------------------- the specs */

static const char *kind_name(bt_codec_kind k) {
  switch (k) {
  case BT_CODEC_NONE: return "none";
  case BT_CODEC_FP16: return "fp16";
  case BT_CODEC_BF16: return "bf16";
  case BT_CODEC_Q: return "q";
  case BT_CODEC_SPARSE_Q: return "sparse-q";
  }
  return "?";
}

static int is_q(bt_codec_kind k) { return k == BT_CODEC_Q || k == BT_CODEC_SPARSE_Q; }

static int parse_u64(const char *s, size_t len, uint64_t *out) {
  if (len == 0 || len > 20)
    return -1;
  char buf[24];
  memcpy(buf, s, len);
  buf[len] = 0;
  for (size_t i = 0; i < len; i++)
    if (!isdigit((unsigned char)buf[i]))
      return -1;
  errno = 0;
  unsigned long long v = strtoull(buf, NULL, 10);
  if (errno)
    return -1;
  *out = v;
  return 0;
}

int bt_codec_parse(const char *name, bt_codec_spec *out, bt_err *err) {
  bt_codec_spec s = {.kind = BT_CODEC_NONE, .bits = 32, .seed = 1};
  if (!name || !*name)
    return bt_err_set(err, "codec: empty name; choose none, fp16, bf16, q1..q8 or sparse-q1..q8");
  const char *colon = strchr(name, ':');
  size_t blen = colon ? (size_t)(colon - name) : strlen(name);
  char base[64];
  if (blen >= sizeof base)
    return bt_err_set(err, "codec '%s': unknown codec; choose none, fp16, bf16, q1..q8 or "
                           "sparse-q1..q8 (options: -ef, :block=N, :stochastic, :seed=N)",
                      name);
  memcpy(base, name, blen);
  base[blen] = 0;
  if (blen > 3 && strcmp(base + blen - 3, "-ef") == 0) {
    s.error_feedback = 1;
    base[blen - 3] = 0;
  }
  int has_block = 0, has_sr = 0, has_seed = 0;
  if (strcmp(base, "none") == 0)
    s.kind = BT_CODEC_NONE, s.bits = 32;
  else if (strcmp(base, "fp16") == 0)
    s.kind = BT_CODEC_FP16, s.bits = 16;
  else if (strcmp(base, "bf16") == 0)
    s.kind = BT_CODEC_BF16, s.bits = 16;
  else if ((base[0] == 'q' && base[1] >= '1' && base[1] <= '8' && base[2] == 0) ||
           (strncmp(base, "sparse-q", 8) == 0 && base[8] >= '1' && base[8] <= '8' &&
            base[9] == 0)) {
    s.kind = base[0] == 'q' ? BT_CODEC_Q : BT_CODEC_SPARSE_Q;
    s.bits = (base[0] == 'q' ? base[1] : base[8]) - '0';
    s.block = BT_CODEC_DEFAULT_BLOCK;
  } else
    return bt_err_set(err,
                      "codec '%s': unknown codec '%s'; choose none, fp16, bf16, q1..q8 or "
                      "sparse-q1..q8 (options: -ef, :block=N, :stochastic, :seed=N)",
                      name, base);
  while (colon) {
    const char *opt = colon + 1;
    colon = strchr(opt, ':');
    size_t olen = colon ? (size_t)(colon - opt) : strlen(opt);
    uint64_t v;
    if (olen == 2 && strncmp(opt, "ef", 2) == 0)
      s.error_feedback = 1;
    else if (olen == 10 && strncmp(opt, "stochastic", 10) == 0)
      s.stochastic = 1, has_sr = 1;
    else if (olen == 7 && strncmp(opt, "nearest", 7) == 0)
      s.stochastic = 0;
    else if (olen > 6 && strncmp(opt, "block=", 6) == 0) {
      if (parse_u64(opt + 6, olen - 6, &v) < 0 || v < 8 || v > BT_CODEC_MAX_BLOCK || v % 8)
        return bt_err_set(err,
                          "codec '%s': block=%.*s: expected a multiple of 8 in 8..%d "
                          "(elements per scale/minimum pair)",
                          name, (int)(olen - 6), opt + 6, BT_CODEC_MAX_BLOCK);
      s.block = (int)v, has_block = 1;
    } else if (olen > 5 && strncmp(opt, "seed=", 5) == 0) {
      if (parse_u64(opt + 5, olen - 5, &v) < 0)
        return bt_err_set(err, "codec '%s': seed=%.*s: expected a non-negative integer", name,
                          (int)(olen - 5), opt + 5);
      s.seed = v, has_seed = 1;
    } else
      return bt_err_set(err,
                        "codec '%s': unknown option '%.*s'; options are ef, block=N, "
                        "stochastic, nearest, seed=N",
                        name, (int)olen, opt);
  }
  if (!is_q(s.kind) && (has_block || has_sr || has_seed))
    return bt_err_set(err,
                      "codec '%s': block, stochastic and seed apply only to q1..q8 and "
                      "sparse-q1..q8",
                      name);
  if (s.kind == BT_CODEC_NONE && s.error_feedback)
    return bt_err_set(err, "codec '%s': error feedback needs a lossy codec (none is exact)",
                      name);
  *out = s;
  return 0;
}

const char *bt_codec_name(const bt_codec_spec *s, char *buf, size_t len) {
  char base[32];
  if (is_q(s->kind))
    snprintf(base, sizeof base, "%s%d", kind_name(s->kind), s->bits);
  else
    snprintf(base, sizeof base, "%s", kind_name(s->kind));
  int o = snprintf(buf, len, "%s%s", base, s->error_feedback ? "-ef" : "");
  if (is_q(s->kind)) {
    if (s->block != BT_CODEC_DEFAULT_BLOCK && o >= 0 && (size_t)o < len)
      o += snprintf(buf + o, len - (size_t)o, ":block=%d", s->block);
    if (s->stochastic && o >= 0 && (size_t)o < len)
      o += snprintf(buf + o, len - (size_t)o, ":stochastic");
    if (s->stochastic && s->seed != 1 && o >= 0 && (size_t)o < len)
      snprintf(buf + o, len - (size_t)o, ":seed=%" PRIu64, s->seed);
  }
  return buf;
}

static int spec_valid(const bt_codec_spec *s) {
  switch (s->kind) {
  case BT_CODEC_NONE: return s->bits == 32 && !s->error_feedback;
  case BT_CODEC_FP16:
  case BT_CODEC_BF16: return s->bits == 16;
  case BT_CODEC_Q:
  case BT_CODEC_SPARSE_Q:
    return s->bits >= 1 && s->bits <= 8 && s->block >= 8 && s->block <= BT_CODEC_MAX_BLOCK &&
           s->block % 8 == 0;
  }
  return 0;
}

/* ------------------------------------------------------------------ sizes */

/* Bytes of n values quantised to k bits in blocks of B. */
static uint64_t q_bytes(uint64_t n, uint64_t B, int k) {
  const uint64_t full = n / B, tail = n % B;
  return full * (8 + B * (uint64_t)k / 8) + (tail ? 8 + (tail * (uint64_t)k + 7) / 8 : 0);
}

static uint64_t payload_bytes(const bt_codec_spec *s, uint64_t n, uint64_t nnz) {
  switch (s->kind) {
  case BT_CODEC_NONE: return n * 4;
  case BT_CODEC_FP16:
  case BT_CODEC_BF16: return n * 2;
  case BT_CODEC_Q: return q_bytes(n, (uint64_t)s->block, s->bits);
  case BT_CODEC_SPARSE_Q: return (n + 7) / 8 + q_bytes(nnz, (uint64_t)s->block, s->bits);
  }
  return 0;
}

size_t bt_codec_max_frame_bytes(const bt_codec_spec *s, size_t n) {
  if (!spec_valid(s) || n > SIZE_MAX / 8)
    return 0;
  return BT_CODEC_HEADER_BYTES + (size_t)payload_bytes(s, n, n);
}

/* ----------------------------------------------------------- the encoder */

struct bt_encoder {
  bt_codec_spec spec;
  uint64_t calls;
  size_t n_ef;    /* elements the error-feedback state was made for */
  float *resid;   /* n_ef: residual carried to the next transfer */
  float *y;       /* n_ef: input + residual */
  float *vals;    /* sparse: the non-zero values (+16 slack) */
  size_t vals_cap;
};

int bt_encoder_create(const bt_codec_spec *spec, bt_encoder **out, bt_err *err) {
  if (!spec_valid(spec)) {
    char name[128];
    return bt_err_set(err, "codec spec '%s' (kind %d, bits %d, block %d) is not valid",
                      bt_codec_name(spec, name, sizeof name), (int)spec->kind, spec->bits,
                      spec->block);
  }
  bt_encoder *e = calloc(1, sizeof *e);
  if (!e)
    return bt_err_set(err, "codec: out of memory for an encoder");
  e->spec = *spec;
  *out = e;
  return 0;
}

void bt_encoder_free(bt_encoder *e) {
  if (!e)
    return;
  free(e->resid), free(e->y), free(e->vals);
  free(e);
}

void bt_encoder_reset(bt_encoder *e) {
  e->calls = 0;
  if (e->resid)
    memset(e->resid, 0, e->n_ef * sizeof(float));
}

const bt_codec_spec *bt_encoder_spec(const bt_encoder *e) { return &e->spec; }

enum { CKS_CHUNK = 16384, SUB = 512 };

/* Quantises x[0..n) into out (blocks of B: scale, minimum, packed codes),
 * feeding the checksum as it goes. Returns the bytes written, or -1 (with
 * err) on a non-finite value. */
static int64_t encode_q(const bt_codec_kernels *K, const float *x, size_t n, size_t B, int k,
                        int stochastic, uint32_t key, uint8_t *out, cks *c, const char *what,
                        bt_err *err) {
  const int maxq = (1 << k) - 1;
  uint8_t codes[SUB];
  size_t pos = 0, done = 0;
  for (size_t b0 = 0; b0 < n; b0 += B) {
    const size_t len = n - b0 < B ? n - b0 : B;
    const float *xb = x + b0;
    float mn, mx;
    const int nan = K->minmax(xb, len, &mn, &mx);
    mn += 0.0f, mx += 0.0f; /* -0 -> +0: the result must not depend on the order of the scan */
    const float range = mx - mn;
    if (nan || !isfinite(range))
      return bt_err_set(err,
                        "codec %s: non-finite value (NaN or infinity) among elements %zu..%zu; "
                        "quantised codecs need finite input",
                        what, b0, b0 + len - 1);
    const float scale = range / (float)maxq;
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    if (!(inv <= 3.0e38f))
      inv = 0.0f;
    putf(out + pos, scale);
    putf(out + pos + 4, mn);
    pos += 8;
    for (size_t s0 = 0; s0 < len; s0 += SUB) {
      const size_t m = len - s0 < SUB ? len - s0 : SUB;
      uint8_t *dst = k == 8 ? out + pos : codes;
      if (stochastic)
        K->quantize_sr(xb + s0, m, mn, inv, maxq, key, (uint32_t)(b0 + s0), dst);
      else
        K->quantize(xb + s0, m, mn, inv, maxq, dst);
      if (k != 8)
        K->pack(codes, m, k, out + pos);
      pos += (m * (size_t)k + 7) / 8;
    }
    if (pos - done >= CKS_CHUNK) {
      cks_update(K, c, out + done, pos - done);
      done = pos;
    }
  }
  cks_update(K, c, out + done, pos - done);
  return (int64_t)pos;
}

/* Dequantises n values from in (trusted: sizes already checked), verifying
 * the checksum of each piece before it is decoded when c is not NULL. */
static void decode_q(const bt_codec_kernels *K, const uint8_t *in, size_t n, size_t B, int k,
                     float *x, cks *c) {
  uint8_t codes[SUB];
  size_t pos = 0, done = 0;
  const size_t total = (size_t)q_bytes(n, B, k);
  for (size_t b0 = 0; b0 < n; b0 += B) {
    const size_t len = n - b0 < B ? n - b0 : B;
    const size_t end = pos + 8 + (len * (size_t)k + 7) / 8;
    if (c && end > done) {
      size_t to = done + CKS_CHUNK > end ? done + CKS_CHUNK : end;
      to = to < total ? to : total;
      cks_update(K, c, in + done, to - done);
      done = to;
    }
    const float scale = getf(in + pos), mn = getf(in + pos + 4);
    pos += 8;
    for (size_t s0 = 0; s0 < len; s0 += SUB) {
      const size_t m = len - s0 < SUB ? len - s0 : SUB;
      const uint8_t *src = in + pos;
      if (k != 8) {
        K->unpack(src, m, k, codes);
        src = codes;
      }
      K->dequantize(src, m, scale, mn, x + b0 + s0);
      pos += (m * (size_t)k + 7) / 8;
    }
  }
  if (c && done < total)
    cks_update(K, c, in + done, total - done);
}

static void write_header(uint8_t *h, const bt_codec_spec *s, uint64_t n, uint64_t payload) {
  memcpy(h, "BTCF", 4);
  h[4] = 1;
  h[5] = (uint8_t)s->kind;
  h[6] = (uint8_t)s->bits;
  h[7] = (uint8_t)((s->stochastic && is_q(s->kind) ? 1 : 0) | (s->error_feedback ? 2 : 0));
  put32(h + 8, is_q(s->kind) ? (uint32_t)s->block : 0);
  put32(h + 12, 0);
  put64(h + 16, n);
  put64(h + 24, payload);
  put64(h + 32, 0);
}

/* Encodes without error feedback. */
static int encode_plain(bt_encoder *e, const float *x, size_t n, uint8_t *f, size_t cap,
                        size_t *len, bt_err *err) {
  const bt_codec_kernels *K = kernels();
  const bt_codec_spec *s = &e->spec;
  char name[128];
  bt_codec_name(s, name, sizeof name);
  const size_t maxb = bt_codec_max_frame_bytes(s, n);
  if (maxb == 0)
    return bt_err_set(err, "codec %s: %zu elements is too many", name, n);
  uint8_t *p = f + BT_CODEC_HEADER_BYTES;
  cks c;
  cks_init(&c);
  uint64_t payload = 0;
  const uint32_t key = (uint32_t)mix64(mix64(s->seed) ^ e->calls);
  e->calls++;
  if (s->kind != BT_CODEC_SPARSE_Q && cap < maxb)
    return bt_err_set(err, "codec %s: frame buffer of %zu bytes, %zu elements need %zu", name,
                      cap, n, maxb);
  switch (s->kind) {
  case BT_CODEC_NONE:
  case BT_CODEC_FP16:
  case BT_CODEC_BF16: {
    const size_t esz = s->kind == BT_CODEC_NONE ? 4 : 2;
    const size_t chunk = CKS_CHUNK / esz;
    for (size_t i = 0; i < n; i += chunk) {
      const size_t m = n - i < chunk ? n - i : chunk;
      uint8_t *dst = p + i * esz;
      if (s->kind == BT_CODEC_NONE)
        memcpy(dst, x + i, m * 4);
      else if (((uintptr_t)dst & 1) == 0) {
        if (s->kind == BT_CODEC_FP16)
          K->f32_to_f16(x + i, (uint16_t *)(void *)dst, m);
        else
          K->f32_to_bf16(x + i, (uint16_t *)(void *)dst, m);
      } else { /* a frame at an odd address: convert through aligned halves */
        uint16_t tmp[256];
        for (size_t j = 0; j < m; j += 256) {
          const size_t t = m - j < 256 ? m - j : 256;
          if (s->kind == BT_CODEC_FP16)
            K->f32_to_f16(x + i + j, tmp, t);
          else
            K->f32_to_bf16(x + i + j, tmp, t);
          memcpy(dst + 2 * j, tmp, 2 * t);
        }
      }
      cks_update(K, &c, dst, m * esz);
    }
    payload = (uint64_t)n * esz;
    break;
  }
  case BT_CODEC_Q: {
    int64_t r = encode_q(K, x, n, (size_t)s->block, s->bits, s->stochastic, key, p, &c, name,
                         err);
    if (r < 0)
      return -1;
    payload = (uint64_t)r;
    break;
  }
  case BT_CODEC_SPARSE_Q: {
    const size_t bm = (n + 7) / 8;
    if (cap < BT_CODEC_HEADER_BYTES + bm)
      return bt_err_set(err, "codec %s: frame buffer of %zu bytes, %zu elements need up to %zu",
                        name, cap, n, maxb);
    if (e->vals_cap < n + 16) {
      float *v = realloc(e->vals, (n + 16) * sizeof(float));
      if (!v)
        return bt_err_set(err, "codec %s: out of memory for %zu elements", name, n);
      e->vals = v, e->vals_cap = n + 16;
    }
    const size_t nnz = K->compact(x, n, p, e->vals);
    const size_t need = BT_CODEC_HEADER_BYTES + bm + (size_t)q_bytes(nnz, (size_t)s->block, s->bits);
    if (cap < need)
      return bt_err_set(err, "codec %s: frame buffer of %zu bytes, this tensor needs %zu (up to "
                             "%zu: bt_codec_max_frame_bytes)",
                        name, cap, need, maxb);
    cks_update(K, &c, p, bm);
    int64_t r = encode_q(K, e->vals, nnz, (size_t)s->block, s->bits, s->stochastic, key, p + bm,
                         &c, name, err);
    if (r < 0)
      return -1;
    payload = bm + (uint64_t)r;
    break;
  }
  }
  write_header(f, s, n, payload);
  put64(f + 32, cks_final(K, &c, f));
  *len = BT_CODEC_HEADER_BYTES + (size_t)payload;
  return 0;
}

/* Decodes a frame whose header and sizes were validated; verifies the
 * checksum when `verify`. Returns 0, or -1 on a checksum mismatch. */
static int decode_checked(const uint8_t *f, const bt_codec_frame_info *fi, float *x, int verify) {
  const bt_codec_kernels *K = kernels();
  const uint8_t *p = f + BT_CODEC_HEADER_BYTES;
  const size_t n = (size_t)fi->n;
  const bt_codec_spec *s = &fi->spec;
  cks c;
  cks_init(&c);
  switch (s->kind) {
  case BT_CODEC_NONE:
  case BT_CODEC_FP16:
  case BT_CODEC_BF16: {
    const size_t esz = s->kind == BT_CODEC_NONE ? 4 : 2;
    const size_t chunk = CKS_CHUNK / esz;
    for (size_t i = 0; i < n; i += chunk) {
      const size_t m = n - i < chunk ? n - i : chunk;
      const uint8_t *src = p + i * esz;
      if (verify)
        cks_update(K, &c, src, m * esz);
      if (s->kind == BT_CODEC_NONE)
        memcpy(x + i, src, m * 4);
      else if (((uintptr_t)src & 1) == 0) {
        if (s->kind == BT_CODEC_FP16)
          K->f16_to_f32((const uint16_t *)(const void *)src, x + i, m);
        else
          K->bf16_to_f32((const uint16_t *)(const void *)src, x + i, m);
      } else { /* a frame at an odd address: copy to aligned halves */
        uint16_t tmp[256];
        for (size_t j = 0; j < m; j += 256) {
          const size_t t = m - j < 256 ? m - j : 256;
          memcpy(tmp, src + 2 * j, 2 * t);
          if (s->kind == BT_CODEC_FP16)
            K->f16_to_f32(tmp, x + i + j, t);
          else
            K->bf16_to_f32(tmp, x + i + j, t);
        }
      }
    }
    break;
  }
  case BT_CODEC_Q: decode_q(K, p, n, (size_t)s->block, s->bits, x, verify ? &c : NULL); break;
  case BT_CODEC_SPARSE_Q: {
    const size_t bm = (n + 7) / 8;
    if (verify)
      cks_update(K, &c, p, bm);
    const size_t nnz = bitmap_count(p, bm);
    decode_q(K, p + bm, nnz, (size_t)s->block, s->bits, x, verify ? &c : NULL);
    K->expand(p, n, x);
    break;
  }
  }
  if (verify) {
    uint8_t h[32];
    memcpy(h, f, 32);
    if (cks_final(K, &c, h) != get64(f + 32))
      return -1;
  }
  return 0;
}

int bt_codec_frame_info_get(const void *frame, size_t len, bt_codec_frame_info *info,
                            bt_err *err) {
  const uint8_t *f = frame;
  if (!f || len < BT_CODEC_HEADER_BYTES)
    return bt_err_set(err, "codec frame: truncated: %zu bytes, the header alone is %d", len,
                      BT_CODEC_HEADER_BYTES);
  if (memcmp(f, "BTCF", 4) != 0)
    return bt_err_set(err, "codec frame: bad magic %02x %02x %02x %02x (expected 'BTCF'): not a "
                           "baton codec frame",
                      f[0], f[1], f[2], f[3]);
  if (f[4] != 1)
    return bt_err_set(err, "codec frame: version %u, this build reads version 1", f[4]);
  bt_codec_spec s = {0};
  if (f[5] > BT_CODEC_SPARSE_Q)
    return bt_err_set(err, "codec frame: unknown codec id %u", f[5]);
  s.kind = (bt_codec_kind)f[5];
  s.bits = f[6];
  if (f[7] & ~3u)
    return bt_err_set(err, "codec frame: unknown flags 0x%02x", f[7]);
  s.stochastic = f[7] & 1;
  s.error_feedback = (f[7] >> 1) & 1;
  s.block = (int)(get32(f + 8) > BT_CODEC_MAX_BLOCK ? -1 : (int)get32(f + 8));
  if (get32(f + 12) != 0)
    return bt_err_set(err, "codec frame: reserved field is %u, expected 0", get32(f + 12));
  if ((!is_q(s.kind) && (s.block != 0 || s.stochastic)) || !spec_valid(&s))
    return bt_err_set(err, "codec frame: codec %s with bits %d, block %u, flags 0x%02x is not "
                           "valid",
                      kind_name(s.kind), s.bits, get32(f + 8), f[7]);
  const uint64_t n = get64(f + 16), payload = get64(f + 24);
  if (n > SIZE_MAX / 8)
    return bt_err_set(err, "codec frame: element count %" PRIu64 " is impossible", n);
  if (payload != len - BT_CODEC_HEADER_BYTES)
    return bt_err_set(err, "codec frame: header says %" PRIu64 " payload bytes, the frame has %zu%s",
                      payload, len - BT_CODEC_HEADER_BYTES,
                      payload > len - BT_CODEC_HEADER_BYTES ? " (truncated)" : "");
  info->spec = s;
  info->n = n;
  info->payload = payload;
  return 0;
}

int bt_codec_decode(const void *frame, size_t len, float *x, size_t n, bt_err *err) {
  bt_codec_frame_info fi;
  if (bt_codec_frame_info_get(frame, len, &fi, err) < 0)
    return -1;
  const uint8_t *f = frame;
  if (fi.n != n)
    return bt_err_set(err, "codec frame: holds %" PRIu64 " elements, the buffer %zu", fi.n, n);
  uint64_t expect;
  if (fi.spec.kind == BT_CODEC_SPARSE_Q) {
    const size_t bm = (n + 7) / 8;
    if (fi.payload < bm)
      return bt_err_set(err, "codec frame: sparse payload of %" PRIu64 " bytes is shorter than "
                             "its %zu-byte bitmap",
                        fi.payload, bm);
    const uint8_t *p = f + BT_CODEC_HEADER_BYTES;
    if (n % 8 && (p[bm - 1] >> (n % 8)))
      return bt_err_set(err, "codec frame: bitmap has bits set beyond element %zu", n);
    const size_t nnz = bitmap_count(p, bm);
    expect = payload_bytes(&fi.spec, n, nnz);
  } else
    expect = payload_bytes(&fi.spec, n, n);
  if (fi.payload != expect) {
    char name[128];
    return bt_err_set(err, "codec frame: %s payload of %" PRIu64 " bytes, %zu elements need %" PRIu64,
                      bt_codec_name(&fi.spec, name, sizeof name), fi.payload, n, expect);
  }
  if (decode_checked(f, &fi, x, 1) < 0)
    return bt_err_set(err, "codec frame: checksum mismatch (the frame was corrupted)");
  return 0;
}

int bt_codec_encode(bt_encoder *e, const float *x, size_t n, void *frame, size_t cap,
                    size_t *len, bt_err *err) {
  if (!e->spec.error_feedback)
    return encode_plain(e, x, n, frame, cap, len, err);
  if (!e->resid) {
    e->resid = calloc(n ? n : 1, sizeof(float));
    e->y = malloc((n ? n : 1) * sizeof(float));
    if (!e->resid || !e->y) {
      free(e->resid), free(e->y);
      e->resid = e->y = NULL;
      return bt_err_set(err, "codec: out of memory for the error-feedback state (%zu elements)",
                        n);
    }
    e->n_ef = n;
  } else if (n != e->n_ef) {
    char name[128];
    return bt_err_set(err,
                      "codec %s: error-feedback stream made for %zu elements, given %zu; use one "
                      "encoder per tensor stream",
                      bt_codec_name(&e->spec, name, sizeof name), e->n_ef, n);
  }
  float *y = e->y, *r = e->resid;
  for (size_t i = 0; i < n; i++)
    y[i] = x[i] + r[i];
  if (encode_plain(e, y, n, frame, cap, len, err) < 0)
    return -1;
  bt_codec_frame_info fi;
  if (bt_codec_frame_info_get(frame, *len, &fi, err) < 0)
    return -1;
  decode_checked(frame, &fi, r, 0); /* r = what the receiver will see */
  for (size_t i = 0; i < n; i++)
    r[i] = y[i] - r[i];
  return 0;
}
