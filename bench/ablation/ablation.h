/* bench/ablation: shared declarations of ablation.c (options, workload,
 * orchestration, report) and ablation_run.c (what one forked child does:
 * one configuration through the engine, and the quality pass over the
 * fixed text).  A benchmark program over librl, so it may use the
 * library's internal headers.
 *
 * Each configuration runs in a fresh child process (fork) so that its peak
 * RSS (VmHWM) is its own; the child writes its figures into a MAP_SHARED
 * region the parent allocated before the fork.  The parent never loads a
 * model: it holds only the tokenizer, the workload and the reference
 * distribution, so what a child inherits is small and reported (VmRSS at
 * the child's start).
 */
#ifndef RL_BENCH_ABLATION_H
#define RL_BENCH_ABLATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redline.h"
#include "tensor/tensor.h"

#define AB_K 32 /* top-k buckets of the reference distribution (bucketed KL) */

/* One request of the fixed workload. */
typedef enum ab_kind { AB_CHAT = 0, AB_CODE = 1, AB_SUMM = 2, AB_JSON = 3 } ab_kind;

typedef struct ab_req {
    int32_t *prompt; /* [n_prompt], owned by the parent */
    int32_t n_prompt, out_len;
    ab_kind kind;
} ab_req;

/* One configuration (a row of the table). */
typedef struct ab_cfg {
    const char *name;
    const char *what; /* one-line definition for the docs */
    int32_t weights;  /* rl_model_weights */
    bool naive, static_batches, chunked, prefix, spec, grammar;
    const char *kt, *vt;
    int base; /* row whose greedy outputs this row is compared with (-1: none) */
} ab_cfg;

/* Per-token record of the reference (f32 weights, f32 KV) distribution. */
typedef struct ab_qrec {
    int32_t target;
    int32_t top_id[AB_K];
    float top_lp[AB_K];
    float target_lp;
} ab_qrec;

/* What a child writes back (in shared memory). */
typedef struct ab_res {
    int ok; /* 1 = ran; 0 = see err */
    char err[240];
    double dur_s, tok_s, ttft_p50, ttft_p99, tpot_p50, tpot_p99;
    int64_t out_tokens, prompt_tokens, cached_tokens;
    uint64_t spec_proposed, spec_accepted, preemptions, grammar_forced;
    int32_t peak_running, n_failed;
    size_t weight_bytes, kv_pool_bytes, kv_peak_bytes, kv_bytes_per_token;
    long rss_start_kb, rss_peak_kb;
    /* quality (only when asked) */
    int q_ok;
    char q_err[160];
    double ppl, kl, top1;
    int64_t q_tokens;
} ab_res;

typedef struct ab_opts {
    const char *model, *draft, *text, *code, *qtext, *all_kv;
    int32_t n_req, conc, prompt_len, output_len, shared, runs, qtokens, qctx, n_ctx, threads, batch;
    uint64_t seed;
    bool json, tiny, break_quality;
    bool rows[10]; /* rows to run (--rows) */
} ab_opts;

/* Shared-memory view a child fills. */
typedef struct ab_slot {
    ab_res *res;
    int32_t *toks;  /* [n_req][out_max] generated ids */
    int32_t *n_tok; /* [n_req] */
    int32_t out_max;
} ab_slot;

/* Child: runs configuration c over the workload (closed loop, `conc`
 * clients) and, when `ref` is non-NULL, the quality pass against it.
 * Fills slot; never exits the process itself. */
void rl__ab_run_config(const ab_opts *o, const ab_cfg *c, const ab_req *reqs, const char *schema,
                       const int32_t *qids, int32_t n_qids, const ab_qrec *ref, int32_t n_ref,
                       ab_slot *slot);
/* Child: computes the reference records (f32 weights, f32 KV) into out
 * [n_ref]; returns 0 or -1 with msg. */
int rl__ab_reference(const ab_opts *o, const int32_t *qids, int32_t n_qids, ab_qrec *out,
                     int32_t n_ref, double *ppl, char *msg, size_t msg_len);
/* Number of scored tokens the quality pass produces for n_qids text ids. */
int32_t rl__ab_n_scored(const ab_opts *o, int32_t n_qids);
long rl__ab_proc_kb(const char *field); /* from /proc/self/status, -1 if absent */

#endif
