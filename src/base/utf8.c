/* UTF-8 helpers (contracts in utf8.h).  One lead-byte table of Unicode
 * Table 3-7 (rl_utf8_lead) drives every strict check here and the
 * tokenizer's streaming detokenizer. */
#include "base/utf8.h"

static inline bool is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

size_t rl_utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0; /* no overlongs */
        if (b == 0xED) *hi = 0x9F; /* no surrogates */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90; /* no overlongs */
        if (b == 0xF4) *hi = 0x8F; /* nothing above U+10FFFF */
        return 4;
    }
    return 0;
}

size_t rl_utf8_decode(const void *sv, size_t n, uint32_t *cp) {
    const uint8_t *s = sv;
    if (n == 0) return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    uint8_t lo, hi;
    size_t len = rl_utf8_lead(s[0], &lo, &hi);
    if (len == 0 || n < len) return 0;
    uint32_t v = s[0] & (0x7Fu >> len); /* the lead's payload bits */
    for (size_t i = 1; i < len; i++) {
        if (s[i] < lo || s[i] > hi) return 0;
        lo = 0x80;
        hi = 0xBF;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
}

size_t rl_utf8_valid_len(const void *s, size_t n) {
    uint32_t cp;
    return rl_utf8_decode(s, n, &cp);
}

bool rl_utf8_valid(const void *sv, size_t n) {
    const uint8_t *s = sv;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = rl_utf8_valid_len(s + i, n - i);
        if (l == 0) return false;
        i += l;
    }
    return true;
}

size_t rl_utf8_cp_len(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

size_t rl_utf8_encode(uint32_t cp, char *o) {
    size_t len = rl_utf8_cp_len(cp);
    static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (size_t i = len - 1; i > 0; i--) {
        o[i] = (char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    o[0] = (char)(lead[len] | cp);
    return len;
}

size_t rl_utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !is_cont((uint8_t)s[i]);
    return k;
}

size_t rl_utf8_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (i < n && k > 0) {
        i++;
        while (i < n && is_cont((uint8_t)s[i])) i++;
        k--;
    }
    return i;
}

size_t rl_utf8_back(const char *s, size_t i) {
    size_t b = i - 1;
    while (b > 0 && i - b < 4 && is_cont((uint8_t)s[b])) b--;
    return b;
}
