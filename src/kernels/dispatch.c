/* Kernel dispatch: builds the reference table, (on CPUs with
 * AVX2+FMA+F16C) the AVX2 table, (with AVX512F/BW/VL/VNNI as well) the
 * AVX512-VNNI table and (with AMX-INT8 granted by the OS as well) the AMX
 * table once, selects one as the active table, and implements
 * the small public kernels that are one call into it (norms, activations,
 * rl_wht).  The drivers live in files of their own: rl_matmul (matmul.c),
 * rl_attention (attention.c), KV page stores (kvpage.c), RoPE (rope.c).
 *
 * Invariants: the public functions work without rl_kernels_init (the first
 * call selects RL_KERNELS_AUTO).  The environment variable
 * RL_KERNELS=ref|avx2|avx512vnni|amx (base/env.h, read once per process) caps
 * the choice under AUTO (debugging and measurement aid; an unknown value
 * is ignored).  Switching the
 * implementation while kernels run on other threads is not supported.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/env.h"
#include "kernels/kernels-impl.h"

static rl__ktab g_ref, g_avx2, g_vnni, g_amx;
static bool g_has_avx2, g_has_vnni, g_has_amx;
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

/* AMX-TILE and AMX-INT8 (CPUID leaf 7 EDX bits 24, 25; the leaves also
 * use AVX512-VBMI's vpermt2b, ECX bit 1, which every AMX CPU has) with the OS
 * saving tile configuration and data (XCR0 bits 17, 18), and the kernel
 * granting this process tile data (rl__amx_enable).  Checked only on top
 * of AVX512-VNNI. */
static bool cpu_has_amx_int8(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if ((d & (3u << 24)) != (3u << 24) || !(c & (1u << 1))) return false; /* + AVX512-VBMI */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17) && rl__amx_enable();
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
        g_has_amx = cpu_has_amx_int8();
    }
    if (g_has_amx) {
        g_amx = g_vnni;
        g_amx.name = "amx";
        rl__amx_fill(&g_amx);
    }
}

rl_kernels_impl rl_kernels_init(rl_kernels_impl want) {
    pthread_once(&g_once, rl__kernels_build);
    if (want == RL_KERNELS_AUTO) {
        const char *env = rl_env(RL_ENV_KERNELS);
        want = !env                             ? RL_KERNELS_AMX
               : strcmp(env, "ref") == 0        ? RL_KERNELS_REF
               : strcmp(env, "avx2") == 0       ? RL_KERNELS_AVX2
               : strcmp(env, "avx512vnni") == 0 ? RL_KERNELS_AVX512VNNI
                                                : RL_KERNELS_AMX;
    }
    if (want == RL_KERNELS_AMX && g_has_amx) {
        atomic_store(&g_active, &g_amx);
        return RL_KERNELS_AMX;
    }
    if (want >= RL_KERNELS_AVX512VNNI && g_has_vnni) {
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

const rl__ktab *rl__kernels_amx(void) {
    pthread_once(&g_once, rl__kernels_build);
    return g_has_amx ? &g_amx : NULL;
}

const char *rl_kernels_impl_name(void) {
    return rl__kernels()->name;
}

void rl_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    rl__kernels()->rmsnorm(out, x, w, n, eps);
}
void rl_softmax(float *x, int64_t n) {
    rl__kernels()->softmax(x, n);
}
void rl_silu_mul(float *out, const float *gate, const float *up, int64_t n) {
    rl__kernels()->silu_mul(out, gate, up, n);
}
void rl_gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    rl__kernels()->gelu_mul(out, gate, up, n);
}
void rl_add_scaled(float *x, const float *y, float a, int64_t n) {
    rl__kernels()->add_scaled(x, y, a, n);
}

void rl_wht(float *x, int n) {
    RL_ASSERT(n > 0 && n <= 512 && (n & (n - 1)) == 0);
    rl__kernels()->wht(x, n);
}
