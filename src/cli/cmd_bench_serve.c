/* `redline bench-serve`: offline serving benchmark (L9).
 *
 *   redline bench-serve [-m MODEL] [-n N] [--prompt-len L|MIN:MAX]
 *       [--output-len L|MIN:MAX] [--rate R|inf] [--shared-prefix K]
 *       [-np SEQS] [-b TOKENS] [-c CTX] [--kv-mem SIZE] [--naive]
 *       [--no-prefix-cache] [--no-chunked] [-t THREADS] [--seed S] [--json]
 *
 * Workload: N requests whose prompts are K shared tokens (a "system
 * prompt", the same for all) followed by L tokens of their own, L and the
 * output length drawn uniformly from their ranges.  Tokens are random ids
 * from the ordinary-text part of the vocabulary (NORMAL tokens whose bytes
 * are printable ASCII; never control or end-of-generation tokens), drawn
 * from a seeded rng, or with --text FILE slices of FILE encoded with the
 * model's tokenizer at seeded offsets.  BOS is prepended when the model
 * adds one.  Requests arrive as a Poisson process of rate R (seeded), or
 * all at time 0.  Generation is greedy with ignore_eos unless told
 * otherwise, so every request produces exactly its output length.
 *
 * The engine runs synchronously: this loop submits the requests whose
 * arrival time has passed, runs one rl_engine_step, takes every event, and
 * repeats until all requests are done.  Times are measured here, from each
 * request's scheduled arrival: TTFT = first token - arrival, ITL = gaps
 * between a request's tokens, TPOT = (last - first) / (n - 1).  KV
 * utilization = sum over steps of live_tokens * step time / sum of
 * (kv_blocks_used * block_size) * step time; live_tokens counts a shared
 * prefix once per sequence, so with prefix sharing it can exceed 1.
 *
 * --max-tokens M sends max_tokens = M (or "ctx": until the context is
 * full) while still stopping each request at its output length (by
 * cancelling it before the next step): this models clients that ask for
 * more than they use, which is what the naive baseline must reserve for.
 * --dump-workload FILE writes the requests (arrival, prompt ids, output
 * length) as JSON for bench/peer-llamacpp-serve to replay elsewhere
 * (--dump-only: and stop there).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "redline.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: redline bench-serve [options]\n"
        "\n"
        "Offline serving benchmark: N synthetic requests through the engine's step loop.\n"
        "\n"
        "workload:\n"
        "  -m, --model FILE       GGUF model (default $REDLINE_MODEL or " RL_DEFAULT_MODEL ")\n"
        "  -n, --requests N       number of requests (default 32)\n"
        "  --prompt-len L|A:B     own prompt tokens per request, fixed or uniform in [A, B] (256)\n"
        "  --output-len L|A:B     generated tokens per request (128)\n"
        "  --shared-prefix K      K shared tokens prepended to every prompt (0)\n"
        "  --rate R|inf           Poisson arrivals at R requests/s (default inf: all at once)\n"
        "  --text FILE            prompts are slices of FILE encoded with the model's tokenizer\n"
        "                         (default: random ordinary-text token ids)\n"
        "  --seed S               workload and sampling seed (default 1)\n"
        "  --temp T               sampling temperature (default 0 = greedy)\n"
        "  --eos                  stop at end-of-generation tokens (default: ignore_eos)\n"
        "  --max-tokens M|ctx     max_tokens sent with each request (default: its output length);\n"
        "                         requests are still stopped at their output length\n"
        "\n"
        "engine:\n"
        "  -np, --parallel N      sequences running at once (default 32)\n"
        "  -b, --batch-size N     tokens per engine step (default 256)\n"
        "  -c, --ctx-size N       context length per sequence (default min(train, 4096))\n"
        "  --kv-mem SIZE          KV-cache memory, e.g. 512M (default: the engine's sizing)\n"
        "  -ctk, --cache-type-k T K pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
        "  -ctv, --cache-type-v T V pages: same choices\n"
        "  -t, --threads N        compute threads (default: one per core)\n"
        "  --naive                baseline: KV reserved for each request's maximum length,\n"
        "                         static batches run to completion (without -b, the batch\n"
        "                         budget is raised to -np whole prompts)\n"
        "  --no-prefix-cache      do not reuse cached prompt prefixes\n"
        "  --no-chunked           do not split prompts across steps\n"
        "\n"
        "output:\n"
        "  --json                 one JSON object on stdout instead of the table\n"
        "  --dump-workload FILE   write the requests as JSON (for bench/peer-llamacpp-serve)\n"
        "  --dump-only            write the workload and exit without running it\n"
        "  -h, --help             this text\n");
}

typedef struct bs_opts {
    const char *model, *text, *dump;
    int32_t n_req, prompt_len[2], output_len[2], shared;
    double rate; /* <= 0: all at once */
    uint64_t seed;
    float temp;
    bool eos, json, dump_only, batch_set;
    int32_t max_tokens; /* 0: output length; -1: until the context is full */
    rl_engine_params ep;
} bs_opts;

/* ---- workload ---- */
typedef struct breq {
    double t_arrive;           /* seconds from the start */
    int32_t *prompt, n_prompt; /* owned */
    int32_t out_len;
    uint64_t id;
    bool submitted, done;
    int32_t n_tok;          /* tokens received */
    double t_first, t_last; /* absolute (rl_time_s) */
    int32_t n_cached;
    rl_finish_reason finish;
    char error[160];
} breq;

/* Ids of ordinary text tokens: NORMAL, not end-of-generation, every byte
 * printable ASCII.  Caller frees. */
static int32_t *text_vocab(const rl_tokenizer *tok, int32_t *n_out) {
    int32_t nv = rl_tokenizer_n_vocab(tok), n = 0;
    int32_t *ids = rl_malloc((size_t)nv * sizeof *ids);
    if (!ids) return NULL;
    for (int32_t id = 0; id < nv; id++) {
        if (rl_tokenizer_token_type(tok, id) != RL_TOKEN_NORMAL || rl_tokenizer_is_eog(tok, id))
            continue;
        size_t len;
        const char *p = rl_tokenizer_piece(tok, id, &len);
        bool ok = p && len > 0;
        for (size_t i = 0; ok && i < len; i++)
            ok = (unsigned char)p[i] >= 0x20 && (unsigned char)p[i] < 0x7f;
        if (ok) ids[n++] = id;
    }
    *n_out = n;
    return ids;
}

static int32_t draw_len(rl_rng *r, const int32_t range[2]) {
    return range[0] + (int32_t)rl_rng_below(r, (uint64_t)(range[1] - range[0]) + 1);
}

/* Builds o->n_req requests into reqs (zeroed by the caller).  Returns 0 or
 * prints the reason and returns -1. */
static int build_workload(const bs_opts *o, const rl_tokenizer *tok, breq *reqs) {
    rl_rng rng;
    rl_rng_seed(&rng, o->seed);
    int32_t *pool = NULL, n_pool = 0;
    bool from_text = o->text != NULL;
    if (from_text) {
        size_t len = 0;
        char *buf = rl_cli_read_file(o->text, &len);
        if (!buf) {
            fprintf(stderr, "redline bench-serve: --text: cannot read '%s': %s\n", o->text,
                    strerror(errno));
            return -1;
        }
        rl_err err = {0};
        size_t n = 0;
        rl_status s = rl_tokenizer_encode(tok, buf, len, 0, &pool, &n, &err);
        free(buf);
        if (s) {
            fprintf(stderr, "redline bench-serve: --text: %s\n", err.msg);
            return -1;
        }
        n_pool = (int32_t)n;
        int32_t need = o->prompt_len[1] > o->shared ? o->prompt_len[1] : o->shared;
        if (n_pool < need + 1) {
            fprintf(stderr,
                    "redline bench-serve: --text: '%s' has %d tokens, fewer than the %d a prompt "
                    "needs\n",
                    o->text, n_pool, need + 1);
            rl_free(pool);
            return -1;
        }
    } else {
        pool = text_vocab(tok, &n_pool);
        if (!pool || n_pool == 0) {
            fprintf(stderr, "redline bench-serve: the vocabulary has no ordinary text tokens\n");
            rl_free(pool);
            return -1;
        }
    }
    int32_t bos = rl_tokenizer_add_bos(tok) ? rl_tokenizer_bos(tok) : -1;
    int32_t n_head = (bos >= 0) + o->shared;
    int32_t *head = rl_malloc(((size_t)n_head + 1) * sizeof *head);
    if (!head) return -1;
    int32_t k = 0;
    if (bos >= 0) head[k++] = bos;
    /* the shared prefix: the start of the text, or random ids */
    for (int32_t i = 0; i < o->shared; i++)
        head[k++] = from_text ? pool[i] : pool[rl_rng_below(&rng, (uint64_t)n_pool)];
    double t = 0;
    for (int32_t r = 0; r < o->n_req; r++) {
        breq *q = &reqs[r];
        int32_t L = draw_len(&rng, o->prompt_len);
        q->out_len = draw_len(&rng, o->output_len);
        if (o->rate > 0) t += -log(1.0 - rl_rng_f64(&rng)) / o->rate; /* exponential gaps */
        q->t_arrive = o->rate > 0 ? t : 0;
        q->n_prompt = n_head + L;
        q->prompt = rl_malloc((size_t)q->n_prompt * sizeof *q->prompt);
        if (!q->prompt) {
            rl_free(head);
            rl_free(pool);
            return -1;
        }
        memcpy(q->prompt, head, (size_t)n_head * sizeof *head);
        if (from_text) {
            int32_t off = (int32_t)rl_rng_below(&rng, (uint64_t)(n_pool - L) + 1);
            memcpy(q->prompt + n_head, pool + off, (size_t)L * sizeof *pool);
        } else {
            for (int32_t i = 0; i < L; i++)
                q->prompt[n_head + i] = pool[rl_rng_below(&rng, (uint64_t)n_pool)];
        }
    }
    rl_free(head);
    rl_free(pool);
    return 0;
}

static int dump_workload(const bs_opts *o, const breq *reqs) {
    json_t *list = json_array();
    for (int32_t r = 0; list && r < o->n_req; r++) {
        json_t *ids = json_array();
        for (int32_t i = 0; ids && i < reqs[r].n_prompt; i++)
            json_array_append_new(ids, json_integer(reqs[r].prompt[i]));
        json_array_append_new(list, json_pack("{s:f, s:i, s:o}", "arrival_s", reqs[r].t_arrive,
                                              "output_len", (int)reqs[r].out_len, "prompt", ids));
    }
    json_t *root = json_pack("{s:I, s:i, s:b, s:f, s:o}", "seed", (json_int_t)o->seed,
                             "shared_prefix", (int)o->shared, "ignore_eos", !o->eos, "temperature",
                             (double)o->temp, "requests", list);
    FILE *f = fopen(o->dump, "w");
    if (!f) {
        json_decref(root);
        fprintf(stderr, "redline bench-serve: --dump-workload: cannot create '%s': %s\n", o->dump,
                strerror(errno));
        return -1;
    }
    int rc = rl_report_json_write(f, root, true, "redline bench-serve: --dump-workload");
    if (fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "redline bench-serve: --dump-workload: write to '%s' failed\n", o->dump);
        rc = -1;
    }
    return rc;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    if (s > 0.05) s = 0.05; /* wake often: arrivals are checked each pass */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- the run ---- */
int rl_cmd_bench_serve(int argc, char **argv) {
    bs_opts o;
    memset(&o, 0, sizeof o);
    rl_engine_params_default(&o.ep);
    o.n_req = 32;
    o.prompt_len[0] = o.prompt_len[1] = 256;
    o.output_len[0] = o.output_len[1] = 128;
    o.seed = 1;
    rl_args A;
    rl_args_init(&A, "redline bench-serve", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        const char *v;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "--naive"))
            o.ep.naive = true;
        else if (rl_args_is(&A, "--no-prefix-cache"))
            o.ep.prefix_cache = false;
        else if (rl_args_is(&A, "--no-chunked"))
            o.ep.chunked_prefill = false;
        else if (rl_args_is(&A, "--json"))
            o.json = true;
        else if (rl_args_is(&A, "--eos"))
            o.eos = true;
        else if (rl_args_is(&A, "--dump-only"))
            o.dump_only = true;
        else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &o.model);
        else if (rl_args_is(&A, "--text"))
            ok = rl_args_str(&A, &o.text);
        else if (rl_args_is(&A, "--dump-workload"))
            ok = rl_args_str(&A, &o.dump);
        else if (rl_args_is(&A, "-n|--requests"))
            ok = rl_args_i32(&A, 1, 100000, &o.n_req);
        else if (rl_args_is(&A, "--prompt-len"))
            ok = rl_args_range(&A, 1, 1 << 20, o.prompt_len);
        else if (rl_args_is(&A, "--output-len"))
            ok = rl_args_range(&A, 1, 1 << 20, o.output_len);
        else if (rl_args_is(&A, "--shared-prefix"))
            ok = rl_args_i32(&A, 0, 1 << 20, &o.shared);
        else if (rl_args_is(&A, "--rate")) {
            double r = 0;
            if ((ok = rl_args_str(&A, &v)) && strcmp(v, "inf") && strcmp(v, "0") &&
                (!rl_parse_f64(v, &r) || !(r > 0)))
                ok = rl_args_bad(&A, v, "expected requests/s > 0 or 'inf'");
            o.rate = r;
        } else if (rl_args_is(&A, "--seed"))
            ok = rl_args_u64(&A, &o.seed);
        else if (rl_args_is(&A, "--temp"))
            ok = rl_args_f32(&A, 0, 1e30, &o.temp);
        else if (rl_args_is(&A, "--max-tokens")) {
            int64_t x = -1;
            if ((ok = rl_args_str(&A, &v)) && strcmp(v, "ctx") && !rl_parse_i64(v, 1, 1 << 20, &x))
                ok = rl_args_bad(&A, v, "expected an integer in [1, %d] or 'ctx'", 1 << 20);
            o.max_tokens = (int32_t)x;
        } else if (rl_args_is(&A, "-np|--parallel"))
            ok = rl_args_i32(&A, 1, 4096, &o.ep.max_seqs);
        else if (rl_args_is(&A, "-b|--batch-size")) {
            ok = rl_args_i32(&A, 1, 65536, &o.ep.max_batch_tokens);
            o.batch_set = true;
        } else if (rl_args_is(&A, "-c|--ctx-size"))
            ok = rl_args_i32(&A, 0, 1 << 20, &o.ep.n_ctx);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 0, 1024, &o.ep.n_threads);
        else if (rl_args_is(&A, "-ctk|--cache-type-k"))
            ok = rl_args_str(&A, &o.ep.cache_type_k); /* checked by rl_engine_new */
        else if (rl_args_is(&A, "-ctv|--cache-type-v"))
            ok = rl_args_str(&A, &o.ep.cache_type_v);
        else if (rl_args_is(&A, "--kv-mem"))
            ok = rl_args_size(&A, true, &o.ep.kv_mem_bytes);
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    if (o.max_tokens > 0 && o.max_tokens < o.output_len[1]) {
        fprintf(stderr,
                "redline bench-serve: --max-tokens %d is below the largest output length %d\n",
                o.max_tokens, o.output_len[1]);
        return 2;
    }
    o.ep.model_path = rl_cli_model_path(o.model);
    /* The naive baseline runs static batches without chunked prefill, and
     * the scheduler closes a static batch once anything runs: with the
     * default token budget a batch would hold only budget / prompt
     * requests (one, for 256-token prompts).  A static-batching server
     * prefills its whole batch at once, so unless -b is given the budget
     * is raised to hold max_seqs full prompts (memory still bounds it). */
    if (o.ep.naive && !o.batch_set) {
        int64_t want = (int64_t)o.ep.max_seqs * (o.shared + o.prompt_len[1] + 1);
        if (want > 65536) want = 65536;
        if (want > o.ep.max_batch_tokens) o.ep.max_batch_tokens = (int32_t)want;
    }

    rl_err err = {0};
    rl_engine *e = NULL;
    if (rl_engine_new(&o.ep, &e, &err)) {
        fprintf(stderr, "redline bench-serve: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    breq *reqs = rl_calloc((size_t)o.n_req, sizeof *reqs);
    size_t max_itl = 0;
    double *itl = NULL, *ttft = NULL, *tpot = NULL;
    if (!reqs) goto out;
    if (build_workload(&o, rl_engine_tokenizer(e), reqs)) goto out;
    if (o.dump && dump_workload(&o, reqs)) goto out;
    if (o.dump_only) {
        rc = o.dump ? 0 : 2;
        if (!o.dump)
            fprintf(stderr, "redline bench-serve: --dump-only needs --dump-workload FILE\n");
        goto out;
    }
    for (int32_t r = 0; r < o.n_req; r++) max_itl += (size_t)reqs[r].out_len;
    itl = rl_malloc((max_itl + 1) * sizeof *itl);
    ttft = rl_malloc((size_t)o.n_req * sizeof *ttft);
    tpot = rl_malloc((size_t)o.n_req * sizeof *tpot);
    if (!itl || !ttft || !tpot) {
        fprintf(stderr, "redline bench-serve: out of memory\n");
        goto out;
    }

    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.sample.temperature = o.temp;
    gp.sample.seed = o.seed;
    gp.sample.no_logprob = true; /* as the server's requests without logprobs */
    gp.ignore_eos = !o.eos;

    rl_engine_stats st0 = rl_engine_get_stats(e);
    int32_t n_itl = 0, n_done = 0, next = 0, n_err = 0;
    int64_t out_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
    double live_w = 0, alloc_w = 0, kv_peak_frac = 0;
    int32_t peak_running = 0;
    const double t0 = rl_time_s(), c0 = rl_report_cpu_s();
    double t_idle_since = -1;
    while (n_done < o.n_req) {
        double now = rl_time_s() - t0;
        for (; next < o.n_req && reqs[next].t_arrive <= now; next++) {
            breq *q = &reqs[next];
            gp.max_tokens = o.max_tokens == 0 ? q->out_len : o.max_tokens > 0 ? o.max_tokens : 0;
            if (rl_engine_submit(e, q->prompt, q->n_prompt, &gp, &q->id, &err)) {
                fprintf(stderr, "redline bench-serve: request %d: %s\n", next, err.msg);
                goto out;
            }
            q->submitted = true;
        }
        double ts = rl_time_s();
        int32_t n_step = rl_engine_step(e);
        double te = rl_time_s();
        if (n_step > 0) {
            rl_engine_stats s = rl_engine_get_stats(e);
            double dt = te - ts, alloc = (double)s.kv_blocks_used * s.block_size;
            live_w += (double)s.live_tokens * dt;
            alloc_w += alloc * dt;
            if (s.kv_blocks_total > 0 &&
                (double)s.kv_blocks_used / s.kv_blocks_total > kv_peak_frac)
                kv_peak_frac = (double)s.kv_blocks_used / s.kv_blocks_total;
            if (s.n_running > peak_running) peak_running = s.n_running;
            t_idle_since = -1;
        }
        /* take every event that step produced */
        for (int32_t r = 0; r < next; r++) {
            breq *q = &reqs[r];
            if (!q->submitted || q->done) continue;
            rl_event ev;
            while (rl_engine_next(e, q->id, &ev, 0) == RL_OK) {
                if (ev.kind == RL_EV_TOKEN && ev.token >= 0) {
                    if (q->n_tok == 0)
                        q->t_first = te;
                    else if (n_itl < (int32_t)max_itl)
                        itl[n_itl++] = te - q->t_last;
                    q->t_last = te;
                    q->n_tok++;
                    /* asked for more than it uses: stop it before the next step */
                    if (o.max_tokens != 0 && q->n_tok == q->out_len) rl_engine_cancel(e, q->id);
                } else if (ev.kind == RL_EV_DONE) {
                    q->done = true;
                    q->n_cached = ev.n_cached;
                    q->finish = ev.finish;
                    if (ev.finish == RL_FINISH_ERROR ||
                        (ev.finish == RL_FINISH_CANCELLED && q->n_tok < q->out_len)) {
                        n_err++;
                        snprintf(q->error, sizeof q->error, "%s",
                                 ev.error[0] ? ev.error : "cancelled");
                        fprintf(stderr, "redline bench-serve: request %d failed: %s\n", r,
                                q->error);
                    }
                    n_done++;
                    break;
                }
            }
        }
        if (n_step == 0) {
            if (next < o.n_req)
                sleep_s(reqs[next].t_arrive - (rl_time_s() - t0));
            else if (n_done < o.n_req) {
                /* nothing to compute, nothing to arrive, yet requests pending:
                 * give cancellations one more step, then call it a stall */
                if (t_idle_since < 0)
                    t_idle_since = te;
                else if (te - t_idle_since > 5.0) {
                    fprintf(stderr,
                            "redline bench-serve: engine stalled with %d requests unfinished\n",
                            o.n_req - n_done);
                    goto out;
                }
                sleep_s(0.001);
            }
        }
    }
    const double dur = rl_time_s() - t0, cpu = rl_report_cpu_s() - c0;
    rl_engine_stats st = rl_engine_get_stats(e);

    int32_t n_tpot = 0, hit_reqs = 0;
    int64_t hit_prompt = 0, hit_cached = 0; /* over requests that hit the prefix cache */
    for (int32_t r = 0; r < o.n_req; r++) {
        breq *q = &reqs[r];
        out_tokens += q->n_tok;
        prompt_tokens += q->n_prompt;
        cached_tokens += q->n_cached;
        if (q->n_cached > 0) {
            hit_reqs++;
            hit_prompt += q->n_prompt;
            hit_cached += q->n_cached;
        }
        ttft[r] = q->n_tok > 0 ? q->t_first - (t0 + q->t_arrive) : 0;
        if (q->n_tok > 1) tpot[n_tpot++] = (q->t_last - q->t_first) / (q->n_tok - 1);
    }
    rl_report_dist d_ttft = rl_report_dist_of(ttft, o.n_req),
                   d_tpot = rl_report_dist_of(tpot, n_tpot), d_itl = rl_report_dist_of(itl, n_itl);

    /* tokens of KV one sequence needs: paged, its length (prompt + output);
     * naive, what it reserves (prompt + max_tokens, at most the context) */
    int32_t n_ctx = rl_engine_n_ctx(e);
    double mean_seq = 0;
    for (int32_t r = 0; r < o.n_req; r++) {
        const breq *q = &reqs[r];
        int32_t t = q->n_prompt + q->out_len;
        if (o.ep.naive)
            t = o.max_tokens < 0 ? n_ctx
                                 : q->n_prompt + (o.max_tokens > 0 ? o.max_tokens : q->out_len);
        mean_seq += t > n_ctx ? n_ctx : t;
    }
    int32_t per_seq = (int32_t)ceil(mean_seq / o.n_req);
    int32_t bs = st.block_size > 0 ? st.block_size : 16;
    int64_t budget_tokens = (int64_t)st.kv_blocks_total * bs;
    int64_t fit = budget_tokens / (((int64_t)per_seq + bs - 1) / bs * bs);
    double util = alloc_w > 0 ? live_w / alloc_w : 0;
    uint64_t pq = st.prefix_queries - st0.prefix_queries, ph = st.prefix_hits - st0.prefix_hits;
    double hit_rate = pq ? (double)ph / (double)pq : 0;
    int64_t computed_prompt = prompt_tokens - cached_tokens;
    const char *mode = o.ep.naive ? "naive" : "paged";

    if (o.json) {
        json_t *j = json_pack(
            "{s:s, s:s, s:s, s:i, s:[i,i], s:[i,i], s:i, s:f, s:i, s:i, s:i, s:i, s:b, s:b, s:I, "
            "s:b, s:i}",
            "model", o.ep.model_path, "mode", mode, "prompt_source", o.text ? "text" : "random",
            "n_requests", (int)o.n_req, "prompt_len", (int)o.prompt_len[0], (int)o.prompt_len[1],
            "output_len", (int)o.output_len[0], (int)o.output_len[1], "shared_prefix",
            (int)o.shared, "rate", o.rate, "max_seqs", (int)o.ep.max_seqs, "batch_tokens",
            (int)o.ep.max_batch_tokens, "n_ctx", (int)n_ctx, "threads", (int)o.ep.n_threads,
            "prefix_cache", (int)(o.ep.prefix_cache && !o.ep.naive), "chunked_prefill",
            (int)(o.ep.chunked_prefill && !o.ep.naive), "seed", (json_int_t)o.seed, "ignore_eos",
            (int)!o.eos, "max_tokens", (int)o.max_tokens);
        json_t *r = json_pack(
            "{s:f, s:i, s:i, s:f, s:I, s:I, s:I, s:f, s:i, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:o, "
            "s:o, s:o}",
            "duration_s", dur, "completed", (int)(o.n_req - n_err), "failed", (int)n_err,
            "requests_per_s", o.n_req / dur, "prompt_tokens", (json_int_t)prompt_tokens,
            "cached_prompt_tokens", (json_int_t)cached_tokens, "computed_prompt_tokens",
            (json_int_t)computed_prompt, "prefill_saved_frac",
            prompt_tokens ? (double)cached_tokens / (double)prompt_tokens : 0.0, "hit_requests",
            (int)hit_reqs, "prefill_saved_frac_on_hits",
            hit_prompt ? (double)hit_cached / (double)hit_prompt : 0.0, "output_tokens",
            (json_int_t)out_tokens, "prompt_tok_s", prompt_tokens / dur, "output_tok_s",
            out_tokens / dur, "total_tok_s", (prompt_tokens + out_tokens) / dur, "cpu_s", cpu,
            "total_tok_per_cpu_s", cpu > 0 ? (prompt_tokens + out_tokens) / cpu : 0.0, "ttft_s",
            rl_report_dist_json(&d_ttft), "tpot_s", rl_report_dist_json(&d_tpot), "itl_s",
            rl_report_dist_json(&d_itl));
        json_t *k = json_pack(
            "{s:f, s:f, s:i, s:i, s:I, s:I, s:I, s:i, s:I, s:i, s:I, s:I, s:f, s:I, s:I, s:f}",
            "kv_utilization", util, "kv_peak_used_frac", kv_peak_frac, "kv_blocks_total",
            (int)st.kv_blocks_total, "block_size", (int)bs, "kv_bytes_per_token",
            (json_int_t)st.kv_bytes_per_token, "kv_budget_tokens", (json_int_t)budget_tokens,
            "kv_budget_bytes", (json_int_t)((size_t)budget_tokens * st.kv_bytes_per_token),
            "seq_tokens", (int)per_seq, "seqs_fit", (json_int_t)fit, "peak_running",
            (int)peak_running, "prefix_queries", (json_int_t)pq, "prefix_hits", (json_int_t)ph,
            "prefix_hit_rate", hit_rate, "preemptions",
            (json_int_t)(st.preemptions - st0.preemptions), "steps",
            (json_int_t)(st.steps - st0.steps), "busy_s", st.busy_s - st0.busy_s);
        if (j && r && k && !json_object_update(j, r) && !json_object_update(j, k)) {
            if (rl_report_json_write(stdout, j, false, "redline bench-serve")) n_err++;
        } else {
            json_decref(j);
            fprintf(stderr, "redline bench-serve: out of memory building the JSON output\n");
            n_err++;
        }
        json_decref(r);
        json_decref(k);
    } else {
        FILE *f = stdout;
        char rate[32];
        if (o.rate > 0)
            snprintf(rate, sizeof rate, "%g req/s (Poisson)", o.rate);
        else
            snprintf(rate, sizeof rate, "all at once");
        fprintf(f, "============ redline bench-serve (%s) ============\n", mode);
        fprintf(f, "%-34s %s\n", "model", o.ep.model_path);
        fprintf(f, "%-34s %d, %s\n", "requests", o.n_req, rate);
        fprintf(f, "%-34s %d+%d..%d (%s) / %d..%d\n", "prompt (shared+own) / output", o.shared,
                o.prompt_len[0], o.prompt_len[1], o.text ? "text" : "random ids", o.output_len[0],
                o.output_len[1]);
        fprintf(f, "%-34s -np %d, -b %d, -c %d, prefix cache %s, chunked %s\n", "engine",
                o.ep.max_seqs, o.ep.max_batch_tokens, n_ctx,
                o.ep.prefix_cache && !o.ep.naive ? "on" : "off",
                o.ep.chunked_prefill && !o.ep.naive ? "on" : "off");
        fprintf(f, "%-34s %d / %d\n", "completed / failed", o.n_req - n_err, n_err);
        fprintf(f, "%-34s %.2f\n", "duration (s)", dur);
        fprintf(f, "%-34s %.3f\n", "request throughput (req/s)", o.n_req / dur);
        fprintf(f, "%-34s %.1f\n", "prompt throughput (tok/s)", prompt_tokens / dur);
        fprintf(f, "%-34s %.1f\n", "output throughput (tok/s)", out_tokens / dur);
        fprintf(f, "%-34s %.1f\n", "total throughput (tok/s)", (prompt_tokens + out_tokens) / dur);
        fprintf(f, "%-34s %.2f s, %.1f total tok per CPU-s\n", "CPU time (all threads)", cpu,
                cpu > 0 ? (prompt_tokens + out_tokens) / cpu : 0);
        fprintf(f, "%-34s %lld / %lld / %lld (%.1f%% saved)\n",
                "prompt tokens submitted/cached/computed", (long long)prompt_tokens,
                (long long)cached_tokens, (long long)computed_prompt,
                prompt_tokens ? 100.0 * (double)cached_tokens / (double)prompt_tokens : 0);
        if (hit_reqs)
            fprintf(f, "%-34s %d requests, %.1f%% of their prompt tokens cached\n",
                    "prefix-cache hits", hit_reqs, 100.0 * (double)hit_cached / (double)hit_prompt);
        fprintf(f, "%-34s %lld\n", "output tokens", (long long)out_tokens);
        fprintf(f, "%-34s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p99");
        const char *names[3] = {"TTFT", "TPOT", "ITL"};
        rl_report_dist *ds[3] = {&d_ttft, &d_tpot, &d_itl};
        for (int k = 0; k < 3; k++)
            fprintf(f, "  %-32s %10.1f %10.1f %10.1f\n", names[k], ds[k]->mean * 1e3,
                    ds[k]->p50 * 1e3, ds[k]->p99 * 1e3);
        fprintf(f, "%-34s %.1f%% (peak %.1f%% of blocks in use, peak %d running)\n",
                "KV utilization", 100 * util, 100 * kv_peak_frac, peak_running);
        fprintf(f, "%-34s %zu B/token, %lld tokens (%.1f MiB)\n", "KV budget",
                st.kv_bytes_per_token, (long long)budget_tokens,
                (double)budget_tokens * (double)st.kv_bytes_per_token / 1048576.0);
        fprintf(f, "%-34s %lld (of %d tokens%s)\n", "sequences that fit the budget", (long long)fit,
                per_seq, o.ep.naive ? " reserved each" : " each");
        fprintf(f, "%-34s %.1f%% (%llu of %llu blocks)\n", "prefix hit rate", 100 * hit_rate,
                (unsigned long long)ph, (unsigned long long)pq);
        fprintf(f, "%-34s %llu\n", "preemptions",
                (unsigned long long)(st.preemptions - st0.preemptions));
        fprintf(f, "%-34s %llu (busy %.2f s)\n", "engine steps",
                (unsigned long long)(st.steps - st0.steps), st.busy_s - st0.busy_s);
    }
    rc = n_err ? 1 : 0;
out:
    for (int32_t r = 0; reqs && r < o.n_req; r++) rl_free(reqs[r].prompt);
    rl_free(reqs);
    rl_free(itl);
    rl_free(ttft);
    rl_free(tpot);
    rl_engine_free(e);
    return rc;
}
