/* Embedding redline through its public header alone.
 *
 *   cc -std=c11 -Iinclude examples/embed.c build/librl.a \
 *      -lm -lpthread -lpcre2-8 -ljansson -lnettle -o embed      (or: make examples)
 *   build/examples/embed [MODEL.gguf] [PROMPT]
 *
 * Loads a model, renders a chat prompt with the model's template, starts
 * the engine's step thread and streams a greedy completion to stdout as
 * its events arrive.  Then it shows the streaming detokenizer: the
 * generated token ids pushed one at a time give back the same text.
 * Model facts and timings go to stderr.  Exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redline.h"

static int fail(const char *what, const rl_err *err) {
    fprintf(stderr, "embed: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "models/smollm2-135m.gguf";
    const char *prompt = argc > 2 ? argv[2] : "Name three primary colors.";
    rl_err err = {0};

    rl_engine_params ep;
    rl_engine_params_default(&ep);
    ep.model_path = model;
    ep.n_ctx = 1024;
    ep.max_seqs = 1;
    rl_engine *e = NULL;
    if (rl_engine_new(&ep, &e, &err)) return fail(model, &err);

    rl_vocab *v = NULL;
    if (rl_engine_vocab(e, &v, &err)) {
        rl_engine_free(e);
        return fail("vocabulary", &err);
    }
    rl_model_info mi;
    rl_vocab_model_info(v, &mi);
    fprintf(stderr,
            "embed: %s (%s): %d layers, vocabulary %d, %d end-of-generation tokens, %s template\n",
            mi.name[0] ? mi.name : model, mi.arch, (int)mi.n_layer, (int)mi.n_vocab, (int)mi.n_eog,
            mi.chat_template);

    /* messages -> prompt text -> token ids */
    rl_chat_msg msgs[] = {{"system", "You are a concise assistant."}, {"user", prompt}};
    char *text = NULL;
    size_t text_len = 0;
    int32_t *ids = NULL, n_ids = 0;
    int rc = 1;
    if (rl_chat_render(v, msgs, 2, true, &text, &text_len, &err)) {
        fail("chat template", &err);
        goto out;
    }
    if (rl_tokenize(v, text, text_len, RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_PARSE_SPECIAL, &ids,
                    &n_ids, &err)) {
        fail("tokenize", &err);
        goto out;
    }

    /* the engine steps on its own thread; this one only takes events */
    if (rl_engine_start(e, &err)) {
        fail("start", &err);
        goto out;
    }
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.sample.temperature = 0; /* greedy */
    gp.max_tokens = 48;
    uint64_t id;
    if (rl_engine_submit(e, ids, n_ids, &gp, &id, &err)) {
        fail("submit", &err);
        goto out;
    }
    int32_t gen[64];
    int n_gen = 0;
    char streamed[4096];
    size_t n_streamed = 0;
    rl_event ev;
    while (rl_engine_next(e, id, &ev, -1) == RL_OK) {
        fwrite(ev.text, 1, (size_t)ev.text_len, stdout);
        fflush(stdout);
        if ((size_t)ev.text_len < sizeof streamed - n_streamed) {
            memcpy(streamed + n_streamed, ev.text, (size_t)ev.text_len);
            n_streamed += (size_t)ev.text_len;
        }
        if (ev.token >= 0 && !rl_token_is_eog(v, ev.token) && n_gen < 64) gen[n_gen++] = ev.token;
        if (ev.kind == RL_EV_DONE) break;
    }
    putchar('\n');
    if (ev.kind != RL_EV_DONE || ev.finish == RL_FINISH_ERROR) {
        fprintf(stderr, "embed: generation failed: %s\n", ev.error);
        goto out;
    }
    fprintf(stderr, "embed: prompt %d tokens, generated %d in %.2f s (first token after %.2f s)\n",
            (int)ev.n_prompt, (int)ev.n_generated, ev.t_total_s, ev.t_first_token_s);

    /* the same ids through the streaming detokenizer */
    rl_detokenizer *d = NULL;
    if (rl_detokenizer_new(v, RL_DETOKENIZE_SKIP_SPECIAL, &d, &err)) {
        fail("detokenizer", &err);
        goto out;
    }
    char again[4096];
    size_t n_again = 0;
    const char *piece;
    size_t len;
    for (int i = 0; i <= n_gen; i++) {
        rl_status st = i < n_gen ? rl_detokenizer_push(d, gen[i], &piece, &len, &err)
                                 : rl_detokenizer_flush(d, &piece, &len, &err);
        if (st) break;
        if (len < sizeof again - n_again) {
            memcpy(again + n_again, piece, len);
            n_again += len;
        }
    }
    rl_detokenizer_free(d);
    bool same = n_again == n_streamed && !memcmp(again, streamed, n_streamed);
    fprintf(stderr, "embed: streaming detokenizer %s the events' text\n",
            same ? "reproduces" : "DIFFERS from");
    rc = same ? 0 : 1;
out:
    rl_free(ids);
    rl_free(text);
    rl_vocab_free(v);
    rl_engine_free(e);
    return rc;
}
