/* The text side of the public API (include/redline.h): rl_vocab (tokenize,
 * detokenize, streaming detokenizer, chat template, model facts) and the
 * structured-output constructors, over the internal tokenizer, template,
 * grammar and model modules.
 *
 * An rl_vocab either owns a model opened for its metadata only
 * (rl_vocab_load: rl_model_load maps and validates the file but reads no
 * weight) or borrows an engine's model and tokenizer (rl_engine_vocab).
 * Everything it computes at creation (template source, BOS/EOS strings,
 * the model facts) is copied into it, and nothing changes afterwards, so
 * every function here is safe from many threads at once (the tokenizer's
 * encode is thread-safe by its own contract).
 *
 * The chat-template choice lives here, once: the file's
 * tokenizer.chat_template, else the built-in template for the architecture
 * (rl_template_fallback).  `redline serve` and `redline run` both get it
 * through rl_chat_render.
 */
#include "redline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct rl_vocab {
    rl_model *own_model;     /* rl_vocab_load only */
    rl_tokenizer *own_tok;   /* rl_vocab_load only */
    const rl_tokenizer *tok; /* own_tok or the engine's (borrowed) */
    char *tmpl;              /* chat template source, NUL-terminated (owned) */
    size_t tmpl_len;
    char *bos_str, *eos_str; /* texts of BOS / EOS for the template (owned) */
    rl_model_info info;
};

struct rl_detokenizer {
    rl_detok d;
};

/* ---- structured output ---- */

rl_grammar *rl_gen_grammar_new(rl_grammar_syntax syntax, const char *text, size_t len,
                               rl_err *err) {
    if (!text) {
        rl_err_set(err, RL_ERR_INVALID, "grammar: text is NULL");
        return NULL;
    }
    switch (syntax) {
    case RL_GRAMMAR_GBNF:
        return rl_grammar_compile(text, len, err);
    case RL_GRAMMAR_JSON_SCHEMA:
        return rl_grammar_from_json_schema(text, len, err);
    }
    rl_err_set(err, RL_ERR_INVALID, "grammar: unknown syntax %d", (int)syntax);
    return NULL;
}

void rl_gen_grammar_free(rl_grammar *g) {
    rl_grammar_free(g);
}

/* ---- rl_vocab ---- */

static char *piece_str(const rl_tokenizer *tok, int32_t id) {
    size_t l = 0;
    const char *p = id >= 0 ? rl_tokenizer_piece(tok, id, &l) : NULL;
    return rl_strndup(p ? p : "", p ? l : 0);
}

/* Fills everything but the ownership fields from model m and tokenizer
 * v->tok. */
static rl_status vocab_init(rl_vocab *v, const rl_model *m, rl_err *err) {
    const rl_tokenizer *tok = v->tok;
    rl_model_info *in = &v->info;
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "%s", rl_model_name(m));
    snprintf(in->arch, sizeof in->arch, "%s", rl_model_arch(m));
    in->n_vocab = rl_tokenizer_n_vocab(tok);
    in->n_ctx_train = rl_model_n_ctx_train(m);
    in->n_layer = rl_model_n_layer(m);
    in->n_embd = rl_model_n_embd(m);
    in->n_head = rl_model_n_head(m);
    in->n_kv_head = rl_model_n_kv_head(m);
    in->head_dim = rl_model_head_dim(m);
    in->bos = rl_tokenizer_bos(tok);
    in->eos = rl_tokenizer_eos(tok);
    in->eot = rl_tokenizer_eot(tok);
    in->pad = rl_tokenizer_pad(tok);
    in->unk = rl_tokenizer_unk(tok);
    in->add_bos = rl_tokenizer_add_bos(tok);
    in->add_eos = rl_tokenizer_add_eos(tok);
    in->fim_pre = rl_tokenizer_fim(tok, RL_FIM_PRE);
    in->fim_suf = rl_tokenizer_fim(tok, RL_FIM_SUF);
    in->fim_mid = rl_tokenizer_fim(tok, RL_FIM_MID);
    in->fim_pad = rl_tokenizer_fim(tok, RL_FIM_PAD);
    in->fim_rep = rl_tokenizer_fim(tok, RL_FIM_REP);
    in->fim_sep = rl_tokenizer_fim(tok, RL_FIM_SEP);
    for (int32_t id = 0; id < in->n_vocab; id++)
        if (rl_tokenizer_is_eog(tok, id)) {
            if (in->n_eog < RL_MAX_EOG) in->eog[in->n_eog] = id;
            in->n_eog++;
        }

    rl_gguf_str ts = {0};
    rl_err gerr = {0};
    in->has_chat_template =
        rl_gguf_get_str(rl_model_gguf(m), "tokenizer.chat_template", &ts, &gerr) == RL_OK &&
        ts.ptr && ts.len > 0;
    const char *src = ts.ptr;
    size_t len = in->has_chat_template ? (size_t)ts.len : 0;
    if (in->has_chat_template) {
        snprintf(in->chat_template, sizeof in->chat_template, "model");
    } else {
        const char *name = NULL;
        src = rl_template_fallback(in->arch, &name);
        len = strlen(src);
        snprintf(in->chat_template, sizeof in->chat_template, "%s", name ? name : "?");
    }
    v->tmpl = rl_strndup(src, len);
    v->tmpl_len = len;
    v->bos_str = piece_str(tok, in->bos);
    v->eos_str = piece_str(tok, in->eos);
    if (!v->tmpl || !v->bos_str || !v->eos_str)
        return rl_err_set(err, RL_ERR_NOMEM, "vocab: out of memory");
    return RL_OK;
}

void rl_vocab_free(rl_vocab *v) {
    if (!v) return;
    rl_free(v->tmpl);
    rl_free(v->bos_str);
    rl_free(v->eos_str);
    rl_tokenizer_free(v->own_tok);
    rl_model_free(v->own_model);
    rl_free(v);
}

rl_status rl_vocab_load(const char *model_path, rl_vocab **out, rl_err *err) {
    *out = NULL;
    if (!model_path) return rl_err_set(err, RL_ERR_INVALID, "vocab: model path is NULL");
    rl_vocab *v = rl_calloc(1, sizeof *v);
    if (!v) return rl_err_set(err, RL_ERR_NOMEM, "vocab: out of memory");
    /* one-token scratch: this model never runs a forward pass */
    rl_model_opts mo = {.max_batch = 1};
    rl_status st = rl_model_load(model_path, &mo, &v->own_model, err);
    if (!st) st = rl_tokenizer_load(rl_model_gguf(v->own_model), &v->own_tok, err);
    if (!st) {
        v->tok = v->own_tok;
        st = vocab_init(v, v->own_model, err);
    }
    if (st) {
        rl_vocab_free(v);
        return st;
    }
    *out = v;
    return RL_OK;
}

rl_status rl_engine_vocab(rl_engine *e, rl_vocab **out, rl_err *err) {
    *out = NULL;
    rl_vocab *v = rl_calloc(1, sizeof *v);
    if (!v) return rl_err_set(err, RL_ERR_NOMEM, "vocab: out of memory");
    v->tok = rl_engine_tokenizer(e);
    rl_status st = vocab_init(v, rl_engine_model(e), err);
    if (st) {
        rl_vocab_free(v);
        return st;
    }
    *out = v;
    return RL_OK;
}

void rl_vocab_model_info(const rl_vocab *v, rl_model_info *out) {
    *out = v->info;
}

rl_status rl_tokenize(const rl_vocab *v, const char *text, size_t len, unsigned flags,
                      int32_t **ids, int32_t *n, rl_err *err) {
    *ids = NULL;
    *n = 0;
    int32_t *a = NULL;
    size_t cnt = 0;
    unsigned tf = (flags & RL_TOKENIZE_PARSE_SPECIAL) ? RL_TOK_PARSE_SPECIAL : 0;
    rl_status st = rl_tokenizer_encode(v->tok, text ? text : "", text ? len : 0, tf, &a, &cnt, err);
    if (st) return st;
    int32_t bos = v->info.bos;
    bool add =
        (flags & RL_TOKENIZE_ADD_BOS) && v->info.add_bos && bos >= 0 && (cnt == 0 || a[0] != bos);
    if (cnt + 2 > (size_t)INT32_MAX / 2) {
        rl_free(a);
        return rl_err_set(err, RL_ERR_LIMIT, "text: %zu tokens are too many", cnt);
    }
    /* the end token: EOS when the metadata adds one, else WordPiece's [SEP] */
    int32_t eos = v->info.add_eos ? v->info.eos : rl_tokenizer_sep(v->tok);
    bool add_e = (flags & RL_TOKENIZE_ADD_EOS) && eos >= 0 && (cnt == 0 || a[cnt - 1] != eos);
    if (add || add_e) {
        int32_t *b = rl_malloc((cnt + 2) * sizeof *b);
        if (!b) {
            rl_free(a);
            return rl_err_set(err, RL_ERR_NOMEM, "tokenize: out of memory");
        }
        if (add) b[0] = bos;
        if (cnt) memcpy(b + add, a, cnt * sizeof *b);
        if (add_e) b[cnt + add] = eos;
        rl_free(a);
        a = b;
        cnt += (size_t)add + (size_t)add_e;
    }
    *ids = a;
    *n = (int32_t)cnt;
    return RL_OK;
}

static unsigned detok_flags(unsigned flags) {
    return (flags & RL_DETOKENIZE_SKIP_SPECIAL) ? RL_TOK_SKIP_SPECIAL : 0;
}

rl_status rl_detokenize(const rl_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **out,
                        size_t *out_len, rl_err *err) {
    return rl_tokenizer_decode(v->tok, ids, n, detok_flags(flags), out, out_len, err);
}

const char *rl_token_piece(const rl_vocab *v, int32_t id, size_t *len) {
    return rl_tokenizer_piece(v->tok, id, len);
}

bool rl_token_is_eog(const rl_vocab *v, int32_t id) {
    return rl_tokenizer_is_eog(v->tok, id);
}

rl_status rl_detokenizer_new(const rl_vocab *v, unsigned flags, rl_detokenizer **out, rl_err *err) {
    *out = rl_calloc(1, sizeof **out);
    if (!*out) return rl_err_set(err, RL_ERR_NOMEM, "detokenizer: out of memory");
    rl_detok_init(&(*out)->d, v->tok, detok_flags(flags));
    return RL_OK;
}

rl_status rl_detokenizer_push(rl_detokenizer *d, int32_t id, const char **text, size_t *len,
                              rl_err *err) {
    rl_detok_clear(&d->d);
    rl_status st = rl_detok_push(&d->d, id, NULL, err);
    *text = d->d.buf ? d->d.buf : "";
    *len = st ? 0 : d->d.len;
    return st;
}

rl_status rl_detokenizer_flush(rl_detokenizer *d, const char **text, size_t *len, rl_err *err) {
    rl_detok_clear(&d->d);
    rl_status st = rl_detok_flush(&d->d, NULL, err);
    *text = d->d.buf ? d->d.buf : "";
    *len = st ? 0 : d->d.len;
    return st;
}

void rl_detokenizer_free(rl_detokenizer *d) {
    if (!d) return;
    rl_detok_free(&d->d);
    rl_free(d);
}

const char *rl_vocab_chat_template(const rl_vocab *v, size_t *len) {
    if (len) *len = v->tmpl_len;
    return v->tmpl;
}

rl_status rl_chat_render_json(const rl_vocab *v, const char *ctx_json, size_t len, char **out,
                              size_t *out_len, rl_err *err) {
    *out = NULL;
    json_t *ctx = json_loadb(ctx_json, len, 0, NULL);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        return rl_err_set(err, RL_ERR_INVALID, "chat context: not a JSON object");
    }
    if (!json_object_get(ctx, "bos_token"))
        json_object_set_new(ctx, "bos_token", json_string(v->bos_str));
    if (!json_object_get(ctx, "eos_token"))
        json_object_set_new(ctx, "eos_token", json_string(v->eos_str));
    char *s = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    if (!s) return rl_err_set(err, RL_ERR_NOMEM, "chat context: out of memory");
    rl_status st =
        rl_template_render_json(v->tmpl, v->tmpl_len, s, strlen(s), NULL, out, out_len, err);
    free(s);
    return st;
}

rl_status rl_chat_render(const rl_vocab *v, const rl_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, char **out, size_t *out_len, rl_err *err) {
    return rl_template_render(v->tmpl, v->tmpl_len, msgs, n_msgs, add_generation_prompt, v->bos_str,
                              v->eos_str, out, out_len, err);
}
