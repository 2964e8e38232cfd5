/* KV page operations: which page types exist (rl_kv_type_*), how a layer's
 * K/V rows are transformed before they are stored (rotation, K shift, K
 * channel scale: rl_kv_rot_resolve, rl_kv_k_shifted, rl_kv_k_scaled) and
 * the store itself (rl_kv_store: transform, then convert or quantize each
 * head's row into its slot of the paged layout described in kernels.h).
 * rl_attention (attention.c) reads the pages with the same predicates, so
 * a row is always read back with the transform it was written with.
 *
 * Invariants: a stored row depends only on the f32 row, the page type and
 * the layer's rot/shift/scale (the iq4_nl quantizer is bit-identical in
 * every kernel table), never on the active table or on other rows.
 * RL_KVQ_ROT (src/base/env.h) is read once, at the first resolve.
 */
#include <stdatomic.h>
#include <string.h>

#include "base/env.h"
#include "kernels/kernels-impl.h"

bool rl_kv_type_quantized(rl_type t) {
    return t == RL_TYPE_Q8_0 || t == RL_TYPE_Q8_64 || t == RL_TYPE_Q4_0 || t == RL_TYPE_IQ4_NL;
}

bool rl_kv_type_known(rl_type t) {
    return t == RL_TYPE_F32 || t == RL_TYPE_F16 || rl_kv_type_quantized(t);
}

bool rl_kv_type_supported(rl_type t, int32_t head_dim) {
    switch (t) {
    case RL_TYPE_F32:
    case RL_TYPE_F16:
        return head_dim > 0;
    case RL_TYPE_Q8_0:
    case RL_TYPE_Q4_0:
    case RL_TYPE_IQ4_NL:
        return head_dim > 0 && head_dim % 32 == 0;
    case RL_TYPE_Q8_64:
        return head_dim > 0 && head_dim % 64 == 0;
    default:
        return false;
    }
}

/* RL_KVQ_ROT=none|hadamard: overrides AUTO for quantized pages (read once;
 * racing first calls compute the same value).  0 = unset. */
static rl_kv_rot rl__kvq_rot_env(void) {
    static _Atomic int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = rl_env(RL_ENV_KVQ_ROT);
        x = !e                           ? 0
            : strcmp(e, "none") == 0     ? RL_KV_ROT_NONE
            : strcmp(e, "hadamard") == 0 ? RL_KV_ROT_HADAMARD
                                         : 0;
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return (rl_kv_rot)x;
}

rl_kv_rot rl_kv_rot_resolve(rl_type t, int32_t head_dim, rl_kv_rot r) {
    if (head_dim <= 0 || head_dim > 512 || (head_dim & (head_dim - 1)) != 0) return RL_KV_ROT_NONE;
    if (r == RL_KV_ROT_AUTO) {
        bool quant = rl_kv_type_quantized(t);
        rl_kv_rot env = quant ? rl__kvq_rot_env() : RL_KV_ROT_AUTO;
        if (env != RL_KV_ROT_AUTO) return env;
        r = quant ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE; /* docs/KVQUANT.md: helps q8_0 too */
    }
    return r == RL_KV_ROT_HADAMARD ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE;
}

bool rl_kv_k_shifted(const rl_kv_layer *kv) {
    return kv->k_shift && rl_kv_type_quantized(kv->k_type);
}

bool rl_kv_k_scaled(const rl_kv_layer *kv) {
    return kv->k_scale && rl_kv_type_quantized(kv->k_type);
}

/* shift: [n_kv_head][head_dim] offset subtracted before rotation, or NULL;
 * scale: [n_kv_head][head_dim] factors applied after the shift, or NULL. */
static void rl__kv_store_one(rl_type t, rl_kv_rot rot, const float *shift, const float *scale,
                             void *base, size_t block_bytes, const rl_kv_layer *kv, int32_t block,
                             int32_t slot, const float *src) {
    size_t row_bytes = rl_type_row_size(t, kv->head_dim);
    bool hrot = rl_kv_rot_resolve(t, kv->head_dim, rot) == RL_KV_ROT_HADAMARD;
    float buf[512];
    RL_ASSERT(!(hrot || shift || scale) || kv->head_dim <= 512);
    for (int h = 0; h < kv->n_kv_head; h++) {
        uint8_t *dst = (uint8_t *)base + (size_t)block * block_bytes +
                       ((size_t)h * kv->block_size + slot) * row_bytes;
        const float *s = src + (size_t)h * kv->head_dim;
        if (shift) { /* work on a copy: the caller's row stays as it was */
            const float *sh = shift + (size_t)h * kv->head_dim;
            for (int i = 0; i < kv->head_dim; i++) buf[i] = s[i] - sh[i];
            s = buf;
        }
        if (scale) {
            const float *sc = scale + (size_t)h * kv->head_dim;
            for (int i = 0; i < kv->head_dim; i++) buf[i] = s[i] * sc[i];
            s = buf;
        }
        if (hrot) {
            if (s != buf) memcpy(buf, s, (size_t)kv->head_dim * sizeof(float));
            rl_wht(buf, kv->head_dim);
            s = buf;
        }
        if (t == RL_TYPE_F32) {
            memcpy(dst, s, (size_t)kv->head_dim * sizeof(float));
        } else if (t == RL_TYPE_F16) {
            rl__kernels()->to_f16((rl_fp16 *)dst, s, kv->head_dim);
        } else if (t == RL_TYPE_IQ4_NL) {
            rl__kernels()->quant_iq4_nl_kv(s, dst, kv->head_dim);
        } else {
            const rl_type_traits *tr = rl_type_get(t);
            RL_ASSERT(tr && tr->from_float);
            tr->from_float(s, dst, kv->head_dim);
        }
    }
}

void rl_kv_store(const rl_kv_layer *kv, const int32_t *block_table, int32_t pos, const float *k_row,
                 const float *v_row) {
    RL_ASSERT(pos >= 0);
    int32_t block = block_table[pos / kv->block_size], slot = pos % kv->block_size;
    rl__kv_store_one(kv->k_type, kv->k_rot, rl_kv_k_shifted(kv) ? kv->k_shift : NULL,
                     rl_kv_k_scaled(kv) ? kv->k_scale : NULL, kv->k_base, kv->k_block_bytes, kv,
                     block, slot, k_row);
    rl__kv_store_one(kv->v_type, kv->v_rot, NULL, NULL, kv->v_base, kv->v_block_bytes, kv, block,
                     slot, v_row);
}
