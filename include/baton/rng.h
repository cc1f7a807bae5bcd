/* rng: small, fast, reproducible random numbers.
 *
 * Every random stream in baton is derived from (seed, stream id) so that a
 * layer's initial weights or a dropout mask do not depend on which rank or in
 * which order it is computed: any partition of the model sees the same
 * numbers. The generator is xoshiro256** seeded through splitmix64. */
#ifndef BATON_RNG_H
#define BATON_RNG_H

#include <stdint.h>

typedef struct bt_rng {
  uint64_t s[4];
} bt_rng;

/* Seeds `rng` for the stream identified by (seed, stream); different streams
 * of one seed are statistically independent. */
void bt_rng_seed(bt_rng *rng, uint64_t seed, uint64_t stream);

/* Combines several identifiers into one stream id (order matters). */
uint64_t bt_rng_stream(uint64_t a, uint64_t b, uint64_t c);

uint64_t bt_rng_u64(bt_rng *rng);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection). */
uint64_t bt_rng_below(bt_rng *rng, uint64_t n);
/* Uniform float in [0, 1). */
float bt_rng_uniform(bt_rng *rng);
/* Standard normal (Box-Muller, no cached second value: reproducible). */
float bt_rng_normal(bt_rng *rng);

#endif
