/* codec: bit-level compression of the activations and gradients that cross a
 * pipeline link, cheap enough to run near memcpy speed.
 *
 * Codecs (the names experiment files and `baton bench codec` use):
 *
 *   none          float32 as is (lossless)
 *   fp16, bf16    IEEE half / bfloat16, round to nearest even
 *   q1 .. q8      k-bit uniform quantisation with a float32 scale and minimum
 *                 per block of `block` elements (default 512), bit-packed
 *   sparse-q1 .. sparse-q8
 *                 a bitmap of the non-zero elements, then the non-zero values
 *                 quantised as qK (for post-ReLU activations)
 *
 * Options follow the name, separated by ':' (or the '-ef' suffix):
 *
 *   q4-ef  or  q4:ef         error feedback (fp16, bf16, qK, sparse-qK)
 *   q4:block=256             elements per quantisation block (multiple of 8,
 *                            8..1048576)
 *   q4:stochastic            stochastic rounding (seeded, reproducible)
 *   q4:seed=7                seed of the stochastic rounding (default 1)
 *
 * e.g. "q4-ef:block=256:stochastic:seed=3". Options that do not apply to a
 * codec (block on fp16, ef on none) are rejected.
 *
 * A frame is self-describing (docs/codec.md): a 40-byte header (magic,
 * version, codec, bits, flags, block, element count, payload length,
 * checksum) and the payload. Decoding needs no spec: it validates the whole
 * frame and rejects a malformed, truncated or corrupted one with an error,
 * never reading or writing out of bounds.
 *
 * Kernels: portable C reference kernels, and AVX2 / AVX-512 kernels chosen at
 * run time; all produce bit-identical frames and decoded values. This module
 * never includes mpi.h. */
#ifndef BATON_CODEC_H
#define BATON_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"

typedef enum bt_codec_kind {
  BT_CODEC_NONE = 0,
  BT_CODEC_FP16 = 1,
  BT_CODEC_BF16 = 2,
  BT_CODEC_Q = 3,
  BT_CODEC_SPARSE_Q = 4,
} bt_codec_kind;

typedef struct bt_codec_spec {
  bt_codec_kind kind;
  int bits;           /* 1..8 for q / sparse-q; 32 (none) or 16 (fp16, bf16) otherwise */
  int block;          /* elements per block (q / sparse-q); 0 otherwise */
  int stochastic;     /* stochastic rounding (q / sparse-q) */
  int error_feedback; /* residual of each transfer added to the next */
  uint64_t seed;      /* stochastic rounding seed */
} bt_codec_spec;

enum {
  BT_CODEC_HEADER_BYTES = 40,
  BT_CODEC_DEFAULT_BLOCK = 512,
  BT_CODEC_MAX_BLOCK = 1 << 20,
};

/* Parses a codec name with options (see above) into `out`. */
int bt_codec_parse(const char *name, bt_codec_spec *out, bt_err *err);

/* The canonical name of a spec ("q4-ef:block=256:stochastic:seed=3"); options
 * at their defaults are left out. Returns buf. */
const char *bt_codec_name(const bt_codec_spec *spec, char *buf, size_t len);

/* The largest frame (header included) encoding n elements can produce; a
 * buffer of this size never makes bt_codec_encode fail for lack of room. */
size_t bt_codec_max_frame_bytes(const bt_codec_spec *spec, size_t n);

/* A stateful encoder for one stream (one tensor crossing one link in one
 * direction): holds the error-feedback residual, the stochastic-rounding
 * counter and scratch. Not thread-safe; use one per stream. */
typedef struct bt_encoder bt_encoder;

int bt_encoder_create(const bt_codec_spec *spec, bt_encoder **out, bt_err *err);
void bt_encoder_free(bt_encoder *enc);
/* Forgets the residual and restarts the rounding counter. */
void bt_encoder_reset(bt_encoder *enc);
/* The encoder's spec. */
const bt_codec_spec *bt_encoder_spec(const bt_encoder *enc);

/* Encodes x[0..n) into frame[0..cap); *len receives the frame's length.
 * Fails (nothing useful in frame) when cap is too small (use
 * bt_codec_max_frame_bytes), when a quantised codec meets a NaN or infinity,
 * or when an error-feedback encoder is given a different n than before. */
int bt_codec_encode(bt_encoder *enc, const float *x, size_t n, void *frame, size_t cap,
                    size_t *len, bt_err *err);

/* Decodes a frame into x[0..n); n must equal the frame's element count.
 * Every field, length and the checksum are validated; on failure x's
 * contents are unspecified (but nothing outside x[0..n) is written). */
int bt_codec_decode(const void *frame, size_t len, float *x, size_t n, bt_err *err);

/* What a frame's header says (validated as by decode, except the payload and
 * checksum, which are not read). */
typedef struct bt_codec_frame_info {
  bt_codec_spec spec; /* kind, bits, block, stochastic and error_feedback flags; seed 0 */
  uint64_t n;         /* elements */
  uint64_t payload;   /* payload bytes */
} bt_codec_frame_info;
int bt_codec_frame_info_get(const void *frame, size_t len, bt_codec_frame_info *info,
                            bt_err *err);

/* Kernel set in use: "avx512", "avx2" or "ref" (chosen at first use from the
 * CPU; $BATON_CODEC_ISA = ref | avx2 | avx512 caps it). */
const char *bt_codec_isa(void);
/* Forces a kernel set; fails if the CPU lacks it. For tests and benchmarks. */
int bt_codec_set_isa(const char *isa, bt_err *err);

#endif
