/* Fill-in-the-middle prompts (server-impl.h, "fim"): `suffix` on
 * /v1/completions and llama-server's /infill, built with the model's FIM
 * tokens (rl_model_info.fim_*: the GGUF's fim_*_token_id keys, or the
 * vocabulary's <|fim_prefix|>, <fim-prefix>, <PRE>, ... spellings).
 *
 * Token order, as llama.cpp's server builds it (the repo-level pattern of
 * Qwen2.5-Coder, arXiv 2409.12186):
 *
 *   [extra] [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID
 *   extra (infill only) = FIM_REP "myproject\n"     (when the model has REP)
 *           per input_extra chunk: FIM_SEP filename "\n" text
 *                      (without SEP: "\n\n--- snippet ---\n\n" text)
 *           FIM_SEP "filename\n"                   (when the model has SEP)
 *
 * BOS only when the tokenizer adds one.  prefix, suffix and the chunks are
 * tokenized as plain text (a "<|fim_prefix|>" written in them stays text);
 * the infill `prompt` parses control tokens, as a completion prompt does.
 * Unlike llama.cpp, prefix and suffix are never cut to fit a batch: a
 * prompt that does not fit the context is a 400; only the extra context
 * is cut, from its front, to leave max_tokens (256 when not given) free.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"

/* Appends the tokens of p[0..n) (flags as rl_tokenize) to b. */
static bool put_text(rl_srv *s, rl_buf *b, const char *p, size_t n, unsigned flags,
                     const char *param, rl_oai_err *e) {
    if (n == 0) return true;
    int32_t *ids = NULL, k = 0;
    rl_err err = {0};
    rl_status st = rl_tokenize(s->vocab, p, n, flags, &ids, &k, &err);
    if (st == RL_ERR_NOMEM) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    if (st)
        return rl_oai_fail(e, 400, param, "invalid_value", "%s: cannot tokenize: %s", param,
                           err.msg);
    bool ok = !rl_buf_append(b, ids, (size_t)k * sizeof *ids);
    rl_free(ids);
    return ok ? true : rl_oai_fail(e, 500, NULL, NULL, "out of memory");
}

static bool put_id(rl_buf *b, int32_t id, rl_oai_err *e) {
    return !rl_buf_append(b, &id, sizeof id) || rl_oai_fail(e, 500, NULL, NULL, "out of memory");
}

bool rl_srv_fim_supported(rl_srv *s, const rl_oai_req *r, rl_oai_err *e) {
    rl_model_info mi;
    rl_vocab_model_info(s->vocab, &mi);
    const char *param = r->kind == RL_OAI_INFILL ? "input_suffix" : "suffix";
    if (mi.fim_pre < 0 || mi.fim_suf < 0 || mi.fim_mid < 0)
        return rl_oai_fail(e, 400, param, "not_supported",
                           "%s: this model has no fill-in-the-middle tokens (%s%s%smissing)", param,
                           mi.fim_pre < 0 ? "prefix " : "", mi.fim_suf < 0 ? "suffix " : "",
                           mi.fim_mid < 0 ? "middle " : "");
    return true;
}

bool rl_srv_fim_prompt(rl_srv *s, const rl_oai_req *r, int32_t **ids, int32_t *n, rl_oai_err *e) {
    *ids = NULL;
    *n = 0;
    if (!rl_srv_fim_supported(s, r, e)) return false;
    rl_model_info mi;
    rl_vocab_model_info(s->vocab, &mi);
    rl_buf extra = {0}, core = {0};
    bool ok = true;
    if (r->kind == RL_OAI_INFILL) {
        if (mi.fim_rep >= 0)
            ok = put_id(&extra, mi.fim_rep, e) &&
                 put_text(s, &extra, "myproject\n", 10, 0, "input_extra", e);
        for (size_t i = 0; ok && r->fim_extra && i < json_array_size(r->fim_extra); i++) {
            json_t *c = json_array_get(r->fim_extra, i);
            json_t *t = json_object_get(c, "text"), *f = json_object_get(c, "filename");
            if (mi.fim_sep >= 0) {
                rl_buf fn = {0};
                ok = !rl_buf_printf(&fn, "%s\n", json_is_string(f) ? json_string_value(f) : "tmp");
                ok = ok ? put_id(&extra, mi.fim_sep, e) &&
                              put_text(s, &extra, fn.p, fn.n, 0, "input_extra", e)
                        : rl_oai_fail(e, 500, NULL, NULL, "out of memory");
                rl_buf_free(&fn);
            } else {
                static const char snip[] = "\n\n--- snippet ---\n\n";
                ok = put_text(s, &extra, snip, sizeof snip - 1, 0, "input_extra", e);
            }
            ok = ok && put_text(s, &extra, json_string_value(t), json_string_length(t), 0,
                                "input_extra", e);
        }
    }
    if (ok && r->kind == RL_OAI_INFILL && mi.fim_sep >= 0)
        ok = put_id(&extra, mi.fim_sep, e) &&
             put_text(s, &extra, "filename\n", 9, 0, "input_extra", e);
    const char *pp = r->kind == RL_OAI_INFILL ? "input_prefix" : "prompt";
    const char *sp = r->kind == RL_OAI_INFILL ? "input_suffix" : "suffix";
    if (ok && mi.add_bos && mi.bos >= 0) ok = put_id(&core, mi.bos, e);
    ok = ok && put_id(&core, mi.fim_pre, e) &&
         put_text(s, &core, r->fim_prefix, r->fim_prefix_len, 0, pp, e) &&
         put_text(s, &core, r->fim_middle, r->fim_middle_len, RL_TOKENIZE_PARSE_SPECIAL, "prompt",
                  e) &&
         put_id(&core, mi.fim_suf, e) &&
         put_text(s, &core, r->fim_suffix, r->fim_suffix_len, 0, sp, e) &&
         put_id(&core, mi.fim_mid, e);
    if (ok) {
        /* the extra context fills what the core and the output leave */
        int64_t n_core = (int64_t)(core.n / sizeof(int32_t)), n_x = extra.n / sizeof(int32_t);
        int64_t reserve = r->max_tokens > 0 ? r->max_tokens : 256;
        int64_t room = (int64_t)s->n_ctx - n_core - reserve;
        int64_t take = n_x < room ? n_x : room > 0 ? room : 0;
        int32_t *out = rl_malloc((size_t)(take + n_core) * sizeof *out + 1);
        if (!out) {
            ok = rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        } else {
            if (take) memcpy(out, extra.p + (n_x - take) * sizeof(int32_t), (size_t)take * 4);
            memcpy(out + take, core.p, core.n);
            *ids = out;
            *n = (int32_t)(take + n_core);
        }
    }
    rl_buf_free(&extra);
    rl_buf_free(&core);
    return ok;
}
