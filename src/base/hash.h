/* Hashing (L0): the project's one 64-bit mixer and one byte-string hash.
 *
 * rl_mix64 is the splitmix64 output function (Steele, Lea and Flood, 2014):
 * rl_mix64(x) is what splitmix64 returns from state x, i.e. the golden-ratio
 * increment followed by the variant-13 finalizer.  It is a bijection on
 * 64-bit words whose every output bit depends on every input bit; rl_rng
 * seeds from it, and hash tables keyed by integers use it directly.
 *
 * rl_hash_bytes hashes a byte string 8 bytes at a time and finishes with
 * rl_mix64.  Both are deterministic in every build (rl_hash_bytes reads words in
 * native byte order).
 * Neither is cryptographic: keys an adversary chooses can collide, so a
 * table keyed by untrusted data must stay correct (if slower) when they do.
 */
#ifndef RL_HASH_H
#define RL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define RL_MIX64_GAMMA 0x9e3779b97f4a7c15ull /* 2^64 / golden ratio, odd */

static inline uint64_t rl_mix64(uint64_t x) {
    x += RL_MIX64_GAMMA;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Hash of p[0..n) (n may be 0).  Equal bytes give equal hashes. */
uint64_t rl_hash_bytes(const void *p, size_t n);

#endif
