/* Helpers shared by the model tests (test_model.c, test_moe.c).  Linked
 * into every unit-test binary (every .c file in tests/unit/ without the
 * test_ prefix). */
#ifndef RL_MTEST_H
#define RL_MTEST_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/seqkv.h"
#include "model/model.h"

/* A batch of toks[0..n) run as two sequences interleaved token by token,
 * the whole batch in reverse order, every token wanting logits: token
 * i/2 of sequence i%2 at batch index 2n-1-i.  bt, bp, bs, want: [2n],
 * filled here; kv's block tables are borrowed. */
rl_batch mt_interleaved_batch(const int32_t *toks, int n, const rl_seqkv *kv, int32_t *bt,
                              int32_t *bp, int32_t *bs, bool *want);

/* Opens the in-memory GGUF buf[0..size) and loads it with o; the model in
 * *out (or NULL).  buf is borrowed: it must outlive the model. */
rl_status mt_load_memory(const void *buf, size_t size, const rl_model_opts *o, rl_model **out,
                         rl_err *err);

#endif
