/* Internals shared by the JSON Schema converter's files (json_schema.c:
 * keywords, numbers, objects, arrays, $ref; json_schema_regex.c: `pattern`
 * regexes).  Only those two files include this.
 *
 * The converter state is opaque to the pattern translator: it only emits
 * text through rl__js_put / rl__js_printf and reports errors through
 * rl__js_fail.  After the first failure every call returns false and the
 * first message stays in the caller's rl_err ("json schema: ..."). */
#ifndef RL_JSON_SCHEMA_IMPL_H
#define RL_JSON_SCHEMA_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "grammar/grammar.h"

typedef struct rl__jsconv rl__jsconv;

/* Records the first error (code, "json schema: <message>"); returns false. */
bool rl__js_fail(rl__jsconv *c, rl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends s[0..n) to b; false (LIMIT past RL_GRAMMAR_MAX_TEXT, or NOMEM)
 * once anything failed. */
bool rl__js_put(rl__jsconv *c, rl_buf *b, const char *s, size_t n);
/* Appends a formatted piece (under 512 bytes) to b, as rl__js_put. */
bool rl__js_printf(rl__jsconv *c, rl_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* json_schema_regex.c: appends the grammar of a JSON string (quotes
 * included) whose content matches the ECMA-262-style regex pat[0..n) as
 * JSON Schema's `pattern` does (a search: a side without ^ or $ admits any
 * characters there); constructs outside the subset of docs/STRUCTURED.md
 * fail with RL_ERR_UNSUPPORTED naming the schema location `ptr` and the
 * offset in the pattern. */
bool rl__js_pattern(rl__jsconv *c, rl_buf *b, const char *pat, size_t n, const char *ptr);

#endif
