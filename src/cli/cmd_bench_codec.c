/* baton bench codec: encode / decode GB/s (of fp32 input), compression ratio
 * and relative error of every codec on realistic tensors, next to memcpy,
 * zstd level 1 and lz4 measured in the same run. Each row interleaves its
 * samples with memcpy samples of the same size, and its "% of memcpy" is the
 * median over samples of (memcpy time / codec time) of neighbouring samples,
 * which compares like with like on a loaded machine; every figure is a
 * median. */
#include <lz4.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "baton/codec.h"
#include "baton/rng.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: baton bench codec [options]\n\n"
          "  --codecs A,B,...   codecs (default: none,fp16,bf16,q1..q8,q4:stochastic,q8-ef,\n"
          "                     q4-ef,sparse-q8,sparse-q4; syntax: include/baton/codec.h)\n"
          "  --sizes S,...      tensor sizes in bytes of fp32, K/M suffixes (default 64K,1M,16M)\n"
          "  --data D,...       gaussian, relu (post-ReLU, about half zeros); default both\n"
          "  --repeats N        samples per figure, median reported (default 15)\n"
          "  --isa I            codec kernels: auto, ref, avx2, avx512 (default auto)\n"
          "  --clock C          cpu (thread CPU time: time slices lost to other processes\n"
          "                     do not count; default) or wall\n"
          "  --no-lossless      skip the zstd and lz4 rows\n");
}

static const char *DEFAULT_CODECS = "none,fp16,bf16,q1,q2,q3,q4,q5,q6,q7,q8,q4:stochastic,"
                                    "q8-ef,q4-ef,sparse-q8,sparse-q4";

typedef struct ctx {
  const float *x;
  float *y;
  size_t n;
  void *frame;
  size_t cap, len;
  bt_encoder *enc;
  ZSTD_CCtx *zc;
  ZSTD_DCtx *zd;
  int failed;
  bt_err err;
} ctx;

typedef void (*op_fn)(ctx *);

static void op_memcpy(ctx *c) { memcpy(c->y, c->x, c->n * sizeof(float)); }
static void op_encode(ctx *c) {
  if (bt_codec_encode(c->enc, c->x, c->n, c->frame, c->cap, &c->len, &c->err) < 0)
    c->failed = 1;
}
static void op_decode(ctx *c) {
  if (bt_codec_decode(c->frame, c->len, c->y, c->n, &c->err) < 0)
    c->failed = 1;
}
static void op_zstd_c(ctx *c) {
  size_t r = ZSTD_compressCCtx(c->zc, c->frame, c->cap, c->x, c->n * 4, 1);
  if (ZSTD_isError(r))
    c->failed = 1;
  else
    c->len = r;
}
static void op_zstd_d(ctx *c) {
  size_t r = ZSTD_decompressDCtx(c->zd, c->y, c->n * 4, c->frame, c->len);
  if (ZSTD_isError(r) || r != c->n * 4)
    c->failed = 1;
}
static void op_lz4_c(ctx *c) {
  int r = LZ4_compress_default((const char *)c->x, c->frame, (int)(c->n * 4), (int)c->cap);
  if (r <= 0)
    c->failed = 1;
  else
    c->len = (size_t)r;
}
static void op_lz4_d(ctx *c) {
  int r = LZ4_decompress_safe(c->frame, (char *)c->y, (int)c->len, (int)(c->n * 4));
  if (r != (int)(c->n * 4))
    c->failed = 1;
}

static int g_cpu_clock = 1;

static double now(void) {
  if (!g_cpu_clock)
    return bt_cli_now();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per call of op, averaged over enough calls to last ~0.2 ms. */
static double sample(op_fn op, ctx *c, int inner) {
  double t0 = now();
  for (int i = 0; i < inner; i++)
    op(c);
  return (now() - t0) / inner;
}

static int inner_for(op_fn op, ctx *c) {
  double t = sample(op, c, 1);
  int k = (int)(2e-4 / (t > 1e-9 ? t : 1e-9)) + 1;
  return k > 10000 ? 10000 : k;
}

typedef struct row {
  double enc, dec, mc;      /* median seconds per call */
  double enc_rel, dec_rel;  /* median over samples of memcpy time / codec time */
} row;

/* Interleaves memcpy, encode and decode samples; returns medians. */
static row measure(op_fn enc, op_fn dec, ctx *c, int reps) {
  double te[256], td[256], tm[256], re[256], rd[256];
  if (reps > 256)
    reps = 256;
  enc(c), dec(c);
  const int ie = inner_for(enc, c), id = inner_for(dec, c), im = inner_for(op_memcpy, c);
  for (int r = 0; r < reps; r++) {
    tm[r] = sample(op_memcpy, c, im);
    te[r] = sample(enc, c, ie);
    td[r] = sample(dec, c, id);
    re[r] = tm[r] / te[r], rd[r] = tm[r] / td[r];
  }
  row out = {bt_cli_median(te, reps), bt_cli_median(td, reps), bt_cli_median(tm, reps), bt_cli_median(re, reps),
             bt_cli_median(rd, reps)};
  return out;
}

static double rel_rmse(const float *x, const float *y, size_t n) {
  double e = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)x[i] - (double)y[i];
    e += d * d, s += (double)x[i] * x[i];
  }
  return s > 0 ? sqrt(e / s) : sqrt(e);
}

static int parse_size(const char *t, size_t *out) {
  char *end;
  double v = strtod(t, &end);
  if (end == t || v <= 0)
    return -1;
  if (*end == 'K' || *end == 'k')
    v *= 1024, end++;
  else if (*end == 'M' || *end == 'm')
    v *= 1024 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024 * 1024, end++;
  if (*end == 'i' && end[1] == 'B')
    end += 2;
  else if (*end == 'B')
    end++;
  if (*end || v < 4 || v > 4.0 * 1024 * 1024 * 1024)
    return -1;
  *out = (size_t)v / 4;
  return 0;
}

static const char *size_name(size_t bytes, char *buf, size_t len) {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) == 0)
    snprintf(buf, len, "%zuMiB", bytes / (1024 * 1024));
  else if (bytes >= 1024 && bytes % 1024 == 0)
    snprintf(buf, len, "%zuKiB", bytes / 1024);
  else
    snprintf(buf, len, "%zuB", bytes);
  return buf;
}

static void print_row(const char *data, const char *size, const char *codec, size_t bytes,
                      const row *r, double ratio, double err) {
  const double ge = bytes / r->enc / 1e9, gd = bytes / r->dec / 1e9, gm = bytes / r->mc / 1e9;
  printf("%-8s %-7s %-16s %8.2f %6.0f%% %8.2f %6.0f%% %9.2f %7.2fx %10.3g\n", data, size, codec,
         ge, 100 * r->enc_rel, gd, 100 * r->dec_rel, gm, ratio, err);
}

/* Splits a comma list into up to max pointers (modifies s). */
static int split(char *s, char **out, int max) {
  int n = 0;
  for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ","))
    out[n++] = t;
  return n;
}

int bt_cmd_bench_codec(int argc, char **argv) {
  char codecs_buf[2048], sizes_buf[256] = "64K,1M,16M", data_buf[64] = "gaussian,relu";
  snprintf(codecs_buf, sizeof codecs_buf, "%s", DEFAULT_CODECS);
  int reps = 15, lossless = 1;
  const char *isa = "auto";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--no-lossless") == 0) {
      lossless = 0;
      continue;
    }
    if (!v)
      return bt_cli_fail("bench codec", "option '%s' needs a value; see --help", a);
    i++;
    if (strcmp(a, "--codecs") == 0)
      snprintf(codecs_buf, sizeof codecs_buf, "%s", v);
    else if (strcmp(a, "--sizes") == 0)
      snprintf(sizes_buf, sizeof sizes_buf, "%s", v);
    else if (strcmp(a, "--data") == 0)
      snprintf(data_buf, sizeof data_buf, "%s", v);
    else if (strcmp(a, "--repeats") == 0) {
      reps = atoi(v);
      if (reps < 1 || reps > 256)
        return bt_cli_fail("bench codec", "--repeats '%s': expected 1..256", v);
    } else if (strcmp(a, "--isa") == 0)
      isa = v;
    else if (strcmp(a, "--clock") == 0) {
      if (strcmp(v, "cpu") != 0 && strcmp(v, "wall") != 0)
        return bt_cli_fail("bench codec", "--clock '%s': choose cpu or wall", v);
      g_cpu_clock = strcmp(v, "cpu") == 0;
    }
    else
      return bt_cli_fail("bench codec", "unknown option '%s'; see --help", a);
  }
  bt_err err;
  if (strcmp(isa, "auto") != 0 && bt_codec_set_isa(isa, &err) < 0)
    return bt_cli_fail("bench codec", "%s", err.msg);
  char *codecs[64], *sizes_s[16], *datas[4];
  const int nc = split(codecs_buf, codecs, 64), ns = split(sizes_buf, sizes_s, 16),
            nd = split(data_buf, datas, 4);
  bt_codec_spec specs[64];
  for (int i = 0; i < nc; i++)
    if (bt_codec_parse(codecs[i], &specs[i], &err) < 0)
      return bt_cli_fail("bench codec", "%s", err.msg);
  size_t sizes[16];
  for (int i = 0; i < ns; i++)
    if (parse_size(sizes_s[i], &sizes[i]) < 0)
      return bt_cli_fail("bench codec", "--sizes '%s': expected bytes such as 64K, 1M, 16M",
                         sizes_s[i]);
  for (int i = 0; i < nd; i++)
    if (strcmp(datas[i], "gaussian") != 0 && strcmp(datas[i], "relu") != 0)
      return bt_cli_fail("bench codec", "--data '%s': choose gaussian or relu", datas[i]);

  printf("baton bench codec: kernels %s, one thread, %s time, %d samples per figure (median); "
         "GB/s of fp32 input; %%mcpy = median of memcpy time / codec time over neighbouring "
         "samples\n",
         bt_codec_isa(), g_cpu_clock ? "thread CPU" : "wall", reps);
  printf("%-8s %-7s %-16s %8s %7s %8s %7s %8s %8s %10s\n", "data", "size", "codec", "enc GB/s",
         "%mcpy", "dec GB/s", "%mcpy", "mcpy GB/s", "ratio", "rel.err");
  /* summary against the targets at the largest size */
  double t_enc[64] = {0}, t_dec[64] = {0};
  size_t largest = 0;
  for (int s = 0; s < ns; s++)
    largest = sizes[s] > largest ? sizes[s] : largest;
  int failed = 0;
  for (int d = 0; d < nd; d++) {
    const int relu = strcmp(datas[d], "relu") == 0;
    for (int s = 0; s < ns; s++) {
      const size_t n = sizes[s], bytes = n * 4;
      char sz[32];
      size_name(bytes, sz, sizeof sz);
      float *x = malloc(bytes), *y = malloc(bytes);
      size_t cap = ZSTD_compressBound(bytes);
      const size_t lz = (size_t)LZ4_compressBound((int)bytes);
      cap = lz > cap ? lz : cap;
      for (int i = 0; i < nc; i++) {
        const size_t m = bt_codec_max_frame_bytes(&specs[i], n);
        cap = m > cap ? m : cap;
      }
      void *frame = malloc(cap);
      if (!x || !y || !frame) {
        free(x), free(y), free(frame);
        return bt_cli_fail("bench codec", "out of memory for %s tensors", sz);
      }
      bt_rng rng;
      bt_rng_seed(&rng, 42, (uint64_t)s);
      for (size_t i = 0; i < n; i++) {
        const float v = bt_rng_normal(&rng);
        x[i] = relu ? (v > 0 ? v : 0.0f) : v;
      }
      memset(y, 0, bytes);
      memset(frame, 0, cap);
      ctx c = {.x = x, .y = y, .n = n, .frame = frame, .cap = cap};
      if (lossless) {
        c.zc = ZSTD_createCCtx(), c.zd = ZSTD_createDCtx();
        row r = measure(op_zstd_c, op_zstd_d, &c, reps);
        print_row(datas[d], sz, "zstd -1", bytes, &r, (double)bytes / (double)c.len,
                  c.failed ? NAN : rel_rmse(x, y, n));
        r = measure(op_lz4_c, op_lz4_d, &c, reps);
        print_row(datas[d], sz, "lz4", bytes, &r, (double)bytes / (double)c.len,
                  c.failed ? NAN : rel_rmse(x, y, n));
        ZSTD_freeCCtx(c.zc), ZSTD_freeDCtx(c.zd);
        if (c.failed) {
          fprintf(stderr, "baton bench codec: zstd or lz4 failed\n");
          failed = 1, c.failed = 0;
        }
      }
      for (int i = 0; i < nc; i++) {
        if (bt_encoder_create(&specs[i], &c.enc, &err) < 0) {
          fprintf(stderr, "baton bench codec: %s\n", err.msg);
          failed = 1;
          continue;
        }
        row r = measure(op_encode, op_decode, &c, reps);
        /* the error of one fresh transfer (error feedback: the first one) */
        bt_encoder_reset(c.enc);
        op_encode(&c), op_decode(&c);
        if (c.failed) {
          fprintf(stderr, "baton bench codec: %s: %s\n", codecs[i], c.err.msg);
          failed = 1, c.failed = 0;
        } else {
          print_row(datas[d], sz, codecs[i], bytes, &r, (double)bytes / (double)c.len,
                    rel_rmse(x, y, n));
          if (n == largest && !relu)
            t_enc[i] = r.enc_rel, t_dec[i] = r.dec_rel;
        }
        bt_encoder_free(c.enc);
      }
      free(x), free(y), free(frame);
    }
  }
  char sz[32];
  printf("targets at %s, gaussian, one core (encode and decode, fraction of memcpy):\n",
         size_name(largest * 4, sz, sizeof sz));
  for (int i = 0; i < nc; i++) {
    const bt_codec_spec *p = &specs[i];
    double need = 0;
    if ((p->kind == BT_CODEC_FP16 || p->kind == BT_CODEC_BF16) && !p->error_feedback)
      need = 0.6;
    else if (p->kind == BT_CODEC_Q && (p->bits == 8 || p->bits == 4) && !p->error_feedback &&
             !p->stochastic)
      need = 0.5;
    if (need > 0 && t_enc[i] > 0)
      printf("  %-8s encode %4.0f%%  decode %4.0f%%  (target >= %.0f%%): %s\n", codecs[i],
             100 * t_enc[i], 100 * t_dec[i], 100 * need,
             t_enc[i] >= need && t_dec[i] >= need ? "met" : "MISSED");
  }
  return failed;
}
