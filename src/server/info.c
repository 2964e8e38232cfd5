/* The routes a router or an orchestrator probes, beside generation:
 *
 *   /livez                      liveness: 200 whenever the HTTP side answers
 *   /health, /readyz            readiness (server.c: 503 loading / draining)
 *   /health_generate            readiness proven by a one-token generation
 *   /server_info, /model_info   what the SGLang Model Gateway reads when a
 *   (and their /get_* aliases)  worker registers: model path and name, the
 *                               parallel sizes, the token capacity
 *   /get_load                   SGLang's load report, one entry per data-
 *                               parallel rank: [{dp_rank, num_reqs,
 *                               num_waiting_reqs, num_tokens}]
 *
 * Invariants: every route answers JSON; none touches the engine before
 * state == RL_SRV_READY; /health_generate counts itself in s->n_active so a
 * draining shutdown waits for it, and always takes its request's DONE event
 * (cancelling on timeout) so no engine request outlives the route.
 */
#include <string.h>

#include "server/server-impl.h"

#define HEALTH_GEN_TIMEOUT_MS 20000 /* a one-token generation that takes longer is unhealthy */

static bool is_ready(rl_srv *s) {
    return atomic_load(&s->state) == RL_SRV_READY && !atomic_load(&s->draining);
}

static enum MHD_Result not_ready(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    int st = atomic_load(&s->state);
    const char *why = st == RL_SRV_LOADING        ? "loading"
                      : st == RL_SRV_FAILED       ? "error"
                      : atomic_load(&s->draining) ? "draining"
                                                  : "ok";
    return rl_srv_reply_json(rq, 503, json_pack("{s:s}", "status", why));
}

enum MHD_Result rl_srv_livez(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    static const char *state[] = {"loading", "ready", "error"};
    int st = atomic_load(&s->state);
    return rl_srv_reply_json(rq, 200,
                             json_pack("{s:s, s:s}", "status", "alive", "state",
                                       st >= 0 && st <= 2 ? state[st] : "unknown"));
}

/* Submits a one-token greedy generation of a fixed prompt and waits for it.
 * 200 {"status":"ok"} when a token came back, 503 otherwise. */
enum MHD_Result rl_srv_health_generate(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    if (!is_ready(s)) return not_ready(rq);
    rl_err err = {0};
    int32_t *ids = NULL, n = 0;
    if (rl_tokenize(s->vocab, "Hello", 5, RL_TOKENIZE_ADD_BOS, &ids, &n, &err) != RL_OK || n == 0) {
        rl_free(ids);
        return rl_srv_reply_json(rq, 503,
                                 json_pack("{s:s, s:s}", "status", "error", "message",
                                           "cannot tokenize the probe prompt"));
    }
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.max_tokens = 1;
    gp.sample.temperature = 0;
    uint64_t id;
    atomic_fetch_add(&s->n_active, 1);
    rl_status st = rl_engine_submit(s->eng, ids, n, &gp, &id, &err);
    rl_free(ids);
    bool ok = false;
    const char *msg = err.msg;
    if (st == RL_OK) {
        double t_end = rl_time_s() + HEALTH_GEN_TIMEOUT_MS / 1000.0;
        rl_event ev;
        for (;;) {
            rl_status nst = rl_engine_next(s->eng, id, &ev, 100);
            if (nst == RL_OK) {
                if (ev.kind != RL_EV_DONE) continue;
                ok = ev.finish == RL_FINISH_LENGTH || ev.finish == RL_FINISH_STOP;
                msg = ok ? "" : ev.error[0] ? ev.error : "the probe generation did not finish";
                break;
            }
            if (nst != RL_ERR_LIMIT) { /* not a timeout: the request is gone */
                msg = "the probe generation was lost";
                break;
            }
            if (rl_time_s() > t_end || atomic_load(&s->abort_all)) {
                rl_engine_cancel(s->eng, id); /* its DONE follows; take it below */
                while (rl_engine_next(s->eng, id, &ev, 1000) == RL_OK && ev.kind != RL_EV_DONE) {
                }
                msg = "the probe generation timed out";
                break;
            }
        }
    }
    atomic_fetch_sub(&s->n_active, 1);
    if (ok) return rl_srv_reply_json(rq, 200, json_pack("{s:s}", "status", "ok"));
    return rl_srv_reply_json(rq, 503, json_pack("{s:s, s:s}", "status", "error", "message", msg));
}

/* SGLang's /server_info fields the gateway reads (model_path,
 * served_model_name, tp_size, dp_size, max_total_tokens, ...), plus
 * redline's own state.  Answers while loading too, with the sizes 0. */
enum MHD_Result rl_srv_server_info(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    bool ready = atomic_load(&s->state) == RL_SRV_READY;
    rl_engine_stats st;
    memset(&st, 0, sizeof st);
    if (ready) st = rl_engine_get_stats(s->eng);
    const rl_engine_params *ep = &s->cfg.ep;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:s}",
        "model_path", ep->model_path ? ep->model_path : "", "served_model_name", s->model_id,
        "tokenizer_path", ep->model_path ? ep->model_path : "", "version", RL_SERVER_VERSION,
        "tp_size", 1, "dp_size", 1, "pp_size", 1, "max_total_tokens",
        (json_int_t)st.kv_blocks_total * st.block_size, "max_running_requests", ep->max_seqs,
        "max_prefill_tokens", ep->max_batch_tokens, "context_length", ready ? s->n_ctx : 0,
        "page_size", st.block_size, "max_queued_requests", s->cfg.max_queue,
        "enable_prefix_caching", ep->prefix_cache, "status",
        !ready ? (atomic_load(&s->state) == RL_SRV_LOADING ? "loading" : "error")
        : atomic_load(&s->draining) ? "draining"
                                    : "ready",
        "engine", "redline");
    return rl_srv_reply_json(rq, 200, o);
}

/* SGLang's /model_info: model_path, tokenizer_path, is_generation,
 * model_type (the GGUF architecture) and architectures. */
enum MHD_Result rl_srv_model_info(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    const char *path = s->cfg.ep.model_path ? s->cfg.ep.model_path : "";
    rl_model_info mi;
    memset(&mi, 0, sizeof mi);
    if (atomic_load(&s->state) == RL_SRV_READY) rl_vocab_model_info(s->vocab, &mi);
    return rl_srv_reply_json(rq, 200,
                             json_pack("{s:s, s:s, s:s, s:b, s:s, s:[s], s:i}", "model_path", path,
                                       "tokenizer_path", path, "served_model_name", s->model_id,
                                       "is_generation", 1, "model_type", mi.arch, "architectures",
                                       mi.arch, "vocab_size", mi.n_vocab));
}

/* SGLang's /get_load: one entry (redline is one data-parallel rank). */
enum MHD_Result rl_srv_get_load(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    rl_engine_stats st;
    memset(&st, 0, sizeof st);
    if (atomic_load(&s->state) == RL_SRV_READY) st = rl_engine_get_stats(s->eng);
    return rl_srv_reply_json(
        rq, 200,
        json_pack("[{s:i, s:i, s:i, s:I, s:i, s:f}]", "dp_rank", 0, "num_reqs",
                  st.n_running + st.n_waiting, "num_waiting_reqs", st.n_waiting, "num_tokens",
                  (json_int_t)st.live_tokens, "num_running_reqs", st.n_running,
                  "kv_cache_usage_perc",
                  st.kv_blocks_total ? (double)st.kv_blocks_used / st.kv_blocks_total : 0.0));
}
