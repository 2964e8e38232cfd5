/* rl_hash_bytes (see hash.h): a multiply-xor pass over 8-byte words in
 * native byte order (the tail zero-padded), the length folded into the
 * start value, then rl_mix64 so that every output bit depends on every
 * input byte. */
#include "base/hash.h"

#include <string.h>

uint64_t rl_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = RL_MIX64_GAMMA ^ ((uint64_t)n * 0xc2b2ae3d27d4eb4full);
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = (h ^ (k * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    h = (h ^ (k * 0x87c37b91114253d5ull)) * 0x4cf5ad432745937full;
    return rl_mix64(h);
}
