/* Rotary position embedding (rl_rope, rl_rope_qk, rl_rope_qk_ext): rotates
 * pairs of each head's first n_rot dims by pos-dependent angles, in place,
 * in the NORMAL (adjacent pairs) or NEOX (half-split pairs) layout, with
 * the frequency adjustments of the long-context schemes (kernels.h):
 * per-pair frequency factors (Llama 3 rope_freqs, LongRoPE short/long),
 * linear position scaling, YaRN's ramp between interpolated and original
 * frequencies, and a magnitude factor on cos/sin (YaRN, LongRoPE).
 *
 * Invariants: scalar code, the same in every kernel table (no dispatch; it
 * runs once per token and layer, not in the hot loop); the angles for one
 * position are computed once per call and shared by the q and k heads, so
 * rl_rope_qk equals rl_rope on q and k separately; a plain configuration
 * (no factors, no YaRN, magnitude 1) takes the original arithmetic, so
 * rl_rope_qk_ext of it equals rl_rope_qk bit for bit.
 */
#include <math.h>

#include "kernels/kernels-impl.h"

/* Same inverse frequencies as the Hugging Face float32 computation:
 * inv_freq_i = 1 / base^(2i/n_rot), theta = (pos*freq_scale) * inv_freq_i. */
enum { RL_ROPE_MAX_PAIRS = 512 };

static bool rope_plain(const rl_rope_cfg *c) {
    return !c->freq_factors && c->ext_factor == 0.0f && c->attn_factor == 1.0f;
}

/* YaRN ramp of pair i: 1 below corr_dims[0] (keep the original frequency),
 * 0 above corr_dims[1] (interpolate), linear in between. */
static float rope_yarn_ramp(const float dims[2], int i) {
    float y = ((float)i - dims[0]) / fmaxf(0.001f, dims[1] - dims[0]);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

static void rl__rope_angles(float *cs, float *sn, int32_t pos, const rl_rope_cfg *c) {
    const int n_rot = c->n_rot;
    if (rope_plain(c)) {
        float p = (float)pos * c->freq_scale;
        for (int i = 0; i < n_rot / 2; i++) {
            float inv = 1.0f / powf(c->base, (float)(2 * i) / (float)n_rot);
            float th = p * inv;
            cs[i] = cosf(th);
            sn[i] = sinf(th);
        }
        return;
    }
    float mscale = c->attn_factor;
    if (c->ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / c->freq_scale);
    for (int i = 0; i < n_rot / 2; i++) {
        float inv = 1.0f / powf(c->base, (float)(2 * i) / (float)n_rot);
        float th_e = (float)pos * inv; /* the original (extrapolated) angle */
        if (c->freq_factors) th_e /= c->freq_factors[i];
        float th = c->freq_scale * th_e; /* interpolated */
        if (c->ext_factor != 0.0f) {
            float mix = rope_yarn_ramp(c->corr_dims, i) * c->ext_factor;
            th = th * (1.0f - mix) + th_e * mix;
        }
        cs[i] = cosf(th) * mscale;
        sn[i] = sinf(th) * mscale;
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

void rl_rope_qk_ext(float *q, int n_head, float *k, int n_kv_head, int head_dim, int32_t pos,
                    const rl_rope_cfg *c) {
    float cs[RL_ROPE_MAX_PAIRS], sn[RL_ROPE_MAX_PAIRS];
    RL_ASSERT(c->n_rot >= 0 && c->n_rot % 2 == 0 && c->n_rot <= head_dim &&
              c->n_rot / 2 <= RL_ROPE_MAX_PAIRS);
    rl__rope_angles(cs, sn, pos, c);
    rl__rope_apply(q, n_head, head_dim, c->n_rot, cs, sn, c->mode);
    if (k) rl__rope_apply(k, n_kv_head, head_dim, c->n_rot, cs, sn, c->mode);
}

void rl_rope_qk(float *q, int n_head, float *k, int n_kv_head, int head_dim, int n_rot, int32_t pos,
                float base, float freq_scale, rl_rope_mode mode) {
    rl_rope_cfg c = rl_rope_cfg_plain(n_rot, base, freq_scale, mode);
    rl_rope_qk_ext(q, n_head, k, n_kv_head, head_dim, pos, &c);
}

void rl_rope(float *x, int n_head, int head_dim, int n_rot, int32_t pos, float base,
             float freq_scale, rl_rope_mode mode) {
    rl_rope_qk(x, n_head, NULL, 0, head_dim, n_rot, pos, base, freq_scale, mode);
}

rl_rope_cfg rl_rope_cfg_plain(int n_rot, float base, float freq_scale, rl_rope_mode mode) {
    rl_rope_cfg c = {
        .n_rot = n_rot, .mode = mode, .base = base, .freq_scale = freq_scale, .attn_factor = 1.0f};
    return c;
}

/* Pair index at which a rotation of n_turns turns over n_ctx_orig positions
 * happens (YaRN's correction dimension), in float as llama.cpp computes it. */
static float rope_yarn_corr_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (n_turns * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

void rl_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2]) {
    float start = floorf(rope_yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, base));
    float end = ceilf(rope_yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, base));
    dims[0] = fmaxf(0.0f, start);
    dims[1] = fminf((float)(n_rot - 1), end);
}
