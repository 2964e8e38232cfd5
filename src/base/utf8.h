/* UTF-8 (L0): strict decoding and validation, encoding, and the counting
 * helpers of code-point-indexed strings.  base.h includes this header.
 *
 * "Well-formed" is RFC 3629 / Unicode Table 3-7: no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no stray
 * continuation bytes, no truncated sequences.  The decoders and validators
 * accept exactly that; the counting helpers (rl_utf8_count, rl_utf8_offset,
 * rl_utf8_back) only look at which bytes are continuation bytes
 * (10xxxxxx), so on well-formed text they count code points and on other
 * bytes they stay total and bounded.  Nothing here allocates. */
#ifndef RL_UTF8_H
#define RL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Classifies a lead byte: the length (1..4) of the sequence it starts, or
 * 0 if no well-formed sequence starts with it (80..C1, F5..FF).  For a
 * multi-byte lead, [*lo, *hi] is the range allowed for the next byte
 * (80..BF, narrowed after E0, ED, F0 and F4); later bytes are 80..BF. */
size_t rl_utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi);
/* Decodes the well-formed sequence at the start of s[0..n): returns its
 * length (1..4) and sets *cp, or returns 0 (n == 0 or not well-formed;
 * *cp untouched). */
size_t rl_utf8_decode(const void *s, size_t n, uint32_t *cp);
/* rl_utf8_decode without the code point. */
size_t rl_utf8_valid_len(const void *s, size_t n);
/* True if s[0..n) is entirely well-formed. */
bool rl_utf8_valid(const void *s, size_t n);

/* Writes the encoding of code point cp (<= 0x10FFFF) to out (room for 4
 * bytes); returns its length, rl_utf8_cp_len(cp). */
size_t rl_utf8_encode(uint32_t cp, char *out);
/* Bytes in the encoding of cp (1..4). */
size_t rl_utf8_cp_len(uint32_t cp);

/* Bytes of s[0..n) that are not continuation bytes: the code point count
 * of well-formed text. */
size_t rl_utf8_count(const char *s, size_t n);
/* Byte offset of code point k of s[0..n) (k counted as rl_utf8_count
 * does), clamped to n. */
size_t rl_utf8_offset(const char *s, size_t n, size_t k);
/* Start of the character that ends at byte i (0 < i): i - 1 moved back
 * over at most three continuation bytes, never below 0. */
size_t rl_utf8_back(const char *s, size_t i);

#endif
