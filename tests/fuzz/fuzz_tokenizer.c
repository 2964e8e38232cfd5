/* libFuzzer target for the tokenizer: encode arbitrary bytes (with and
 * without special-token parsing) with the default model's vocabulary, check
 * that decoding the ids gives back valid UTF-8, and push arbitrary ids
 * through the streaming detokenizer.  The vocabulary is loaded once from
 * $REDLINE_FUZZ_MODEL (default models/smollm2-135m.gguf). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static rl_gguf *g;
static rl_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("REDLINE_FUZZ_MODEL");
    if (!path) path = "models/smollm2-135m.gguf";
    rl_err err;
    if (rl_gguf_open(path, &g, &err) || rl_tokenizer_load(g, &tok, &err)) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    unsigned flags =
        (data[0] & 1 ? RL_TOK_PARSE_SPECIAL : 0) | (data[0] & 2 ? RL_TOK_ADD_SPECIAL : 0);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    rl_err err;
    if (rl_tokenizer_encode(tok, text, len, flags, &ids, &n, &err) == RL_OK) {
        char *out = NULL;
        size_t out_len = 0;
        if (rl_tokenizer_decode(tok, ids, n, 0, &out, &out_len, &err) == RL_OK) {
            /* decoding is byte-exact: valid text must come back valid */
            if (rl_utf8_valid(text, len) && !rl_utf8_valid(out, out_len)) abort();
            rl_free(out);
        }
        rl_free(ids);
    }
    /* arbitrary ids, in range or not, through the streaming detokenizer */
    rl_detok d;
    rl_detok_init(&d, tok, data[0] & 4 ? RL_TOK_SKIP_SPECIAL : 0);
    for (size_t i = 0; i + 4 <= size; i += 4) {
        int32_t id;
        memcpy(&id, data + i, 4);
        rl_detok_push(&d, id % (rl_tokenizer_n_vocab(tok) + 8), NULL, &err);
    }
    rl_detok_flush(&d, NULL, &err);
    if (!rl_utf8_valid(d.buf, d.len)) abort();
    rl_detok_free(&d);
    return 0;
}
