/* xoshiro256** (Blackman & Vigna, 2018) with splitmix64 seeding.
 * Written from the published algorithm description; see rng.h for the
 * contract.  Every function here is O(1) and allocation-free. */
#include "base/rng.h"

#include "base/base.h"

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* splitmix64: advances *x by the golden-ratio increment and returns a
 * well-mixed function of it.  Used only to expand a seed into state. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rl_rng_seed(rl_rng *r, uint64_t seed) {
    RL_ASSERT(r);
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
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
