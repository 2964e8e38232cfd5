/* Internals of the engine; only src/engine/ includes this. */
#ifndef RL_ENGINE_IMPL_H
#define RL_ENGINE_IMPL_H

#include <pthread.h>

#include "redline.h"
#include "engine/engine.h" /* the in-tree accessors engine.c defines */
#include "base/threadpool.h"
#include "kv/kv.h"
#include "model/model.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "sched/sched.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

/* One request.  `base` must stay first: the scheduler hands back
 * rl_sched_req pointers that are cast to ereq. */
typedef struct ereq {
    rl_sched_req base;
    struct ereq *next;      /* e->reqs list (under e->mu) */
    rl_gen_params gp;
    int32_t max_new;        /* new tokens at most (clamped to the context) */
    int32_t n_generated;
    rl_sampler *sampler;    /* engine thread only */
    rl_detok detok;         /* pending text not yet emitted (stop-string holdback) */
    bool in_inbox;          /* submitted, not yet given to the scheduler (under mu) */
    bool cancel;            /* cancellation requested (under mu) */
    bool finished;          /* DONE event queued */
    double t_submit, t_first;
    int32_t n_draft;        /* draft tokens appended to base.tokens this step */
    rl_spec_acc acc;        /* running acceptance of its drafter's tokens */
    bool drafted;           /* this step's drafts came from its drafter (not the grammar) */
    bool has_draft_seq;
    rl_spec_draft_seq draft_seq;
    rl_grammar *grammar;    /* retained; NULL = unconstrained */
    rl_gmatch *gm, *gm_scratch; /* matcher, and a scratch copy for verifying drafts */
    rl_event *ev;           /* ring of undelivered events (under mu) */
    int32_t ev_head, ev_n, ev_cap;
} ereq;

struct rl_engine {
    rl_engine_params params;
    rl_model *model;
    rl_tokenizer *tok;
    rl_threadpool *tp;
    rl_kv_pool *pool;
    rl_sched *sched;
    int32_t n_vocab, n_ctx;
    size_t kv_bytes_per_token;

    pthread_mutex_t mu;
    pthread_cond_t work_cond; /* new work or stop */
    pthread_cond_t ev_cond;   /* new events */
    pthread_t thread;
    bool thread_started, stop;
    ereq *reqs;               /* every live request (under mu) */
    uint64_t next_id;

    /* step buffers, sized at creation */
    rl_sched_req **plan;      /* [max_seqs] */
    int32_t *b_token, *b_pos, *b_seq; /* [max_batch_tokens] */
    bool *b_want;
    int32_t **b_tables;       /* [max_seqs] */
    int32_t *b_nblocks;
    float *logits;            /* [n_logit_rows][n_vocab] */
    int32_t n_logit_rows;     /* max_seqs + spec_max_batch * draft_max */

    /* speculative decoding */
    rl_spec_draft *draft;     /* NULL without a draft model */
    ereq **spec_reqs;         /* [max_seqs] requests with drafts this step */
    int32_t *spec_kbuf;       /* [max_seqs] */
    int32_t **spec_out;       /* [max_seqs] -> [draft_max] */
    rl_spec_draft_seq **spec_dseqs; /* [max_seqs] */
    const int32_t **spec_toks;
    int32_t *spec_ntoks;
    int32_t *spec_dk;         /* [max_seqs] compacted for the draft model */
    int32_t **spec_dout;
    rl_spec_cost cost;        /* online forward timings for the draft-length policy */
    int32_t spec_idle;        /* steps since the policy last chose to draft */
    int32_t spec_probe_k;     /* draft length of the last periodic probe */
    float *spec_acc;          /* [max_seqs] acceptance estimates of one step */
    float *verify_scratch;    /* [2 * n_vocab] */
    rl_sample_result *verify_res; /* [draft_max + 1] */
    int32_t *verify_out;      /* [draft_max + 1] */
    uint64_t st_spec_proposed, st_spec_accepted, st_spec_verifies, st_forced;
    rl_vocab_trie *trie;      /* built at the first constrained request (under mu) */

    /* counters (engine thread), published in stats_snapshot under mu */
    uint64_t st_prompt, st_gen, st_cached, st_finished;
    double busy_s;
    rl_engine_stats stats_snapshot;
};

#endif
