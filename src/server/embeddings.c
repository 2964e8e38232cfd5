/* POST /v1/embeddings (OpenAI's shape): one pooled, L2-normalised vector
 * per input, computed by the engine (rl_engine_embed: the step loop runs
 * each between generation steps).
 *
 * Request: input (required): a string, a list of strings, a token array or
 * a list of token arrays; encoding_format "float" (default) or "base64"
 * (little-endian float32 bytes); model and user (strings, not checked
 * against the served model, as for the other routes); dimensions (if given,
 * must equal the model's width: redline does not truncate).  Strings are
 * tokenized with the model's BOS/EOS rule ([CLS] ... [SEP] for WordPiece);
 * control tokens written in the text are not parsed.  Token arrays are used
 * as given.
 * Response: {object: "list", data: [{object: "embedding", index, embedding}],
 * model, usage: {prompt_tokens, total_tokens}}.
 * Errors (400, the field named): a missing, empty or mistyped input or
 * element (input[i]), token ids outside the vocabulary, an input longer
 * than the model embeds at once (context_length_exceeded), more than
 * RL_SRV_EMBD_MAX_INPUTS inputs, an unknown encoding_format.
 */
#include <stdio.h>
#include <string.h>

#include "server/server-impl.h"

#define RL_SRV_EMBD_MAX_INPUTS 2048

/* One input's token ids (owned). */
typedef struct embd_in {
    int32_t *ids;
    int32_t n;
} embd_in;

static bool fail_type(rl_oai_err *e) {
    return rl_oai_fail(e, 400, "input", "invalid_type",
                       "input: must be a string, an array of strings, an array of token ids or "
                       "an array of token-id arrays");
}

/* Tokens of input element v (a string or a token array) named `name`. */
static bool one_input(rl_srv *s, const json_t *v, const char *name, embd_in *out, rl_oai_err *e) {
    int32_t max = rl_engine_embed_max_tokens(s->eng);
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return rl_oai_fail(e, 400, name, "invalid_value", "%s: must not be empty", name);
        rl_err err = {0};
        rl_status st =
            rl_tokenize(s->vocab, json_string_value(v), json_string_length(v),
                        RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_ADD_EOS, &out->ids, &out->n, &err);
        if (st == RL_ERR_NOMEM) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        if (st == RL_ERR_LIMIT)
            return rl_oai_fail(e, 400, name, "context_length_exceeded", "%s: too many tokens",
                               name);
        if (st)
            return rl_oai_fail(e, 400, name, "invalid_value", "%s: cannot tokenize: %s", name,
                               err.msg);
        if (out->n == 0)
            return rl_oai_fail(e, 400, name, "invalid_value", "%s: has no tokens", name);
    } else if (json_is_array(v)) {
        /* the limit is checked below, with the model's own message */
        if (!rl_oai_token_array(v, name, s->n_vocab, 1 << 24, false, &out->ids, &out->n, e))
            return false;
    } else {
        return fail_type(e);
    }
    if (out->n > max)
        return rl_oai_fail(e, 400, name, "context_length_exceeded",
                           "%s: %d tokens exceed the %d this model embeds at once", name,
                           (int)out->n, (int)max);
    return true;
}

/* input -> ins[0..*n_in) (allocated). */
static bool parse_input(rl_srv *s, const json_t *input, embd_in **ins, size_t *n_in,
                        rl_oai_err *e) {
    *ins = NULL;
    *n_in = 0;
    if (!input || json_is_null(input))
        return rl_oai_fail(e, 400, "input", "missing_field", "input: is required");
    /* one input: a string, or a flat array of token ids */
    bool flat = json_is_string(input) || (json_is_array(input) && json_array_size(input) > 0 &&
                                          json_is_integer(json_array_get(input, 0)));
    if (!flat && !json_is_array(input)) return fail_type(e);
    size_t cnt = flat ? 1 : json_array_size(input);
    if (cnt == 0) return rl_oai_fail(e, 400, "input", "invalid_value", "input: must not be empty");
    if (cnt > RL_SRV_EMBD_MAX_INPUTS)
        return rl_oai_fail(e, 400, "input", "invalid_value",
                           "input: %zu inputs is more than the limit of %d", cnt,
                           RL_SRV_EMBD_MAX_INPUTS);
    embd_in *a = rl_calloc(cnt, sizeof *a);
    if (!a) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    *ins = a;
    *n_in = cnt;
    for (size_t i = 0; i < cnt; i++) {
        const json_t *v = flat ? input : json_array_get(input, i);
        char name[32];
        if (flat)
            snprintf(name, sizeof name, "input");
        else
            snprintf(name, sizeof name, "input[%zu]", i);
        /* a list holds strings or token arrays, not bare ids or objects */
        if (!flat && !json_is_string(v) && !json_is_array(v))
            return rl_oai_fail(e, 400, name, "invalid_type",
                               "%s: must be a string or an array of token ids", name);
        if (!one_input(s, v, name, &a[i], e)) return false;
    }
    return true;
}

static void free_inputs(embd_in *ins, size_t n) {
    for (size_t i = 0; i < n; i++) rl_free(ins[i].ids);
    rl_free(ins);
}

static json_t *base64_floats(const float *v, int32_t n) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = (size_t)n * 4;
    uint8_t *b = rl_malloc(len ? len : 1);
    char *out = rl_malloc((len + 2) / 3 * 4 + 1);
    json_t *j = NULL;
    if (b && out) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (uint8_t)(u >> (8 * k)); /* little endian */
        }
        size_t o = 0;
        for (size_t i = 0; i < len; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16;
            if (i + 1 < len) w |= (uint32_t)b[i + 1] << 8;
            if (i + 2 < len) w |= b[i + 2];
            out[o++] = tbl[(w >> 18) & 63];
            out[o++] = tbl[(w >> 12) & 63];
            out[o++] = i + 1 < len ? tbl[(w >> 6) & 63] : '=';
            out[o++] = i + 2 < len ? tbl[w & 63] : '=';
        }
        j = json_stringn(out, o);
    }
    rl_free(b);
    rl_free(out);
    return j;
}

enum MHD_Result rl_srv_embeddings(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    rl_oai_err e;
    json_t *root = rl_oai_parse_object(rq->body.p ? rq->body.p : "", rq->body.n, &e);
    if (!root) return rl_srv_reply_error(rq, &e);
    embd_in *ins = NULL;
    size_t n_in = 0;
    int32_t E = rl_engine_n_embd(s->eng);
    bool b64 = false, ok = true;
    const json_t *fmt = json_object_get(root, "encoding_format");
    const json_t *dims = json_object_get(root, "dimensions");
    const char *str_fields[] = {"model", "user"};
    for (size_t i = 0; ok && i < 2; i++) {
        const json_t *v = json_object_get(root, str_fields[i]);
        if (v && !json_is_null(v) && !json_is_string(v))
            ok = rl_oai_fail(&e, 400, str_fields[i], "invalid_type", "%s: must be a string",
                             str_fields[i]);
    }
    if (ok && fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        b64 = !strcmp(f, "base64");
        if (!b64 && strcmp(f, "float"))
            ok = rl_oai_fail(&e, 400, "encoding_format", "invalid_value",
                             "encoding_format: must be \"float\" or \"base64\"");
    }
    if (ok && dims && !json_is_null(dims) &&
        (!json_is_integer(dims) || json_integer_value(dims) != E))
        ok = rl_oai_fail(&e, 400, "dimensions", "invalid_value",
                         "dimensions: this model's embeddings have %d dimensions (no truncation)",
                         (int)E);
    if (ok) ok = parse_input(s, json_object_get(root, "input"), &ins, &n_in, &e);
    json_decref(root);
    float *vec = ok ? rl_malloc((size_t)E * sizeof *vec) : NULL;
    if (ok && !vec) ok = rl_oai_fail(&e, 500, NULL, NULL, "out of memory");
    json_t *data = ok ? json_array() : NULL;
    int64_t n_tok = 0;
    for (size_t i = 0; ok && i < n_in; i++) {
        rl_err err = {0};
        rl_status st = rl_engine_embed(s->eng, ins[i].ids, ins[i].n, vec, &err);
        if (st) {
            ok = rl_oai_fail(&e, st == RL_ERR_NOMEM ? 503 : 400, "input",
                             st == RL_ERR_LIMIT ? "context_length_exceeded" : "invalid_value",
                             "input[%zu]: %s", i, err.msg);
            break;
        }
        n_tok += ins[i].n;
        json_t *emb;
        if (b64) {
            emb = base64_floats(vec, E);
        } else {
            emb = json_array();
            for (int32_t d = 0; d < E; d++) json_array_append_new(emb, json_real(vec[d]));
        }
        json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", emb));
    }
    rl_free(vec);
    free_inputs(ins, n_in);
    if (!ok) {
        json_decref(data);
        return rl_srv_reply_error(rq, &e);
    }
    atomic_store(&rq->n_prompt, (int)n_tok);
    json_t *o = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                          s->model_id, "usage", "prompt_tokens", (json_int_t)n_tok, "total_tokens",
                          (json_int_t)n_tok);
    return rl_srv_reply_json(rq, 200, o);
}
