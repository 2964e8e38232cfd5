/* `redline perplexity`: perplexity of a model over a text file, and KL
 * divergence against a saved distribution of another (base) model run.
 *
 *   redline perplexity [-m MODEL] -f TEXT [-c CTX] [--stride S] [--chunks N]
 *                      [-t THREADS] [--save-dist FILE] [--kl-base FILE]
 *
 * Windows.  The text is tokenized once (no special tokens); window w covers
 * text tokens [w*S, w*S + T) where T = CTX, or CTX-1 after a BOS when the
 * model's tokenizer adds one, and S = min(stride, T) (default T).
 * Each window scores the tokens the previous window did not: its last
 * min(S, CTX-1) tokens, or for the first window every token from its
 * second on.  With S = CTX/2 that is the usual "second half of each
 * window", so each scored token sees at least CTX/2 tokens of context;
 * with S = CTX (the default, half the cost) windows do not overlap and
 * early tokens of a window see little context, which gives a higher
 * perplexity.  PPL = exp(mean NLL); the ± is exp(mean) * standard error of
 * the mean NLL (delta method).
 *
 * --llama-windows instead cuts llama-perplexity's windows, so that both
 * programs score identical tokens: the stream is the text's tokens with BOS
 * first when the tokenizer adds one, window w is stream tokens
 * [w*CTX, (w+1)*CTX) with its first replaced by BOS (when added), and each
 * window scores its slots [CTX/2 + 1, CTX) (llama-perplexity's second half).
 *
 * Distribution files (--save-dist, read by --kl-base), little-endian:
 *   header: char magic[4] = "RLPD"; u32 version = 1; u32 k (= 32);
 *           u32 n_vocab; u32 ctx; u32 stride; u64 n_tokens
 *   n_tokens records: i32 target; i32 top_id[k] (best first);
 *           f32 top_logprob[k]; f32 log_rest (log of the probability mass
 *           outside the top k; -inf if none); f32 target_logprob
 * KL(base || this) is approximated on the k+1 buckets {top-k ids of the
 * base, everything else}: sum_i pb_i (log pb_i - log pc_i) + pb_rest
 * (log pb_rest - log pc_rest).  Merging outcomes never increases KL, so this
 * is a lower bound of the full-vocabulary KL; with k = 32 the tail mass is
 * usually small and the bound tight.  "top-1 agreement" is the share of
 * scored tokens where both models' most likely token is the same.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "kv/seqkv.h"
#include "model/kcal.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define PD_K     32
#define PD_MAGIC "RLPD"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: redline perplexity [-m MODEL] -f TEXT [options]\n\n"
        "  -m, --model FILE    GGUF model (default $REDLINE_MODEL or %s)\n"
        "  -f, --file FILE     text to score\n"
        "  -c, --ctx-size N    window length in tokens (default 512)\n"
        "      --stride S      window start spacing (default CTX; CTX/2 = score the\n"
        "                      second half of overlapping windows)\n"
        "      --chunks N      stop after N windows (default: the whole text)\n"
        "      --llama-windows llama-perplexity's windows and scored tokens (see the\n"
        "                      source's header; --stride is ignored)\n"
        "  -t, --threads N     threads (default: CPU count)\n"
        "  -b, --batch-size N  tokens per forward (default 512)\n"
        "      --weights W     stored (default: the file's types, 8-bit activations),\n"
        "                      f32 or f16 (dequantized at load, float activations)\n"
        "      --no-fast-tiles no tiles: layers not repacked at load, the text on the\n"
        "                      per-token matmul path (the baseline of the q4_K/q6_K/\n"
        "                      q4_1 tiles)\n"
        "      --save-dist F   write per-token top-%d log-probs + tail mass to F\n"
        "      --kl-base F     compare with a --save-dist file of a base model run:\n"
        "                      mean KL(base || this) and top-1 agreement\n"
        "  -ctk, --cache-type-k T  K cache pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
        "  -ctv, --cache-type-v T  V cache pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
        "  -h, --help          this text\n",
        RL_DEFAULT_MODEL, PD_K);
}

typedef struct pd_header {
    char magic[4];
    uint32_t version, k, n_vocab, ctx, stride;
    uint64_t n_tokens;
} pd_header;

typedef struct pd_rec {
    int32_t target;
    int32_t top_id[PD_K];
    float top_lp[PD_K];
    float log_rest;
    float target_lp;
} pd_rec;
_Static_assert(sizeof(pd_header) == 32, "distribution file header is 32 bytes");
_Static_assert(sizeof(pd_rec) == 12 + 8 * PD_K, "distribution record layout");

/* Log-softmax statistics of one row: logsumexp, and the top-k ids (best
 * first, ties to the lower id) with their log-probs and the tail mass. */
static void row_stats(const float *x, int32_t V, int32_t target, pd_rec *r) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int32_t i = 0; i < V; i++) s += exp((double)x[i] - mx);
    double lse = mx + log(s);
    int32_t n = 0; /* sorted insertion into top-k */
    for (int32_t i = 0; i < V; i++) {
        if (n == PD_K && x[i] <= x[r->top_id[n - 1]]) continue;
        int32_t j = n < PD_K ? n++ : PD_K - 1;
        while (j > 0 && x[r->top_id[j - 1]] < x[i]) {
            r->top_id[j] = r->top_id[j - 1];
            j--;
        }
        r->top_id[j] = i;
    }
    double top_mass = 0;
    for (int32_t j = 0; j < n; j++) {
        r->top_lp[j] = (float)(x[r->top_id[j]] - lse);
        top_mass += exp((double)x[r->top_id[j]] - lse);
    }
    for (int32_t j = n; j < PD_K; j++) {
        r->top_id[j] = -1;
        r->top_lp[j] = -INFINITY;
    }
    double rest = 1.0 - top_mass;
    r->log_rest = rest > 1e-30 ? (float)log(rest) : -INFINITY;
    r->target = target;
    r->target_lp = (float)(x[target] - lse);
}

/* KL(base || cur) over the base's top-k buckets plus the tail (see top). */
static double kl_bucketed(const pd_rec *b, const float *x, int32_t V, double lse) {
    double kl = 0, cur_top = 0, base_top = 0;
    for (int32_t j = 0; j < PD_K && b->top_id[j] >= 0; j++) {
        double pb = exp((double)b->top_lp[j]);
        double lc = x[b->top_id[j]] - lse;
        cur_top += exp(lc);
        base_top += pb;
        if (pb > 0) kl += pb * ((double)b->top_lp[j] - lc);
    }
    double pb_rest = 1.0 - base_top, pc_rest = 1.0 - cur_top;
    if (pb_rest > 1e-12) kl += pb_rest * (log(pb_rest) - log(pc_rest > 1e-30 ? pc_rest : 1e-30));
    (void)V;
    return kl;
}

int rl_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *save = NULL, *klb = NULL;
    rl_type ctk = RL_TYPE_F16, ctv = RL_TYPE_F16;
    int32_t ctx = 512, stride = 0, chunks = 0, threads = 0, batch = 512;
    bool llama_win = false;
    rl_model_weights weights = RL_MODEL_WEIGHTS_STORED;
    static const char *const weight_names[] = {"stored", "f32", "f16", NULL};
    static const rl_model_weights weight_modes[] = {RL_MODEL_WEIGHTS_STORED, RL_MODEL_WEIGHTS_F32,
                                                    RL_MODEL_WEIGHTS_F16};
    rl_args A;
    rl_args_init(&A, "redline perplexity", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        const char *v = NULL;
        int k;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &model);
        else if (rl_args_is(&A, "-f|--file"))
            ok = rl_args_str(&A, &file);
        else if (rl_args_is(&A, "-c|--ctx-size"))
            ok = rl_args_i32(&A, 2, 1 << 20, &ctx);
        else if (rl_args_is(&A, "--stride"))
            ok = rl_args_i32(&A, 1, 1 << 20, &stride);
        else if (rl_args_is(&A, "--chunks"))
            ok = rl_args_i32(&A, 1, 1 << 30, &chunks);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 1, 1024, &threads);
        else if (rl_args_is(&A, "-b|--batch-size"))
            ok = rl_args_i32(&A, 1, 1 << 16, &batch);
        else if (rl_args_is(&A, "--save-dist"))
            ok = rl_args_str(&A, &save);
        else if (rl_args_is(&A, "--kl-base"))
            ok = rl_args_str(&A, &klb);
        else if (rl_args_is(&A, "--llama-windows"))
            llama_win = true;
        else if (rl_args_is(&A, "--no-fast-tiles"))
            rl_matmul_set_fast_tiles(false);
        else if (rl_args_is(&A, "--weights")) {
            if ((ok = rl_args_choice(&A, weight_names, &k))) weights = weight_modes[k];
        } else if (rl_args_is(&A, "-ctk|--cache-type-k") || rl_args_is(&A, "-ctv|--cache-type-v")) {
            rl_type *t = rl_args_is(&A, "-ctk|--cache-type-k") ? &ctk : &ctv;
            if ((ok = rl_args_str(&A, &v)) && !(rl_type_from_name(v, t) && rl_kv_type_known(*t)))
                ok = rl_args_bad(&A, v, "expected f16, f32, q8_0, q8_64, q4_0 or iq4_nl");
        } else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    if (!file) {
        fprintf(stderr, "redline perplexity: -f TEXT is required (see --help)\n");
        return 2;
    }
    if (!stride || llama_win) stride = ctx;
    if (stride > ctx) {
        fprintf(stderr, "redline perplexity: --stride %d exceeds the context %d\n", (int)stride,
                (int)ctx);
        return 2;
    }
    if (!threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc > 0 ? (int32_t)(nc > 64 ? 64 : nc) : 1;
    }
    model = rl_cli_model_path(model);
    rl_kernels_init(RL_KERNELS_AUTO);

    int rc = 1;
    rl_err err = {0};
    rl_model *m = NULL;
    rl_tokenizer *tok = NULL;
    rl_threadpool *tp = NULL;
    rl_seqkv kv = {0};
    char *text = NULL;
    int32_t *ids = NULL, *wtok = NULL, *wpos = NULL, *wseq = NULL;
    bool *want = NULL, *prompt = NULL;
    float *lg = NULL;
    FILE *fs = NULL, *fb = NULL;
    size_t n_ids = 0, tlen = 0;

    if (!(text = rl_cli_read_file(file, &tlen))) {
        fprintf(stderr, "redline perplexity: cannot read '%s': %s\n", file, strerror(errno));
        return 1;
    }
    double t0 = rl_time_s();
    rl_model_opts mo = {.max_batch = batch, .prefault = true, .weights = weights};
    if (rl_model_load(model, &mo, &m, &err) || rl_tokenizer_load(rl_model_gguf(m), &tok, &err)) {
        fprintf(stderr, "redline perplexity: %s: %s\n", model, err.msg);
        goto done;
    }
    if (rl_tokenizer_encode(tok, text, tlen, 0, &ids, &n_ids, &err)) {
        fprintf(stderr, "redline perplexity: %s\n", err.msg);
        goto done;
    }
    const int32_t V = rl_model_n_vocab(m);
    const int32_t bos = rl_tokenizer_add_bos(tok) ? rl_tokenizer_bos(tok) : -1;
    if (llama_win && bos >= 0) { /* the stream llama-perplexity cuts: BOS first */
        int32_t *s = rl_realloc(ids, (n_ids + 1) * sizeof(int32_t));
        if (!s) {
            fprintf(stderr, "redline perplexity: out of memory\n");
            goto done;
        }
        ids = s;
        memmove(ids + 1, ids, n_ids * sizeof(int32_t));
        ids[0] = bos;
        n_ids++;
    }
    /* text (stream) tokens per window */
    const int32_t n_text = llama_win ? ctx : ctx - (bos >= 0 ? 1 : 0);
    if (n_text < 2 || n_ids < (size_t)n_text + 1) {
        fprintf(stderr,
                "redline perplexity: the text has %zu tokens; need at least %d for one "
                "window of -c %d\n",
                n_ids, (int)n_text + 1, (int)ctx);
        goto done;
    }
    if (stride > n_text) stride = n_text; /* windows step over text tokens */
    /* Forward chunk: bounded so that its logits stay under 64 MiB. */
    int32_t fb_tok = (int32_t)((64u << 20) / ((size_t)V * sizeof(float)));
    if (fb_tok < 1) fb_tok = 1;
    if (fb_tok > rl_model_max_batch(m)) fb_tok = rl_model_max_batch(m);
    tp = threads > 1 ? rl_threadpool_new(threads) : NULL;
    wtok = malloc((size_t)ctx * sizeof(int32_t));
    wpos = malloc((size_t)fb_tok * sizeof(int32_t));
    wseq = calloc((size_t)fb_tok, sizeof(int32_t));
    want = malloc((size_t)fb_tok * sizeof(bool));
    prompt = malloc((size_t)fb_tok * sizeof(bool)); /* the text is a prompt */
    lg = malloc((size_t)fb_tok * (size_t)V * sizeof(float));
    if (!wtok || !wpos || !wseq || !want || !prompt || !lg || (threads > 1 && !tp) ||
        rl_seqkv_init_kv(&kv, m, ctx, 1, 0, ctk, ctv, &err) ||
        (rl_kv_type_quantized(ctk) && rl_model_calibrate_k(m, tok, tp, &err))) {
        fprintf(stderr, "redline perplexity: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    pd_header hdr = {{'R', 'L', 'P', 'D'}, 1, PD_K, (uint32_t)V, (uint32_t)ctx,
                     (uint32_t)stride,     0};
    if (save) {
        if (!(fs = fopen(save, "wb")) || fwrite(&hdr, sizeof hdr, 1, fs) != 1) {
            fprintf(stderr, "redline perplexity: cannot write '%s': %s\n", save, strerror(errno));
            goto done;
        }
    }
    if (klb) {
        pd_header bh;
        if (!(fb = fopen(klb, "rb")) || fread(&bh, sizeof bh, 1, fb) != 1) {
            fprintf(stderr, "redline perplexity: cannot read '%s'\n", klb);
            goto done;
        }
        if (memcmp(bh.magic, PD_MAGIC, 4) || bh.version != 1 || bh.k != PD_K ||
            bh.n_vocab != (uint32_t)V || bh.ctx != (uint32_t)ctx || bh.stride != (uint32_t)stride) {
            fprintf(stderr,
                    "redline perplexity: '%s' is not a distribution file for this setup "
                    "(need vocab %d, ctx %d, stride %d; file has %u, %u, %u)\n",
                    klb, (int)V, (int)ctx, (int)stride, bh.n_vocab, bh.ctx, bh.stride);
            goto done;
        }
    }
    fprintf(stderr, "perplexity: %s, %zu tokens, ctx %d, stride %d, load+tokenize %.2f s\n",
            rl_model_name(m)[0] ? rl_model_name(m) : model, n_ids, (int)ctx, (int)stride,
            rl_time_s() - t0);

    double nll = 0, nll2 = 0, kl = 0, kl2 = 0;
    int64_t n_scored = 0, n_top1 = 0;
    int32_t n_win = 0;
    t0 = rl_time_s();
    for (size_t start = 0; start + (size_t)n_text <= n_ids; start += (size_t)stride) {
        if (chunks && n_win >= chunks) break;
        int32_t off = bos >= 0 ? 1 : 0, n = 0;
        if (bos >= 0 && !llama_win) wtok[n++] = bos;
        for (int32_t j = 0; j < n_text; j++) wtok[n++] = ids[start + (size_t)j];
        if (bos >= 0 && llama_win) wtok[0] = bos;
        /* scored window slots: [first, ctx); slot j is predicted at j-1 */
        int32_t first = n_win == 0 ? off + 1 : ctx - (stride < n_text - 1 ? stride : n_text - 1);
        if (first < off + 1) first = off + 1;
        if (llama_win) first = ctx / 2 + 1;
        for (int32_t i0 = 0; i0 < ctx - 1; i0 += fb_tok) {
            int32_t nb = ctx - 1 - i0 < fb_tok ? ctx - 1 - i0 : fb_tok;
            for (int32_t j = 0; j < nb; j++) {
                wpos[j] = i0 + j;
                want[j] = i0 + j + 1 >= first;
                prompt[j] = true;
            }
            const int32_t *tables[1] = {kv.tables[0]};
            rl_batch b = {.n_tok = nb,
                          .token = wtok + i0,
                          .pos = wpos,
                          .seq = wseq,
                          .want_logits = want,
                          .prompt = prompt,
                          .n_seq = 1,
                          .block_tables = tables,
                          .n_blocks = kv.n_blocks};
            if (rl_model_forward(m, &b, kv.layers, lg, tp, &err)) {
                fprintf(stderr, "redline perplexity: %s\n", err.msg);
                goto done;
            }
            int32_t r = 0;
            for (int32_t j = 0; j < nb; j++) {
                if (!want[j]) continue;
                const float *x = lg + (size_t)(r++) * V;
                pd_rec rec;
                row_stats(x, V, wtok[i0 + j + 1], &rec);
                double l = -(double)rec.target_lp;
                nll += l;
                nll2 += l * l;
                n_scored++;
                if (fs && fwrite(&rec, sizeof rec, 1, fs) != 1) {
                    fprintf(stderr, "redline perplexity: write error on '%s'\n", save);
                    goto done;
                }
                if (fb) {
                    pd_rec br;
                    if (fread(&br, sizeof br, 1, fb) != 1 || br.target != rec.target) {
                        fprintf(stderr,
                                "redline perplexity: '%s' ends early or was made from "
                                "a different text (token %lld)\n",
                                klb, (long long)n_scored);
                        goto done;
                    }
                    double lse = (double)x[rec.target] - rec.target_lp;
                    double d = kl_bucketed(&br, x, V, lse);
                    kl += d;
                    kl2 += d * d;
                    n_top1 += br.top_id[0] == rec.top_id[0];
                }
            }
        }
        n_win++;
        double mean = nll / (double)n_scored;
        fprintf(stderr, "\r[%d] ppl %.4f  (%lld tokens, %.1f tok/s)   ", (int)n_win, exp(mean),
                (long long)n_scored, (double)n_win * (ctx - 1) / (rl_time_s() - t0));
    }
    fputc('\n', stderr);
    double mean = nll / (double)n_scored;
    double var = n_scored > 1 ? (nll2 / (double)n_scored - mean * mean) : 0;
    double se = n_scored > 1 ? sqrt(var > 0 ? var / (double)(n_scored - 1) : 0) : 0;
    printf("perplexity: %.4f +/- %.4f over %lld scored tokens in %d windows (ctx %d, stride %d)\n",
           exp(mean), exp(mean) * se, (long long)n_scored, (int)n_win, (int)ctx, (int)stride);
    if (fb) {
        double km = kl / (double)n_scored;
        double kv2 = kl2 / (double)n_scored - km * km;
        double kse = n_scored > 1 ? sqrt(kv2 > 0 ? kv2 / (double)(n_scored - 1) : 0) : 0;
        printf("KL divergence (base || this, top-%d + tail): %.6f +/- %.6f\n", PD_K, km, kse);
        printf("top-1 agreement: %.2f%%\n", 100.0 * (double)n_top1 / (double)n_scored);
    }
    if (fs) {
        hdr.n_tokens = (uint64_t)n_scored;
        if (fseek(fs, 0, SEEK_SET) || fwrite(&hdr, sizeof hdr, 1, fs) != 1) {
            fprintf(stderr, "redline perplexity: write error on '%s'\n", save);
            goto done;
        }
    }
    rc = 0;
done:
    if (fs && fclose(fs) && rc == 0) rc = 1;
    if (fb) fclose(fb);
    free(text);
    rl_free(ids);
    free(wtok);
    free(wpos);
    free(wseq);
    free(want);
    free(prompt);
    free(lg);
    rl_seqkv_free(&kv);
    rl_tokenizer_free(tok);
    rl_model_free(m);
    rl_threadpool_free(tp);
    return rc;
}
