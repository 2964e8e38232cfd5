/* redline public API: an inference engine that runs many requests at once
 * (continuous batching over a paged, prefix-shared KV cache), plus the text
 * side of a model (tokenizer, detokenizer, chat template, model facts).
 *
 * Self-contained: compiles with -Iinclude alone (it includes only
 * redline-types.h and standard headers).  Link with librl.a and
 * -lm -lpthread -lpcre2-8 -ljansson -lnettle; examples/embed.c is a
 * complete program.
 *
 * Typical use:
 *   rl_err err;
 *   rl_engine_params ep;  rl_engine_params_default(&ep);  ep.model_path = "m.gguf";
 *   rl_engine *e;  rl_engine_new(&ep, &e, &err);
 *   rl_vocab *v;  rl_engine_vocab(e, &v, &err);   // tokenizer + chat template
 *   rl_chat_msg msg = {"user", "Hello"};
 *   char *text;  size_t len;  rl_chat_render(v, &msg, 1, true, &text, &len, &err);
 *   int32_t *ids, n;  rl_tokenize(v, text, len, RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_PARSE_SPECIAL,
 *                                 &ids, &n, &err);
 *   rl_engine_start(e, &err);                 // step loop on its own thread (or call
 *                                             // rl_engine_step yourself)
 *   rl_gen_params gp;  rl_gen_params_default(&gp);  gp.max_tokens = 64;
 *   uint64_t id;  rl_engine_submit(e, ids, n, &gp, &id, &err);
 *   rl_event ev;
 *   while (rl_engine_next(e, id, &ev, -1) == RL_OK) {
 *       fwrite(ev.text, 1, ev.text_len, stdout);
 *       if (ev.kind == RL_EV_DONE) break;
 *   }
 *   rl_free(ids);  rl_free(text);  rl_vocab_free(v);  rl_engine_free(e);
 *
 * Every function is thread-safe unless noted.  Ownership: arrays passed in
 * are copied; the engine owns its requests until their DONE event has been
 * taken with rl_engine_next; buffers the library hands out are freed with
 * rl_free.
 */
#ifndef REDLINE_H
#define REDLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redline-types.h" /* rl_status, rl_err, rl_sample_params, rl_chat_msg, rl_free */

typedef struct rl_engine rl_engine;
typedef struct rl_grammar rl_grammar; /* a compiled output constraint (rl_gen_grammar_new) */

typedef struct rl_engine_params {
    const char *model_path;
    int32_t n_threads;        /* 0 = one per core */
    size_t kv_mem_bytes;      /* KV budget; 0 = n_ctx * max(4, max_seqs/4) tokens'
                                 worth, raised toward n_ctx * max_seqs up to 512 MiB */
    int32_t block_size;       /* tokens per KV block (16) */
    int32_t max_batch_tokens; /* token budget per step (256) */
    int32_t max_seqs;         /* concurrently running sequences (32) */
    int32_t n_ctx;            /* max tokens of one sequence; 0 = min(train context, 4096) */
    int32_t max_waiting;      /* queued requests beyond which submit says RL_ERR_LIMIT (1024) */
    bool prefix_cache;        /* reuse cached prompt prefixes (true) */
    bool chunked_prefill;     /* split long prompts across steps (true) */
    bool naive;               /* baseline: full-length KV reservation + static batches */
    const char *cache_type_k; /* K cache pages: "f16" (default), "f32", "q8_0", "q8_64",
                                 "q4_0" or "iq4_nl" (quantized types: docs/KVQUANT.md) */
    const char *cache_type_v; /* V cache pages: the same six types */
    /* speculative decoding */
    const char *draft_model_path; /* same-vocabulary draft model (NULL = none) */
    int32_t draft_max;            /* most draft tokens per sequence per step (5) */
    int32_t draft_n_vocab;        /* draft head restricted to token ids [0, N) (32768;
                                     0 = all) */
    int32_t spec_max_batch;       /* speculate only while at most this many sequences
                                     decode at once (4); within it a cost model of
                                     measured step times picks the draft length */
    bool draft_fixed;             /* always draft draft_max tokens (no cost model; for
                                     benchmarks) */
    int32_t ngram_min, ngram_max; /* n-gram lookup lengths (1, 3) */
    /* baselines for the technique table (bench/ablation) */
    int32_t weights; /* rl_model_weights: 0 = as stored (default), 1 = f32, 2 = f16 dequantized */
    bool static_batches; /* admit new sequences only when none runs (naive implies it) */
} rl_engine_params;

void rl_engine_params_default(rl_engine_params *p);

#define RL_MAX_STOP     4
#define RL_MAX_STOP_LEN 64

typedef enum rl_spec_mode {
    RL_SPEC_NONE = 0,
    RL_SPEC_NGRAM = 1, /* prompt lookup: no second model */
    RL_SPEC_DRAFT = 2, /* the engine's draft model */
} rl_spec_mode;

typedef struct rl_gen_params {
    rl_sample_params sample;
    rl_spec_mode spec;   /* speculative decoding for this request (NONE) */
    int32_t max_tokens;  /* new tokens at most; <= 0 = until the context is full */
    int32_t priority;    /* higher is scheduled first (0) */
    uint64_t cache_salt; /* per-tenant prefix-cache salt (0 = shared) */
    bool ignore_eos;     /* keep going past end-of-generation tokens */
    int32_t n_stop;
    char stop[RL_MAX_STOP][RL_MAX_STOP_LEN + 1]; /* stop strings (not included in output) */
    /* Structured output: a compiled grammar (rl_gen_grammar_new, e.g. from
     * a JSON schema) that every generated token must keep valid; the engine
     * retains its own reference.  NULL = unconstrained. */
    rl_grammar *grammar;
    /* Reasoning budget, on when think_close is non-empty: once think_budget
     * tokens (0 = none) have been generated inside the think block, the
     * engine writes think_close (e.g. "\n</think>\n\n") into the output as
     * if sampled and goes on with the answer.  The block is open from the
     * first token when think_open (the prompt opened it), else from a
     * "<think>" within the first 16 generated tokens; a "</think>" the
     * model writes itself ends it.  Not forced while a grammar constrains
     * the output (a lazy grammar that has not triggered does not). */
    int32_t think_budget;
    bool think_open;
    char think_close[RL_MAX_STOP_LEN + 1];
} rl_gen_params;

void rl_gen_params_default(rl_gen_params *p);

typedef enum rl_event_kind {
    RL_EV_TOKEN = 1, /* a generated token and/or text */
    RL_EV_DONE = 2,  /* final event of a request */
} rl_event_kind;

typedef enum rl_finish_reason {
    RL_FINISH_NONE = 0,
    RL_FINISH_STOP = 1,   /* end-of-generation token or stop string */
    RL_FINISH_LENGTH = 2, /* max_tokens or the context limit */
    RL_FINISH_CANCELLED = 3,
    RL_FINISH_ERROR = 4,
} rl_finish_reason;

#define RL_EV_TEXT_MAX 256
#define RL_EV_MAX_TOP  20

typedef struct rl_event {
    rl_event_kind kind;
    int32_t token; /* -1 when the event carries only text */
    float logprob;
    int32_t n_top;
    int32_t top_id[RL_EV_MAX_TOP];
    float top_logprob[RL_EV_MAX_TOP];
    int32_t text_len;
    char text[RL_EV_TEXT_MAX]; /* UTF-8, not NUL-terminated past text_len */
    /* DONE only: */
    rl_finish_reason finish;
    int32_t n_prompt, n_cached, n_generated;
    double t_first_token_s, t_total_s; /* since submit */
    rl_status error_code;              /* ERROR: RL_ERR_LIMIT = the request's own grammar
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
    uint64_t live_tokens; /* tokens with K/V stored, over running requests */
    uint64_t prompt_tokens, generation_tokens, cached_prompt_tokens;
    uint64_t prefix_queries, prefix_hits; /* blocks */
    uint64_t preemptions, steps, requests_finished;
    uint64_t spec_proposed, spec_accepted, spec_verifies; /* draft tokens, per verification */
    uint64_t grammar_forced; /* tokens proposed by grammar jump-forward */
    double busy_s;           /* time spent in steps */
} rl_engine_stats;

rl_engine_stats rl_engine_get_stats(rl_engine *e);

/* The context length of one sequence (rl_engine_params.n_ctx resolved). */
int32_t rl_engine_n_ctx(const rl_engine *e);

/* ---- embeddings ----
 * rl_engine_embed: the embedding of tokens[0..n) into out[rl_engine_n_embd]:
 * the model's final hidden states (a decoder's after its output norm)
 * pooled by the GGUF's <arch>.pooling_type (mean when absent; "cls" = the
 * first token, "last" = the last), L2-normalised.  Thread-safe; blocks
 * until done.  With the step thread running, the job is queued and the
 * step loop runs it between generation steps (its own forward, on KV blocks
 * borrowed from the pool; not batched with generated tokens); without it
 * the call runs in the caller's thread (do not step concurrently).
 * Errors: RL_ERR_RANGE for an empty input or a token id outside the
 * vocabulary, RL_ERR_LIMIT beyond rl_engine_embed_max_tokens (the message
 * names "input"). */
rl_status rl_engine_embed(rl_engine *e, const int32_t *tokens, int32_t n, float *out, rl_err *err);
int32_t rl_engine_n_embd(const rl_engine *e);
/* Longest input rl_engine_embed takes: the context for a causal model;
 * bert: min(max_batch_tokens, its trained context) (one forward). */
int32_t rl_engine_embed_max_tokens(const rl_engine *e);
/* "mean", "cls" or "last" (static string). */
const char *rl_engine_pooling(const rl_engine *e);
/* False for an embedding-only model (bert): rl_engine_submit refuses it. */
bool rl_engine_can_generate(const rl_engine *e);

/* ---- structured output ---- */

typedef enum rl_grammar_syntax {
    RL_GRAMMAR_GBNF = 1, /* a GBNF-like grammar whose start rule is `root` (docs/STRUCTURED.md) */
    RL_GRAMMAR_JSON_SCHEMA = 2, /* a JSON Schema object (the subset docs/STRUCTURED.md lists) */
} rl_grammar_syntax;

/* Compiles text[0..len) into a grammar for rl_gen_params.grammar.  NULL on
 * error with err naming the problem (line and column for GBNF, the schema
 * path for JSON Schema).  Immutable and reference-counted: one grammar may
 * serve any number of requests; the caller frees its reference with
 * rl_gen_grammar_free (the engine keeps its own while a request runs). */
rl_grammar *rl_gen_grammar_new(rl_grammar_syntax syntax, const char *text, size_t len, rl_err *err);
void rl_gen_grammar_free(rl_grammar *g); /* NULL is a no-op */

/* ---- the text side of a model: rl_vocab ----
 *
 * An rl_vocab is a model's tokenizer, its chat template and its facts.  It
 * comes either from a running engine (rl_engine_vocab: shares the engine's
 * tokenizer) or straight from a file without an engine (rl_vocab_load:
 * maps and validates the file and reads its tokenizer; no weight is read
 * and no KV cache is allocated, so tokenize-only programs stay cheap).
 * Immutable once made: every function below may be called from any number
 * of threads at once.
 *
 * The chat template is the file's tokenizer.chat_template or, when the file
 * has none, a built-in one chosen by architecture (gemma* -> "gemma", any
 * other -> "chatml"); the server and `redline run` both use this choice. */
typedef struct rl_vocab rl_vocab;

/* Opens a model file for its vocabulary only.  *out is NULL on error.
 * Free with rl_vocab_free. */
rl_status rl_vocab_load(const char *model_path, rl_vocab **out, rl_err *err);
/* A vocabulary over e's model.  It borrows the engine's tokenizer: use it
 * only while e lives (rl_vocab_free may come before or after
 * rl_engine_free).  *out is NULL on error (out of memory). */
rl_status rl_engine_vocab(rl_engine *e, rl_vocab **out, rl_err *err);
void rl_vocab_free(rl_vocab *v); /* NULL is a no-op */

#define RL_MAX_EOG        16
#define RL_MODEL_NAME_MAX 128

/* What a model file says about itself. */
typedef struct rl_model_info {
    char name[RL_MODEL_NAME_MAX]; /* general.name; "" when absent */
    char arch[32];                /* general.architecture, e.g. "llama", "qwen3", "gemma2" */
    int32_t n_vocab;              /* token ids are [0, n_vocab) */
    int32_t n_ctx_train;          /* trained context length */
    int32_t n_layer, n_embd, n_head, n_kv_head, head_dim;
    int32_t bos, eos, eot, pad, unk; /* special token ids; -1 = none */
    bool add_bos, add_eos;           /* the tokenizer's metadata asks for BOS / EOS */
    int32_t n_eog;                   /* end-of-generation tokens (eos, eot, <|im_end|>, ...) */
    int32_t eog[RL_MAX_EOG];         /* the first min(n_eog, RL_MAX_EOG) of them, ascending */
    bool has_chat_template;          /* the file carries tokenizer.chat_template */
    char chat_template[16];          /* the template rl_chat_render uses: "model" (the
                                        file's), or the built-in "chatml" / "gemma" */
    /* fill-in-the-middle tokens (-1 = none): the file's fim_*_token_id keys,
     * else the vocabulary's <|fim_prefix|>, <fim-prefix>, <PRE>, ... */
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
} rl_model_info;

void rl_vocab_model_info(const rl_vocab *v, rl_model_info *out);

/* rl_tokenize flags */
#define RL_TOKENIZE_ADD_BOS                                                                        \
    1u /* prepend BOS when the model adds one and the text                                         \
          does not already start with it */
#define RL_TOKENIZE_PARSE_SPECIAL                                                                  \
    2u /* text that spells a control token ("<|im_start|>")                                        \
          becomes that token (templates write them) */
#define RL_TOKENIZE_ADD_EOS                                                                        \
    4u /* append EOS when the model adds one (WordPiece:                                           \
          [SEP]) and the text does not already end with it */
/* rl_detokenize / rl_detokenizer_new flags */
#define RL_DETOKENIZE_SKIP_SPECIAL 1u /* render control tokens as nothing */

/* Text (any bytes; invalid UTF-8 is encoded byte-wise) -> token ids.  *ids
 * is allocated (rl_free; NULL when *n == 0).  RL_ERR_LIMIT when the text
 * would need more than INT32_MAX / 2 tokens. */
rl_status rl_tokenize(const rl_vocab *v, const char *text, size_t len, unsigned flags,
                      int32_t **ids, int32_t *n, rl_err *err);
/* Token ids -> NUL-terminated valid UTF-8 (bytes that never form a valid
 * sequence become U+FFFD).  *out allocated (rl_free).  RL_ERR_RANGE naming
 * the position when an id is outside [0, n_vocab). */
rl_status rl_detokenize(const rl_vocab *v, const int32_t *ids, size_t n, unsigned flags, char **out,
                        size_t *out_len, rl_err *err);
/* The raw bytes of one token (may be part of a UTF-8 character; control
 * tokens as their text).  Borrowed until rl_vocab_free; NULL with *len = 0
 * when id is out of range. */
const char *rl_token_piece(const rl_vocab *v, int32_t id, size_t *len);
/* True when id ends a generation (false for ids out of range). */
bool rl_token_is_eog(const rl_vocab *v, int32_t id);

/* Streaming detokenizer: push token ids one at a time, get back only
 * complete, valid UTF-8 (a character split across tokens is held until it
 * is complete).  One per stream; not thread-safe.  Borrows v. */
typedef struct rl_detokenizer rl_detokenizer;
rl_status rl_detokenizer_new(const rl_vocab *v, unsigned flags, rl_detokenizer **out, rl_err *err);
/* Appends the text of token id; *text / *len get the bytes that became
 * ready (borrowed until the next call on d; *len may be 0). */
rl_status rl_detokenizer_push(rl_detokenizer *d, int32_t id, const char **text, size_t *len,
                              rl_err *err);
/* Ends the stream: a held incomplete character becomes U+FFFD.  Same
 * output convention as push; d may be pushed to again afterwards. */
rl_status rl_detokenizer_flush(rl_detokenizer *d, const char **text, size_t *len, rl_err *err);
void rl_detokenizer_free(rl_detokenizer *d); /* NULL is a no-op */

/* Renders messages through the model's chat template (see rl_vocab above)
 * as Hugging Face's apply_chat_template does, with the model's BOS and EOS
 * strings; add_generation_prompt opens the assistant's turn.  *out is
 * NUL-terminated, *out_len bytes (rl_free).  Template errors (an
 * unsupported construct, a raise_exception of the template, its step or
 * memory bounds) are returned with the template's line and column. */
rl_status rl_chat_render(const rl_vocab *v, const rl_chat_msg *msgs, size_t n_msgs,
                         bool add_generation_prompt, char **out, size_t *out_len, rl_err *err);

/* The chat template's source (see rl_vocab above), *len bytes; borrowed
 * until rl_vocab_free. */
const char *rl_vocab_chat_template(const rl_vocab *v, size_t *len);
/* Renders the chat template over a whole context: every key of the JSON
 * object ctx_json[0..len) is a template variable ({"messages": [...],
 * "tools": [...], "add_generation_prompt": true, "enable_thinking": false,
 * ...}), so messages may carry tool_calls; bos_token and eos_token are the
 * model's unless given.  Output and errors as rl_chat_render. */
rl_status rl_chat_render_json(const rl_vocab *v, const char *ctx_json, size_t len, char **out,
                              size_t *out_len, rl_err *err);

#endif
