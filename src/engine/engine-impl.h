/* Internals of the engine; only src/engine/ includes this. */
#ifndef RL_ENGINE_IMPL_H
#define RL_ENGINE_IMPL_H

#include <pthread.h>

#include "redline.h"
#include "engine/engine.h" /* the in-tree accessors engine.c defines */
#include "base/arena.h"
#include "base/threadpool.h"
#include "kv/kv.h"
#include "model/model.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "sched/sched.h"
#include "spec/spec.h"
#include "tokenizer/tokenizer.h"

/* One request.  `base` must stay first: the scheduler hands back
 * rl_sched_req pointers that are cast to ereq.  A request is on several
 * intrusive lists of the engine at once (see struct rl_engine); each link
 * is guarded as its list is. */
typedef struct ereq {
    rl_sched_req base;
    struct ereq *id_next;       /* e->by_id bucket chain (under mu) */
    struct ereq *inbox_next;    /* e->inbox (under mu) */
    struct ereq *cancel_next;   /* e->cancels (under mu) */
    struct ereq *anext, *aprev; /* e->active (engine thread) */
    bool cancel;                /* cancellation requested (under mu) */
    bool cancel_listed;         /* on e->cancels (under mu) */
    bool in_active;             /* on e->active (engine thread) */
    bool finished;              /* DONE event queued (set by the engine thread under mu) */
    rl_gen_params gp;
    int32_t max_new; /* new tokens at most (clamped to the context) */
    int32_t n_generated;
    rl_sampler *sampler; /* engine thread only */
    rl_detok detok;      /* pending text not yet emitted (stop-string holdback) */
    bool cached_counted; /* its prefix-cache hit is in st_cached (first admission) */
    double t_submit, t_first;
    int32_t n_draft; /* draft tokens appended to base.tokens this step */
    rl_spec_acc acc; /* running acceptance of its drafter's tokens */
    bool drafted;    /* this step's drafts came from its drafter (not the grammar) */
    bool has_draft_seq;
    rl_spec_draft_seq draft_seq;
    rl_grammar *grammar;        /* retained; NULL = unconstrained */
    rl_gmatch *gm, *gm_scratch; /* matcher, and a scratch copy for verifying drafts */
    /* reasoning budget (gp.think_close set; engine thread): RL__THINK_*,
     * tokens inside the block, the last bytes of output (to see the tags),
     * and the tokens of think_close */
    uint8_t think;
    int32_t think_n;
    char think_tail[16];
    uint8_t think_tail_n;
    int32_t think_ids[RL_MAX_STOP_LEN + 1];
    int32_t n_think_ids;
    rl_event *ev; /* ring of undelivered events (under mu) */
    int32_t ev_head, ev_n, ev_cap;
    /* Its new events (rl_engine_next waits here): one condition a request,
     * so a token wakes only the thread reading that request, not every
     * client's (32 streams were 32 wakeups per token, 1,024 a step). */
    pthread_cond_t ev_wait;
} ereq;

/* One embedding request (embed.c): on the caller's stack while it waits. */
typedef struct rl__embed_job {
    const int32_t *tokens; /* [n] borrowed */
    int32_t n;
    float *out;    /* [n_embd] */
    rl_status st;  /* set when done */
    char msg[512]; /* error message */
    bool done;     /* (under mu) */
    struct rl__embed_job *next;
} rl__embed_job;

struct rl_engine {
    rl_engine_params params;
    rl_engine_hooks hooks; /* rl_engine_set_hooks at creation; forward always set */
    bool hooked;           /* hooks came from rl_engine_set_hooks (on_* slots) */
    rl_model *model;
    rl_tokenizer *tok;
    rl_threadpool *tp;
    rl_kv_pool *pool;
    rl_sched *sched;
    int32_t n_vocab, n_ctx;
    size_t kv_bytes_per_token;

    pthread_mutex_t mu;
    pthread_cond_t work_cond; /* new work or stop */
    pthread_cond_t ev_cond;   /* embedding jobs done (embed.c) */
    pthread_t thread;
    bool thread_started, stop;
    /* requests (see ereq for the links) */
    ereq **by_id; /* [id_mask + 1] every live request by id & id_mask
                     (under mu): submitted, until its DONE is taken */
    uint64_t id_mask;
    ereq *inbox; /* submitted, not yet given to the scheduler, newest
                    first (under mu) */
    int32_t n_inbox;
    ereq *cancels;         /* cancelled and not finished, highest id first (under mu) */
    int32_t n_queued;      /* requests not finished (under mu): the queue limit */
    rl__embed_job *embeds; /* embedding jobs waiting, oldest first (under mu) */
    ereq *active;          /* given to the scheduler and not finished, newest
                              first (engine thread) */
    uint64_t next_id;

    /* buffers sized at creation, all in `arena` */
    rl_arena arena;
    rl_sched_req **plan;              /* [max_seqs] */
    int32_t *b_token, *b_pos, *b_seq; /* [max_batch_tokens] */
    bool *b_want;
    bool *b_prompt;     /* [max_batch_tokens] rl_batch.prompt */
    int32_t **b_tables; /* [max_seqs] */
    int32_t *b_nblocks;
    float *logits;                /* [n_logit_rows][n_vocab] */
    int32_t n_logit_rows;         /* max_seqs (one a sequence) + rows for drafts */
    float *verify_scratch;        /* [2 * n_vocab] */
    rl_sample_result *verify_res; /* [draft_max + 1] */
    int32_t *verify_out;          /* [draft_max + 1] */

    /* speculative decoding */
    rl_spec_draft *draft;  /* NULL without a draft model */
    rl_spec_planner *spec; /* who drafts how much, each step */
    uint64_t st_spec_proposed, st_spec_accepted, st_spec_verifies;
    rl_vocab_trie *trie; /* built at the first constrained request (under mu) */

    /* counters (engine thread), published in stats_snapshot under mu */
    uint64_t st_prompt, st_gen, st_cached, st_finished;
    double busy_s;
    rl_engine_stats stats_snapshot;
};

enum { RL__THINK_OFF = 0, RL__THINK_WAIT = 1, RL__THINK_IN = 2 };

/* ---- requests.c ---- */
/* Ends request r (engine thread): frees its KV, queues the DONE event with
 * reason why, error code and message (msg may be NULL).  No-op when r has
 * finished already; r must not be touched after (its DONE may be taken,
 * and r freed, at once). */
void rl__engine_finish(rl_engine *e, ereq *r, rl_finish_reason why, rl_status code,
                       const char *msg);
/* A step's first stage (engine thread): hands the inbox to the scheduler
 * and ends the cancelled requests. */
void rl__engine_take_inbox(rl_engine *e);
/* Frees every request (rl_engine_free, after the thread has stopped). */
void rl__engine_free_requests(rl_engine *e);

/* ---- embed.c ---- */
/* A step's embedding stage (engine thread): runs the queued embedding
 * jobs (those whose KV blocks the pool cannot supply now wait); returns
 * the tokens computed. */
int32_t rl__engine_run_embeds(rl_engine *e);
/* Ends every queued embedding job with an error (rl_engine_free). */
void rl__engine_fail_embeds(rl_engine *e);

/* ---- output.c ---- */
/* Queues ev on r's event ring (caller holds e->mu); wakes rl_engine_next. */
void rl__engine_push_event(rl_engine *e, ereq *r, const rl_event *ev);
/* Appends token tok (already accepted by r's sampler) to r: grammar, text,
 * stop strings, end-of-generation and length limits.  False when r
 * finished (the caller must not touch r's drafts or tokens after that). */
bool rl__engine_emit_token(rl_engine *e, ereq *r, int32_t tok, const rl_sample_result *sr);
/* Emits what of r's pending text can no longer start a stop string (all
 * of it with `all`) as TOKEN events, the first carrying token and sr;
 * true on a stop-string match (the text before it is emitted). */
bool rl__engine_flush_text(rl_engine *e, ereq *r, int32_t token, const rl_sample_result *sr,
                           bool all);
/* Reasoning budget: the think block's state after token tok was emitted. */
void rl__engine_think_update(rl_engine *e, ereq *r, int32_t tok);
/* The budget is spent and think_close may be written now. */
bool rl__engine_think_due(const ereq *r);
/* Writes think_close into r's output (tokens accepted by the sampler and
 * emitted); false when r finished meanwhile (as rl__engine_emit_token). */
bool rl__engine_think_close(rl_engine *e, ereq *r);
/* Pure stop-string rule over pending text buf[0..len) and stop[0..n_stop):
 * returns how many bytes may be emitted.  A stop string in buf: *stopped,
 * and the bytes before its earliest occurrence.  Else all of buf when
 * `all`, or all but the longest suffix that is a proper prefix of some
 * stop string (it may become one with the next token). */
size_t rl__stop_scan(const char *buf, size_t len, const char (*stop)[RL_MAX_STOP_LEN + 1],
                     int32_t n_stop, bool all, bool *stopped);
/* Bytes of p[0..n) for the next event: all of them up to RL_EV_TEXT_MAX,
 * else RL_EV_TEXT_MAX cut back to the start of a UTF-8 character. */
size_t rl__text_chunk(const char *p, size_t n);

#endif
