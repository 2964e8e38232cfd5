/* Encode entry point (special-token partition, BOS/EOS) and decoding: the
 * one-shot decode and the streaming detokenizer.
 *
 * Special tokens: at each byte whose value starts some special token the
 * longest matching one wins (Hugging Face's leftmost-longest rule);
 * control tokens count only with RL_TOK_PARSE_SPECIAL, user-defined tokens
 * always.  The text between matches goes to the model's encoder.
 *
 * Detokenizer invariant: buf[0..len) is always valid UTF-8; at most one
 * incomplete sequence (< 4 bytes) is held back in pend.
 */
#include <string.h>

#include "base/buf.h"
#include "tokenizer/tokenizer-impl.h"

static rl_status encode_text(const rl_tokenizer *tok, const uint8_t *s, size_t n, bool first,
                             rl__ids *out, rl_err *err) {
    if (tok->kind == RL_TOKENIZER_BPE) return n ? rl__bpe_encode(tok, s, n, out, err) : RL_OK;
    if (n == 0) return RL_OK;
    if (tok->kind == RL_TOKENIZER_WPM) return rl__wpm_encode(tok, s, n, out, err);
    return rl__spm_encode(tok, s, n, first && tok->add_space_prefix, out, err);
}

rl_status rl_tokenizer_encode(const rl_tokenizer *tok, const char *text, size_t len, unsigned flags,
                              int32_t **ids, size_t *n, rl_err *err) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return rl_err_set(err, RL_ERR_INVALID, "encode: NULL text");
    const uint8_t *s = (const uint8_t *)text;
    rl__ids out = {0};
    rl_status st = RL_OK;
    bool parse = flags & RL_TOK_PARSE_SPECIAL;
    if ((flags & RL_TOK_ADD_SPECIAL) && tok->add_bos && (st = rl__ids_push(&out, tok->bos)))
        goto nomem;
    size_t frag = 0;
    for (size_t pos = 0; pos < len;) {
        if (!tok->spec_first[s[pos]]) {
            pos++;
            continue;
        }
        int32_t hit = -1;
        size_t hit_len = 0;
        for (int k = 0; k < tok->n_spec_lens && hit < 0; k++) {
            size_t l = tok->spec_lens[k];
            if (l > len - pos) continue;
            int32_t id = rl__vocab_find(tok, text + pos, l);
            if (id < 0) continue;
            uint8_t a = tok->attr[id];
            if ((a & RL__TA_USER) || ((a & RL__TA_CONTROL) && parse)) {
                hit = id;
                hit_len = l;
            }
        }
        if (hit < 0) {
            pos++;
            continue;
        }
        if ((st = encode_text(tok, s + frag, pos - frag, frag == 0, &out, err))) goto fail;
        if ((st = rl__ids_push(&out, hit))) goto nomem;
        pos += hit_len;
        frag = pos;
    }
    if ((st = encode_text(tok, s + frag, len - frag, frag == 0, &out, err))) goto fail;
    if ((flags & RL_TOK_ADD_SPECIAL) && tok->add_eos && (st = rl__ids_push(&out, tok->eos)))
        goto nomem;
    if ((flags & RL_TOK_ADD_SPECIAL) && tok->add_sep && (st = rl__ids_push(&out, tok->sep)))
        goto nomem;
    *ids = out.v;
    *n = out.n;
    return RL_OK;
nomem:
    st = rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
fail:
    rl_free(out.v);
    return st;
}

/* ---- streaming detokenizer ---- */

void rl_detok_init(rl_detok *d, const rl_tokenizer *tok, unsigned flags) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->flags = flags;
    d->at_start = true;
}

void rl_detok_free(rl_detok *d) {
    rl_free(d->buf);
    d->buf = NULL;
    d->len = d->cap = 0;
}

void rl_detok_clear(rl_detok *d) {
    d->len = 0;
    if (d->buf) d->buf[0] = 0;
}

static rl_status out_reserve(rl_detok *d, size_t extra) {
    size_t need;
    if (!rl_add_size(d->len, extra, &need) || !rl_add_size(need, 1, &need)) return RL_ERR_NOMEM;
    return rl_grow((void **)&d->buf, &d->cap, need, 1) ? RL_ERR_NOMEM : RL_OK;
}

rl_status rl_detok_push_bytes(rl_detok *d, const char *p, size_t n, size_t *appended, rl_err *err) {
    size_t before = d->len;
    /* worst case: every byte becomes U+FFFD (3 bytes) plus held bytes */
    size_t room;
    if (!rl_mul_size(n, 3, &room) || !rl_add_size(room, 4, &room) || out_reserve(d, room)) {
        if (appended) *appended = 0;
        return rl_err_set(err, RL_ERR_NOMEM, "detokenize: out of memory");
    }
    char *o = d->buf;
    size_t w = d->len;
    for (size_t i = 0; i < n;) {
        uint8_t b = (uint8_t)p[i];
        if (d->n_need == 0) {
            i++;
            if (b < 0x80) {
                o[w++] = (char)b;
                continue;
            }
            d->n_need = (uint8_t)rl_utf8_lead(b, &d->lo, &d->hi);
            if (d->n_need == 0) {
                memcpy(o + w, "\xEF\xBF\xBD", 3);
                w += 3;
                continue;
            }
            d->pend[0] = b;
            d->n_pend = 1;
            continue;
        }
        if (b < d->lo || b > d->hi) { /* the held prefix can never complete */
            memcpy(o + w, "\xEF\xBF\xBD", 3);
            w += 3;
            d->n_need = d->n_pend = 0;
            continue; /* reprocess b */
        }
        i++;
        d->pend[d->n_pend++] = b;
        d->lo = 0x80;
        d->hi = 0xBF;
        if (d->n_pend == d->n_need) {
            memcpy(o + w, d->pend, d->n_pend);
            w += d->n_pend;
            d->n_need = d->n_pend = 0;
        }
    }
    o[w] = 0;
    d->len = w;
    if (appended) *appended = w - before;
    return RL_OK;
}

rl_status rl_detok_push(rl_detok *d, int32_t id, size_t *appended, rl_err *err) {
    const rl_tokenizer *tok = d->tok;
    if (appended) *appended = 0;
    if (id < 0 || id >= tok->n_vocab)
        return rl_err_set(err, RL_ERR_RANGE, "detokenize: token id %d out of range [0, %d)", id,
                          tok->n_vocab);
    if ((d->flags & RL_TOK_SKIP_SPECIAL) && (tok->attr[id] & RL__TA_CONTROL)) return RL_OK;
    size_t len;
    const char *p = rl_tokenizer_piece(tok, id, &len);
    if (d->at_start && len) {
        d->at_start = false;
        /* the space prefix added at encode time (WordPiece: the word-start
         * mark of the first word) is not part of the text */
        bool prefixed = tok->kind == RL_TOKENIZER_WPM ||
                        (tok->kind == RL_TOKENIZER_SPM && tok->add_space_prefix);
        if (prefixed && p[0] == ' ' && !(tok->attr[id] & (RL__TA_CONTROL | RL__TA_USER))) {
            p++;
            len--;
        }
    }
    return rl_detok_push_bytes(d, p, len, appended, err);
}

rl_status rl_detok_flush(rl_detok *d, size_t *appended, rl_err *err) {
    if (appended) *appended = 0;
    if (!d->n_need) return RL_OK;
    if (out_reserve(d, 3)) return rl_err_set(err, RL_ERR_NOMEM, "detokenize: out of memory");
    memcpy(d->buf + d->len, "\xEF\xBF\xBD", 3);
    d->len += 3;
    d->buf[d->len] = 0;
    d->n_need = d->n_pend = 0;
    if (appended) *appended = 3;
    return RL_OK;
}

rl_status rl_tokenizer_decode(const rl_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                              char **out, size_t *out_len, rl_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    rl_detok d;
    rl_detok_init(&d, tok, flags);
    rl_status st = RL_OK;
    for (size_t i = 0; i < n && !st; i++) {
        st = rl_detok_push(&d, ids[i], NULL, err);
        if (st) rl_err_prefix(err, "ids[%zu]", i);
    }
    if (!st) st = rl_detok_flush(&d, NULL, err);
    if (!st && !d.buf && out_reserve(&d, 0))
        st = rl_err_set(err, RL_ERR_NOMEM, "decode: out of memory");
    if (st) {
        rl_detok_free(&d);
        return st;
    }
    d.buf[d.len] = 0;
    *out = d.buf;
    if (out_len) *out_len = d.len;
    return RL_OK;
}
