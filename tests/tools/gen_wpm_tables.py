#!/usr/bin/env python3
"""Generates src/tokenizer/wpm_tables.c: the per-code-point data of BERT's
basic tokenizer (WordPiece models, tokenizer.ggml.model = "bert").

The reference is Hugging Face tokenizers, which produced llama.cpp's
ggml-vocab-bert-bge test vectors: BertNormalizer(clean_text,
handle_chinese_chars, strip_accents, lowercase) and BertPreTokenizer.  Each
code point is run through them on its own, and the results are tabulated:

  class ranges  DROP  removed (controls, U+0000, U+FFFD, nonspacing marks)
                SPACE ends a word (Unicode White_Space, less \\v \\f U+0085,
                      which BertNormalizer removes as controls)
                CJK   a word of its own (BERT's CJK ideograph blocks)
  map           the code point's replacement when it is not itself: NFD
                with the nonspacing marks removed, then lowercased (one to
                three code points); Hangul syllables are left out, their
                decomposition is computed (and checked here)
  punct ranges  punctuation after normalization (ASCII punctuation or a
                Unicode P* character): a word of its own

HF's Unicode tables are older than Python's, so the data is taken from HF
itself rather than from unicodedata.  The script then replays the tables on
every code point (alone and between two letters) and checks the words
against HF's.

    .venv/bin/python tests/tools/gen_wpm_tables.py > src/tokenizer/wpm_tables.c
"""
import sys

import tokenizers
from tokenizers import normalizers, pre_tokenizers

NORM = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                  strip_accents=None, lowercase=True)
PRE = pre_tokenizers.BertPreTokenizer()
DROP, SPACE, CJK = 1, 2, 3
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    return (cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000)


def hangul(cp):
    s = cp - HANGUL_FIRST
    out = [0x1100 + s // 588, 0x1161 + (s % 588) // 28]
    if s % 28:
        out.append(0x11A7 + s % 28)
    return out


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def classify():
    cls, mapping = {}, {}
    for cp in code_points():
        c = chr(cp)
        r = NORM.normalize_str(c)
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            assert [ord(x) for x in r] == hangul(cp), hex(cp)
            continue
        if r == "":
            cls[cp] = DROP
        elif r == " ":
            cls[cp] = SPACE
        elif r.startswith(" ") and r.endswith(" "):
            cls[cp] = CJK
            if r[1:-1] != c:
                mapping[cp] = [ord(x) for x in r[1:-1]]
        elif r != c:
            assert " " not in r, hex(cp)
            mapping[cp] = [ord(x) for x in r]
    for cp, out in mapping.items():  # normalizing is idempotent
        assert len(out) <= 3 and NORM.normalize_str("".join(map(chr, out))).strip() == \
            "".join(map(chr, out)), hex(cp)
    punct = []
    for cp in code_points():
        c = chr(cp)
        if cp in cls or cp in mapping or HANGUL_FIRST <= cp <= HANGUL_LAST:
            continue
        words = [w for w, _ in PRE.pre_tokenize_str("a" + c + "a")]
        assert words in (["a" + c + "a"], ["a", c, "a"]), (hex(cp), words)
        if len(words) == 3:
            punct.append(cp)
    return cls, mapping, punct


def replay(cp, cls, mapping, punct_set):
    """Words of "a" + chr(cp) + "a" by the C algorithm (wpm.c)."""
    words, cur = [], ["a"]
    k = cls.get(cp, 0)
    out = hangul(cp) if HANGUL_FIRST <= cp <= HANGUL_LAST else mapping.get(cp, [cp])
    if k == SPACE:
        words.append("".join(cur))
        cur = []
    elif k == CJK:
        words += ["".join(cur), "".join(map(chr, out))]
        cur = []
    elif k != DROP:
        for o in out:
            if o in punct_set:
                if cur:
                    words.append("".join(cur))
                words.append(chr(o))
                cur = []
            else:
                cur.append(chr(o))
    cur.append("a")
    words.append("".join(cur))
    return [w for w in words if w]


def check(cls, mapping, punct):
    punct_set = set(punct)
    for cp in code_points():
        want = [w for w, _ in PRE.pre_tokenize_str(NORM.normalize_str("a" + chr(cp) + "a"))]
        got = replay(cp, cls, mapping, punct_set)
        assert got == want, (hex(cp), got, want)


def emit_ranges(name, rows, per_line, fmt):
    print(f"const uint32_t {name}[][{len(rows[0])}] = {{")
    for i in range(0, len(rows), per_line):
        print("    " + " ".join(fmt(r) for r in rows[i:i + per_line]))
    print("};")
    print(f"const size_t {name}_n = {len(rows)};")


def main():
    cls, mapping, punct = classify()
    check(cls, mapping, punct)
    class_rows = []
    for k in (DROP, SPACE, CJK):
        class_rows += [[a, b, k] for a, b in ranges(sorted(cp for cp, v in cls.items() if v == k))]
    class_rows.sort()
    multi, map_rows = [], []
    for cp in sorted(mapping):
        out = mapping[cp]
        if len(out) == 1:
            map_rows.append([cp, out[0]])
        else:
            map_rows.append([cp, 0x80000000 | len(multi)])
            multi += [len(out)] + out
    print(f"""/* GENERATED by tests/tools/gen_wpm_tables.py from Hugging Face tokenizers
 * {tokenizers.__version__} (BertNormalizer with lowercase, accent stripping,
 * clean_text and CJK handling; BertPreTokenizer), one code point at a time.
 * Do not edit; regenerate.  The script checks that these tables, applied as
 * wpm.c applies them, give HF's words for every code point.
 *
 * rl__wpm_class: sorted disjoint [first, last, class] ranges (RL__WPM_DROP,
 *   RL__WPM_SPACE, RL__WPM_CJK); code points in none are word characters.
 * rl__wpm_map: sorted [cp, replacement]; a replacement with the top bit set
 *   is an index into rl__wpm_multi (a count, then that many code points).
 *   Hangul syllables (U+AC00..U+D7A3) are not listed: they decompose
 *   arithmetically (wpm.c).
 * rl__wpm_punct: sorted disjoint [first, last] ranges of the normalized code
 *   points that are words of their own.
 */
#include "tokenizer/tokenizer-impl.h"
""")
    emit_ranges("rl__wpm_class", class_rows, 4,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}, {r[2]}}},")
    print()
    emit_ranges("rl__wpm_map", map_rows, 6, lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}}},")
    print()
    print("const uint32_t rl__wpm_multi[] = {")
    for i in range(0, len(multi), 10):
        print("    " + " ".join(f"0x{x:X}," for x in multi[i:i + 10]))
    print("};")
    print(f"const size_t rl__wpm_multi_n = {len(multi)};")
    print()
    emit_ranges("rl__wpm_punct", [[a, b] for a, b in ranges(punct)], 5,
                lambda r: f"{{0x{r[0]:X}, 0x{r[1]:X}}},")
    print(f"class ranges {len(class_rows)}, map {len(map_rows)}, multi {len(multi)}, "
          f"punct ranges {len(ranges(punct))}", file=sys.stderr)


if __name__ == "__main__":
    main()
