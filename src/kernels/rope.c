/* Rotary position embedding (rl_rope, rl_rope_qk): rotates pairs of each
 * head's first n_rot dims by pos-dependent angles, in place, in the NORMAL
 * (adjacent pairs) or NEOX (half-split pairs) layout (kernels.h).
 *
 * Invariants: scalar code, the same in every kernel table (no dispatch);
 * the angles for one position are computed once per call and shared by
 * the q and k heads, so rl_rope_qk equals rl_rope on q and k separately.
 */
#include <math.h>

#include "kernels/kernels-impl.h"

/* Same inverse frequencies as the Hugging Face float32 computation:
 * inv_freq_i = 1 / base^(2i/n_rot), theta = (pos*freq_scale) * inv_freq_i. */
enum { RL_ROPE_MAX_PAIRS = 512 };

static void rl__rope_angles(float *cs, float *sn, int n_rot, int32_t pos, float base,
                            float freq_scale) {
    float p = (float)pos * freq_scale;
    for (int i = 0; i < n_rot / 2; i++) {
        float inv = 1.0f / powf(base, (float)(2 * i) / (float)n_rot);
        float th = p * inv;
        cs[i] = cosf(th);
        sn[i] = sinf(th);
    }
}

static void rl__rope_apply(float *x, int n_head, int head_dim, int n_rot, const float *cs,
                           const float *sn, rl_rope_mode mode) {
    int half = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int i0 = mode == RL_ROPE_NEOX ? i : 2 * i;
            int i1 = mode == RL_ROPE_NEOX ? i + half : 2 * i + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * cs[i] - b * sn[i];
            v[i1] = a * sn[i] + b * cs[i];
        }
    }
}

void rl_rope_qk(float *q, int n_head, float *k, int n_kv_head, int head_dim, int n_rot, int32_t pos,
                float base, float freq_scale, rl_rope_mode mode) {
    float cs[RL_ROPE_MAX_PAIRS], sn[RL_ROPE_MAX_PAIRS];
    RL_ASSERT(n_rot % 2 == 0 && n_rot <= head_dim && n_rot / 2 <= RL_ROPE_MAX_PAIRS);
    rl__rope_angles(cs, sn, n_rot, pos, base, freq_scale);
    rl__rope_apply(q, n_head, head_dim, n_rot, cs, sn, mode);
    if (k) rl__rope_apply(k, n_kv_head, head_dim, n_rot, cs, sn, mode);
}

void rl_rope(float *x, int n_head, int head_dim, int n_rot, int32_t pos, float base,
             float freq_scale, rl_rope_mode mode) {
    rl_rope_qk(x, n_head, NULL, 0, head_dim, n_rot, pos, base, freq_scale, mode);
}
