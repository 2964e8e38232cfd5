/* Kernel dispatch: builds the reference table, (on CPUs with
 * AVX2+FMA+F16C) the AVX2 table and (with AVX512F/BW/VL/VNNI as well) the
 * AVX512-VNNI table once, selects one as the active table, and
 * implements the small public kernels (norms, activations, rope, get_row,
 * kv_store) as thin wrappers over the active table.
 *
 * Invariants: the public functions work without rl_kernels_init (the first
 * call selects RL_KERNELS_AUTO).  The environment variable
 * RL_KERNELS=ref|avx2|avx512vnni caps the choice under AUTO (debugging and
 * measurement aid; an unknown value is ignored).  Switching the
 * implementation while kernels run on other threads is not supported.
 */
#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"

static rl__ktab g_ref, g_avx2, g_vnni;
static bool g_has_avx2, g_has_vnni;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic(const rl__ktab *) g_active;

/* AVX2, FMA and F16C from CPUID (leaf 1 ECX bits 12 FMA, 29 F16C, 27
 * OSXSAVE; leaf 7 EBX bit 5 AVX2) plus the OS saving YMM state (XCR0). */
static bool cpu_has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27);
    if (!fma || !f16c || !osxsave) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6u) != 6u) return false; /* XMM and YMM state enabled */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return b & (1u << 5);
}

/* AVX512F/BW/VL and AVX512-VNNI from CPUID leaf 7 (EBX bits 16 F, 30 BW,
 * 31 VL; ECX bit 11 VNNI) plus the OS saving opmask and ZMM state (XCR0
 * bits 5, 6, 7, with XMM/YMM bits 1, 2).  Checked only on top of AVX2. */
static bool cpu_has_avx512vnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const unsigned need_b = (1u << 16) | (1u << 30) | (1u << 31);
    if ((b & need_b) != need_b || !(c & (1u << 11))) return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xE6u) == 0xE6u;
}

static void rl__kernels_build(void) {
    rl__ref_fill(&g_ref);
    g_has_avx2 = cpu_has_avx2_fma_f16c();
    if (g_has_avx2) {
        g_avx2 = g_ref;
        g_avx2.name = "avx2";
        rl__avx2_fill(&g_avx2);
        g_has_vnni = cpu_has_avx512vnni();
    }
    if (g_has_vnni) {
        g_vnni = g_avx2;
        g_vnni.name = "avx512vnni";
        rl__vnni_fill(&g_vnni);
    }
}

rl_kernels_impl rl_kernels_init(rl_kernels_impl want) {
    pthread_once(&g_once, rl__kernels_build);
    if (want == RL_KERNELS_AUTO) {
        const char *env = getenv("RL_KERNELS");
        want = !env                           ? RL_KERNELS_AVX512VNNI
               : strcmp(env, "ref") == 0      ? RL_KERNELS_REF
               : strcmp(env, "avx2") == 0     ? RL_KERNELS_AVX2
                                              : RL_KERNELS_AVX512VNNI;
    }
    if (want == RL_KERNELS_AVX512VNNI && g_has_vnni) {
        atomic_store(&g_active, &g_vnni);
        return RL_KERNELS_AVX512VNNI;
    }
    if (want >= RL_KERNELS_AVX2 && g_has_avx2) {
        atomic_store(&g_active, &g_avx2);
        return RL_KERNELS_AVX2;
    }
    atomic_store(&g_active, &g_ref);
    return RL_KERNELS_REF;
}

const rl__ktab *rl__kernels(void) {
    const rl__ktab *t = atomic_load_explicit(&g_active, memory_order_acquire);
    if (__builtin_expect(t == NULL, 0)) {
        rl_kernels_init(RL_KERNELS_AUTO);
        t = atomic_load(&g_active);
    }
    return t;
}

const rl__ktab *rl__kernels_ref(void) {
    pthread_once(&g_once, rl__kernels_build);
    return &g_ref;
}

const rl__ktab *rl__kernels_avx2(void) {
    pthread_once(&g_once, rl__kernels_build);
    return g_has_avx2 ? &g_avx2 : NULL;
}

const rl__ktab *rl__kernels_vnni(void) {
    pthread_once(&g_once, rl__kernels_build);
    return g_has_vnni ? &g_vnni : NULL;
}

const char *rl_kernels_impl_name(void) { return rl__kernels()->name; }

rl_type rl__act_type(rl_type t) {
    switch (t) {
    case RL_TYPE_F32:
    case RL_TYPE_F16:
    case RL_TYPE_BF16: return RL_TYPE_F32;
    case RL_TYPE_Q4_0:
    case RL_TYPE_Q5_0:
    case RL_TYPE_Q8_0: return RL_TYPE_Q8_0;
    case RL_TYPE_Q4_1:
    case RL_TYPE_Q5_1: return RL_TYPE_Q8_1;
    case RL_TYPE_Q2_K:
    case RL_TYPE_Q3_K:
    case RL_TYPE_Q4_K:
    case RL_TYPE_Q5_K:
    case RL_TYPE_Q6_K: return RL_TYPE_Q8_K;
    default: return RL_TYPE_COUNT;
    }
}

void rl_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    rl__kernels()->rmsnorm(out, x, w, n, eps);
}
void rl_softmax(float *x, int64_t n) { rl__kernels()->softmax(x, n); }
void rl_silu_mul(float *out, const float *gate, const float *up, int64_t n) {
    rl__kernels()->silu_mul(out, gate, up, n);
}
void rl_gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    rl__kernels()->gelu_mul(out, gate, up, n);
}

void rl_get_row(const rl_mat *w, int64_t row, float *out) {
    RL_ASSERT(row >= 0 && row < w->n_rows);
    const uint8_t *src = (const uint8_t *)w->data + (size_t)row * w->row_size;
    if (w->type == RL_TYPE_F32) {
        memcpy(out, src, (size_t)w->n_cols * sizeof(float));
        return;
    }
    const rl_type_traits *tr = rl_type_get(w->type);
    RL_ASSERT(tr && tr->to_float);
    tr->to_float(src, out, w->n_cols);
}

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

void rl_wht(float *x, int n) {
    RL_ASSERT(n > 0 && n <= 512 && (n & (n - 1)) == 0);
    rl__kernels()->wht(x, n);
}

/* RL_KVQ_ROT=none|hadamard: overrides AUTO for quantized pages (read once;
 * racing first calls compute the same value).  0 = unset. */
static rl_kv_rot rl__kvq_rot_env(void) {
    static _Atomic int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = getenv("RL_KVQ_ROT");
        x = !e ? 0 : strcmp(e, "none") == 0 ? RL_KV_ROT_NONE
                 : strcmp(e, "hadamard") == 0 ? RL_KV_ROT_HADAMARD : 0;
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

double rl_kv_k_scale_fit(const double *sum_k, const double *sum_k2, const double *sum_q2, double n_k,
                         double n_q, int hd, float *D) {
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

/* shift: [n_kv_head][head_dim] offset subtracted before rotation, or NULL;
 * scale: [n_kv_head][head_dim] factors applied after the shift, or NULL. */
static void rl__kv_store_one(rl_type t, rl_kv_rot rot, const float *shift, const float *scale,
                             void *base,
                             size_t block_bytes, const rl_kv_layer *kv, int32_t block, int32_t slot,
                             const float *src) {
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
            rl_fp16 *d = (rl_fp16 *)dst;
            for (int i = 0; i < kv->head_dim; i++) d[i] = rl_f32_to_fp16(s[i]);
        } else if (t == RL_TYPE_IQ4_NL) {
            rl__kernels()->quant_iq4_nl_kv(s, dst, kv->head_dim);
        } else {
            const rl_type_traits *tr = rl_type_get(t);
            RL_ASSERT(tr && tr->from_float);
            tr->from_float(s, dst, kv->head_dim);
        }
    }
}

void rl_kv_store(const rl_kv_layer *kv, const int32_t *block_table, int32_t pos,
                 const float *k_row, const float *v_row) {
    RL_ASSERT(pos >= 0);
    int32_t block = block_table[pos / kv->block_size], slot = pos % kv->block_size;
    rl__kv_store_one(kv->k_type, kv->k_rot, rl_kv_k_shifted(kv) ? kv->k_shift : NULL,
                     rl_kv_k_scaled(kv) ? kv->k_scale : NULL, kv->k_base, kv->k_block_bytes, kv,
                     block, slot, k_row);
    rl__kv_store_one(kv->v_type, kv->v_rot, NULL, NULL, kv->v_base, kv->v_block_bytes, kv, block,
                     slot, v_row);
}
