/* Helpers shared by the model tests (see mtest.h). */
#include "mtest.h"

#include "gguf/gguf.h"

rl_batch mt_interleaved_batch(const int32_t *toks, int n, const rl_seqkv *kv, int32_t *bt,
                              int32_t *bp, int32_t *bs, bool *want) {
    for (int i = 0; i < 2 * n; i++) {
        int j = 2 * n - 1 - i;
        bt[j] = toks[i / 2];
        bp[j] = i / 2;
        bs[j] = i % 2;
        want[j] = true;
    }
    rl_batch b = {.n_tok = 2 * n,
                  .token = bt,
                  .pos = bp,
                  .seq = bs,
                  .want_logits = want,
                  .n_seq = 2,
                  .block_tables = kv->tables,
                  .n_blocks = kv->n_blocks};
    return b;
}

rl_status mt_load_memory(const void *buf, size_t size, const rl_model_opts *o, rl_model **out,
                         rl_err *err) {
    rl_gguf *g = NULL;
    rl_status st = rl_gguf_open_memory(buf, size, &g, err);
    if (st) return st;
    return rl_model_load_gguf(g, o, out, err);
}
