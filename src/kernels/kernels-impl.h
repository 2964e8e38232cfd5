/* Internal kernel table shared by dispatch.c, the drivers (matmul.c,
 * attention.c), the reference kernels (ref/) and the AVX2 kernels (x86/).
 * Only src/kernels/ and the kernel tests include this header.
 *
 * A table holds leaf kernels (one row / one block run); the drivers split
 * work over threads and call through the active table.  Each leaf has a
 * fixed reduction order that depends only on its arguments, never on how
 * many rows or tokens the caller processes, so results are batch- and
 * thread-count-invariant for a given table.
 */
#ifndef RL_KERNELS_IMPL_H
#define RL_KERNELS_IMPL_H

#include <math.h>

#include "kernels/kernels.h"

/* *s = dot(w row of n elements, x row of n elements).  x is packed in the
 * activation type rl__act_type(w's type) (q8_0/q8_1/q8_K), or plain f32
 * when the weight type is f32/f16/bf16. */
typedef void (*rl__vec_dot_fn)(int64_t n, float *s, const void *w, const void *x);
/* Optional 4-token variant: s[k * s_stride] = vec_dot(n, w, x + k * x_stride)
 * for k = 0..3, bit-identical to four vec_dot calls (same float operation
 * sequence per token; only the weight unpacking is shared). */
typedef void (*rl__vec_dot4_fn)(int64_t n, float *s, size_t s_stride, const void *w, const void *x,
                                size_t x_stride);
/* Optional 8-token variant, same contract as vec_dot4 for k = 0..7. */
typedef rl__vec_dot4_fn rl__vec_dot8_fn;
/* Optional 2-row variant for one token: s[j] = vec_dot(n, w + j * w_stride,
 * x) for j = 0, 1, bit-identical to two vec_dot calls (same float
 * operation sequence per row; only the activation loads are shared, and
 * the two rows' dependency chains interleave). */
typedef void (*rl__vec_dot2r_fn)(int64_t n, float *s, const void *w, size_t w_stride,
                                 const void *x);
/* Quantize n floats (n a multiple of the block size) into packed blocks. */
typedef void (*rl__quant_fn)(const float *x, void *y, int64_t n);

/* ---- fast many-token tiles (ref/ref_tile.c, x86/avx2_tile.c) ----
 * For the tokens rl_matmul_ex marks fast (prompt tokens): the matmul driver
 * repacks groups of 8 weight rows into an interleaved layout in a per-thread
 * buffer, then streams the tokens over it (dot_row: the same reduction on
 * one row in place, for few tokens).  The reduction differs from vec_dot's (each
 * super-block's integer sum is formed per row and converted once), so the
 * results are within float rounding of vec_dot, not bit-identical; the
 * scalar twin (ref) and the AVX2 leaf agree bit for bit.
 *
 * q4_K, 8 rows r = 0..7, one super-block: */
typedef struct rl__q4k_x8 {
    float d[8], dmin[8]; /* per row */
    /* scale of sub-block b for row r at lanes 2r and 2r+1 */
    int16_t sc[8][16];
    /* mins: for pair p (sub-blocks 2p, 2p+1), row r: lane 2r = m(2p),
     * lane 2r+1 = m(2p+1) */
    int16_t mn[4][16];
    /* element 4g + c (g < 64, c < 4) of row r at q[g][4r + c], 0..15
     * (0..31: q5_K, whose scales, mins and steps are q4_K's) */
    uint8_t q[64][32];
} rl__q4k_x8;
_Static_assert(sizeof(rl__q4k_x8) == 2496, "q4_K x8 block");
/* q6_K, 8 rows, one super-block (codes q 0..63, w = d * sc * (q - 32)): */
typedef struct rl__q6k_x8 {
    float d[8];
    /* scale of 16-element sub-block b for row r at lanes 2r and 2r+1 */
    int16_t sc[16][16];
    /* for pair p (sub-blocks 2p, 2p+1), row r: lane 2r = sc(2p), 2r+1 = sc(2p+1) */
    int16_t scp[8][16];
    /* element 4g + c of row r at q[g][4r + c], 0..63 */
    uint8_t q[64][32];
} rl__q6k_x8;
_Static_assert(sizeof(rl__q6k_x8) == 2848, "q6_K x8 block");
void rl__pack_q6_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* Row r's 16 sub-block scales into a packed block (sc and scp). */
void rl__q6k_x8_scales(rl__q6k_x8 *o, int r, const int8_t scales[16]);
/* q3_K on the q6_K tile: a q3_K block is a q6_K block with codes (q3 + 32,
 * 28..35) and its scales (-32..31) as int8, so q3_K rows pack into
 * rl__q6k_x8 and run the q6_K leaves (packed and pair); per super-block
 * sumi - 32 corr is the exact sum_b sc_b sum (q3 x). */
void rl__pack_q3_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* q2_K, 8 rows, one super-block (codes q 0..3, w = d * sc * q - dmin * m
 * per 16-element sub-block, sc and m 0..15), against q8_K: per
 * super-block and row sumi = sum_b sc_b sum (q x), msum = sum_b m_b bsum_b
 * (the q8_K 16-element sums), then q4_K's two fused multiply-adds
 * (acc = fma(d dx, sumi, acc), fma(-(dmin dx), msum, acc)). */
typedef struct rl__q2k_x8 {
    float d[8], dmin[8];
    /* scale of 16-element sub-block b for row r at lanes 2r and 2r+1 */
    int16_t sc[16][16];
    /* for pair p (sub-blocks 2p, 2p+1), row r: lane 2r = m(2p), 2r+1 = m(2p+1) */
    int16_t mn[8][16];
    /* element 4g + c of row r at q[g][4r + c], 0..3 */
    uint8_t q[64][32];
} rl__q2k_x8;
_Static_assert(sizeof(rl__q2k_x8) == 2880, "q2_K x8 block");
void rl__pack_q2_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* Row r's scales and mins from a q2_K block's 16 packed bytes (sc, mn). */
void rl__q2k_x8_scales(rl__q2k_x8 *o, int r, const uint8_t scales[16]);
/* iq4_xs, 8 rows, one super-block (w = d (ls - 32) v per 32-element
 * sub-block, v the iq4_nl codebook value, -127..113), against q8_K: each
 * code as two nibble planes of v + 128 = 16 h + l (h, l 0..15), so the
 * q4_K tile's unsigned-by-signed products apply; per super-block and row
 * sumi = sum_b (ls_b - 32) sum (16 h + l) x and msum = sum_b (ls_b - 32)
 * bsum32_b, then q4_K's two fused multiply-adds with dmin = 128 d, which
 * leaves d dx sum_b (ls_b - 32) sum v x. */
typedef struct rl__iq4xs_x8 {
    float d[8], dmin[8];
    /* sub-block b, row r: sc[2b] lanes 2r, 2r + 1 = 16 (ls - 32) (the h
     * plane), sc[2b + 1] = ls - 32 (the l plane) */
    int16_t sc[16][16];
    /* for pair p (sub-blocks 2p, 2p+1), row r: lanes 2r, 2r + 1 = ls - 32 */
    int16_t mn[4][16];
    /* element 32b + 4g + c of row r: h at q[16b + g][4r + c], l at
     * q[16b + 8 + g][4r + c] */
    uint8_t q[128][32];
} rl__iq4xs_x8;
_Static_assert(sizeof(rl__iq4xs_x8) == 4800, "iq4_xs x8 block");
void rl__pack_iq4_xs_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* Row r's scales from an iq4_xs block (sc, mn). */
void rl__iq4xs_x8_scales(rl__iq4xs_x8 *o, int r, const rl_block_iq4_xs *b);
/* mxfp4, 8 rows, one 32-element block (w = d * v: v the doubled e2m1
 * value, -12..12, as a signed byte; d = 2^(e - 128), rl_e8m0_half_to_f32),
 * against q8_0: per block and row acc = fma(d * dx, (float)sum(v qx), acc). */
typedef struct rl__mxfp4_x8 {
    float d[8];
    /* element 4g + c (g < 8, c < 4) of row r at q[g][4r + c] */
    int8_t q[8][32];
} rl__mxfp4_x8;
_Static_assert(sizeof(rl__mxfp4_x8) == 288, "mxfp4 x8 block");
void rl__pack_mxfp4_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* q4_1, 8 rows, one 32-element block (w = d * q + m, q 0..15), against q8_1
 * (x = dx * qx, sx = dx * sum qx): per block and row
 *   acc = fma(d * dx, (float)sum(q * qx), acc); acc = fma(m, sx, acc). */
typedef struct rl__q41_x8 {
    float d[8], m[8];
    /* element 4g + c (g < 8, c < 4) of row r at q[g][4r + c], 0..15 */
    uint8_t q[8][32];
} rl__q41_x8;
_Static_assert(sizeof(rl__q41_x8) == 320, "q4_1 x8 block");
/* (fields in whole 32-byte units: the pair leaves' interleaving) */
_Static_assert(sizeof(rl__q4k_x8) % 32 == 0 && sizeof(rl__q6k_x8) % 32 == 0 &&
                   sizeof(rl__q41_x8) % 32 == 0 && sizeof(rl__q2k_x8) % 32 == 0 &&
                   sizeof(rl__mxfp4_x8) % 32 == 0 && sizeof(rl__iq4xs_x8) % 32 == 0,
               "packed blocks in 32-byte units");
void rl__pack_q4_1_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* Tokens per call of a tile8 dot (1..RL_TILE8_T). */
#define RL_TILE8_T 4
/* Tokens per call of a pair leaf (1..RL_TILE16_T). */
#define RL_TILE16_T 8
/* The bytes a thread converts next (the following pair's resident groups,
 * rl__rtile.to_pair), for a packed pair leaf to prefetch a few cache lines
 * of per block of columns while it computes (the leaf advances next toward
 * end): the conversion then reads cache, not DRAM, and costs its stores
 * rather than a stall on every line.  A leaf may ignore it; NULL: none. */
typedef struct rl__pf {
    const uint8_t *next, *end;
    /* bytes to fetch a block of columns (256) and token: the leaf's pass
     * of T tokens fetches T of them a block, so the step's passes cover
     * the pair whatever their count (0: a leaf's own rate) */
    size_t tok_bytes;
} rl__pf;
/* rl__pf.tok_bytes for a pair of `bytes` on n_cols columns and n_tok tokens */
static inline size_t rl__pf_tok_bytes(size_t bytes, int64_t n_cols, int64_t n_tok) {
    const size_t n = (size_t)(n_cols / RL_QK_K * n_tok);
    return n ? (bytes + n - 1) / n : 0;
}
/* A pair leaf (rl__tile8.dot16: the AVX2 and AVX512-VNNI tables;
 * rl__rtile.dot16: AVX512-VNNI only; NULL elsewhere): the 8-row dot of two
 * groups of the same layout at once, their 16 rows in the 16 int32/float
 * lanes of a zmm register (two ymm on AVX2): rows 0..7 from g0, rows 8..15
 * from g0 + g_stride; s[k * s_stride + r] for r < 16, k < n_x
 * (1..RL_TILE16_T).  The integer sums are exact and the float steps are
 * the 8-row leaf's per lane, so each lane is bit-identical to the 8-row
 * dot on its group. */
typedef void (*rl__tile16_fn)(int64_t n_cols, float *s, size_t s_stride, const void *g0,
                              size_t g_stride, const void *x, size_t x_stride, int n_x);
/* The packed tiles' pair leaf (rl__tile8.dot16): the same, on a packed
 * pair: per block of columns (rl__tile8.block_size bytes of each group)
 * the two groups' packed blocks interleaved 32 bytes at a time (every
 * field of the packed types is a whole number of 32-byte units): bytes
 * 64u .. 64u + 31 are group A's unit u, 64u + 32 .. 64u + 63 group B's,
 * so each field of the pair is one 64-byte load (rl__tile8_merge16). */
typedef void (*rl__tile16p_fn)(int64_t n_cols, float *s, size_t s_stride, const void *pair,
                               const void *x, size_t x_stride, int n_x, rl__pf *pf);
typedef struct rl__tile8 {
    /* Packs rows w, w + row_size, .. (8 of them, n_cols each) into dst
     * (n_cols / 256 packed blocks). */
    void (*pack)(void *dst, const void *w, size_t row_size, int64_t n_cols);
    /* s[k * s_stride + r] = row r . token k for r < 8, k < n_x. */
    void (*dot)(int64_t n_cols, float *s, size_t s_stride, const void *packed, const void *x,
                size_t x_stride, int n_x);
    /* s[k * s_stride] = weight row w (the matrix's own layout) . token k for
     * k < n_x (1..RL_TILE8_T), bit-identical to that row's lane of dot: the
     * same reduction without packing, for calls with few tiled tokens. */
    void (*dot_row)(int64_t n_cols, float *s, size_t s_stride, const void *w, const void *x,
                    size_t x_stride, int n_x);
    rl__tile16p_fn dot16; /* a packed pair (may be NULL) */
    /* dot16 resuming from sums already in s: each lane's chain of fused
     * multiply-adds continues from s[k * s_stride + r], so a pair's
     * columns run in blocks (each converted just before its tokens) give
     * the bits of one call on all of them; NULL: none. */
    rl__tile16p_fn dot16a;
    size_t
        block_size; /* packed bytes per 256 columns (a multiple of it for the 32-element types) */
    /* Calls with at least this many fast tokens pack the rows (fewer run
     * dot_row); 0: RL_MATMUL_FAST_MIN_TOK.  Lower where packing costs a few
     * tokens of the leaf's work and dot_row is slow (its float step per
     * 32-element block in scalar). */
    int pack_min;
} rl__tile8;
void rl__pack_q4_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
void rl__pack_q5_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols);
/* ---- resident tiles (ref/ref_tile.c, x86/avx2_tile.c) ----
 * A matrix made resident (rl_mat_make_resident, kernels.h) holds its rows 8
 * at a time in an interleaved layout written once at load, in the same
 * number of bytes as its row-major blocks, and every token (one or many)
 * runs the same leaf on it: the tiles' reduction above, without a per-step
 * repack, so a token's result never depends on what shares its step.
 *
 * q4_1, 8 rows r = 0..7, one 32-element block (the 8 rows' blocks, 160
 * bytes): q[v][4r + c] is byte 4v + c of row r's qs, so its low nibble is
 * element 4v + c (group v of rl__q41_x8) and its high nibble element
 * 16 + 4v + c (group v + 4).  Per block and row, the same two fused
 * multiply-adds as rl__q41_x8's tile (d, m widened from fp16 exactly). */
typedef struct rl__q41_r8 {
    rl_fp16 d[8], m[8];
    uint8_t q[4][32];
} rl__q41_r8;
_Static_assert(sizeof(rl__q41_r8) == 8 * sizeof(rl_block_q4_1), "q4_1 resident block");
/* q5_0, 8 rows, one 32-element block (the 8 rows' blocks, 176 bytes):
 * q[v][4r + c] is byte 4v + c of row r's qs as in rl__q41_r8 (low nibble
 * element 4v + c, high nibble element 16 + 4v + c: element 4G + c of
 * group G = v or v + 4), and bit G of hb[4r + c] is the fifth bit of
 * element 4G + c (bit 4G + c of row r's qh).  The codes are 0..31 (the
 * value is d (code - 16)); per block and row sumi = sum code x - 16 sum x
 * exactly, then acc = fma(d dx, sumi, acc). */
typedef struct rl__q50_r8 {
    rl_fp16 d[8];
    uint8_t hb[32];
    uint8_t q[4][32];
} rl__q50_r8;
_Static_assert(sizeof(rl__q50_r8) == 8 * sizeof(rl_block_q5_0), "q5_0 resident block");
/* q5_1, 8 rows, one 32-element block (192 bytes): rl__q50_r8 with each
 * row's m; codes 0..31 (the value d code + m), the float steps q4_1's. */
typedef struct rl__q51_r8 {
    rl_fp16 d[8], m[8];
    uint8_t hb[32];
    uint8_t q[4][32];
} rl__q51_r8;
_Static_assert(sizeof(rl__q51_r8) == 8 * sizeof(rl_block_q5_1), "q5_1 resident block");
/* q4_0, 8 rows, one 32-element block (144 bytes): rl__q50_r8 without the
 * fifth bits, codes 0..15 (the value d (code - 8)); sumi = sum code x - 8
 * sum x, the same form of the activations (rl__q80s) and float step. */
typedef struct rl__q40_r8 {
    rl_fp16 d[8];
    uint8_t q[4][32];
} rl__q40_r8;
_Static_assert(sizeof(rl__q40_r8) == 8 * sizeof(rl_block_q4_0), "q4_0 resident block");
/* Row r's 16 nibble bytes into / out of the 4-byte groups of the 8 rows
 * (q[j / 4][4 r + j % 4] = qs[j]: the q4_1, q5_0, q4_0 and mxfp4 layouts;
 * the scalar repackers). */
static inline void rl__r8_put_qs(uint8_t (*q)[32], int r, const uint8_t *qs) {
    for (int j = 0; j < 16; j++) q[j / 4][4 * r + j % 4] = qs[j];
}
static inline void rl__r8_get_qs(uint8_t *qs, const uint8_t (*q)[32], int r) {
    for (int j = 0; j < 16; j++) qs[j] = q[j / 4][4 * r + j % 4];
}
/* mxfp4, 8 rows, one 32-element block (136 bytes): rl__q40_r8 with each
 * row's e8m0 exponent for its scale; the codes index rl_mxfp4_values (-12..
 * 12), read as u = value + 16 (4..28, unsigned): sumi = sum u x - 16 sum x
 * on the same activation form (rl__q80s), then acc = fma(d dx, sumi, acc)
 * with d = rl_e8m0_half_to_f32(e): rl__mxfp4_x8's float step, so the
 * packed and resident tiles give the same bits. */
typedef struct rl__mxfp4_r8 {
    uint8_t e[8];
    uint8_t q[4][32];
} rl__mxfp4_r8;
_Static_assert(sizeof(rl__mxfp4_r8) == 8 * sizeof(rl_block_mxfp4), "mxfp4 resident block");
/* q4_K, 8 rows, one super-block (the 8 rows' blocks, 1152 bytes): the
 * scales kept packed (row r's scales[0..3] at sa[4r..], [4..7] at sb,
 * [8..11] at sc; decoded per super-block in registers), and q[8j + g][4r +
 * c] is byte 32j + 4g + c of row r's qs: its low nibble element 64j + 4g +
 * c (sub-block 2j), its high nibble element 64j + 32 + 4g + c (sub-block
 * 2j + 1).  The same integers and float steps as rl__q4k_x8's tile. */
typedef struct rl__q4k_r8 {
    rl_fp16 d[8], dmin[8];
    uint8_t sa[32], sb[32], sc[32];
    uint8_t q[32][32];
} rl__q4k_r8;
_Static_assert(sizeof(rl__q4k_r8) == 8 * sizeof(rl_block_q4_K), "q4_K resident block");
/* q5_K, 8 rows, one super-block (the 8 rows' blocks, 1408 bytes):
 * rl__q4k_r8's fields (the same scales, nibbles and order) and the fifth
 * bits transposed for the leaves' unrolled group loop: bit g of hb[b][4r +
 * c] is the fifth bit of element 32b + 4g + c of row r (bit b of its
 * qh[4g + c]).  Codes 0..31, the same integers and float steps as the
 * packed q5_K tile (rl__q4k_x8). */
typedef struct rl__q5k_r8 {
    rl_fp16 d[8], dmin[8];
    uint8_t sa[32], sb[32], sc[32];
    uint8_t hb[8][32];
    uint8_t q[32][32];
} rl__q5k_r8;
_Static_assert(sizeof(rl__q5k_r8) == 8 * sizeof(rl_block_q5_K), "q5_K resident block");
/* iq4_xs, 8 rows, one super-block (the 8 rows' blocks, 1088 bytes): the
 * scales kept packed (row r's scales_h at sh[r], its scales_l at sl[4r..
 * 4r + 3]; decoded per super-block in registers into rl__iq4xs_x8's sc
 * and mn), and q[4b + v][4r + c] is byte 16b + 4v + c of row r's qs: its
 * low nibble element 32b + 4v + c (group v of sub-block b), its high
 * nibble element 32b + 16 + 4v + c (group v + 4), each looked up as the
 * two nibble planes of v + 128.  The same integers and float steps as
 * rl__iq4xs_x8's tile. */
typedef struct rl__iq4xs_r8 {
    rl_fp16 d[8];
    uint16_t sh[8];
    uint8_t sl[32];
    uint8_t q[32][32];
} rl__iq4xs_r8;
_Static_assert(sizeof(rl__iq4xs_r8) == 8 * sizeof(rl_block_iq4_xs), "iq4_xs resident block");
/* q6_K, 8 rows, one super-block (1680 bytes): for half h (elements 128h..)
 * and t = 4g + c (g < 8, c < 4), ql[h][g][4r + c] is byte 64h + t of row
 * r's ql and ql[h][8 + g][4r + c] byte 64h + 32 + t, qh[h][g][4r + c] byte
 * 32h + t of its qh; so element 128h + 32o + t (quadrant o < 4) is the low
 * (o < 2) or high nibble of ql[h][8 (o & 1) + g] with bits 2o, 2o + 1 of
 * qh[h][g] above it.  sc[b][r]: scale of 16-element sub-block b.  The same
 * integers and float step as rl__q6k_x8's tile. */
typedef struct rl__q6k_r8 {
    rl_fp16 d[8];
    int8_t sc[16][8];
    uint8_t ql[2][16][32];
    uint8_t qh[2][8][32];
} rl__q6k_r8;
_Static_assert(sizeof(rl__q6k_r8) == 8 * sizeof(rl_block_q6_K), "q6_K resident block");
/* q8_0, 8 rows, one 32-element block (288 bytes: 36 a row, the file's 34
 * and the sum of the row's codes): q[g][4r + c] is code 4g + c of row r,
 * sw[r] the sum of row r's 32 codes.  vpdpbusd multiplies unsigned by
 * signed bytes, so its leaves take the activation codes offset by 128 (the
 * q8_0 rows with each code XORed with 0x80: x + 128 as unsigned bytes,
 * rl__q80o) and subtract 128 * sw: per block and row, sumi =
 * sum w x exactly, then acc = fma(d * dx, (float)sumi, acc). */
typedef struct rl__q80_r8 {
    rl_fp16 d[8];
    int16_t sw[8];
    int8_t q[8][32];
} rl__q80_r8;
_Static_assert(sizeof(rl__q80_r8) == 288, "q8_0 resident block");
typedef struct rl__rtile {
    /* Rows w, w + row_size, .. (8 of them, n_cols each, the file's blocks)
     * into dst (the group: n_cols / block elements * block_bytes bytes,
     * the interleaved layout). */
    void (*repack)(void *dst, const void *w, size_t row_size, int64_t n_cols);
    /* Block i of row r (0..7) of the group back in the file's layout. */
    void (*unpack_block)(void *dst, const void *group, int r, int64_t i);
    /* The group (n_cols each) in the packed tile's layout (rl__tile8, the
     * same bytes as its pack on the 8 original rows), for many-token steps. */
    void (*to_tile)(void *dst, const void *group, int64_t n_cols);
    /* Two groups straight into a packed pair (rl__tile8.dot16's layout:
     * to_tile of each, interleaved 32 bytes at a time); NULL where the
     * table has none (the driver then interleaves two to_tile results). */
    void (*to_pair)(void *dst, const void *ga, const void *gb, int64_t n_cols);
    /* s[k * s_stride + r] = row r of the group . token k for r < 8, k <
     * n_x (1..RL_TILE8_T). */
    void (*dot)(int64_t n_cols, float *s, size_t s_stride, const void *group, const void *x,
                size_t x_stride, int n_x);
    rl__tile16_fn dot16; /* two resident groups (may be NULL) */
    /* Bytes of one block of the group (8 rows); 0: 8 * the type's block
     * size (the file's bytes, rearranged). */
    size_t block_bytes;
    /* The dots take the activation rows in a form of their own: x_prep
     * writes it (n_blocks 32-element blocks of the type's activation
     * blocks into x_block bytes each), and the matmul driver hands the
     * dots that copy (q8_0: the codes offset by 128, rl__q80o; q4_1 on
     * the AVX512-VNNI table: the scales as floats, rl__q81f).  NULL: the
     * activation rows as quantized. */
    void (*x_prep)(void *dst, const void *src, int64_t n_blocks);
    size_t x_block;
    /* The packed pair leaf (rl__tile8.dot16's) on x_prep's form, for the
     * steps that convert groups to the packed tile; NULL: tile8.dot16 on
     * the activation rows as quantized. */
    rl__tile16p_fn pdot16;
    /* Steps of at least this many tokens convert the groups to the packed
     * layout (to_tile); 0: the driver's default (RL_MM_PAIR_PACK_MIN with
     * pair leaves).  Higher where the conversion costs about what the
     * packed leaf saves (q4_1 on the AVX512-VNNI table, whose 32-element
     * blocks' float steps dominate either leaf). */
    int pack_min;
    /* Steps of fewer tokens run the 8-row leaf (dot) where dot16 exists:
     * a pair streams two groups at once, which one token does not repay
     * (q4_1 on the AVX2 table); 0: dot16 at any token count. */
    int pair_min;
    /* Matrices of this type are made resident under this table (its
     * leaves for the layout are fast); the leaves exist in every table
     * that has .dot, so a resident matrix runs whichever table is active. */
    bool make;
    /* A head of this type is made resident under this table although it
     * has no pair leaves (dot16): its 8-row leaf is not slower at one
     * token than the per-row dots (rl_mat_resident_head). */
    bool head;
} rl__rtile;

/* ---- AMX leaves (x86/amx_tile.c; the "amx" table only) ----
 * Resident pairs of groups (16 rows each, as rl__rtile.dot16 takes them)
 * against n_tok tokens, a multiple of 16, of the activations in the
 * leaf's form (x_prep): the same bits as the pair leaf
 * (rl__rtile.dot16) on those tokens (test_kernels_tile.c).  NULL: none
 * for the type. */
typedef struct rl__amx {
    /* n_pairs pairs (pair p: groups g0 + 2p gs and g0 + (2p + 1) gs, its
     * results at s + 16 p); buf: the thread's work buffer */
    void (*dot16)(int64_t n_cols, float *s, size_t s_stride, const void *g0, size_t gs, int n_pairs,
                  const void *x, size_t x_stride, int64_t n_tok, void *buf, size_t buf_bytes);
    /* The activations' form the leaf takes: block b of n_blocks q8_K
     * blocks (one row) into RL_AMX_XQ_BYTES at dst + b * dst_stride (the
     * driver runs it once per step and row, super-block b of every token
     * together: x_stride = n_tok * RL_AMX_XQ_BYTES). */
    void (*x_prep)(void *dst, size_t dst_stride, const void *src, int64_t n_blocks);
} rl__amx;
#define RL_AMX_XQ_BYTES 320
/* Steps of at least this many tokens take the AMX leaves, the first
 * multiple of 16 (Qwen2.5-Coder-1.5B, 2 threads, against 32: 16 sequences
 * decoding 1.14x, 24 1.10x). */
#ifndef RL_AMX_MIN_TOK
#define RL_AMX_MIN_TOK 16
#endif

/* rl__rtile.x_prep forms (ref/ref_tile.c), their fp16 scales widened to
 * float, so a leaf's float step per block and token reads a broadcast
 * operand instead of converting it: q8_0 rows with each code XORed with
 * 0x80 (x + 128 as unsigned bytes, rl__q80o); q8_1 rows (rl__q81f); q8_0
 * rows as the nibbles of x + 128 (rl__q80n); q8_0 rows with their code
 * sums (rl__q80s). */
typedef struct rl__q80o {
    float d; /* rl_block_q8_0's d, exactly */
    uint8_t qs[32];
} rl__q80o;
_Static_assert(sizeof(rl__q80o) == 36, "offset q8_0 with a float scale");
typedef struct rl__q81f {
    float d, s; /* rl_block_q8_1's d and s, exactly */
    int8_t qs[32];
} rl__q81f;
_Static_assert(sizeof(rl__q81f) == 40, "q8_1 with float scales");
/* q8_0 rows for the AVX2 table's leaves (vpmaddubsw saturates a pair sum
 * of unsigned x + 128 and signed weight bytes): x + 128 = 16 hi + lo, both
 * nibbles unsigned bytes, so each pair sum stays within 2 * 15 * 128. */
typedef struct rl__q80n {
    float d; /* rl_block_q8_0's d, exactly */
    uint8_t lo[32], hi[32];
} rl__q80n;
_Static_assert(sizeof(rl__q80n) == 68, "q8_0 as nibbles with a float scale");
/* q8_0 rows with 16 times the block's code sum (the q5_0 leaves' offset;
 * half of it q4_0's). */
typedef struct rl__q80s {
    float d;     /* rl_block_q8_0's d, exactly */
    int32_t s16; /* 16 sum qs */
    int8_t qs[32];
} rl__q80s;
_Static_assert(sizeof(rl__q80s) == 40, "q8_0 with a float scale and its code sum");
/* (the q5 leaves read either form: the same size, d and the codes at the
 * same offsets) */
_Static_assert(sizeof(rl__q80s) == sizeof(rl__q81f) &&
                   offsetof(rl__q80s, qs) == offsetof(rl__q81f, qs),
               "the q5 leaves' two activation forms");
void rl__x_offset_q8_0(void *dst, const void *src, int64_t n_blocks);
void rl__x_sum_q8_0(void *dst, const void *src, int64_t n_blocks);
void rl__x_q8_1f(void *dst, const void *src, int64_t n_blocks);
void rl__x_nibbles_q8_0(void *dst, const void *src, int64_t n_blocks);
/* The largest x_block of any form (scratch sizing). */
#define RL_X_PREP_MAX_BLOCK sizeof(rl__q80n)

/* The pair sum of the q8_K bsums of sub-block b (32 elements). */
static inline int16_t rl__q8k_bsum32(const rl_block_q8_K *x, int b) {
    return (int16_t)(x->bsums[2 * b] + x->bsums[2 * b + 1]);
}

/* Most query heads one grouped attention item carries (kq_rows_g). */
#define RL_ATT_GMAX 8

typedef struct rl__ktab {
    const char *name;
    rl__vec_dot_fn vec_dot[RL_TYPE_COUNT];     /* indexed by weight type; NULL = unsupported */
    rl__vec_dot4_fn vec_dot4[RL_TYPE_COUNT];   /* may be NULL */
    rl__vec_dot8_fn vec_dot8[RL_TYPE_COUNT];   /* may be NULL */
    rl__vec_dot2r_fn vec_dot2r[RL_TYPE_COUNT]; /* may be NULL */
    rl__tile8 tile8[RL_TYPE_COUNT];            /* .dot may be NULL */
    rl__rtile rtile[RL_TYPE_COUNT];            /* .dot NULL: no resident layout */
    rl__amx amx[RL_TYPE_COUNT];                /* .dot16 NULL but in the "amx" table */
    rl__quant_fn quant_q8_0, quant_q8_1, quant_q8_K;
    /* y[i] = rl_f32_to_fp16(x[i]) for i < n, the same bits (f16 KV pages) */
    void (*to_f16)(rl_fp16 *y, const float *x, int64_t n);
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
    void (*softmax)(float *x, int64_t n);
    /* x[i] = exp(x[i] - m) for i < n (x[i] <= m); returns their sum (attention's
     * softmax weights of one tile of positions) */
    float (*exp_sum)(float *x, int64_t n, float m);
    /* x[i] = (x[i] + b) * a for i < n (two roundings, as written); returns
     * their max (-INFINITY for n = 0): attention's scaled scores of a tile */
    float (*add_scale_max)(float *x, int64_t n, float b, float a);
    void (*silu_mul)(float *out, const float *gate, const float *up, int64_t n);
    void (*gelu_mul)(float *out, const float *gate, const float *up, int64_t n);
    void (*add_scaled)(float *x, const float *y, float a, int64_t n); /* rl_add_scaled */
    /* attention leaves */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const float *a, const rl_fp16 *b, int64_t n);
    void (*axpy_f32)(float *y, const float *x, float a, int64_t n); /* y += a*x */
    void (*axpy_f16)(float *y, const rl_fp16 *x, float a, int64_t n);
    void (*scale)(float *y, float a, int64_t n); /* y *= a */
    /* Attention leaves over a run of n KV rows of hd elements, row r at
     * (const uint8_t *)base + r * stride (ref/ref_kvq.c, x86/avx2_kvq.c),
     * indexed by the K or V page type (f32, f16, q8_0, q4_0; NULL =
     * unsupported).
     * kq_rows: s[r] = q . k_r.  q is f32[hd] for f32/f16 pages and hd/32
     *   q8_0 blocks (quant_q8_0 of the f32 query) for q8_0/q4_0 pages:
     *   integer dot per block, blocks combined in float.
     * v_rows: acc[i] += w[r] * v_r[i] for r = 0..n-1 in order; pages are
     *   dequantized in registers (w[r] * d_block first, then one multiply-add
     *   per element), so each acc element sees the same operation sequence
     *   as n single-row calls. */
    void (*kq_rows[RL_TYPE_COUNT])(const void *q, const void *k, size_t stride, int n, int hd,
                                   float *s);
    void (*v_rows[RL_TYPE_COUNT])(float *acc, const void *v, size_t stride, const float *w, int n,
                                  int hd);
    /* The same leaves for g query rows that share the K/V rows (GQA heads,
     * of one or several tokens), each row read and widened once for all
     * of them: row j's
     * query at q + j * hd, its scores at s + j * s_stride, its weights at
     * w + j * w_stride, its accumulator at acc + j * hd.  Bit-identical to g
     * kq_rows / v_rows calls (the same operations per head).  kq_rows_g:
     * f32/f16 pages (f32 query rows); v_rows_g: every page type; NULL:
     * none (the driver calls the one-head leaf per row). */
    void (*kq_rows_g[RL_TYPE_COUNT])(const float *q, const void *k, size_t stride, int n, int hd,
                                     int g, float *s, size_t s_stride);
    void (*v_rows_g[RL_TYPE_COUNT])(float *acc, const void *v, size_t stride, const float *w,
                                    size_t w_stride, int n, int hd, int g);
    /* kq_rows_g for quantized pages scored with q8_0 queries: row j's
     * query is the hd / 32 blocks at q + j * (hd / 32).  Bit-identical to g
     * kq_rows calls; NULL: none (the driver calls kq_rows per row). */
    void (*kqq_rows_g[RL_TYPE_COUNT])(const rl_block_q8_0 *q, const void *k, size_t stride, int n,
                                      int hd, int g, float *s, size_t s_stride);
    /* kq_rows with an f32 query for q8_0/q4_0 pages: codes widened to float
     * in registers, per block sum_i q_i*code_i, then acc += d_block * that
     * (no query rounding; used when RL_KVQ_QUERY=f32, see attention.c). */
    void (*kqf_rows[RL_TYPE_COUNT])(const void *q, const void *k, size_t stride, int n, int hd,
                                    float *s);
    /* rl_wht: in-place orthonormal Walsh-Hadamard transform of x[n], n a
     * power of two (bit-identical across implementations). */
    void (*wht)(float *x, int n);
    /* iq4_nl KV-page quantizer (rl__quant_iq4_nl_kv's scale search);
     * bit-identical in every implementation, so stored pages do not depend
     * on the table. */
    rl__quant_fn quant_iq4_nl_kv;
} rl__ktab;

/* Activation type paired with weight type t (RL_TYPE_F32 for float weights,
 * RL_TYPE_COUNT if unsupported). */
rl_type rl__act_type(rl_type t);

/* The active table (lazily initialised to the best implementation). */
const rl__ktab *rl__kernels(void);
/* The reference table, and the AVX2 table (NULL if the CPU lacks
 * AVX2/FMA/F16C).  For tests and benchmarks. */
const rl__ktab *rl__kernels_ref(void);
const rl__ktab *rl__kernels_avx2(void);
/* The AVX512-VNNI table (the AVX2 table with its matmul leaves replaced;
 * NULL if the CPU lacks AVX512F/BW/VL/VNNI or the OS does not save ZMM
 * state). */
const rl__ktab *rl__kernels_vnni(void);
/* The AMX table (the AVX512-VNNI table with AMX leaves for many tokens;
 * NULL if the CPU lacks AMX-TILE/AMX-INT8, the OS does not save tile
 * state, or the kernel refuses the process its tile data). */
const rl__ktab *rl__kernels_amx(void);
/* Asks the kernel for tile data once per process (x86/amx_tile.c). */
bool rl__amx_enable(void);

/* Fillers, called once by dispatch.c. */
void rl__ref_fill(rl__ktab *t);
void rl__avx2_fill(rl__ktab *t);       /* overrides entries of a ref-filled table */
void rl__vnni_fill(rl__ktab *t);       /* overrides entries of an AVX2-filled table */
void rl__ref_fill_kvq(rl__ktab *t);    /* KV attention leaves (ref/ref_kvq.c) */
void rl__ref_fill_tile(rl__ktab *t);   /* fast tiles' twins (ref/ref_tile.c) */
void rl__avx2_fill_tile(rl__ktab *t);  /* (x86/avx2_tile.c) */
void rl__vnni_fill_tile(rl__ktab *t);  /* (x86/vnni_tile.c) */
void rl__vnni_fill_att(rl__ktab *t);   /* (x86/vnni_att.c) */
void rl__vnni_fill_quant(rl__ktab *t); /* (x86/vnni_quant.c) */
void rl__amx_fill(rl__ktab *t);        /* overrides entries of a VNNI-filled table */
void rl__avx2_fill_kvq(rl__ktab *t);   /* (x86/avx2_kvq.c) */

/* Reference leaves exported for reuse (AVX2 tails, tests). */
void rl__quant_q8_0_ref(const float *x, void *y, int64_t n);
void rl__quant_q8_1_ref(const float *x, void *y, int64_t n);
void rl__quant_q8_K_ref(const float *x, void *y, int64_t n);
/* q3_K's scale j (0..15, the 6-bit code - 32) and element e (0..255: the
 * two low bits, less 4 where the hmask bit is clear: -4..3) of a block. */
int rl__q3_K_scale(const uint8_t *scales, int j);
int rl__q3_K_code(const rl_block_q3_K *b, int e);
/* iq4_nl codebook (tensor.h's), and the KV-page quantizer for iq4_nl
 * (the traits' scale search; ref/ref_kvq.c).  iq4_nl blocks have
 * rl_block_q4_0's layout. */
#define rl__iq4nl_values rl_iq4nl_values
void rl__quant_iq4_nl_kv(const float *x, void *y, int64_t n);
/* The iq4_nl page quantizers' shared ends: the element of largest
 * magnitude of a 32-block (its value in *mx; returns |mx|), and the store
 * of the chosen scale and codes. */
static inline float rl__iq4nl_absmax(const float *x, float *mx) {
    float amax = 0.0f;
    *mx = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), *mx = x[j];
    return amax;
}
/* Candidate it (-15..15) of the scale search: the value mx*id takes, near
 * either end of the codebook (-134..-119 for it <= 0, 106..120 above). */
static inline float rl__iq4nl_cand(int it) {
    return it <= 0 ? (float)rl__iq4nl_values[0] - (float)it - 7.0f
                   : (float)rl__iq4nl_values[15] + (float)it - 8.0f;
}
static inline void rl__iq4nl_store(rl_block_q4_0 *y, float d, const uint8_t q[32]) {
    y->d = rl_f32_to_fp16(d);
    for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* ---- compute-peak probes (peak.c, x86/avx2_peak.c, x86/vnni_peak.c) ----
 * Each leaf runs n_iter steps of RL_PEAK_*_ACC independent multiply-add
 * chains, writes the checksum of its accumulators to *check and returns
 * the number of multiply-adds done.  int8 chain k multiplies the unsigned
 * bytes a_k[j] = rl__peak_operand(0, k, j) by the signed bytes
 * b[j] = rl__peak_operand(1, 0, j) (j < 32 for ymm, < 64 for zmm) and adds
 * the products into int32 lanes; the checksum is the sum of all lanes
 * modulo 2^32.  fp32 chain k starts at k and adds 1 * RL_PEAK_F32_STEP per
 * step in each of 8 lanes; the checksum is the lane sum in units of the
 * step (exact for n_iter < 2^22).  rl__peak_expect (peak.c) is the scalar
 * twin of the checksums. */
#define RL_PEAK_I8_ACC   6  /* AVX2 int8 chains (14 of the 16 ymm live) */
#define RL_PEAK_VNNI_ACC 12 /* vpdpbusd chains: latency 5 x up to 2 ports */
#define RL_PEAK_F32_ACC  10 /* FMA chains: latency 4-5 x 2 pipes */
#define RL_PEAK_F32_STEP (1.0f / 1024.0f)
static inline int rl__peak_operand(int which, int k, int j) {
    return which == 0 ? 1 + (3 * j + k) % 11 : j % 7 - 3;
}
uint64_t rl__peak_i8_avx2(int64_t n_iter, uint32_t *check);
uint64_t rl__peak_f32_fma(int64_t n_iter, uint32_t *check);
uint64_t rl__peak_i8_vnni(int64_t n_iter, uint32_t *check);
/* AMX: tiles 0-3 += A4 B6, A4 B7, A5 B6, A5 B7 (TDPBSUD), every row of
 * A4, A5 the signed bytes rl__peak_operand(1, 0, j), every row of B6 (B7)
 * the unsigned rl__peak_operand(0, 0 (1), j), j < 64 (x86/amx_tile.c). */
uint64_t rl__peak_i8_amx(int64_t n_iter, uint32_t *check);
uint32_t rl__peak_expect(int kind, int64_t n_iter);

#endif
