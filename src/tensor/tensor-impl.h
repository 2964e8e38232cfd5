/* redline tensor internals: the per-type scalar reference conversions that
 * the traits table in tensor.c points at.  Only src/tensor/ includes this;
 * everyone else reaches these through rl_type_get(t)->to_float/from_float.
 *
 * Contract of every function here: n is a multiple of the type's block size
 * (RL_ASSERT'ed; a violation is a caller bug, never untrusted input, because
 * the GGUF reader already validated ne[0] % blck_size == 0).  x and y must
 * not overlap.
 */
#ifndef RL_TENSOR_IMPL_H
#define RL_TENSOR_IMPL_H

#include "tensor/tensor.h"

/* plain types (tensor.c) */
void rl__f32_to_float(const void *x, float *y, int64_t n);
void rl__f32_from_float(const float *x, void *y, int64_t n);
void rl__f16_to_float(const void *x, float *y, int64_t n);
void rl__f16_from_float(const float *x, void *y, int64_t n);
void rl__bf16_to_float(const void *x, float *y, int64_t n);
void rl__bf16_from_float(const float *x, void *y, int64_t n);
void rl__f64_to_float(const void *x, float *y, int64_t n);

/* 32-element block quants (quants.c) */
void rl__q4_0_to_float(const void *x, float *y, int64_t n);
void rl__q4_0_from_float(const float *x, void *y, int64_t n);
void rl__q4_1_to_float(const void *x, float *y, int64_t n);
void rl__q4_1_from_float(const float *x, void *y, int64_t n);
void rl__q5_0_to_float(const void *x, float *y, int64_t n);
void rl__q5_0_from_float(const float *x, void *y, int64_t n);
void rl__q5_1_to_float(const void *x, float *y, int64_t n);
void rl__q5_1_from_float(const float *x, void *y, int64_t n);
void rl__q8_0_to_float(const void *x, float *y, int64_t n);
void rl__q8_0_from_float(const float *x, void *y, int64_t n);
void rl__q8_1_to_float(const void *x, float *y, int64_t n);
void rl__q8_64_to_float(const void *x, float *y, int64_t n);
void rl__q8_64_from_float(const float *x, void *y, int64_t n);
void rl__q8_1_from_float(const float *x, void *y, int64_t n);

/* codebook quants (quants_nl.c) */
void rl__iq4_nl_to_float(const void *x, float *y, int64_t n);
void rl__iq4_nl_from_float(const float *x, void *y, int64_t n);
void rl__iq4_xs_to_float(const void *x, float *y, int64_t n);
void rl__iq4_xs_from_float(const float *x, void *y, int64_t n);
void rl__mxfp4_to_float(const void *x, float *y, int64_t n);
void rl__mxfp4_from_float(const float *x, void *y, int64_t n);

/* 256-element super-block K-quants (quants_k.c) */
void rl__q2_K_to_float(const void *x, float *y, int64_t n);
void rl__q2_K_from_float(const float *x, void *y, int64_t n);
void rl__q3_K_to_float(const void *x, float *y, int64_t n);
void rl__q3_K_from_float(const float *x, void *y, int64_t n);
void rl__q4_K_to_float(const void *x, float *y, int64_t n);
void rl__q4_K_from_float(const float *x, void *y, int64_t n);
void rl__q5_K_to_float(const void *x, float *y, int64_t n);
void rl__q5_K_from_float(const float *x, void *y, int64_t n);
void rl__q6_K_to_float(const void *x, float *y, int64_t n);
void rl__q6_K_from_float(const float *x, void *y, int64_t n);
void rl__q8_K_to_float(const void *x, float *y, int64_t n);
void rl__q8_K_from_float(const float *x, void *y, int64_t n);

/* fp16 with directed rounding (quantizers use these so a stored scale never
 * shrinks the range it must cover).  v must be finite; results saturate at
 * the largest finite half. */
rl_fp16 rl__fp16_round_up(float v);   /* smallest half >= v */
rl_fp16 rl__fp16_round_down(float v); /* largest half <= v */

#endif
