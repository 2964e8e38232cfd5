/* redline tensor types (L1): the type ids of GGUF/GGML, the quantized block
 * formats, fp16/bf16 conversion, and a designated-initializer traits table
 * with the scalar reference quantize/dequantize of each type.  Pure math:
 * no I/O, no allocation.
 *
 * Layout conventions: a tensor has up to 4 dims ne[0..3], ne[0] the fastest
 * (contiguous) axis.  A row is ne[0] elements; quantized types pack a row as
 * ne[0]/blck_size blocks, so ne[0] must be a multiple of blck_size.
 */
#ifndef RL_TENSOR_H
#define RL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Type ids as stored in GGUF files.  Append-only; values are fixed by the
 * file format (gaps are ids the format retired or that we do not load). */
typedef enum rl_type {
    RL_TYPE_F32 = 0,
    RL_TYPE_F16 = 1,
    RL_TYPE_Q4_0 = 2,
    RL_TYPE_Q4_1 = 3,
    RL_TYPE_Q5_0 = 6,
    RL_TYPE_Q5_1 = 7,
    RL_TYPE_Q8_0 = 8,
    RL_TYPE_Q8_1 = 9,
    RL_TYPE_Q2_K = 10,
    RL_TYPE_Q3_K = 11,
    RL_TYPE_Q4_K = 12,
    RL_TYPE_Q5_K = 13,
    RL_TYPE_Q6_K = 14,
    RL_TYPE_Q8_K = 15,
    RL_TYPE_IQ4_NL = 20,
    RL_TYPE_IQ4_XS = 23,
    RL_TYPE_I8 = 24,
    RL_TYPE_I16 = 25,
    RL_TYPE_I32 = 26,
    RL_TYPE_I64 = 27,
    RL_TYPE_F64 = 28,
    RL_TYPE_BF16 = 30,
    RL_TYPE_MXFP4 = 39,    /* gpt-oss experts */
    RL_TYPE_GGUF_END = 40, /* GGUF type ids are below this */
    /* redline's own types, never read from or written to a file: */
    RL_TYPE_Q8_64 = 40, /* KV pages: q8 with one fp16 scale per 64 */
    RL_TYPE_COUNT = 41, /* table size; ids >= this are unknown */
} rl_type;

typedef uint16_t rl_fp16; /* IEEE half, stored bits */
typedef uint16_t rl_bf16; /* bfloat16, stored bits */

#define RL_QK4_0        32
#define RL_QK4_1        32
#define RL_QK5_0        32
#define RL_QK5_1        32
#define RL_QK8_0        32
#define RL_QK8_1        32
#define RL_QK8_64       64
#define RL_QK4_NL       32
#define RL_QK_MXFP4     32
#define RL_QK_K         256
#define RL_K_SCALE_SIZE 12

/* x = d * q, q in [-8, 7] stored as nibble q+8; element j in low nibble of
 * qs[j], element j+16 in the high nibble. */
typedef struct {
    rl_fp16 d;
    uint8_t qs[RL_QK4_0 / 2];
} rl_block_q4_0;
/* x = d * q + m, q in [0, 15]; same nibble order as q4_0. */
typedef struct {
    rl_fp16 d, m;
    uint8_t qs[RL_QK4_1 / 2];
} rl_block_q4_1;
/* 5-bit: low nibbles as q4_0, the 5th bits in qh (bit j of the 32-bit qh). */
typedef struct {
    rl_fp16 d;
    uint8_t qh[4];
    uint8_t qs[RL_QK5_0 / 2];
} rl_block_q5_0;
typedef struct {
    rl_fp16 d, m;
    uint8_t qh[4];
    uint8_t qs[RL_QK5_1 / 2];
} rl_block_q5_1;
/* x = d * q, q int8. */
typedef struct {
    rl_fp16 d;
    int8_t qs[RL_QK8_0];
} rl_block_q8_0;
/* q8_0 with 64-element blocks (8.25 bits per value instead of 8.5): a KV
 * page type only (RL_TYPE_Q8_64, not a GGUF type). */
typedef struct {
    rl_fp16 d;
    int8_t qs[RL_QK8_64];
} rl_block_q8_64;
/* q8_0 plus s = d * sum(qs), used for activations against q4_1/q5_1. */
typedef struct {
    rl_fp16 d, s;
    int8_t qs[RL_QK8_1];
} rl_block_q8_1;

/* Non-linear codebook types (a fixed int8 table per format, below):
 * iq4_nl: x = d * rl_iq4nl_values[q], same nibble order as q4_0. */
typedef struct {
    rl_fp16 d;
    uint8_t qs[RL_QK4_NL / 2];
} rl_block_iq4_nl;
/* mxfp4 (OCP microscaling FP4): 32 e2m1 codes and one e8m0 shared
 * exponent; x = rl_mxfp4_values[q] * rl_e8m0_half_to_f32(e) (the table
 * holds twice the e2m1 value, so the scale is 2^(e-128)); nibble order as
 * q4_0. */
typedef struct {
    uint8_t e;
    uint8_t qs[RL_QK_MXFP4 / 2];
} rl_block_mxfp4;

/* K-quants: super-blocks of 256 elements. */
typedef struct {
    uint8_t scales[RL_QK_K / 16]; /* 4-bit scale | 4-bit min per 16 */
    uint8_t qs[RL_QK_K / 4];      /* 2-bit quants */
    rl_fp16 d, dmin;
} rl_block_q2_K;
typedef struct {
    uint8_t hmask[RL_QK_K / 8]; /* high bit */
    uint8_t qs[RL_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 6-bit scales */
    rl_fp16 d;
} rl_block_q3_K;
typedef struct {
    rl_fp16 d, dmin;
    uint8_t scales[RL_K_SCALE_SIZE]; /* 8 6-bit scales and mins */
    uint8_t qs[RL_QK_K / 2];
} rl_block_q4_K;
typedef struct {
    rl_fp16 d, dmin;
    uint8_t scales[RL_K_SCALE_SIZE];
    uint8_t qh[RL_QK_K / 8];
    uint8_t qs[RL_QK_K / 2];
} rl_block_q5_K;
typedef struct {
    uint8_t ql[RL_QK_K / 2];     /* low 4 bits */
    uint8_t qh[RL_QK_K / 4];     /* high 2 bits */
    int8_t scales[RL_QK_K / 16]; /* 8-bit scales */
    rl_fp16 d;
} rl_block_q6_K;
/* iq4_xs: 8 sub-blocks of 32, each with a 6-bit scale ls (low 4 bits:
 * nibble ib%2 of scales_l[ib/2]; high 2 bits: bits 2ib..2ib+1 of
 * scales_h); x = (d * (ls - 32)) * rl_iq4nl_values[q]; sub-block ib's
 * codes are qs[16ib..16ib+15] in q4_0's nibble order. */
typedef struct {
    rl_fp16 d;
    uint16_t scales_h;
    uint8_t scales_l[RL_QK_K / 64];
    uint8_t qs[RL_QK_K / 2];
} rl_block_iq4_xs;
/* Activations for K-quant dot products. */
typedef struct {
    float d;
    int8_t qs[RL_QK_K];
    int16_t bsums[RL_QK_K / 16]; /* sum of each 16 quants */
} rl_block_q8_K;

_Static_assert(sizeof(rl_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(rl_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(rl_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(rl_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(rl_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(rl_block_q8_1) == 36, "q8_1 block size");
_Static_assert(sizeof(rl_block_q8_64) == 66, "q8_64 block size");
_Static_assert(sizeof(rl_block_q2_K) == 84, "q2_K block size");
_Static_assert(sizeof(rl_block_q3_K) == 110, "q3_K block size");
_Static_assert(sizeof(rl_block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(rl_block_q5_K) == 176, "q5_K block size");
_Static_assert(sizeof(rl_block_q6_K) == 210, "q6_K block size");
_Static_assert(sizeof(rl_block_q8_K) == 292, "q8_K block size");
_Static_assert(sizeof(rl_block_iq4_nl) == 18, "iq4_nl block size");
_Static_assert(sizeof(rl_block_iq4_xs) == 136, "iq4_xs block size");
_Static_assert(sizeof(rl_block_mxfp4) == 17, "mxfp4 block size");

/* The codebooks (part of the formats): iq4_nl/iq4_xs, ascending; mxfp4,
 * twice the e2m1 values (codes 0..7 positive, 8..15 their negatives). */
extern const int8_t rl_iq4nl_values[16];
extern const int8_t rl_mxfp4_values[16];
/* Half the e8m0 scale e, i.e. 2^(e - 128) (e = 255, which the format
 * reserves for NaN, decodes as 2^127 like the gguf package does); inline,
 * for the mxfp4 leaves' per-block steps. */
static inline float rl_e8m0_half_to_f32(uint8_t e) {
    /* e = 0, 1: the subnormals 2^-128, 2^-127; else exponent field e - 1 */
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    union {
        uint32_t u;
        float f;
    } v = {.u = bits};
    return v.f;
}

/* Scalar reference conversions: x has n elements (n a multiple of the
 * type's block size), y is the packed output. */
typedef void (*rl_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*rl_from_float_fn)(const float *x, void *y, int64_t n);

typedef struct rl_type_traits {
    const char *name;  /* "q4_K", as GGUF tools print it */
    int32_t blck_size; /* elements per block (1 for plain types) */
    size_t type_size;  /* bytes per block */
    bool is_quantized;
    rl_to_float_fn to_float;     /* may be NULL: type not dequantizable */
    rl_from_float_fn from_float; /* may be NULL: no reference quantizer */
} rl_type_traits;

/* Traits of `t`, or NULL if `t` is not a known type id. */
const rl_type_traits *rl_type_get(uint32_t t);
const char *rl_type_name(uint32_t t); /* "?" if unknown */
/* Bytes of one row of ne0 elements; 0 if ne0 is not a multiple of the block
 * size or the type is unknown.  Overflow-free for ne0 < 2^40. */
size_t rl_type_row_size(rl_type t, int64_t ne0);
/* Parse "q8_0", "f16" ... (case-insensitive); returns false if unknown. */
bool rl_type_from_name(const char *name, rl_type *out);

/* fp16 / bf16 scalar conversion (exact IEEE round-to-nearest-even). */
float rl_fp16_to_f32(rl_fp16 h);
rl_fp16 rl_f32_to_fp16(float f);
float rl_bf16_to_f32(rl_bf16 h);
rl_bf16 rl_f32_to_bf16(float f);

/* q4_K/q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes s:
 *   j < 4:  sc = s[j] & 63,  m = s[j+4] & 63
 *   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
 *           m  = (s[j+4] >> 4) | (s[j]   >> 6) << 4
 * The one decoder of this layout: the dequantizers and the reference dot products use it. */
static inline void rl_scale_min_k4(const uint8_t s[12], int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

#endif
