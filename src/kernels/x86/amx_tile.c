/* AMX leaves for many tokens (kernels-impl.h, rl__amx): a pair of
 * resident groups (16 weight rows) against a multiple of 16 tokens, the
 * integer products summed by the tile unit (TDPBSUD: signed activation
 * bytes times unsigned weight bytes, 16 tokens x 16 rows x 64 columns per
 * instruction), the float work per super-block done in zmm registers as
 * the VNNI pair leaf does it.  The results are the pair leaf's bits.
 *
 * q4_K: a tile instruction sums 64 columns, two sub-blocks of different
 * scales, so the scale goes into the weight bytes.  Each super-block of
 * the pair is converted (rl__amx_q4k_part, a quarter at a time) into the
 * unsigned products p = q * sc (q < 16, sc < 64: p < 1024) split as p =
 * lo + 256 hi (the 16-bit product's bytes, hi < 4), in the tile unit's B
 * layout (row kk of a 64-column step holds columns 4kk..4kk+3 of each of
 * the 16 rows).  Per super-block and
 * token the tile unit gives L = sum lo x and H = sum hi x (|L|, |H| <
 * 2^23), and sumi = L + 256 H = sum_j sc_j sum_{k in j} q_k x_k exactly,
 * the pair leaf's integer; the mins' sum and the two float steps are its
 * own (rl__q4k_fstep16's operations).
 *
 * q6_K: p = sc (q - 32) (|p| <= 4096) split as p = lo + 256 hi, lo
 * unsigned, hi signed (-16..16, through TDPBSSD); sumi = L + 256 H
 * is the pair leaf's integer with the -32 in it, and its one float step
 * follows (rl__q6k_fstep16's operations).
 *
 * The conversion of a super-block runs between the tile steps of the one
 * before (rl__amx_run), and the driver uses these leaves from
 * RL_AMX_MIN_TOK tokens.
 *
 * Tile state: the process asks the kernel for it once (rl__amx_enable,
 * arch_prctl ARCH_REQ_XCOMP_PERM); each leaf call loads its tile
 * configuration and releases the tiles before it returns, so no tile state
 * outlives a call (threads and signals see none).  Compiled with the
 * VNNI flags plus -mamx-tile -mamx-int8 (Makefile) and reached only
 * through the "amx" table. */
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/x86/avx2-impl.h"

#define RL_ARCH_REQ_XCOMP_PERM 0x1023
#define RL_XFEATURE_XTILEDATA  18

bool rl__amx_enable(void) {
    return syscall(SYS_arch_prctl, RL_ARCH_REQ_XCOMP_PERM, RL_XFEATURE_XTILEDATA) == 0;
}

/* Palette 1: tiles 0-3 the int32 sums (16 tokens x 16 rows), 4-5 two
 * blocks of 16 tokens' activation bytes (64 columns each), 6-7 the lo and
 * hi weight bytes of one 64-column step; every tile 16 rows of 64 bytes. */
typedef struct rl__amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} rl__amx_cfg;
_Static_assert(sizeof(rl__amx_cfg) == 64, "tile configuration");

static void rl__amx_config(void) {
    rl__amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
}

/* One super-block of a pair converted for the tile unit (p = lo + 256 hi,
 * lo unsigned; hi unsigned for q4_K, signed for q6_K;
 * dmin and mn q4_K's only). */
typedef struct rl__amx_sb {
    uint8_t lo[4][16][64], hi[4][16][64]; /* [64-column step j][kk][4 n + c] */
    float d[16], dmin[16];                /* rows 0..7 group A, 8..15 group B */
    int16_t mn[4][32];                    /* rl__q4k_fstep16's min vectors */
    int16_t sc[8][32];                    /* q4_K: sub-block k's scales, lane-doubled, A then B */
} rl__amx_sb;
#define RL_AMX_Q4K 0
#define RL_AMX_Q6K 1
#define RL_AMX_AI  static inline __attribute__((always_inline))

/* The 16-bit products of the even (pe) and the odd (po) bytes of a vector
 * as its bytes' p = lo + 256 hi: lo the low byte (unsigned), hi the high
 * byte (p >> 8, signed where p is), both picked in place by vpermt2b. */
static inline void rl__amx_bytes(__m512i pe, __m512i po, uint8_t *lo, uint8_t *hi) {
    /* output byte 2i: byte 2i (lo) or 2i + 1 (hi) of pe; 2i + 1: of po */
    const __m512i ilo = _mm512_set_epi64(0x7E3E7C3C7A3A7838, 0x7636743472327030, 0x6E2E6C2C6A2A6828,
                                         0x6626642462226020, 0x5E1E5C1C5A1A5818, 0x5616541452125010,
                                         0x4E0E4C0C4A0A4808, 0x4606440442024000);
    const __m512i ihi = _mm512_add_epi8(ilo, _mm512_set1_epi8(1));
    _mm512_store_si512((void *)lo, _mm512_permutex2var_epi8(pe, ilo, po));
    _mm512_store_si512((void *)hi, _mm512_permutex2var_epi8(pe, ihi, po));
}

/* The bytes q (< 16) of the 16 rows times each row's scale (sc: int16
 * lanes 2n, 2n + 1 = row n's, < 64: rl__q4kr8_scales's lane-doubled
 * vectors), p = q sc < 1024 as lo + 256 hi (hi < 4): the products of the
 * even and the odd bytes by vpmaddubsw against (sc, 0) and (0, sc). */
static inline void rl__amx_split(__m512i q, __m512i sc, uint8_t *lo, uint8_t *hi) {
    rl__amx_bytes(_mm512_maddubs_epi16(q, sc), _mm512_maddubs_epi16(q, _mm512_slli_epi16(sc, 8)),
                  lo, hi);
}

/* q6_K: the codes q (< 64) of the 16 rows times each row's signed scale
 * (sc: int16 lanes 2n, 2n + 1; sc32 = 32 sc), p = sc (q - 32) (|p| <=
 * 4096) as lo + 256 hi, hi signed. */
static inline void rl__amx_split6(__m512i q, __m512i sc, __m512i sc32, uint8_t *lo, uint8_t *hi) {
    const __m512i pe = _mm512_sub_epi16(
        _mm512_maddubs_epi16(q, _mm512_and_si512(sc, _mm512_set1_epi16(0xFF))), sc32);
    const __m512i po = _mm512_sub_epi16(_mm512_maddubs_epi16(q, _mm512_slli_epi16(sc, 8)), sc32);
    rl__amx_bytes(pe, po, lo, hi);
}

/* The codes of quadrant o of one group of a pair (rl__q6k_r8: l0 =
 * ql[h][g], l1 = ql[h][8 + g], hb = qh[h][g] of both groups). */
RL_AMX_AI __m512i rl__amx_q6codes(__m512i l0, __m512i l1, __m512i hb, const int o) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i l = o & 1 ? l1 : l0;
    const __m512i nib = _mm512_and_si512(o < 2 ? l : _mm512_srli_epi16(l, 4), m4);
    const __m512i hi = o == 0   ? _mm512_slli_epi16(hb, 4)
                       : o == 1 ? _mm512_slli_epi16(hb, 2)
                       : o == 2 ? hb
                                : _mm512_srli_epi16(hb, 2);
    return _mm512_or_si512(nib, _mm512_and_si512(hi, m30));
}

/* Quarter k of super-block i of resident q6_K groups a, b (rl__q6k_r8)
 * into o: half h = k / 2, groups g of half k & 1 (element 128h + 32o + 4g
 * + c is step 2h + o / 2, row 8 (o & 1) + g, in sub-block 8h + 2o + g / 4);
 * quarter 0 also the scales d. */
static void rl__amx_q6k_part(rl__amx_sb *o, const rl__q6k_r8 *a, const rl__q6k_r8 *b, int k) {
    const int h = k >> 1, g4 = k & 1;
    __m512i sc[4], sc32[4];
    for (int q = 0; q < 4; q++) {
        const int j = 8 * h + 2 * q + g4;
        sc[q] = RL_Z2(rl__r8_i8x2(a->sc[j], a->sc[j]), rl__r8_i8x2(b->sc[j], b->sc[j]));
        sc32[q] = _mm512_slli_epi16(sc[q], 5);
    }
    _Pragma("GCC unroll 4") for (int g = 4 * g4; g < 4 * g4 + 4; g++) {
        const __m512i l0 = rl__z_load2(a->ql[h][g], b->ql[h][g]);
        const __m512i l1 = rl__z_load2(a->ql[h][8 + g], b->ql[h][8 + g]);
        const __m512i hb = rl__z_load2(a->qh[h][g], b->qh[h][g]);
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) rl__amx_split6(
            rl__amx_q6codes(l0, l1, hb, q), sc[q], sc32[q], o->lo[2 * h + q / 2][8 * (q & 1) + g],
            o->hi[2 * h + q / 2][8 * (q & 1) + g]);
    }
    if (k == 0) _mm512_store_ps(o->d, rl__z_cvtph2(a->d, b->d));
}

/* Quarter j (the 64-column step j) of super-block i of resident q4_K
 * groups a, b (rl__q4k_r8) into o; quarter 0 first the scales, the mins
 * and d, dmin, which the others read. */
static void rl__amx_q4k_part(rl__amx_sb *o, const rl__q4k_r8 *a, const rl__q4k_r8 *b, int j) {
    if (j == 0) {
        _Alignas(32) int16_t scA[8][16], mnA[4][16], scB[8][16], mnB[4][16];
        rl__q4kr8_scales(a, (uint8_t *)scA, (uint8_t *)mnA, 32);
        rl__q4kr8_scales(b, (uint8_t *)scB, (uint8_t *)mnB, 32);
        for (int k = 0; k < 8; k++)
            _mm512_store_si512((void *)o->sc[k], rl__z_load2(scA[k], scB[k]));
        _mm512_store_ps(o->d, rl__z_cvtph2(a->d, b->d));
        _mm512_store_ps(o->dmin, rl__z_cvtph2(a->dmin, b->dmin));
        for (int q = 0; q < 4; q++)
            _mm512_store_si512((void *)o->mn[q], rl__z_load2(mnA[q], mnB[q]));
    }
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i sl = _mm512_load_si512((const void *)o->sc[2 * j]);
    const __m512i sh = _mm512_load_si512((const void *)o->sc[2 * j + 1]);
    _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
        const __m512i raw = rl__z_load2(a->q[8 * j + g], b->q[8 * j + g]);
        /* low nibbles: columns 64j + 4g + c (sub-block 2j), step row g;
         * high: 64j + 32 + 4g + c (2j + 1), step row 8 + g */
        rl__amx_split(_mm512_and_si512(raw, m4), sl, o->lo[j][g], o->hi[j][g]);
        rl__amx_split(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), sh, o->lo[j][8 + g],
                      o->hi[j][8 + g]);
    }
}

/* Quarter k of super-block i of the pair whose group a is at ga (b gs
 * after it) into o. */
RL_AMX_AI void rl__amx_convert(rl__amx_sb *o, const uint8_t *ga, size_t gs, int64_t i, int k,
                               const int ty) {
    if (ty == RL_AMX_Q6K)
        rl__amx_q6k_part(o, (const rl__q6k_r8 *)ga + i, (const rl__q6k_r8 *)(ga + gs) + i, k);
    else
        rl__amx_q4k_part(o, (const rl__q4k_r8 *)ga + i, (const rl__q4k_r8 *)(ga + gs) + i, k);
}

/* The conversion that runs between the tile steps (rl__amx_run): quarters
 * k < ke of the super-block ni of pairs nq, nq + 1, ... into nb[]. */
typedef struct rl__amx_next {
    rl__amx_sb *nb;
    const uint8_t *gp; /* pair p's group a: gp + 2 p gs */
    size_t gs;
    int nq, k, ke;
    int64_t ni;
} rl__amx_next;

/* The conversion is where the weights come from DRAM: each quarter
 * prefetches its counterpart RL_AMX_PF_SB super-blocks on
 * (Qwen2.5-Coder-1.5B, 2 threads: 16, 32, 64 sequences decoding 1.10x,
 * 1.06-1.09x, 1.05x; pp512 1.00x; 1, 2 and 4 ahead the same). */
#ifndef RL_AMX_PF_SB
#define RL_AMX_PF_SB 2
#endif
/* The next quarters up to k1 (at most nx->ke). */
RL_AMX_AI void rl__amx_next_upto(rl__amx_next *nx, int k1, const int ty) {
    const size_t sb = ty == RL_AMX_Q6K ? sizeof(rl__q6k_r8) : sizeof(rl__q4k_r8);
    for (; nx->k < k1 && nx->k < nx->ke; nx->k++) {
        const uint8_t *ga = nx->gp + (size_t)(2 * (nx->nq + (nx->k >> 2))) * nx->gs;
        /* the same quarter RL_AMX_PF_SB super-blocks on, both groups */
        const uint8_t *pf =
            ga + (size_t)(nx->ni + RL_AMX_PF_SB) * sb + (size_t)(nx->k & 3) * sb / 4;
        for (size_t o = 0; o < sb / 4 + 63; o += 64) {
            _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
            _mm_prefetch((const char *)pf + nx->gs + o, _MM_HINT_T0);
        }
        rl__amx_convert(&nx->nb[nx->k >> 2], ga, nx->gs, nx->ni, nx->k & 3, ty);
    }
}

/* The activation rows in the leaves' form (rl__amx.x_prep): per token and
 * super-block the q8_K scale, the sums of its sub-block pairs as
 * rl__q4k_fstep16 forms them, and the 256 codes on whole lines, so a tile
 * row is one aligned 64-byte load; super-block i of every token together
 * (the driver's layout: token t's at i * sb_stride + t * RL_AMX_XQ_BYTES),
 * so the tile rows of a block of tokens are consecutive lines. */
typedef struct rl__amx_xq {
    float d;
    int32_t pq[4]; /* (bsum32 2q, bsum32 2q + 1) as int16 pairs, q < 4 */
    int32_t pad[11];
    int8_t qs[256];
} rl__amx_xq;
_Static_assert(sizeof(rl__amx_xq) == RL_AMX_XQ_BYTES, "AMX activation block");

static void rl__amx_x_q8_K(void *dst, size_t dst_stride, const void *src, int64_t n_blocks) {
    const rl_block_q8_K *x = src;
    for (int64_t b = 0; b < n_blocks; b++, x++) {
        rl__amx_xq *o = (rl__amx_xq *)((uint8_t *)dst + (size_t)b * dst_stride);
        _Alignas(32) int32_t pq[8];
        const __m256i b32 =
            _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), _mm256_set1_epi16(1));
        _mm256_store_si256((__m256i *)pq, _mm256_packs_epi32(b32, b32));
        memset(o, 0, offsetof(rl__amx_xq, qs));
        o->d = x->d;
        o->pq[0] = pq[0];
        o->pq[1] = pq[1];
        o->pq[2] = pq[4];
        o->pq[3] = pq[5];
        memcpy(o->qs, x->qs, sizeof o->qs);
    }
}

/* The float step of one token on its accumulator: q4_K's
 * (rl__q4k_fstep16's operations) acc + d dx sumi - dmin dx msum; q6_K's
 * (rl__q6k_fstep16's) acc + d dx sumi, its sumi with the -32 in it. */
RL_AMX_AI void rl__amx_fstep(float *acc, __m512i sumi, const rl__amx_sb *o, const rl__amx_xq *x,
                             const int ty) {
    if (ty == RL_AMX_Q6K) {
        const __m512 dx = _mm512_set1_ps(x->d);
        _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(o->d), dx),
                                             _mm512_cvtepi32_ps(sumi), _mm512_load_ps(acc)));
        return;
    }
    const __m512i *mn = (const __m512i *)o->mn;
    __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn[0], _mm512_set1_epi32(x->pq[0]));
    msum = _mm512_dpwssd_epi32(msum, mn[1], _mm512_set1_epi32(x->pq[1]));
    msum = _mm512_dpwssd_epi32(msum, mn[2], _mm512_set1_epi32(x->pq[2]));
    msum = _mm512_dpwssd_epi32(msum, mn[3], _mm512_set1_epi32(x->pq[3]));
    const __m512 dx = _mm512_set1_ps(x->d);
    __m512 a = _mm512_load_ps(acc);
    a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(o->d), dx), _mm512_cvtepi32_ps(sumi), a);
    a = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_load_ps(o->dmin), dx), _mm512_cvtepi32_ps(msum), a);
    _mm512_store_ps(acc, a);
}

/* The tile work of one super-block of one pair against nt (16 or 32)
 * tokens (x: the first token's block, stride xs): lo and hi sums into c
 * (c[2h] lo, c[2h + 1] hi of tokens 16h..16h + 15). */
RL_AMX_AI void rl__amx_tiles(int32_t (*c)[16][16], const rl__amx_sb *o, const rl__amx_xq *x, int nt,
                             rl__amx_next *nx, int k1, const int ty) {
    const int k0 = nx->k;
    const int two = nt == 32;
    const size_t xs = sizeof(rl__amx_xq);
    const int8_t *x0 = x->qs, *x1 = x0 + 16 * xs;
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int j = 0; j < 4; j++) {
        _tile_loadd(4, x0 + 64 * j, (long)xs);
        _tile_loadd(6, o->lo[j], 64);
        _tile_loadd(7, o->hi[j], 64);
        _tile_dpbsud(0, 4, 6);
        if (ty == RL_AMX_Q6K)
            _tile_dpbssd(1, 4, 7);
        else
            _tile_dpbsud(1, 4, 7);
        if (two) {
            _tile_loadd(5, x1 + 64 * j, (long)xs);
            _tile_dpbsud(2, 5, 6);
            if (ty == RL_AMX_Q6K)
                _tile_dpbssd(3, 5, 7);
            else
                _tile_dpbsud(3, 5, 7);
        }
        /* a quarter of this unit's share of the next conversion (quarters
         * up to k1, all of it after the last step) while the tile unit
         * works */
        rl__amx_next_upto(nx, k0 + ((j + 1) * (k1 - k0) + 3) / 4, ty);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    if (two) {
        _tile_stored(2, c[2], 64);
        _tile_stored(3, c[3], 64);
    }
}

/* The float steps of one super-block for nt tokens from its tile sums. */
RL_AMX_AI void rl__amx_floats(float (*acc)[16], const int32_t (*c)[16][16], const rl__amx_sb *o,
                              const rl__amx_xq *x, int nt, const int ty) {
    for (int k = 0; k < nt; k++) {
        const int h = k >> 4, r = k & 15;
        const __m512i hi = _mm512_load_si512((const void *)c[2 * h + 1][r]);
        const __m512i sumi = _mm512_add_epi32(_mm512_load_si512((const void *)c[2 * h][r]),
                                              _mm512_slli_epi32(hi, 8));
        rl__amx_fstep(acc[k], sumi, o, &x[k], ty);
    }
}

/* Token t's block of super-block i (x: token 0's of super-block 0; xs:
 * bytes from one super-block's blocks to the next's). */
static inline const rl__amx_xq *rl__amx_xat(const rl__amx_xq *x, size_t xs, int64_t i, int64_t t) {
    return (const rl__amx_xq *)((const uint8_t *)x + (size_t)i * xs) + t;
}

/* Pairs per batch (their converted super-block stays in L1 while the
 * tokens pass), and tokens per pass (the batch's accumulators). */
#define RL_AMX_PAIRS 4
#define RL_AMX_TOK   512

/* s[t * ss + 16 p + r] = row r of pair p (groups g0 + 2p gs, g0 + (2p + 1)
 * gs) . token t of vx (rl__amx_x_q8_K's layout, xs bytes from one
 * super-block's blocks to the next's), for p < n_pairs, t <
 * n_tok (a multiple of 16).  Per pass of up to RL_AMX_TOK tokens and batch
 * of RL_AMX_PAIRS pairs, super-block by super-block: the batch's
 * super-block converted once (L1), then every block of 32 tokens against
 * each pair, so a token block's codes are read from L2 once per batch and
 * the weights' lines from L1.  The conversion of the next super-block (or
 * the next batch's first) is spread between the tile work of this one, in
 * the other half of a double buffer: its quarters spread over the 64-column
 * steps of the tiles, so the tile unit has work queued while the vector
 * units convert (with the byte split of rl__amx_bytes: Qwen2.5-Coder-1.5B,
 * 32 and 64 sequences decoding, 2 threads, 1.07-1.12x over converting a
 * whole super-block before its tiles).  The accumulators of the batch live
 * in the work buffer, contiguous per (pair, token block) (rows of s can be
 * a multiple of 4 KiB apart and alias in L1), and go to s at the end.  The
 * tile sums of one (token block, pair) are stored while the previous
 * one's are read (a tile store's data reaches loads late).  Each (token,
 * row) sees its super-blocks in order: the pair leaf's float steps. */
RL_AMX_AI void rl__amx_run(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                           int n_pairs, const void *vx, size_t xs, int64_t n_tok, void *buf,
                           size_t buf_bytes, const int ty) {
    const int64_t nsb = n_cols / RL_QK_K;
    rl__amx_sb *cv = buf;                                          /* [2][RL_AMX_PAIRS] */
    float(*acc)[RL_AMX_TOK][16] = (void *)(cv + 2 * RL_AMX_PAIRS); /* [RL_AMX_PAIRS] */
    RL_ASSERT(sizeof(rl__amx_sb) * 2 * RL_AMX_PAIRS +
                  sizeof(float) * 16 * RL_AMX_TOK * RL_AMX_PAIRS <=
              buf_bytes);
    _Alignas(64) int32_t c[2][4][16][16];
    /* pairs per batch: one where one or two token blocks follow each
     * conversion (the converted super-blocks stay in L1; 2 measured the
     * same within noise at 32 and 64 sequences), 4 above (512 tokens:
     * 1.15x faster than 2) */
    const int pb = n_tok <= 64 ? 1 : RL_AMX_PAIRS;
    const uint8_t *gp = g0; /* pair p's group a: gp + 2 p gs */
    rl__amx_config();
    for (int64_t t0 = 0; t0 < n_tok; t0 += RL_AMX_TOK) {
        const int64_t ntt = n_tok - t0 < RL_AMX_TOK ? n_tok - t0 : RL_AMX_TOK;
        const int nblk = (int)((ntt + 31) / 32);
        const rl__amx_xq *xt = (const rl__amx_xq *)vx + t0;
        int cur = 0;
        for (int p = 0; p < pb && p < n_pairs; p++)
            for (int k = 0; k < 4; k++)
                rl__amx_convert(&cv[p], gp + (size_t)(2 * p) * gs, gs, 0, k, ty);
        for (int p0 = 0; p0 < n_pairs; p0 += pb) {
            const int np = n_pairs - p0 < pb ? n_pairs - p0 : pb;
            for (int p = 0; p < np; p++) memset(acc[p], 0, sizeof(float) * 16 * (size_t)ntt);
            for (int64_t i = 0; i < nsb; i++, cur ^= 1) {
                rl__amx_sb *cb = cv + cur * RL_AMX_PAIRS, *nb = cv + (cur ^ 1) * RL_AMX_PAIRS;
                /* the next super-block to convert: (pair nq, super-block ni) on */
                int nq = p0, nn = np;
                int64_t ni = i + 1;
                if (ni == nsb) {
                    nq = p0 + pb, ni = 0;
                    nn = n_pairs - nq < pb ? n_pairs - nq : pb;
                }
                const int nk = 4 * nn, nu = nblk * np;
                rl__amx_next nx = {
                    .nb = nb, .gp = gp, .gs = gs, .nq = nq, .k = 0, .ke = nk, .ni = ni};
                /* the pending (token block, pair) whose sums are in c[u & 1] */
                int u = 0, pp = 0, pnt = 0;
                int64_t pt = 0;
                for (int64_t t = 0; t < ntt; t += 32) {
                    const int nt = t + 32 <= ntt ? 32 : 16;
                    for (int p = 0; p < np; p++, u++) {
                        rl__amx_tiles(c[u & 1], &cb[p], rl__amx_xat(xt, xs, i, t), nt, &nx,
                                      ((u + 1) * nk + nu - 1) / nu, ty);
                        if (u > 0)
                            rl__amx_floats(&acc[pp][pt], (const int32_t(*)[16][16])c[(u - 1) & 1],
                                           &cb[pp], rl__amx_xat(xt, xs, i, pt), pnt, ty);
                        pp = p, pt = t, pnt = nt;
                    }
                }
                rl__amx_floats(&acc[pp][pt], (const int32_t(*)[16][16])c[(u - 1) & 1], &cb[pp],
                               rl__amx_xat(xt, xs, i, pt), pnt, ty);
            }
            for (int p = 0; p < np; p++)
                for (int64_t k = 0; k < ntt; k++)
                    _mm512_storeu_ps(s + (size_t)(t0 + k) * ss + 16 * (p0 + p),
                                     _mm512_load_ps(acc[p][k]));
        }
    }
    _tile_release();
}

static void rl__amx_q4_K(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                         int n_pairs, const void *vx, size_t xs, int64_t n_tok, void *buf,
                         size_t buf_bytes) {
    rl__amx_run(n_cols, s, ss, g0, gs, n_pairs, vx, xs, n_tok, buf, buf_bytes, RL_AMX_Q4K);
}
static void rl__amx_q6_K(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                         int n_pairs, const void *vx, size_t xs, int64_t n_tok, void *buf,
                         size_t buf_bytes) {
    rl__amx_run(n_cols, s, ss, g0, gs, n_pairs, vx, xs, n_tok, buf, buf_bytes, RL_AMX_Q6K);
}

uint64_t rl__peak_i8_amx(int64_t n_iter, uint32_t *check) {
    _Alignas(64) int8_t a[16][64];
    _Alignas(64) uint8_t b[2][16][64];
    _Alignas(64) int32_t c[16][16];
    for (int r = 0; r < 16; r++)
        for (int j = 0; j < 64; j++) {
            a[r][j] = (int8_t)rl__peak_operand(1, 0, j);
            b[0][r][j] = (uint8_t)rl__peak_operand(0, 0, j);
            b[1][r][j] = (uint8_t)rl__peak_operand(0, 1, j);
        }
    rl__amx_config();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b[0], 64);
    _tile_loadd(7, b[1], 64);
    for (int64_t it = 0; it < n_iter; it++) {
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbsud(2, 5, 6);
        _tile_dpbsud(3, 5, 7);
    }
    uint32_t s = 0;
#define RL_PEAK_AMX_SUM(t)                                                                         \
    _tile_stored(t, c, 64);                                                                        \
    for (int m = 0; m < 16; m++)                                                                   \
        for (int n = 0; n < 16; n++) s += (uint32_t)c[m][n]
    RL_PEAK_AMX_SUM(0);
    RL_PEAK_AMX_SUM(1);
    RL_PEAK_AMX_SUM(2);
    RL_PEAK_AMX_SUM(3);
#undef RL_PEAK_AMX_SUM
    _tile_release();
    *check = s;
    return n_iter > 0 ? (uint64_t)n_iter * 4 * 16 * 16 * 64 : 0;
}

void rl__amx_fill(rl__ktab *t) {
    t->amx[RL_TYPE_Q4_K].dot16 = rl__amx_q4_K;
    t->amx[RL_TYPE_Q4_K].x_prep = rl__amx_x_q8_K;
    t->amx[RL_TYPE_Q6_K].dot16 = rl__amx_q6_K;
    t->amx[RL_TYPE_Q6_K].x_prep = rl__amx_x_q8_K;
}
