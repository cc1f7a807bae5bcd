/* rng: xoshiro256** seeded by splitmix64; see include/baton/rng.h. */
#include "baton/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void bt_rng_seed(bt_rng *rng, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ rotl(stream * 0xd1342543de82ef95ULL, 17);
  for (int i = 0; i < 4; i++)
    rng->s[i] = splitmix64(&x);
}

uint64_t bt_rng_stream(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a;
  uint64_t h = splitmix64(&x);
  x = h ^ b;
  h = splitmix64(&x);
  x = h ^ c;
  return splitmix64(&x);
}

uint64_t bt_rng_u64(bt_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t bt_rng_below(bt_rng *rng, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do {
    r = bt_rng_u64(rng);
  } while (r >= limit);
  return r % n;
}

float bt_rng_uniform(bt_rng *rng) { return (float)(bt_rng_u64(rng) >> 40) * (1.0f / 16777216.0f); }

float bt_rng_normal(bt_rng *rng) {
  double u1 = ((double)(bt_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  double u2 = (double)(bt_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
