/* Chat-template string operations shared by filters and methods: Python's
 * str.strip/split/replace/startswith/find/count and case mapping, over
 * UTF-8 (lengths and offsets in code points where Python counts them).
 *
 * Invariants: results that are substrings of the input share its bytes;
 * everything new comes from the ctx arena; a markup input gives a markup
 * result where markupsafe.Markup's method would.
 */
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "chat/chat-impl.h"

/* Does code point set `chars` (NULL: Python whitespace) contain the code
 * point at p[i] (forward) / ending at p[i] (backward)?  *w = its width. */
static bool strip_match(const char *p, size_t n, size_t i, bool backward, tp_val *chars,
                        size_t *w) {
    if (!chars || chars->t == V_NONE)
        return backward ? rl__tp_is_space_before(p, i, w) : rl__tp_is_space_at(p, n, i, w);
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
    rl__tp_charge(c, (b + s.u.s.n - e) * (chars && chars->t != V_NONE ? chars->u.s.n + 1 : 1), off);
    tp_val r = tp_str(p + b, e - b);
    r.safe = s.safe;
    return r;
}

/* ---- Unicode case mapping (Python's str.lower/upper/title/capitalize) ----
 * Simple mappings come from the C library's UTF-8 ctype tables (a
 * C.UTF-8 locale object, never the process locale); the special cases
 * Python applies unconditionally that change the length (ß -> SS, the
 * Latin ligatures, İ -> i̇) and the Greek final sigma are handled here.
 * Without a UTF-8 locale only ASCII letters change case. */

static locale_t case_loc;
static pthread_once_t case_once = PTHREAD_ONCE_INIT;
static void case_init(void) {
    case_loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!case_loc) case_loc = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", (locale_t)0);
}
static locale_t loc(void) {
    pthread_once(&case_once, case_init);
    return case_loc;
}

bool rl__tp_cp_alpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    return loc() && iswalpha_l((wint_t)cp, loc());
}
bool rl__tp_cp_upper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
    return loc() && iswupper_l((wint_t)cp, loc());
}
bool rl__tp_cp_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z';
    return loc() && iswlower_l((wint_t)cp, loc());
}
static bool cp_cased(uint32_t cp) {
    return rl__tp_cp_upper(cp) || rl__tp_cp_lower(cp);
}

enum { CM_LOWER, CM_UPPER, CM_TITLE };

/* Maps one code point; returns how many code points went to out[]. */
static size_t map_cp(uint32_t cp, int m, uint32_t out[3]) {
    if (cp < 0x80) {
        out[0] = m == CM_LOWER ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp)
                               : (cp >= 'a' && cp <= 'z' ? cp - 32 : cp);
        return 1;
    }
    if (m != CM_LOWER) {
        static const struct {
            uint32_t cp;
            const char *up, *title;
        } special[] = {{0xDF, "SS", "Ss"},   {0xFB00, "FF", "Ff"},   {0xFB01, "FI", "Fi"},
                       {0xFB02, "FL", "Fl"}, {0xFB03, "FFI", "Ffi"}, {0xFB04, "FFL", "Ffl"},
                       {0xFB05, "ST", "St"}, {0xFB06, "ST", "St"}};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            if (special[i].cp == cp) {
                const char *r = m == CM_UPPER ? special[i].up : special[i].title;
                size_t n = 0;
                for (; r[n]; n++) out[n] = (uint32_t)(unsigned char)r[n];
                return n;
            }
        if (m == CM_TITLE) { /* the four Latin digraphs have a titlecase form */
            static const uint32_t dig[] = {0x1C4, 0x1C7, 0x1CA, 0x1F1};
            for (int i = 0; i < 4; i++)
                if (cp >= dig[i] && cp <= dig[i] + 2) {
                    out[0] = dig[i] + 1;
                    return 1;
                }
        }
    } else if (cp == 0x130) { /* İ -> i + combining dot above */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    locale_t l = loc();
    out[0] = !l              ? cp
             : m == CM_LOWER ? (uint32_t)towlower_l((wint_t)cp, l)
                             : (uint32_t)towupper_l((wint_t)cp, l);
    return 1;
}

static void put_cp(tp_ctx *c, char **buf, size_t *len, size_t *cap, uint32_t cp, size_t off) {
    char e[4];
    rl__tp_buf_put(c, buf, len, cap, e, rl_utf8_encode(cp, e), off);
}

static bool is_title_sep(const char *p, size_t n, size_t i, size_t *w) {
    if (rl__tp_is_space_at(p, n, i, w)) return true;
    *w = 1;
    return p[i] == '-' || p[i] == '(' || p[i] == '{' || p[i] == '[' || p[i] == '<';
}

/* mode: 0 lower, 1 upper, 2 capitalize, 3 title (str.title), 4 jinja2's
 * |title (words start after - ( { [ < or whitespace), 5 swapcase,
 * 6 casefold (lower, with ß and the ligatures expanded; σ for every Σ). */
tp_val rl__tp_str_case(tp_ctx *c, tp_val s, int mode, size_t off) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    rl__tp_charge(c, n * 4, off);
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    bool prev_cased = false, prev_sep = true, first = true;
    uint32_t prev = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t w = rl_utf8_decode(p + i, n - i, &cp);
        if (!w) { /* not UTF-8: the byte passes through */
            rl__tp_buf_put(c, &buf, &bl, &bc, p + i, 1, off);
            i++;
            prev_cased = prev_sep = first = false;
            continue;
        }
        int m;
        switch (mode) {
        case 0:
            m = CM_LOWER;
            break;
        case 1:
            m = CM_UPPER;
            break;
        case 2:
            m = first ? CM_TITLE : CM_LOWER;
            break;
        case 3:
            m = prev_cased ? CM_LOWER : CM_TITLE;
            break;
        case 4:
            m = prev_sep ? CM_UPPER : CM_LOWER;
            break;
        case 6:
            m = CM_LOWER;
            break;
        default:
            m = rl__tp_cp_upper(cp) ? CM_LOWER : rl__tp_cp_lower(cp) ? CM_UPPER : -1;
            break;
        }
        uint32_t out[3];
        size_t k = 1;
        out[0] = cp;
        if (mode == 6 &&
            (cp == 0xDF || (cp >= 0xFB00 && cp <= 0xFB06))) { /* casefold: full folding */
            k = map_cp(cp, CM_UPPER, out);
            for (size_t j = 0; j < k; j++) out[j] |= 0x20; /* the expansions are ASCII letters */
        } else if (m == CM_LOWER && cp == 0x3A3 &&
                   mode != 6) { /* final sigma: after a cased letter, not before one */
            uint32_t nx = 0;
            if (i + w < n) rl_utf8_decode(p + i + w, n - i - w, &nx);
            out[0] = (i > 0 && cp_cased(prev) && !(nx && cp_cased(nx))) ? 0x3C2 : 0x3C3;
        } else if (m >= 0) {
            k = map_cp(cp, m, out);
        }
        for (size_t j = 0; j < k; j++) put_cp(c, &buf, &bl, &bc, out[j], off);
        size_t sw;
        prev_sep = is_title_sep(p, n, i, &sw);
        prev_cased = cp_cased(cp);
        prev = cp;
        first = false;
        i += w;
    }
    tp_val r = tp_str(buf, bl);
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
    rl__tp_charge(c, s.u.s.n, off);
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
        const char *h = memmem(p + i, n - i, sp.u.s.p, sp.u.s.n);
        if (!h) break;
        i = (size_t)(h - p);
        rl__tp_list_append(c, out.u.l, &cap, tp_str(p + st, i - st), off);
        i += sp.u.s.n;
        st = i;
    }
    rl__tp_list_append(c, out.u.l, &cap, tp_str(p + st, n - st), off);
    return out;
}

tp_val rl__tp_str_replace(tp_ctx *c, tp_val s, tp_val *from, tp_val *to, tp_val *count,
                          size_t off) {
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
    rl__tp_charge(c, n, off);
    while (i + f.u.s.n <= n && (max < 0 || done < max)) {
        const char *h = memmem(s.u.s.p + i, n - i, f.u.s.p, f.u.s.n);
        if (!h) break;
        i = (size_t)(h - s.u.s.p);
        rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + st, i - st, off);
        rl__tp_buf_put(c, &buf, &bl, &bc, t.u.s.p, t.u.s.n, off);
        i += f.u.s.n;
        st = i;
        done++;
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

/* mode 0: str.find, 1: str.count, 2: str.rfind (code-point indices). */
int64_t rl__tp_str_find(tp_ctx *c, tp_val s, tp_val x, int mode, size_t off) {
    rl__tp_charge(c, s.u.s.n, off);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, m = x.u.s.n;
    if (m == 0)
        return mode == 1   ? (int64_t)rl_utf8_count(p, n) + 1
               : mode == 2 ? (int64_t)rl_utf8_count(p, n)
                           : 0;
    int64_t cnt = 0, last = -1;
    for (size_t i = 0; i + m <= n;) {
        const char *h = memmem(p + i, n - i, x.u.s.p, m);
        if (!h) break;
        size_t at = (size_t)(h - p);
        if (mode == 0) return (int64_t)rl_utf8_count(p, at);
        cnt++;
        last = (int64_t)at;
        i = at + (mode == 1 ? m : 1);
    }
    if (mode == 1) return cnt;
    return last < 0 ? -1 : (int64_t)rl_utf8_count(p, (size_t)last);
}

/* Python's str.splitlines: \n \r \r\n \v \f \x1c-\x1e \x85 U+2028 U+2029. */
tp_val rl__tp_str_splitlines(tp_ctx *c, tp_val s, bool keepends, size_t off) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, st = 0, cap = 0;
    tp_val out = mk_list(c, 0, false, off);
    rl__tp_charge(c, n, off);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)p[i];
        size_t w = 0; /* width of the line break at i, 0 if none */
        if (ch == '\r')
            w = i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
        else if (ch == '\n' || ch == '\v' || ch == '\f' || (ch >= 0x1c && ch <= 0x1e))
            w = 1;
        else if (ch == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85)
            w = 2;
        else if (ch == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
                 ((unsigned char)p[i + 2] == 0xA8 || (unsigned char)p[i + 2] == 0xA9))
            w = 3;
        if (!w) {
            i++;
            continue;
        }
        tp_val line = tp_str(p + st, i - st + (keepends ? w : 0));
        line.safe = s.safe;
        rl__tp_list_append(c, out.u.l, &cap, line, off);
        i += w;
        st = i;
    }
    if (st < n) {
        tp_val line = tp_str(p + st, n - st);
        line.safe = s.safe;
        rl__tp_list_append(c, out.u.l, &cap, line, off);
    }
    return out;
}

/* str.rsplit: as split, but maxsplit counts from the right. */
tp_val rl__tp_str_rsplit(tp_ctx *c, tp_val s, tp_val *sep, tp_val *maxsplit, size_t off) {
    int64_t max = maxsplit ? rl__tp_want_int(c, maxsplit, "rsplit", off) : -1;
    if (max < 0) return rl__tp_str_split(c, s, sep, NULL, off);
    rl__tp_charge(c, s.u.s.n, off);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, cap = 0, w;
    tp_val out = mk_list(c, 0, false, off);
    tp_list *l = out.u.l;
    if (!sep || sep->t == V_NONE) {
        size_t e = n;
        for (;;) {
            while (e > 0 && rl__tp_is_space_before(p, e, &w)) e -= w;
            if (e == 0) break;
            size_t b = e;
            if ((int64_t)l->n >= max) { /* the rest, leading space and all */
                rl__tp_list_append(c, l, &cap, tp_str(p, e), off);
                break;
            }
            while (b > 0 && !rl__tp_is_space_before(p, b, &w)) b -= w;
            rl__tp_list_append(c, l, &cap, tp_str(p + b, e - b), off);
            e = b;
        }
    } else {
        tp_val sp = rl__tp_want_str(c, sep, "rsplit", off);
        if (sp.u.s.n == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "rsplit: empty separator");
        size_t e = n, i = n;
        while (i >= sp.u.s.n && (int64_t)l->n < max) {
            if (memcmp(p + i - sp.u.s.n, sp.u.s.p, sp.u.s.n) == 0) {
                rl__tp_list_append(c, l, &cap, tp_str(p + i, e - i), off);
                i -= sp.u.s.n;
                e = i;
            } else {
                i--;
            }
        }
        rl__tp_list_append(c, l, &cap, tp_str(p, e), off);
    }
    for (size_t i = 0; i < l->n / 2; i++) { /* collected right to left */
        tp_val t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return out;
}

/* str.partition / rpartition: a 3-tuple. */
tp_val rl__tp_str_partition(tp_ctx *c, tp_val s, tp_val *sep, bool right, size_t off) {
    tp_val sp = rl__tp_want_str(c, sep, right ? "rpartition" : "partition", off);
    if (!sp.u.s.n) rl__tp_fail(c, RL_ERR_FORMAT, off, "partition: empty separator");
    rl__tp_charge(c, s.u.s.n, off);
    tp_val t = mk_list(c, 3, true, off);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, hit = n + 1;
    for (size_t i = 0; i + sp.u.s.n <= n; i++)
        if (!memcmp(p + i, sp.u.s.p, sp.u.s.n)) {
            hit = i;
            if (!right) break;
        }
    if (hit > n) {
        t.u.l->v[right ? 2 : 0] = s;
        t.u.l->v[1] = tp_str("", 0);
        t.u.l->v[right ? 0 : 2] = tp_str("", 0);
        return t;
    }
    t.u.l->v[0] = tp_str(p, hit);
    t.u.l->v[1] = sp;
    t.u.l->v[2] = tp_str(p + hit + sp.u.s.n, n - hit - sp.u.s.n);
    return t;
}

/* str.center / ljust / rjust (align 0 1 2) and zfill (3), widths in code
 * points. */
tp_val rl__tp_str_pad(tp_ctx *c, tp_val s, tp_val *width, tp_val *fill, int align, size_t off) {
    int64_t w = rl__tp_want_int(c, width, "pad width", off);
    size_t len = rl_utf8_count(s.u.s.p, s.u.s.n);
    if (w > 10000000) rl__tp_fail(c, RL_ERR_LIMIT, off, "pad width %lld too large", (long long)w);
    if (w <= (int64_t)len) return s;
    tp_val f = tp_str(align == 3 ? "0" : " ", 1);
    if (fill && align != 3) {
        f = rl__tp_want_str(c, fill, "fill character", off);
        if (rl_utf8_count(f.u.s.p, f.u.s.n) != 1)
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "The fill character must be exactly one character long");
    }
    size_t marg = (size_t)w - len, left;
    if (align == 0)
        left = marg / 2 + (marg & (size_t)w & 1);
    else if (align == 1)
        left = 0;
    else
        left = marg;
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    size_t body = 0;
    if (align == 3 && s.u.s.n &&
        (s.u.s.p[0] == '-' || s.u.s.p[0] == '+')) { /* zfill: zeros after the sign */
        rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p, 1, off);
        body = 1;
    }
    for (size_t i = 0; i < left; i++) rl__tp_buf_put(c, &buf, &bl, &bc, f.u.s.p, f.u.s.n, off);
    rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + body, s.u.s.n - body, off);
    for (size_t i = left; i < marg; i++) rl__tp_buf_put(c, &buf, &bl, &bc, f.u.s.p, f.u.s.n, off);
    tp_val r = tp_str(buf, bl);
    r.safe = s.safe;
    return r;
}
