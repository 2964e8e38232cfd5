/* redline public API: an inference engine that runs many requests at once
 * (continuous batching over a paged, prefix-shared KV cache).
 *
 * Typical use:
 *   rl_engine_params ep;  rl_engine_params_default(&ep);  ep.model_path = "m.gguf";
 *   rl_engine *e;  rl_engine_new(&ep, &e, &err);
 *   rl_engine_start(e);                       // step loop on its own thread
 *   rl_gen_params gp;  rl_gen_params_default(&gp);  gp.max_tokens = 64;
 *   uint64_t id;  rl_engine_submit(e, prompt_ids, n, &gp, &id, &err);
 *   rl_event ev;
 *   while (rl_engine_next(e, id, &ev, -1) == RL_OK && ev.kind != RL_EV_DONE) ...
 *   rl_engine_free(e);
 *
 * Every function is thread-safe unless noted.  Ownership: arrays passed in
 * are copied; the engine owns its requests until their DONE event has been
 * taken with rl_engine_next.
 */
#ifndef REDLINE_H
#define REDLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"        /* rl_status, rl_err */
#include "sample/sample.h"    /* rl_sample_params */

typedef struct rl_engine rl_engine;
struct rl_model;
struct rl_tokenizer;
struct rl_grammar;

typedef struct rl_engine_params {
    const char *model_path;
    int32_t n_threads;        /* 0 = one per core */
    size_t kv_mem_bytes;      /* KV budget; 0 = n_ctx * max(4, max_seqs/4) tokens' worth */
    int32_t block_size;       /* tokens per KV block (16) */
    int32_t max_batch_tokens; /* token budget per step (256) */
    int32_t max_seqs;         /* concurrently running sequences (32) */
    int32_t n_ctx;            /* max tokens of one sequence; 0 = min(train context, 4096) */
    int32_t max_waiting;      /* queued requests beyond which submit says RL_ERR_LIMIT (1024) */
    bool prefix_cache;        /* reuse cached prompt prefixes (true) */
    bool chunked_prefill;     /* split long prompts across steps (true) */
    bool naive;               /* baseline: full-length KV reservation + static batches */
    const char *cache_type_k; /* "f16" (default) or "f32" */
    const char *cache_type_v;
    /* speculative decoding */
    const char *draft_model_path; /* same-vocabulary draft model (NULL = none) */
    int32_t draft_max;        /* most draft tokens per sequence per step (5) */
    int32_t draft_n_vocab;    /* draft head restricted to token ids [0, N) (32768;
                                 0 = all) */
    int32_t spec_max_batch;   /* speculate only while at most this many sequences
                                 decode at once (4); within it a cost model of
                                 measured step times picks the draft length */
    bool draft_fixed;         /* always draft draft_max tokens (no cost model; for
                                 benchmarks) */
    int32_t ngram_min, ngram_max; /* n-gram lookup lengths (1, 3) */
    /* baselines for `redline bench ablation` */
    int32_t weights;          /* rl_model_weights: 0 = as stored (default), 1 = f32, 2 = f16 dequantized */
    bool static_batches;      /* admit new sequences only when none runs (naive implies it) */
} rl_engine_params;

void rl_engine_params_default(rl_engine_params *p);

#define RL_MAX_STOP 4
#define RL_MAX_STOP_LEN 64

typedef enum rl_spec_mode {
    RL_SPEC_NONE = 0,
    RL_SPEC_NGRAM = 1, /* prompt lookup: no second model */
    RL_SPEC_DRAFT = 2, /* the engine's draft model */
} rl_spec_mode;

typedef struct rl_gen_params {
    rl_sample_params sample;
    rl_spec_mode spec;        /* speculative decoding for this request (NONE) */
    int32_t max_tokens;       /* new tokens at most; <= 0 = until the context is full */
    int32_t priority;         /* higher is scheduled first (0) */
    uint64_t cache_salt;      /* per-tenant prefix-cache salt (0 = shared) */
    bool ignore_eos;          /* keep going past end-of-generation tokens */
    int32_t n_stop;
    char stop[RL_MAX_STOP][RL_MAX_STOP_LEN + 1]; /* stop strings (not included in output) */
    /* Structured output: a compiled grammar (src/grammar/grammar.h, e.g.
     * from a JSON schema) that every generated token must keep valid; the
     * engine retains its own reference.  NULL = unconstrained. */
    struct rl_grammar *grammar;
} rl_gen_params;

void rl_gen_params_default(rl_gen_params *p);

typedef enum rl_event_kind {
    RL_EV_TOKEN = 1, /* a generated token and/or text */
    RL_EV_DONE = 2,  /* final event of a request */
} rl_event_kind;

typedef enum rl_finish_reason {
    RL_FINISH_NONE = 0,
    RL_FINISH_STOP = 1,      /* end-of-generation token or stop string */
    RL_FINISH_LENGTH = 2,    /* max_tokens or the context limit */
    RL_FINISH_CANCELLED = 3,
    RL_FINISH_ERROR = 4,
} rl_finish_reason;

#define RL_EV_TEXT_MAX 256
#define RL_EV_MAX_TOP 20

typedef struct rl_event {
    rl_event_kind kind;
    int32_t token;                /* -1 when the event carries only text */
    float logprob;
    int32_t n_top;
    int32_t top_id[RL_EV_MAX_TOP];
    float top_logprob[RL_EV_MAX_TOP];
    int32_t text_len;
    char text[RL_EV_TEXT_MAX];    /* UTF-8, not NUL-terminated past text_len */
    /* DONE only: */
    rl_finish_reason finish;
    int32_t n_prompt, n_cached, n_generated;
    double t_first_token_s, t_total_s; /* since submit */
    rl_status error_code;         /* ERROR: RL_ERR_LIMIT = the request's own grammar
                                     or parameters exceed a bound (a client error) */
    char error[160];
} rl_event;

/* Loads the model and tokenizer, sizes the KV pool.  Does not start the
 * step thread. */
rl_status rl_engine_new(const rl_engine_params *p, rl_engine **out, rl_err *err);
/* Stops the thread (if any), cancels what is left, frees everything. */
void rl_engine_free(rl_engine *e);
/* Runs the step loop on a new thread until rl_engine_free. */
rl_status rl_engine_start(rl_engine *e, rl_err *err);
/* One step in the caller's thread (for embedding without threads and for
 * offline benchmarks); do not mix with rl_engine_start.  Returns the number
 * of tokens computed (0 = nothing to do). */
int32_t rl_engine_step(rl_engine *e);

/* Queues a request: prompt tokens are copied.  Errors (nothing queued):
 * RL_ERR_INVALID for bad sampling parameters (the message names the
 * field), RL_ERR_RANGE for token ids out of range or an empty prompt,
 * RL_ERR_LIMIT for a prompt that can never fit (the context or the KV
 * pool) or a full queue. */
rl_status rl_engine_submit(rl_engine *e, const int32_t *prompt, int32_t n_prompt,
                           const rl_gen_params *gp, uint64_t *id, rl_err *err);
/* Cancels a request at any point; its DONE event (CANCELLED) follows and
 * its KV blocks return to the pool within one step. */
void rl_engine_cancel(rl_engine *e, uint64_t id);
/* Takes the next event of request id, waiting up to timeout_ms (< 0 =
 * forever).  RL_ERR_LIMIT on timeout, RL_ERR_NOT_FOUND for an unknown id.
 * After the DONE event is taken the id is forgotten. */
rl_status rl_engine_next(rl_engine *e, uint64_t id, rl_event *ev, int timeout_ms);

typedef struct rl_engine_stats {
    int32_t n_running, n_waiting;
    int32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached;
    int32_t block_size;
    size_t kv_bytes_per_token;
    uint64_t live_tokens;          /* tokens with K/V stored, over running requests */
    uint64_t prompt_tokens, generation_tokens, cached_prompt_tokens;
    uint64_t prefix_queries, prefix_hits; /* blocks */
    uint64_t preemptions, steps, requests_finished;
    uint64_t spec_proposed, spec_accepted, spec_verifies; /* draft tokens, per verification */
    uint64_t grammar_forced;       /* tokens proposed by grammar jump-forward */
    double busy_s;                 /* time spent in steps */
} rl_engine_stats;

rl_engine_stats rl_engine_get_stats(rl_engine *e);

/* The loaded model and tokenizer (borrowed until rl_engine_free) for
 * callers that tokenize, render templates or inspect hyperparameters. */
struct rl_model *rl_engine_model(rl_engine *e);
const struct rl_tokenizer *rl_engine_tokenizer(rl_engine *e);
int32_t rl_engine_n_ctx(const rl_engine *e);

#endif
