/* What a generated token turns into: its events (the per-request ring
 * callers drain with rl_engine_next), its text with stop strings held back
 * until they can be told apart, and the end of the request by
 * end-of-generation, stop string, length or a completed grammar.
 *
 * The stop-string and chunking rules are pure functions of the pending
 * text (rl__stop_scan, rl__text_chunk), testable without a model; the
 * rest runs on the step loop and takes e->mu only to queue events.
 *
 * Reasoning budget (gp.think_close): every emitted token's bytes go through
 * a 16-byte tail that spots "<think>" (the block opens, when the prompt did
 * not open it) and "</think>" (the model closed it); when the budget is
 * spent, sample_and_update (engine.c) writes the close's tokens instead of
 * sampling, and they are emitted like sampled ones.
 *
 * Invariant: pending text (r->detok) is valid UTF-8 (the detokenizer
 * decodes lossily) and every cut falls on a character boundary: a stop
 * string is valid UTF-8, so a match or a held-back prefix of one starts at
 * a lead byte, and event chunks are cut back to a lead byte. */
#include <string.h>

#include "chat/chat.h" /* RL_THINK_OPEN, RL_THINK_CLOSE */
#include "engine/engine-impl.h"

void rl__engine_push_event(rl_engine *e, ereq *r, const rl_event *ev) {
    if (r->ev_n == r->ev_cap) {
        int32_t nc = r->ev_cap ? r->ev_cap * 2 : 16;
        rl_event *q = rl_malloc((size_t)nc * sizeof *q);
        if (!q) return; /* out of memory: drop (the DONE event has a reserved slot) */
        for (int32_t i = 0; i < r->ev_n; i++) q[i] = r->ev[(r->ev_head + i) % r->ev_cap];
        rl_free(r->ev);
        r->ev = q;
        r->ev_head = 0;
        r->ev_cap = nc;
    }
    r->ev[(r->ev_head + r->ev_n) % r->ev_cap] = *ev;
    r->ev_n++;
    pthread_cond_broadcast(&r->ev_wait);
}

size_t rl__stop_scan(const char *buf, size_t len, const char (*stop)[RL_MAX_STOP_LEN + 1],
                     int32_t n_stop, bool all, bool *stopped) {
    size_t emit = len, cut = len;
    *stopped = false;
    for (int32_t i = 0; i < n_stop; i++) {
        const char *hit = len ? memmem(buf, len, stop[i], strlen(stop[i])) : NULL;
        if (hit && (size_t)(hit - buf) < cut) {
            cut = (size_t)(hit - buf);
            *stopped = true;
        }
    }
    if (*stopped) return cut;
    if (all) return emit;
    /* hold back a suffix that is a prefix of some stop string */
    for (int32_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > 0; k--)
            if (!memcmp(buf + len - k, stop[i], k)) {
                if (len - k < emit) emit = len - k;
                break;
            }
    }
    return emit;
}

size_t rl__text_chunk(const char *p, size_t n) {
    if (n <= RL_EV_TEXT_MAX) return n;
    size_t m = RL_EV_TEXT_MAX;
    while (m > 0 && ((uint8_t)p[m] & 0xC0) == 0x80) m--; /* back to a lead byte */
    return m > 0 ? m : RL_EV_TEXT_MAX; /* no lead byte in reach (not UTF-8): cut anyway */
}

/* Emits the longest prefix of r's pending text that cannot be the start
 * of a stop string, as events of at most RL_EV_TEXT_MAX bytes (the first
 * one carries `token` and its logprobs, even with no text); on a
 * stop-string match emits the text before it, drops the rest and returns
 * true.  With `all`, emits everything (end of request). */
bool rl__engine_flush_text(rl_engine *e, ereq *r, int32_t token, const rl_sample_result *sr,
                           bool all) {
    rl_detok *d = &r->detok;
    bool stopped;
    size_t emit = rl__stop_scan(d->buf, d->len, r->gp.stop, r->gp.n_stop, all, &stopped);
    bool first = true;
    size_t off = 0;
    pthread_mutex_lock(&e->mu);
    while (first || off < emit) {
        rl_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RL_EV_TOKEN;
        ev.token = first ? token : -1;
        if (first && sr) {
            ev.logprob = sr->logprob;
            ev.n_top = sr->n_top < RL_EV_MAX_TOP ? sr->n_top : RL_EV_MAX_TOP;
            for (int32_t k = 0; k < ev.n_top; k++) {
                ev.top_id[k] = sr->top_id[k];
                ev.top_logprob[k] = sr->top_logprob[k];
            }
        }
        size_t n = rl__text_chunk(d->buf + off, emit - off);
        memcpy(ev.text, d->buf + off, n);
        ev.text_len = (int32_t)n;
        off += n;
        if (token >= 0 || n > 0) rl__engine_push_event(e, r, &ev);
        first = false;
    }
    pthread_mutex_unlock(&e->mu);
    size_t keep = stopped ? 0 : d->len - emit;
    memmove(d->buf, d->buf + emit, keep);
    d->len = keep;
    if (d->buf) d->buf[keep] = 0;
    return stopped;
}

/* Appends token tok (already accepted by r's sampler) to r: text, stop
 * strings, end-of-generation and length limits.  Returns false when r
 * finished (r must not be touched by the caller's loop after that). */
bool rl__engine_emit_token(rl_engine *e, ereq *r, int32_t tok, const rl_sample_result *sr) {
    if (r->t_first == 0) r->t_first = rl_time_s();
    rl_err gerr;
    if (r->gm && !rl_tokenizer_is_eog(e->tok, tok) && rl_gmatch_accept_token(r->gm, tok, &gerr)) {
        rl__engine_finish(e, r, RL_FINISH_ERROR, gerr.code, gerr.msg);
        return false;
    }
    r->n_generated++;
    e->st_gen++;
    bool eog = !r->gp.ignore_eos && rl_tokenizer_is_eog(e->tok, tok);
    if (eog) {
        rl__engine_flush_text(e, r, tok, sr, true);
        rl__engine_finish(e, r, RL_FINISH_STOP, RL_OK, NULL);
        return false;
    }
    rl_err derr;
    rl_detok_push(&r->detok, tok, NULL, &derr);
    r->base.tokens[r->base.n_tokens++] = tok;
    if (r->think) rl__engine_think_update(e, r, tok);
    bool at_end = r->n_generated >= r->max_new || r->base.n_tokens >= e->n_ctx;
    if (at_end) rl_detok_flush(&r->detok, NULL, &derr);
    if (rl__engine_flush_text(e, r, tok, sr, at_end)) {
        rl__engine_finish(e, r, RL_FINISH_STOP, RL_OK, NULL);
        return false;
    }
    if (at_end) {
        rl__engine_finish(e, r, RL_FINISH_LENGTH, RL_OK, NULL);
        return false;
    }
    if (r->gm && rl_gmatch_is_done(r->gm)) { /* the grammar admits nothing more */
        rl_detok_flush(&r->detok, NULL, &derr);
        rl__engine_flush_text(e, r, -1, NULL, true);
        rl__engine_finish(e, r, RL_FINISH_STOP, RL_OK, NULL);
        return false;
    }
    return true;
}

/* ---- reasoning budget ---- */

void rl__engine_think_update(rl_engine *e, ereq *r, int32_t tok) {
    size_t l = 0;
    const char *p = rl_tokenizer_piece(e->tok, tok, &l);
    size_t cap = sizeof r->think_tail, n = r->think_tail_n;
    if (l >= cap) { /* keep the last cap bytes of tail + piece */
        memcpy(r->think_tail, p + l - cap, cap);
        n = cap;
    } else {
        if (n + l > cap) {
            memmove(r->think_tail, r->think_tail + (n + l - cap), cap - l);
            n = cap - l;
        }
        memcpy(r->think_tail + n, p, l);
        n += l;
    }
    r->think_tail_n = (uint8_t)n;
    if (r->think == RL__THINK_WAIT) {
        if (memmem(r->think_tail, n, RL_THINK_OPEN, strlen(RL_THINK_OPEN))) {
            r->think = RL__THINK_IN;
            r->think_n = 0;
            r->think_tail_n = 0;
        } else if (r->n_generated >= 16) {
            r->think = RL__THINK_OFF; /* the model does not think */
        }
        return;
    }
    r->think_n++;
    if (memmem(r->think_tail, n, RL_THINK_CLOSE, strlen(RL_THINK_CLOSE)))
        r->think = RL__THINK_OFF; /* closed by the model */
}

bool rl__engine_think_due(const ereq *r) {
    return r->think == RL__THINK_IN && r->think_n >= r->gp.think_budget &&
           (!r->gm || rl_gmatch_is_waiting(r->gm));
}

bool rl__engine_think_close(rl_engine *e, ereq *r) {
    r->think = RL__THINK_OFF;
    for (int32_t i = 0; i < r->n_think_ids; i++) {
        rl_sampler_accept(r->sampler, r->think_ids[i]);
        if (!rl__engine_emit_token(e, r, r->think_ids[i], NULL)) return false;
    }
    return true;
}
