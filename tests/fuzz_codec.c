/* libFuzzer target for the codec's decoder (clang only):
 *
 *   clang -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -I. \
 *     tests/fuzz_codec.c src/codec.c src/codec_simd.c src/err.c -lm -o fuzz_codec
 *   ./fuzz_codec -max_total_time=20
 *
 * test.sh builds and runs it for 20 s when clang has libFuzzer. The first
 * byte picks a mode:
 *   'F'  the rest is a frame whose checksum is recomputed first, so the
 *        fuzzer reaches the size checks and the decoding behind it
 *   'E'  the rest is float data: encode it with a codec chosen by the next
 *        byte, damage the frame as the following bytes say (truncate, flip,
 *        reseal), decode; a valid round trip must succeed
 *   else the input is a frame as is
 * The decode buffer is allocated with exactly the frame's element count, so
 * AddressSanitizer catches any write or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "baton/codec.h"
#include "src/codec_impl.h"

static const char *CODECS[] = {"none",      "fp16",      "bf16",          "q1",
                               "q3",        "q4",        "q8",            "q5:block=8",
                               "sparse-q4", "sparse-q8", "sparse-q2:block=16",
                               "q4:stochastic", "q6-ef", "bf16-ef",     "q7:block=24"};
enum { N_CODECS = sizeof CODECS / sizeof CODECS[0], MAX_ELEMS = 1 << 18 };

static void decode_frame(const uint8_t *f, size_t len) {
  bt_codec_frame_info fi;
  bt_err err;
  if (bt_codec_frame_info_get(f, len, &fi, &err) < 0 || fi.n > MAX_ELEMS)
    return;
  float *x = malloc(fi.n ? fi.n * sizeof(float) : 1);
  (void)bt_codec_decode(f, len, x, (size_t)fi.n, &err);
  /* a wrong element count must be refused before anything is written */
  if (fi.n > 0)
    (void)bt_codec_decode(f, len, x, (size_t)fi.n - 1, &err);
  free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if (data[0] == 'F' && size - 1 >= BT_CODEC_HEADER_BYTES) {
    uint8_t *f = malloc(size - 1);
    memcpy(f, data + 1, size - 1);
    bt_codec_reseal(f, size - 1);
    decode_frame(f, size - 1);
    free(f);
    return 0;
  }
  if (data[0] == 'E' && size >= 6) {
    const char *name = CODECS[data[1] % N_CODECS];
    const uint8_t op = data[2];
    const uint16_t where = (uint16_t)(data[3] | data[4] << 8);
    const size_t n = (size - 5) / 4;
    float *x = malloc(n ? n * sizeof(float) : 1);
    memcpy(x, data + 5, n * sizeof(float));
    bt_codec_spec s;
    bt_err err;
    bt_encoder *e;
    if (bt_codec_parse(name, &s, &err) < 0 || bt_encoder_create(&s, &e, &err) < 0)
      abort();
    const size_t cap = bt_codec_max_frame_bytes(&s, n);
    uint8_t *f = malloc(cap);
    size_t len;
    if (bt_codec_encode(e, x, n, f, cap, &len, &err) == 0) {
      if (len > cap)
        abort();
      float *y = malloc(n ? n * sizeof(float) : 1);
      if (bt_codec_decode(f, len, y, n, &err) < 0)
        abort(); /* our own frame must decode */
      free(y);
      switch (op % 4) {
      case 0: /* truncate */
        len = where % (len + 1);
        break;
      case 1: /* flip one bit */
        f[(where / 8) % len] ^= (uint8_t)(1u << (where % 8));
        if (bt_codec_decode(f, len, x, n, &err) == 0)
          abort(); /* the checksum must catch it */
        break;
      case 2: /* overwrite a byte and reseal */
        f[where % len] = data[2];
        bt_codec_reseal(f, len);
        break;
      default: break;
      }
      uint8_t *g = malloc(len ? len : 1); /* exactly len bytes for ASan */
      memcpy(g, f, len);
      decode_frame(g, len);
      free(g);
    }
    free(f);
    free(x);
    bt_encoder_free(e);
    return 0;
  }
  uint8_t *f = malloc(size);
  memcpy(f, data, size);
  decode_frame(f, size);
  free(f);
  return 0;
}
