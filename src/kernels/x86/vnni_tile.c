/* AVX512-VNNI leaves of the tiles (kernels-impl.h, rl__tile8 dots and
 * rl__rtile dots; q4_K, q6_K, q4_1): tile-impl.h's templates with vpdpbusd
 * summing each row's byte products into its int32 lane (one uop for
 * vpmaddubsw + vpaddw; the scale by vpmulld per sub-block).  The sums are
 * exact, so these are the AVX2 leaves' and the scalar twins' bits
 * (test_kernels_tile.c runs every table).  The packers, the conversions of
 * resident groups and dot_row stay the AVX2 table's.  Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512vnni (Makefile) and reached only
 * through the "avx512vnni" table. */
#define RL_TILE_VNNI 1
#include "kernels/x86/tile-impl.h"

void rl__vnni_fill_tile(rl__ktab *t) {
    t->tile8[RL_TYPE_Q4_1].dot = rl__tile8_q4_1_vnni;
    t->tile8[RL_TYPE_Q4_K].dot = rl__tile8_q4_K_vnni;
    t->tile8[RL_TYPE_Q6_K].dot = rl__tile8_q6_K_vnni;
    t->rtile[RL_TYPE_Q4_1].dot = rl__tile8_q4_1r8_vnni;
    t->rtile[RL_TYPE_Q4_K].dot = rl__tile8_q4_Kr8_vnni;
    t->rtile[RL_TYPE_Q6_K].dot = rl__tile8_q6_Kr8_vnni;
}
