/* Chat-template string operations shared by filters and methods: Python's
 * str.strip/split/replace/startswith/find/count and case mapping, over
 * UTF-8 (lengths and offsets in code points where Python counts them).
 *
 * Invariants: results that are substrings of the input share its bytes;
 * everything new comes from the ctx arena; a markup input gives a markup
 * result where markupsafe.Markup's method would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

/* Does code point set `chars` (NULL: Python whitespace) contain the code
 * point at p[i] (forward) / ending at p[i] (backward)?  *w = its width. */
static bool strip_match(const char *p, size_t n, size_t i, bool backward, tp_val *chars, size_t *w) {
    if (!chars || chars->t == V_NONE) return backward ? rl__tp_is_space_before(p, i, w) : rl__tp_is_space_at(p, n, i, w);
    size_t s = backward ? rl_utf8_back(p, i) : i;
    size_t e = s + rl_utf8_offset(p + s, n - s, 1);
    *w = e - s;
    const char *cs = chars->u.s.p;
    size_t cn = chars->u.s.n;
    for (size_t k = 0; k < cn;) {
        size_t cw = rl_utf8_offset(cs + k, cn - k, 1);
        if (cw == *w && memcmp(cs + k, p + s, cw) == 0) return true;
        k += cw;
    }
    return false;
}

tp_val rl__tp_str_strip(tp_ctx *c, tp_val s, tp_val *chars, bool left, bool right, size_t off) {
    if (chars && chars->t != V_NONE) rl__tp_want_str(c, chars, "strip", off);
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n, w;
    while (left && b < e && strip_match(p, e, b, false, chars, &w)) b += w;
    while (right && e > b && strip_match(p, e, e, true, chars, &w)) e -= w;
    tp_val r = tp_str(p + b, e - b);
    r.safe = s.safe;
    return r;
}

tp_val rl__tp_str_case(tp_ctx *c, tp_val s, int mode, size_t off) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title */
    char *p = rl__tp_strdup(c, s.u.s.p, s.u.s.n, off);
    bool word_start = true;
    for (size_t i = 0; i < s.u.s.n; i++) {
        char ch = p[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && word_start);
        if (up && ch >= 'a' && ch <= 'z') p[i] = (char)(ch - 32);
        if (!up && ch >= 'A' && ch <= 'Z') p[i] = (char)(ch + 32);
        word_start = !alpha && !((unsigned char)ch >= 0x80) && !(ch >= '0' && ch <= '9');
    }
    tp_val r = tp_str(p, s.u.s.n);
    r.safe = s.safe;
    return r;
}

tp_list *rl__tp_list_append(tp_ctx *c, tp_list *l, size_t *cap, tp_val v, size_t off) {
    l->v = rl__tp_grow(c, l->v, l->n, cap, sizeof(tp_val), 8, off);
    l->v[l->n++] = v;
    return l;
}

tp_val rl__tp_str_split(tp_ctx *c, tp_val s, tp_val *sep, tp_val *maxsplit, size_t off) {
    int64_t max = maxsplit ? rl__tp_want_int(c, maxsplit, "split", off) : -1;
    tp_val out = mk_list(c, 0, false, off);
    size_t cap = 0;
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0, w;
    if (!sep || sep->t == V_NONE) {
        for (;;) {
            while (i < n && rl__tp_is_space_at(p, n, i, &w)) i += w;
            if (i >= n) break;
            if (max >= 0 && (int64_t)out.u.l->n >= max) {
                size_t e = n;
                while (e > i && rl__tp_is_space_before(p, e, &w)) e -= w;
                rl__tp_list_append(c, out.u.l, &cap, tp_str(p + i, e - i), off);
                break;
            }
            size_t st = i;
            while (i < n && !rl__tp_is_space_at(p, n, i, &w)) i += w;
            rl__tp_list_append(c, out.u.l, &cap, tp_str(p + st, i - st), off);
        }
        return out;
    }
    tp_val sp = rl__tp_want_str(c, sep, "split", off);
    if (sp.u.s.n == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "split: empty separator");
    size_t st = 0;
    while (i + sp.u.s.n <= n && (max < 0 || (int64_t)out.u.l->n < max)) {
        if (memcmp(p + i, sp.u.s.p, sp.u.s.n) == 0) {
            rl__tp_list_append(c, out.u.l, &cap, tp_str(p + st, i - st), off);
            i += sp.u.s.n;
            st = i;
        } else {
            i++;
        }
    }
    rl__tp_list_append(c, out.u.l, &cap, tp_str(p + st, n - st), off);
    return out;
}

tp_val rl__tp_str_replace(tp_ctx *c, tp_val s, tp_val *from, tp_val *to, tp_val *count, size_t off) {
    tp_val f = rl__tp_want_str(c, from, "replace", off), t = rl__tp_want_str(c, to, "replace", off);
    int64_t max = count && count->t != V_NONE ? rl__tp_want_int(c, count, "replace", off) : -1;
    char *buf = NULL;
    size_t bl = 0, bc = 0, i = 0, n = s.u.s.n;
    int64_t done = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    if (f.u.s.n == 0) { /* Python inserts `to` between every character */
        size_t pos = 0;
        while (pos <= n) {
            if (max < 0 || done < max) {
                rl__tp_buf_put(c, &buf, &bl, &bc, t.u.s.p, t.u.s.n, off);
                done++;
            }
            if (pos == n) break;
            size_t w = rl_utf8_offset(s.u.s.p + pos, n - pos, 1);
            rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + pos, w, off);
            pos += w;
        }
        return tp_str(buf, bl);
    }
    size_t st = 0;
    while (i + f.u.s.n <= n && (max < 0 || done < max)) {
        if (memcmp(s.u.s.p + i, f.u.s.p, f.u.s.n) == 0) {
            rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + st, i - st, off);
            rl__tp_buf_put(c, &buf, &bl, &bc, t.u.s.p, t.u.s.n, off);
            i += f.u.s.n;
            st = i;
            done++;
        } else {
            i++;
        }
    }
    rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + st, n - st, off);
    return tp_str(buf, bl);
}

bool rl__tp_str_affix(tp_ctx *c, tp_val s, tp_val *x, bool end, size_t off) {
    if (x && x->t == V_LIST) {
        for (size_t i = 0; i < x->u.l->n; i++)
            if (rl__tp_str_affix(c, s, &x->u.l->v[i], end, off)) return true;
        return false;
    }
    tp_val a = rl__tp_want_str(c, x, end ? "endswith" : "startswith", off);
    if (a.u.s.n > s.u.s.n) return false;
    return memcmp(s.u.s.p + (end ? s.u.s.n - a.u.s.n : 0), a.u.s.p, a.u.s.n) == 0;
}

int64_t rl__tp_str_find(tp_val s, tp_val x, bool count) {
    int64_t cnt = 0;
    if (x.u.s.n == 0) return count ? (int64_t)rl_utf8_count(s.u.s.p, s.u.s.n) + 1 : 0;
    for (size_t i = 0; i + x.u.s.n <= s.u.s.n; i++) {
        if (memcmp(s.u.s.p + i, x.u.s.p, x.u.s.n) != 0) continue;
        if (!count) return (int64_t)rl_utf8_count(s.u.s.p, i);
        cnt++;
        i += x.u.s.n - 1;
    }
    return count ? cnt : -1;
}

