/* Seedable pseudo-random numbers (L0): xoshiro256** seeded through
 * splitmix64.
 *
 * Invariants:
 *   - the state is a plain struct so a request can snapshot and restore it
 *     by assignment (preemption, recompute, speculative rollback);
 *   - the same seed always yields the same stream, on every platform and in
 *     every build (the stream is part of the seed contract: do not change
 *     the algorithm without bumping a documented version);
 *   - the state is never all zero (splitmix64 cannot produce four zero
 *     words in a row), so every seed, including 0, is valid.
 * Not cryptographic.  Not thread-safe: one rl_rng per user. */
#ifndef RL_RNG_H
#define RL_RNG_H

#include <stdint.h>

typedef struct rl_rng {
    uint64_t s[4];
} rl_rng;

/* Seeds *r from a 64-bit seed (any value, 0 included). */
void rl_rng_seed(rl_rng *r, uint64_t seed);
/* Next 64 uniformly distributed bits. */
uint64_t rl_rng_u64(rl_rng *r);
/* Uniform double in [0, 1) with 53 random bits (multiples of 2^-53). */
double rl_rng_f64(rl_rng *r);
/* Uniform integer in [0, bound); bound > 0.  Unbiased (rejection). */
uint64_t rl_rng_below(rl_rng *r, uint64_t bound);

#endif
