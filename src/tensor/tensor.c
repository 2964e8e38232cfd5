/* redline tensor types: the traits table, type names, row sizes, and exact
 * fp16 / bf16 <-> f32 conversions.
 *
 * Invariants:
 *   - the table is indexed by rl_type id; an entry with name == NULL is an
 *     id we do not know (rl_type_get returns NULL for it);
 *   - conversions are bit-exact IEEE: round to nearest, ties to even;
 *     Inf stays Inf, NaN stays NaN (payload kept where it fits, fp16 NaN
 *     bits survive f16 -> f32 -> f16 unchanged), subnormals are converted,
 *     never flushed;
 *   - the host is little-endian (x86-64), like the GGUF format, so stored
 *     rl_fp16 / block fields are read in place.
 */
#include "tensor/tensor-impl.h"

#include "base/base.h"

#include <ctype.h>
#include <string.h>

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE float sizes");

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- fp16 ---- */

float rl_fp16_to_f32(rl_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13)); /* Inf / NaN, payload kept */
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* subnormal: value m * 2^-24; normalize so the leading 1 is bit 10 */
        uint32_t ex = 113; /* 127 - 14 */
        while (!(m & 0x400u)) {
            m <<= 1;
            ex--;
        }
        return bits_f32(sign | (ex << 23) | ((m & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

rl_fp16 rl_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) { /* NaN: keep the top payload bits; never let it become Inf */
        uint16_t m = (uint16_t)(x >> 13) & 0x3ffu;
        return (rl_fp16)(sign | 0x7c00u | (m ? m : 0x200u));
    }
    /* >= 65520 (halfway between 65504 and 2^16) rounds to Inf, ties-to-even */
    if (x >= 0x477ff000u) return (rl_fp16)(sign | 0x7c00u);
    if (x >= 0x38800000u) {                    /* normal half range, >= 2^-14 */
        uint32_t r = x - ((127u - 15u) << 23); /* rebias exponent */
        r += 0xfffu + ((r >> 13) & 1u);        /* RNE; a carry bumps the exponent */
        return (rl_fp16)(sign | (r >> 13));
    }
    if (x <= 0x33000000u) return sign; /* <= 2^-25: ties to even -> 0 */
    /* half subnormal: units of 2^-24 */
    uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - (x >> 23); /* 14..24 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++; /* q == 0x400 is the smallest normal */
    return (rl_fp16)(sign | q);
}

rl_fp16 rl__fp16_round_up(float v) {
    rl_fp16 h = rl_f32_to_fp16(v);
    if ((h & 0x7fffu) >= 0x7c00u) return (rl_fp16)((h & 0x8000u) | 0x7bffu);
    if (rl_fp16_to_f32(h) < v) {
        if (h == 0x8000u)
            h = 0x0001u; /* -0 -> smallest positive subnormal */
        else if (h & 0x8000u)
            h--; /* negative: toward zero */
        else if (h < 0x7bffu)
            h++;
    }
    return h;
}

rl_fp16 rl__fp16_round_down(float v) {
    rl_fp16 h = rl_f32_to_fp16(v);
    if ((h & 0x7fffu) >= 0x7c00u) return (rl_fp16)((h & 0x8000u) | 0x7bffu);
    if (rl_fp16_to_f32(h) > v) {
        if (h == 0x0000u)
            h = 0x8001u;
        else if (h & 0x8000u) {
            if (h < 0xfbffu) h++;
        } else
            h--;
    }
    return h;
}

/* ---- bf16 ---- */

float rl_bf16_to_f32(rl_bf16 h) {
    return bits_f32((uint32_t)h << 16);
}

rl_bf16 rl_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (rl_bf16)((x >> 16) | 0x40u); /* quiet NaN */
    /* RNE on the low 16 bits; a carry into the exponent is the right answer
     * (it also turns values >= the bf16 overflow threshold into Inf) */
    return (rl_bf16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- plain-type row conversions ---- */

void rl__f32_to_float(const void *x, float *y, int64_t n) {
    memcpy(y, x, (size_t)n * 4);
}
void rl__f32_from_float(const float *x, void *y, int64_t n) {
    memcpy(y, x, (size_t)n * 4);
}

void rl__f16_to_float(const void *x, float *y, int64_t n) {
    const rl_fp16 *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = rl_fp16_to_f32(h[i]);
}
void rl__f16_from_float(const float *x, void *y, int64_t n) {
    rl_fp16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = rl_f32_to_fp16(x[i]);
}
void rl__bf16_to_float(const void *x, float *y, int64_t n) {
    const rl_bf16 *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = rl_bf16_to_f32(h[i]);
}
void rl__bf16_from_float(const float *x, void *y, int64_t n) {
    rl_bf16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = rl_f32_to_bf16(x[i]);
}
void rl__f64_to_float(const void *x, float *y, int64_t n) {
    const unsigned char *p = x;
    for (int64_t i = 0; i < n; i++) {
        double d;
        memcpy(&d, p + 8 * i, 8); /* f64 data may be only 4-byte aligned in a file */
        y[i] = (float)d;
    }
}

/* ---- the traits table ---- */

#define PLAIN(nm, sz, tof, fromf)                                                                  \
    {                                                                                              \
        .name = nm, .blck_size = 1, .type_size = sz, .is_quantized = false, .to_float = tof,       \
        .from_float = fromf                                                                        \
    }
#define QUANT(nm, blk, blktype, tof, fromf)                                                        \
    {                                                                                              \
        .name = nm, .blck_size = blk, .type_size = sizeof(blktype), .is_quantized = true,          \
        .to_float = tof, .from_float = fromf                                                       \
    }

static const rl_type_traits k_traits[RL_TYPE_COUNT] = {
    [RL_TYPE_F32] = PLAIN("f32", 4, rl__f32_to_float, rl__f32_from_float),
    [RL_TYPE_F16] = PLAIN("f16", 2, rl__f16_to_float, rl__f16_from_float),
    [RL_TYPE_BF16] = PLAIN("bf16", 2, rl__bf16_to_float, rl__bf16_from_float),
    [RL_TYPE_F64] = PLAIN("f64", 8, rl__f64_to_float, NULL),
    [RL_TYPE_I8] = PLAIN("i8", 1, NULL, NULL),
    [RL_TYPE_I16] = PLAIN("i16", 2, NULL, NULL),
    [RL_TYPE_I32] = PLAIN("i32", 4, NULL, NULL),
    [RL_TYPE_I64] = PLAIN("i64", 8, NULL, NULL),
    [RL_TYPE_Q4_0] = QUANT("q4_0", RL_QK4_0, rl_block_q4_0, rl__q4_0_to_float, rl__q4_0_from_float),
    [RL_TYPE_Q4_1] = QUANT("q4_1", RL_QK4_1, rl_block_q4_1, rl__q4_1_to_float, rl__q4_1_from_float),
    [RL_TYPE_Q5_0] = QUANT("q5_0", RL_QK5_0, rl_block_q5_0, rl__q5_0_to_float, rl__q5_0_from_float),
    [RL_TYPE_Q5_1] = QUANT("q5_1", RL_QK5_1, rl_block_q5_1, rl__q5_1_to_float, rl__q5_1_from_float),
    [RL_TYPE_Q8_0] = QUANT("q8_0", RL_QK8_0, rl_block_q8_0, rl__q8_0_to_float, rl__q8_0_from_float),
    [RL_TYPE_Q8_1] = QUANT("q8_1", RL_QK8_1, rl_block_q8_1, rl__q8_1_to_float, rl__q8_1_from_float),
    [RL_TYPE_Q2_K] = QUANT("q2_K", RL_QK_K, rl_block_q2_K, rl__q2_K_to_float, rl__q2_K_from_float),
    [RL_TYPE_Q3_K] = QUANT("q3_K", RL_QK_K, rl_block_q3_K, rl__q3_K_to_float, rl__q3_K_from_float),
    [RL_TYPE_Q4_K] = QUANT("q4_K", RL_QK_K, rl_block_q4_K, rl__q4_K_to_float, rl__q4_K_from_float),
    [RL_TYPE_Q5_K] = QUANT("q5_K", RL_QK_K, rl_block_q5_K, rl__q5_K_to_float, rl__q5_K_from_float),
    [RL_TYPE_Q6_K] = QUANT("q6_K", RL_QK_K, rl_block_q6_K, rl__q6_K_to_float, rl__q6_K_from_float),
    [RL_TYPE_Q8_K] = QUANT("q8_K", RL_QK_K, rl_block_q8_K, rl__q8_K_to_float, rl__q8_K_from_float),
    [RL_TYPE_IQ4_NL] =
        QUANT("iq4_nl", RL_QK4_NL, rl_block_iq4_nl, rl__iq4_nl_to_float, rl__iq4_nl_from_float),
    [RL_TYPE_IQ4_XS] =
        QUANT("iq4_xs", RL_QK_K, rl_block_iq4_xs, rl__iq4_xs_to_float, rl__iq4_xs_from_float),
    [RL_TYPE_MXFP4] =
        QUANT("mxfp4", RL_QK_MXFP4, rl_block_mxfp4, rl__mxfp4_to_float, rl__mxfp4_from_float),
    [RL_TYPE_Q8_64] =
        QUANT("q8_64", RL_QK8_64, rl_block_q8_64, rl__q8_64_to_float, rl__q8_64_from_float),
};

const rl_type_traits *rl_type_get(uint32_t t) {
    if (t >= RL_TYPE_COUNT || k_traits[t].name == NULL) return NULL;
    return &k_traits[t];
}

const char *rl_type_name(uint32_t t) {
    const rl_type_traits *tr = rl_type_get(t);
    return tr ? tr->name : "?";
}

size_t rl_type_row_size(rl_type t, int64_t ne0) {
    const rl_type_traits *tr = rl_type_get((uint32_t)t);
    if (!tr || ne0 < 0 || ne0 % tr->blck_size != 0) return 0;
    size_t out;
    if (!rl_mul_size((size_t)(ne0 / tr->blck_size), tr->type_size, &out)) return 0;
    return out;
}

bool rl_type_from_name(const char *name, rl_type *out) {
    if (!name) return false;
    for (uint32_t t = 0; t < RL_TYPE_COUNT; t++) {
        const char *tn = k_traits[t].name;
        if (!tn) continue;
        size_t i = 0;
        while (tn[i] && name[i] && tolower((unsigned char)tn[i]) == tolower((unsigned char)name[i]))
            i++;
        if (tn[i] == '\0' && name[i] == '\0') {
            if (out) *out = (rl_type)t;
            return true;
        }
    }
    return false;
}
