"""Deterministic tokenizer test corpus: >= 2,000 strings covering English
prose, source code, whitespace runs (tabs, newlines, CR, Unicode spaces),
digits and long numbers, punctuation, emoji and ZWJ sequences, CJK, Arabic,
Devanagari, combining marks, very long words and text that looks like
special tokens.  Pure function of the seed; uses only texts that Debian and
Python ship (common-licenses, the stdlib sources) plus generated strings.
"""
import glob
import os
import random
import sysconfig

WORDS = ("the quick brown fox jumps over lazy dog tokenizer model inference engine "
         "I'm you're we've they'll she'd it's don't CAN'T WON'T O'Neil rock'n'roll "
         "Hello World naïve café résumé Zürich São Paulo Ελληνικά Русский язык "
         "straße ﬁne ½ ² Ⅻ ①").split()
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>",
            "<bos>", "<eos>", "<pad>", "<unk>", "</s>", "<s>", "<|eot_id|>", "<|begin_of_text|>",
            "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<repo_name>", "<unused12>",
            "[multimodal]", "<start_of_image>", "<|im_", "im_end|>", "<<|im_end|>>", "<mask>"]
SCRIPTS = {
    "cjk": "我们今天去公园散步天气很好日本語のテキストです한국어 텍스트입니다漢字かなカナ",
    "arabic": "مرحبا بالعالم هذا نص عربي للاختبار ١٢٣٤٥٦",
    "devanagari": "नमस्ते दुनिया यह एक परीक्षण है क्षत्रिय ज्ञान १२३",
    "thai": "สวัสดีชาวโลก ภาษาไทย",
    "hebrew": "שלום עולם בדיקה",
    "cyrillic": "Привет мир съешь же ещё этих мягких французских булок",
    "greek": "Γειά σου Κόσμε αβγδ ΑΒΓΔ",
}
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪", "🧑🏿‍💻", "✔︎", "🤖", "👩‍🔬", "☕", "🦀"]
COMBINING = ["e\u0301", "a\u0308\u0304", "n\u0303", "\u0915\u094d\u0937", "Z\u0351\u036b\u0343",
             "o\u0338", "\u1100\u1161\u11a8"]
USPACES = ["\u00a0", "\u2000", "\u2003", "\u2009", "\u200a", "\u3000", "\u180e", "\u200b",
           "\ufeff", "\u0085", "\u2028", "\u2029", "\u202f", "\u205f", "\u1680", "\x0b", "\x0c",
           "\x1c", "\x1f", "\u00ad"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "—", "–", "«»", "¿¡", "“”", "‘’",
                                                      "…", "•", "§", "©", "™", "€", "£", "¥"]
WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n", "\n ", " \t ", "\n\n\n\n",
      "        ", "\t\n", "\r"]


def _texts(pattern, limit):
    files = sorted(glob.glob(pattern))[:limit]
    out = []
    for f in files:
        try:
            with open(f, encoding="utf-8") as fh:
                out.append(fh.read())
        except (OSError, UnicodeDecodeError):
            pass
    return out


def _chunks(texts, rng, n, lo, hi):
    res = []
    if not texts:
        return res
    for _ in range(n):
        t = rng.choice(texts)
        if len(t) < 10:
            continue
        a = rng.randrange(0, max(1, len(t) - lo))
        res.append(t[a:a + rng.randint(lo, hi)])
    return res


def corpus(seed=1234, n_random=900):
    rng = random.Random(seed)
    out = []
    prose = _texts("/usr/share/common-licenses/*", 20)
    code = _texts(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"), 200)
    out += _chunks(prose, rng, 300, 20, 600)
    out += _chunks(code, rng, 300, 20, 800)
    for w in WORDS:
        out += [w, " " + w, w.upper(), w + "s", "  " + w]
    for sp in SPECIALS:
        out += [sp, "Hi" + sp + "there", " " + sp + "\n", sp + sp, "x " + sp + " y"]
    for name, s in SCRIPTS.items():
        out += [s, " " + s, s[: len(s) // 2], s.replace(" ", "  ")]
    for e in EMOJI + COMBINING:
        out += [e, "a" + e + "b", " " + e, e * 3, "text " + e + " more"]
    for u in USPACES:
        out += [u, "a" + u + "b", u + u + "x", "x " + u + " y", u + "\n"]
    for p in PUNCT:
        out += [p, p * 3, "a" + p + "b", " " + p + " ", "word" + p]
    for w in WS:
        out += [w, "a" + w + "b", w + "x" + w, "x" + w, w * 2 + "end"]
    nums = ["0", "7", "42", "1234", "12345", "123456789", "3.14159", "1,000,000", "1e-10",
            "0x1F", "2024-01-01", "10:30", "٣٤٥", "१२३", "½", "²³", "Ⅻ", "①②", "-17", "+3",
            "9" * 40, "12 345 678", " 123", "  4567", "a1b2c3", "v1.2.3"]
    out += nums + [" " + n for n in nums] + ["x" + n + "y" for n in nums]
    out += ["a" * 500, "z" * 3000, "abcdefghij" * 200, " " * 300, "\n" * 100, "\t" * 50,
            "supercalifragilisticexpialidocious" * 10, "ab" * 1000, "😀" * 100, "我" * 300,
            "".join(chr(c) for c in range(0x20, 0x7F)), "".join(chr(c) for c in range(0xA0, 0x180)),
            "", " ", "a", "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\u00ff\u0100"]
    pools = [" ".join(WORDS), "".join(SCRIPTS.values()), "".join(EMOJI + COMBINING),
             "".join(PUNCT), "".join(WS), "0123456789", "".join(USPACES), "".join(SPECIALS)]
    for _ in range(n_random):
        k = rng.randint(1, 12)
        parts = []
        for _ in range(k):
            pool = rng.choice(pools)
            a = rng.randrange(len(pool))
            parts.append(pool[a:a + rng.randint(1, 12)])
        out.append("".join(parts))
    for _ in range(200):  # random code points from the BMP and beyond
        s = []
        for _ in range(rng.randint(1, 20)):
            c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                            rng.randint(0x3000, 0xD7FF), rng.randint(0xE000, 0xFFFD),
                            rng.randint(0x10000, 0x1FAFF)])
            s.append(chr(c))
        out.append("".join(s))
    return out


if __name__ == "__main__":
    c = corpus()
    print(len(c), sum(len(s) for s in c))
