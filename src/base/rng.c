/* xoshiro256** (Blackman & Vigna, 2018) with splitmix64 seeding.
 * Written from the published algorithm description; see rng.h for the
 * contract.  Every function here is O(1) and allocation-free. */
#include "base/rng.h"

#include "base/base.h"
#include "base/hash.h"

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* splitmix64 seeding: state word i is splitmix64's i-th output from the
 * seed, rl_mix64(seed + i * gamma) (base/hash.h). */
void rl_rng_seed(rl_rng *r, uint64_t seed) {
    RL_ASSERT(r);
    uint64_t x = seed;
    for (int i = 0; i < 4; i++, x += RL_MIX64_GAMMA) r->s[i] = rl_mix64(x);
}

uint64_t rl_rng_u64(rl_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rl_rng_f64(rl_rng *r) {
    /* top 53 bits: the low bits of xoshiro256** are as good, but the top
     * ones make the mapping to doubles exact */
    return (double)(rl_rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t rl_rng_below(rl_rng *r, uint64_t bound) {
    RL_ASSERT(bound > 0);
    /* reject the top partial copy of [0, bound) so every residue is
     * equally likely; the loop runs more than once with probability
     * < bound / 2^64 */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % bound);
    for (;;) {
        uint64_t x = rl_rng_u64(r);
        if (x < limit) return x % bound;
    }
}
