/* K calibration of quantized K pages, all of it (docs/KVQUANT.md,
 * "Calibrated K shift" and "K channel scale"): the built-in text, the
 * driver that tokenizes it (rl_model_calibrate_k), the pass that runs it
 * through the model with f32 KV of its own (rl_model_calibrate_k_shift),
 * the per-layer key/query sums the forward adds while the pass runs
 * (rl__kcal_accumulate, called from blocks.c), the per-head channel-scale
 * fit (rl_model_k_scale_fit) and the results the forward reads
 * (rl_model_k_shift, rl_model_k_scale).
 *
 * Invariants: the results depend only on the model and the text (the
 * forward is batch- and thread-invariant, the sums run in token order);
 * they are set once, for all layers or none, before any quantized K page
 * is written, and never change afterwards.  RL_KV_KCAL and RL_KV_KSCALE
 * (base/env.h) switch parts off as measurement aids.
 */
#include "model/kcal.h"

#include <math.h>
#include <string.h>

#include "base/env.h"
#include "model/model-impl.h"

/* The built-in calibration text: prose, code, a chat turn and JSON, the
 * kinds of input redline serves, written for this purpose (about 300
 * tokens with a byte-level BPE).  The mean key it yields is a property of
 * each layer more than of the text (docs/KVQUANT.md measures it against a
 * held-out text), so it need not be long. */
static const char k_calib_text[] =
    "The river had been rising for three days before anyone in the valley thought to move the "
    "grain. By the time the mill owner sent his sons up to the loft, water was already pooling "
    "around the stones, and the old bridge groaned each time a branch struck its pillars. "
    "Nobody panicked; they had seen floods before, and they knew the work would be long.\n\n"
    "def merge_intervals(items):\n"
    "    \"\"\"Merge overlapping [start, end] pairs and return them sorted.\"\"\"\n"
    "    out = []\n"
    "    for start, end in sorted(items):\n"
    "        if out and start <= out[-1][1]:\n"
    "            out[-1][1] = max(out[-1][1], end)\n"
    "        else:\n"
    "            out.append([start, end])\n"
    "    return out\n\n"
    "User: Can you explain why my build fails with 'undefined reference to main'?\n"
    "Assistant: That error comes from the linker. It means no object file you passed defines "
    "a function called main, usually because the file containing it was left out of the "
    "command, or because you are building a library and forgot the -c or -shared flag.\n\n"
    "{\"id\": 4182, \"name\": \"Ada\", \"tags\": [\"math\", \"engines\"], \"active\": true, "
    "\"score\": 97.5, \"address\": {\"city\": \"London\", \"zip\": null}}\n\n"
    "Summary: heavy rain raised the river, the mill was emptied in time, and the bridge held.\n";

double rl_model_k_scale_fit(const double *sum_k, const double *sum_k2, const double *sum_q2,
                            double n_k, double n_q, int hd, float *D) {
    double var[512], q2[512], d[512], lsum = 0.0;
    RL_ASSERT(hd > 0 && hd <= 512 && n_k > 0 && n_q > 0);
    for (int i = 0; i < hd; i++) {
        double mu = sum_k[i] / n_k;
        var[i] = fmax(sum_k2[i] / n_k - mu * mu, 1e-12);
        q2[i] = fmax(sum_q2[i] / n_q, 1e-12);
        d[i] = sqrt(sqrt(q2[i]) / sqrt(var[i]));
        lsum += log(d[i]);
    }
    double g = exp(lsum / hd), a0 = 0, b0 = 0, a1 = 0, b1 = 0;
    for (int i = 0; i < hd; i++) {
        d[i] /= g;
        D[i] = (float)d[i];
        a0 += q2[i];
        b0 += var[i];
        a1 += q2[i] / (d[i] * d[i]);
        b1 += d[i] * d[i] * var[i];
    }
    return (a0 * b0) / (a1 * b1);
}

void rl__kcal_accumulate(rl_model *m, const rl__fwd *f, int32_t il) {
    const rl_hparams *hp = &m->hp;
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim;
    const int64_t nkv = (int64_t)hp->n_kv_head * hp->head_dim, hd = hp->head_dim;
    const size_t plane = (size_t)hp->n_layer * (size_t)nkv;
    const int32_t group = hp->n_head / hp->n_kv_head;
    double *sum = m->kcal_sum + (size_t)il * (size_t)nkv, *sq = sum + plane, *qsq = sq + plane;
    for (int32_t j = 0; j < f->n; j++) { /* position 0 (the attention sink) left out */
        if (f->pos[j] == 0) continue;
        for (int64_t d = 0; d < nkv; d++) {
            double x = m->k[j * nkv + d];
            sum[d] += x;
            sq[d] += x * x;
        }
        for (int32_t h = 0; h < hp->n_head; h++)
            for (int64_t i = 0; i < hd; i++) {
                double x = m->q[j * nq + h * hd + i];
                qsq[(h / group) * hd + i] += x * x;
            }
    }
}

const float *rl_model_k_shift(const rl_model *m, int32_t il) {
    const rl_layer *L = &m->layers[il];
    return L->k_cal ? L->k_cal : L->bk;
}

const float *rl_model_k_scale(const rl_model *m, int32_t il) {
    return m->layers[il].k_cal_scale;
}

bool rl_model_k_calibrated(const rl_model *m) {
    return m->hp.n_layer > 0 && m->layers[0].k_cal;
}

/* rl_model_calibrate_k_shift with its forwards run by fwd(ud, ...). */
static rl_status calibrate_shift(rl_model *m, const int32_t *ids, int32_t n, bool with_scale,
                                 rl_threadpool *tp, rl_model_forward_fn fwd, void *ud,
                                 rl_err *err) {
    if (rl_model_k_calibrated(m)) return RL_OK;
    if (n < 1) return rl_err_set(err, RL_ERR_INVALID, "K calibration needs at least one token");
    const rl_hparams *hp = &m->hp;
    const int32_t bs = 16, nb = (n + bs - 1) / bs, L = hp->n_layer;
    const size_t nkv = (size_t)hp->n_kv_head * (size_t)hp->head_dim;
    const size_t block_bytes = nkv * bs * sizeof(float), layer_bytes = block_bytes * (size_t)nb;
    rl_status st = RL_OK;
    float *kv_mem = rl_calloc(2 * (size_t)L, layer_bytes);
    rl_kv_layer *kvl = rl_calloc((size_t)L, sizeof *kvl);
    int32_t *bt = rl_calloc((size_t)nb, sizeof *bt), *pos = rl_calloc((size_t)n, sizeof *pos),
            *seq = rl_calloc((size_t)n, sizeof *seq);
    float *logits = rl_calloc((size_t)hp->n_vocab, sizeof *logits);
    m->kcal_sum = rl_calloc(3 * (size_t)L * nkv, sizeof(double));
    if (!kv_mem || !kvl || !bt || !pos || !seq || !logits || !m->kcal_sum) {
        st = rl_err_set(err, RL_ERR_NOMEM, "out of memory for K calibration (%d tokens)", (int)n);
        goto done;
    }
    for (int32_t l = 0; l < L; l++)
        kvl[l] = (rl_kv_layer){.k_type = RL_TYPE_F32,
                               .v_type = RL_TYPE_F32,
                               .n_kv_head = hp->n_kv_head,
                               .head_dim = hp->head_dim,
                               .block_size = bs,
                               .k_base = (uint8_t *)kv_mem + (size_t)(2 * l) * layer_bytes,
                               .v_base = (uint8_t *)kv_mem + (size_t)(2 * l + 1) * layer_bytes,
                               .k_block_bytes = block_bytes,
                               .v_block_bytes = block_bytes};
    for (int32_t b = 0; b < nb; b++) bt[b] = b;
    for (int32_t i = 0; i < n; i++) pos[i] = i;
    const int32_t *tables[1] = {bt};
    for (int32_t i0 = 0; i0 < n; i0 += m->max_batch) {
        int32_t c = n - i0 < m->max_batch ? n - i0 : m->max_batch;
        rl_batch b = {.n_tok = c,
                      .token = ids + i0,
                      .pos = pos + i0,
                      .seq = seq,
                      .n_seq = 1,
                      .block_tables = tables,
                      .n_blocks = &nb};
        if ((st = fwd(ud, m, &b, kvl, logits, tp, err))) goto done;
    }
    for (int32_t l = 0; l < L; l++) {
        float *mean = rl__model_own_alloc(m, nkv * sizeof(float));
        if (!mean) {
            st = rl_err_set(err, RL_ERR_NOMEM, "out of memory for the K shift");
            goto done;
        }
        for (size_t d = 0; d < nkv; d++)
            mean[d] = n > 1 ? (float)(m->kcal_sum[(size_t)l * nkv + d] / (n - 1)) : 0.0f;
        m->layers[l].k_cal = mean;
    }
    if (n > 1 && with_scale) { /* K channel scale where the error model predicts a large gain */
        const size_t plane = (size_t)L * nkv, hd = (size_t)hp->head_dim;
        const double group = (double)(hp->n_head / hp->n_kv_head);
        for (int32_t l = 0; l < L; l++) {
            float *D = rl__model_own_alloc(m, nkv * sizeof(float));
            if (!D) {
                st = rl_err_set(err, RL_ERR_NOMEM, "out of memory for the K scale");
                goto done;
            }
            const double *sum = m->kcal_sum + (size_t)l * nkv, *sq = sum + plane, *qsq = sq + plane;
            bool any = false;
            for (size_t o = 0; o < nkv; o += hd) {
                double gain = rl_model_k_scale_fit(sum + o, sq + o, qsq + o, n - 1, (n - 1) * group,
                                                   (int)hd, D + o);
                if (gain >= RL_KV_KSCALE_MIN_GAIN)
                    any = true;
                else /* unscaled head: x * 1 and q / 1 are exact, pages as before */
                    for (size_t i = o; i < o + hd; i++) D[i] = 1.0f;
            }
            m->layers[l].k_cal_scale = any ? D : NULL;
        }
    }
done:
    if (st) /* all layers or none */
        for (int32_t l = 0; l < L; l++) m->layers[l].k_cal = m->layers[l].k_cal_scale = NULL;
    rl_free(m->kcal_sum);
    m->kcal_sum = NULL;
    rl_free(kv_mem);
    rl_free(kvl);
    rl_free(bt);
    rl_free(pos);
    rl_free(seq);
    rl_free(logits);
    return st;
}

rl_status rl_model_calibrate_k_shift(rl_model *m, const int32_t *ids, int32_t n, bool with_scale,
                                     rl_threadpool *tp, rl_err *err) {
    return calibrate_shift(m, ids, n, with_scale, tp, rl_model_forward_plain, NULL, err);
}

rl_status rl_model_calibrate_k(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp,
                               rl_err *err) {
    return rl_model_calibrate_k_with(m, tok, tp, NULL, NULL, err);
}

rl_status rl_model_calibrate_k_with(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp,
                                    rl_model_forward_fn fwd, void *ud, rl_err *err) {
    if (rl_model_k_calibrated(m)) return RL_OK;
    if (rl_env_is(RL_ENV_KV_KCAL, "none"))
        return RL_OK; /* keep the bias shift (a measurement aid) */
    int32_t *ids = NULL;
    size_t n = 0;
    rl_status st = rl_tokenizer_encode(tok, k_calib_text, strlen(k_calib_text), 0, &ids, &n, err);
    if (st) return st;
    /* RL_KV_KSCALE=none: shift only (a measurement aid) */
    st = calibrate_shift(m, ids, (int32_t)n, !rl_env_is(RL_ENV_KV_KSCALE, "none"), tp,
                         fwd ? fwd : rl_model_forward_plain, ud, err);
    rl_free(ids);
    return st;
}
