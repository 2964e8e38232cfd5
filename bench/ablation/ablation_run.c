/* bench/ablation, the child side: one configuration through the
 * engine (closed loop of `conc` clients over the fixed workload), then the
 * quality pass of the same model and KV types over the fixed text.
 *
 * Serving run.  Every request is submitted with max_tokens = 0 (until the
 * context is full: what a client that does not bound its answer asks for,
 * and what the naive baseline must reserve KV for) and cancelled here once
 * it has produced its output length; JSON requests under a grammar get
 * max_tokens = their output length so the grammar can close the object.
 * Greedy, ignore_eos.  TTFT = first token - submit; TPOT = (last - first) /
 * (n - 1); both taken after the engine step that produced the token.
 *
 * Quality pass.  The text ids are cut into windows of W = qctx tokens
 * that start W/2 apart; each window scores its second half, so every text
 * token from W/2 on is scored exactly once, from the logits of the token
 * before it, with at least W/2 tokens of context (`redline perplexity
 * --stride CTX/2`).  The first tokens of a window are not scored: a
 * prediction from one or two tokens of context is never made when serving
 * (the first token sampled follows a whole prompt), and on Qwen2.5 it is
 * also the one place where 8-bit activations cost quality -- position 0
 * carries a massive activation (channel 408, 30x the row's RMS) -- so
 * scoring it would let 1 token in W dominate the PPL delta (measured and
 * written up in docs/PERFORMANCE.md).  KL(reference || this) is bucketed
 * on the reference's top-32 ids plus the rest, a lower bound of the full
 * KL (see cmd_perplexity.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ablation.h"
#include "base/rng.h"
#include "cli/report.h"
#include "engine/engine.h"
#include "kv/seqkv.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "grammar/grammar.h"

long rl__ab_proc_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') {
            v = strtol(line + fl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* Bytes the model's weights occupy in this configuration: stored tensors
 * as in the file; under f32/f16 dequantization, every 2-D tensor not
 * already of that type counts n_elements * 4 (or 2). */
static size_t weight_bytes(const rl_gguf *g, int32_t weights) {
    size_t sum = 0;
    for (int64_t i = 0; i < rl_gguf_n_tensors(g); i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        rl_type to = weights == RL_MODEL_WEIGHTS_F32 ? RL_TYPE_F32 : RL_TYPE_F16;
        if (weights != RL_MODEL_WEIGHTS_STORED && t->n_dims >= 2 && t->type != to)
            sum += (size_t)t->n_elements * (weights == RL_MODEL_WEIGHTS_F32 ? 4u : 2u);
        else
            sum += t->nbytes;
    }
    return sum;
}

/* KV bytes per token of a model for K/V page types (from the attn_k shape). */
static size_t kv_bytes_per_token(const rl_gguf *g, rl_type kt, rl_type vt) {
    int32_t n_layer = 0;
    int64_t kv_dim = 0;
    char name[64];
    for (;; n_layer++) {
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", (int)n_layer);
        const rl_gguf_tensor *t = rl_gguf_find_tensor(g, name);
        if (!t) break;
        if (!kv_dim) kv_dim = t->ne[1];
    }
    return (size_t)n_layer * (rl_type_row_size(kt, kv_dim) + rl_type_row_size(vt, kv_dim));
}

int32_t rl__ab_n_scored(const ab_opts *o, int32_t n_qids) {
    int32_t n = n_qids - o->qctx / 2;
    return n < o->qtokens ? (n > 0 ? n : 0) : o->qtokens;
}

/* log-sum-exp of x[0..V) */
static double lse_of(const float *x, int32_t V) {
    float mx = x[0];
    for (int32_t i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int32_t i = 0; i < V; i++) s += exp((double)(x[i] - mx));
    return mx + log(s);
}

/* Runs the quality pass on model m with K/V types kt/vt.  With `out`,
 * writes reference records; with `ref`, accumulates NLL, KL and top-1
 * agreement against it.  noise > 0 (the --break-quality test hook) adds
 * Gaussian noise of that standard deviation to every logit first. */
static int quality_pass(const ab_opts *o, rl_model *m, rl_type kt, rl_type vt, const int32_t *qids,
                        int32_t n_qids, ab_qrec *out, const ab_qrec *ref, float noise,
                        rl_threadpool *tp, double *ppl, double *kl_mean, double *top1, char *msg,
                        size_t msg_len) {
    const int32_t V = rl_model_n_vocab(m), n_score = rl__ab_n_scored(o, n_qids);
    const int32_t W = o->qctx;
    int32_t ch = rl_model_max_batch(m) < 64 ? rl_model_max_batch(m) : 64;
    rl_err err = {0};
    rl_seqkv kv;
    float *lg = malloc((size_t)ch * (size_t)V * sizeof(float));
    if (!lg || rl_seqkv_init_kv(&kv, m, W, 1, 0, kt, vt, &err)) {
        snprintf(msg, msg_len, "%s", lg ? err.msg : "out of memory");
        free(lg);
        return -1;
    }
    rl_rng rng;
    rl_rng_seed(&rng, 12345);
    double nll = 0, kl = 0;
    int64_t n_top1 = 0;
    int32_t k = 0; /* scored tokens so far */
    int rc = 0;
    const int32_t h = W / 2 - 1; /* first scored position of a window */
    for (int32_t w0 = 0; k < n_score; w0 += W / 2) {
        int32_t len = n_qids - w0 < W ? n_qids - w0 : W;
        if (len - 1 <= h) break; /* nothing left to score */
        /* the unscored first half: K/V only, no logits */
        if (h > 0 && rl_seqkv_eval(&kv, m, 0, qids + w0, h, 0, false, NULL, tp, &err)) {
            snprintf(msg, msg_len, "quality forward: %s", err.msg);
            rc = -1;
            goto done;
        }
        for (int32_t c0 = h; c0 < len - 1 && k < n_score; c0 += ch) {
            int32_t nc = len - c0 < ch ? len - c0 : ch;
            if (rl_seqkv_eval(&kv, m, 0, qids + w0 + c0, nc, c0, true, lg, tp, &err)) {
                snprintf(msg, msg_len, "quality forward: %s", err.msg);
                rc = -1;
                goto done;
            }
            for (int32_t j = 0; j < nc && c0 + j < len - 1 && k < n_score; j++) {
                float *x = lg + (size_t)j * V;
                if (noise > 0)
                    for (int32_t v = 0; v < V; v++) {
                        double u1 = rl_rng_f64(&rng), u2 = rl_rng_f64(&rng);
                        x[v] += noise * (float)(sqrt(-2 * log(u1 > 1e-300 ? u1 : 1e-300)) *
                                                cos(6.283185307179586 * u2));
                    }
                double lse = lse_of(x, V);
                int32_t target = qids[w0 + c0 + j + 1];
                nll -= x[target] - lse;
                int32_t am = 0;
                for (int32_t v = 1; v < V; v++) am = x[v] > x[am] ? v : am;
                if (out) {
                    ab_qrec *r = &out[k];
                    r->target = target;
                    r->target_lp = (float)(x[target] - lse);
                    int32_t nk = 0; /* sorted top-k, best first */
                    for (int32_t v = 0; v < V; v++) {
                        if (nk == AB_K && x[v] <= x[r->top_id[AB_K - 1]]) continue;
                        int32_t p = nk < AB_K ? nk++ : AB_K - 1;
                        while (p > 0 && x[r->top_id[p - 1]] < x[v]) {
                            r->top_id[p] = r->top_id[p - 1];
                            p--;
                        }
                        r->top_id[p] = v;
                    }
                    for (int32_t i = 0; i < AB_K; i++)
                        r->top_lp[i] = i < nk ? (float)(x[r->top_id[i]] - lse) : -INFINITY;
                    for (int32_t i = nk; i < AB_K; i++) r->top_id[i] = -1;
                }
                if (ref) {
                    const ab_qrec *b = &ref[k];
                    double d = 0, pb_top = 0, pc_top = 0;
                    for (int32_t i = 0; i < AB_K && b->top_id[i] >= 0; i++) {
                        double pb = exp((double)b->top_lp[i]), lc = x[b->top_id[i]] - lse;
                        pb_top += pb;
                        pc_top += exp(lc);
                        if (pb > 0) d += pb * ((double)b->top_lp[i] - lc);
                    }
                    double pbr = 1 - pb_top, pcr = 1 - pc_top;
                    if (pbr > 1e-12) d += pbr * (log(pbr) - log(pcr > 1e-30 ? pcr : 1e-30));
                    kl += d;
                    n_top1 += b->top_id[0] == am;
                }
                k++;
            }
        }
        if (w0 + len >= n_qids) break;
    }
    *ppl = k > 0 ? exp(nll / k) : 0;
    if (kl_mean) *kl_mean = k > 0 ? kl / k : 0;
    if (top1) *top1 = k > 0 ? (double)n_top1 / k : 0;
done:
    rl_seqkv_free(&kv);
    free(lg);
    return rc;
}

int rl__ab_reference(const ab_opts *o, const int32_t *qids, int32_t n_qids, ab_qrec *out,
                     int32_t n_ref, double *ppl, char *msg, size_t msg_len) {
    rl_err err = {0};
    rl_model *m = NULL;
    rl_model_opts mo = {.max_batch = 64, .weights = RL_MODEL_WEIGHTS_F32};
    if (rl_model_load(o->model, &mo, &m, &err)) {
        snprintf(msg, msg_len, "reference model: %s", err.msg);
        return -1;
    }
    rl_threadpool *tp = rl_threadpool_new(o->threads);
    int rc = n_ref == rl__ab_n_scored(o, n_qids)
                 ? quality_pass(o, m, RL_TYPE_F32, RL_TYPE_F32, qids, n_qids, out, NULL, 0, tp, ppl,
                                NULL, NULL, msg, msg_len)
                 : -1;
    rl_threadpool_free(tp);
    rl_model_free(m);
    return rc;
}

typedef struct run_req {
    uint64_t id;
    bool submitted, done;
    int32_t n_tok;
    double t_sub, t_first, t_last;
} run_req;

void rl__ab_run_config(const ab_opts *o, const ab_cfg *c, const ab_req *reqs, const char *schema,
                       const int32_t *qids, int32_t n_qids, const ab_qrec *ref, int32_t n_ref,
                       ab_slot *slot) {
    ab_res *res = slot->res;
    memset(res, 0, sizeof *res);
    res->rss_start_kb = rl__ab_proc_kb("VmRSS");
    rl_err err = {0};
    rl_type kt, vt;
    if (!rl_type_from_name(c->kt, &kt) || !rl_type_from_name(c->vt, &vt)) {
        snprintf(res->err, sizeof res->err, "unknown KV type %s/%s", c->kt, c->vt);
        return;
    }
    rl_engine_params ep;
    rl_engine_params_default(&ep);
    ep.model_path = o->model;
    ep.n_threads = o->threads;
    ep.n_ctx = o->n_ctx;
    ep.max_seqs = o->conc;
    ep.weights = c->weights;
    ep.naive = c->naive;
    ep.static_batches = c->static_batches;
    ep.chunked_prefill = c->chunked;
    ep.prefix_cache = c->prefix;
    ep.cache_type_k = c->kt;
    ep.cache_type_v = c->vt;
    ep.draft_model_path = c->spec ? o->draft : NULL;
    int32_t max_prompt = 0;
    for (int32_t r = 0; r < o->n_req; r++)
        max_prompt = reqs[r].n_prompt > max_prompt ? reqs[r].n_prompt : max_prompt;
    ep.max_batch_tokens = o->batch;
    /* Without chunked prefill a whole prompt must fit one step; a static
     * batch is prefilled at once: budget = conc whole prompts. */
    if (!c->chunked) {
        int64_t want = c->naive || c->static_batches ? (int64_t)o->conc * (max_prompt + 1)
                                                     : max_prompt + o->conc;
        ep.max_batch_tokens = (int32_t)(want > 65536 ? 65536 : want);
    }
    /* The same KV budget in tokens for every row: conc sequences of n_ctx,
     * in this row's page types. */
    rl_gguf *g = NULL;
    if (rl_gguf_open(o->model, &g, &err)) {
        snprintf(res->err, sizeof res->err, "%.200s", err.msg);
        return;
    }
    size_t bpt = kv_bytes_per_token(g, kt, vt);
    res->weight_bytes = weight_bytes(g, c->weights);
    rl_gguf_close(g);
    if (c->spec && o->draft && !rl_gguf_open(o->draft, &g, &err)) {
        res->weight_bytes += weight_bytes(g, RL_MODEL_WEIGHTS_STORED);
        rl_gguf_close(g);
    }
    int32_t bs = ep.block_size;
    ep.kv_mem_bytes = ((size_t)o->conc * (size_t)((o->n_ctx + bs - 1) / bs) + 1) * (size_t)bs * bpt;

    rl_engine *e = NULL;
    if (rl_engine_new(&ep, &e, &err)) {
        snprintf(res->err, sizeof res->err, "%.200s", err.msg);
        return;
    }
    rl_grammar *gram = NULL;
    if (c->grammar && !(gram = rl_grammar_from_json_schema(schema, strlen(schema), &err))) {
        snprintf(res->err, sizeof res->err, "JSON schema: %.200s", err.msg);
        rl_engine_free(e);
        return;
    }
    run_req *rr = calloc((size_t)o->n_req, sizeof *rr);
    double *ttft = calloc((size_t)o->n_req, sizeof *ttft),
           *tpot = calloc((size_t)o->n_req, sizeof *tpot);
    if (!rr || !ttft || !tpot) {
        snprintf(res->err, sizeof res->err, "out of memory");
        goto out;
    }
    rl_engine_stats st0 = rl_engine_get_stats(e);
    res->kv_bytes_per_token = st0.kv_bytes_per_token;
    res->kv_pool_bytes =
        (size_t)st0.kv_blocks_total * (size_t)st0.block_size * st0.kv_bytes_per_token;
    int32_t next = 0, n_done = 0, inflight = 0, idle = 0;
    const double t0 = rl_time_s();
    while (n_done < o->n_req) {
        for (; inflight < o->conc && next < o->n_req; next++, inflight++) {
            const ab_req *q = &reqs[next];
            rl_gen_params gp;
            rl_gen_params_default(&gp);
            gp.sample.temperature = 0;
            gp.ignore_eos = true;
            gp.max_tokens = 0;
            if (c->spec) gp.spec = o->draft ? RL_SPEC_DRAFT : RL_SPEC_NGRAM;
            if (gram && q->kind == AB_JSON) {
                gp.grammar = gram;
                gp.max_tokens = q->out_len;
            }
            if (rl_engine_submit(e, q->prompt, q->n_prompt, &gp, &rr[next].id, &err)) {
                snprintf(res->err, sizeof res->err, "request %d: %.200s", (int)next, err.msg);
                goto out;
            }
            rr[next].submitted = true;
            rr[next].t_sub = rl_time_s();
        }
        int32_t n_step = rl_engine_step(e);
        double te = rl_time_s();
        rl_engine_stats s = rl_engine_get_stats(e);
        size_t kvb = (size_t)s.kv_blocks_used * (size_t)s.block_size * s.kv_bytes_per_token;
        if (kvb > res->kv_peak_bytes) res->kv_peak_bytes = kvb;
        if (s.n_running > res->peak_running) res->peak_running = s.n_running;
        for (int32_t r = 0; r < next; r++) {
            run_req *q = &rr[r];
            if (q->done) continue;
            rl_event ev;
            while (rl_engine_next(e, q->id, &ev, 0) == RL_OK) {
                if (ev.kind == RL_EV_TOKEN && ev.token >= 0) {
                    if (q->n_tok == 0) q->t_first = te;
                    q->t_last = te;
                    if (q->n_tok < slot->out_max)
                        slot->toks[(size_t)r * slot->out_max + q->n_tok] = ev.token;
                    if (++q->n_tok == reqs[r].out_len) rl_engine_cancel(e, q->id);
                } else if (ev.kind == RL_EV_DONE) {
                    q->done = true;
                    if (ev.finish == RL_FINISH_ERROR) res->n_failed++;
                    res->cached_tokens += ev.n_cached;
                    n_done++;
                    inflight--;
                    break;
                }
            }
        }
        idle = n_step > 0 ? 0 : idle + 1;
        if (idle > 100000) {
            snprintf(res->err, sizeof res->err, "engine stalled with %d requests unfinished",
                     (int)(o->n_req - n_done));
            goto out;
        }
    }
    res->dur_s = rl_time_s() - t0;
    rl_engine_stats st = rl_engine_get_stats(e);
    int32_t n_tp = 0;
    for (int32_t r = 0; r < o->n_req; r++) {
        slot->n_tok[r] = rr[r].n_tok < slot->out_max ? rr[r].n_tok : slot->out_max;
        res->out_tokens += rr[r].n_tok;
        res->prompt_tokens += reqs[r].n_prompt;
        ttft[r] = rr[r].n_tok > 0 ? rr[r].t_first - rr[r].t_sub : 0;
        if (rr[r].n_tok > 1) tpot[n_tp++] = (rr[r].t_last - rr[r].t_first) / (rr[r].n_tok - 1);
    }
    res->tok_s = res->dur_s > 0 ? (double)res->out_tokens / res->dur_s : 0;
    rl_report_dist dt = rl_report_dist_of(ttft, o->n_req), dp = rl_report_dist_of(tpot, n_tp);
    res->ttft_p99 = dt.p99;
    res->ttft_p50 = dt.p50;
    res->tpot_p99 = dp.p99;
    res->tpot_p50 = dp.p50;
    res->spec_proposed = st.spec_proposed - st0.spec_proposed;
    res->spec_accepted = st.spec_accepted - st0.spec_accepted;
    res->preemptions = st.preemptions - st0.preemptions;
    res->grammar_forced = st.grammar_forced - st0.grammar_forced;
    res->rss_peak_kb = rl__ab_proc_kb("VmHWM"); /* before the quality pass allocates */
    res->ok = 1;
    if (ref) {
        rl_threadpool *tp = rl_threadpool_new(o->threads);
        double ppl = 0, kl = 0, top1 = 0;
        if (quality_pass(o, rl_engine_model(e), kt, vt, qids, n_qids, NULL, ref,
                         o->break_quality ? 1.0f : 0.0f, tp, &ppl, &kl, &top1, res->q_err,
                         sizeof res->q_err) == 0) {
            res->q_ok = 1;
            res->ppl = ppl;
            res->kl = kl;
            res->top1 = top1;
            res->q_tokens = n_ref;
        }
        rl_threadpool_free(tp);
    }
out:
    free(rr);
    free(ttft);
    free(tpot);
    rl_grammar_free(gram);
    rl_engine_free(e);
}
