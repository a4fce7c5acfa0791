/* The CUDA W4A16 kernel's weight layout, built and checked on the host.
 *
 * Built in every configuration (plain C): the repacking, the kernel's exact
 * dequantization and its launch shape are tested on machines without a GPU
 * against the CPU's INT group storage (quantizers/intq.h).
 *
 * Layout (Marlin's idea: repack once so that what a lane loads is already its
 * share of the tensor-core operands; our own arrangement): W [n x k] of 4-bit
 * codes is cut into tiles of 16 output rows x 64 input columns, 512 bytes
 * each, one 16-byte load per lane of a warp. The tile feeds eight
 * mma.m16n8k16 operations: two halves of 8 rows (nh) by four steps of 16
 * columns (ks). In each, lane l = 4 g + t holds the B operand's row nh*8 + g
 * at columns ks*16 + 2t, 2t+1 (register j = 0) and ks*16 + 2t+8, 2t+9
 * (j = 1): 16 pairs per lane, pair r = (nh*4 + ks)*2 + j in word r/4 of the
 * lane's four, the pair's first code in nibble r%4 and its second in nibble
 * r%4 + 4, so that (word >> 4i) & 0x000F000F puts both into the halves of
 * one half2. Tiles of one row block follow each other along k.
 *
 * Scales and zeros: one 32-bit word per (group, row), [k/group][n]: the low
 * half is the scale as F16, the high half -zero * scale as F16. The kernel
 * dequantizes w = fma(q, scale, -zero*scale) in F16 (one rounding), which
 * dsq_w4_weight reproduces bit for bit. */
#ifndef DSQ_RUNTIME_CUDA_W4A16_PACK_H
#define DSQ_RUNTIME_CUDA_W4A16_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dsq_intq; /* quantizers/intq.h (not included: CUDA sources include this header) */

#define DSQ_W4_TILE_N 16
#define DSQ_W4_TILE_K 64
#define DSQ_W4_TILE_WORDS 128 /* 32-bit words per tile */
/* The kernel's block: this many row tiles (one warp each), an input-column
 * slice of at most DSQ_W4_MAX_SLICE columns (more slices only for parallelism). */
#define DSQ_W4_WARPS 4
#define DSQ_W4_ROW_TILES_PER_WARP 2 /* tiles of 16 rows a warp multiplies with the same activations */
#define DSQ_W4_MAX_SLICE 16384

typedef struct dsq_w4_packed {
    int64_t n, k; /* W is [n x k] */
    int group;    /* input columns per scale */
    uint32_t *qw; /* (n / 16) * (k / 64) tiles of DSQ_W4_TILE_WORDS words */
    uint32_t *sz; /* [k / group][n]: F16 scale | F16 (-zero * scale) << 16 */
} dsq_w4_packed;

/* Repacks 4-bit INT groups. Refuses (naming the reason) other widths, an
 * act-order g_idx, n not a multiple of 16, k not a multiple of 64, a group
 * size that is not a multiple of 32 or does not divide k, codes or zeros
 * above 15, and scales that are not finite or do not fit F16. */
dsq_status dsq_w4_pack(const struct dsq_intq *q, dsq_w4_packed *out);
void dsq_w4_packed_free(dsq_w4_packed *p);

/* The code of W[row][col] read back from the tiles (tests). */
int dsq_w4_code(const dsq_w4_packed *p, int64_t row, int64_t col);
/* W[row][col] as the kernel dequantizes it: F16 bits. */
uint16_t dsq_w4_weight(const dsq_w4_packed *p, int64_t row, int64_t col);

/* The kernel's result in exact arithmetic: y[m x n] = f16(x) W^T, the products
 * of F16-rounded activations and dsq_w4_weight summed in double; also
 * mag[m x n] = sum |x w| (the scale of the rounding error an F32-accumulating
 * kernel may make), when mag is not NULL. */
dsq_status dsq_w4_reference(const dsq_w4_packed *p, const float *x, int m, double *y, double *mag);

/* Grid of one launch: blocks along n (DSQ_W4_WARPS warps of
 * DSQ_W4_ROW_TILES_PER_WARP row tiles each), split-k
 * slices of `slice` columns (a multiple of 64, at most DSQ_W4_MAX_SLICE), and
 * groups of m_block rows (16, 32 or 64: a warp multiplies each dequantized
 * tile with up to four 16-row tiles of activations). The grid stays within
 * one wave (wave_blocks: the blocks the GPU holds at once) when it can; more than one slice
 * means the partial sums are added atomically into a zeroed output. */
typedef struct dsq_w4_shape {
    int blocks_n, splits, m_blocks, m_block;
    int slice;
} dsq_w4_shape;
dsq_w4_shape dsq_w4_launch_shape(int64_t n, int64_t k, int m, int wave_blocks);
/* Rows of activations one block multiplies for m rows (16, 32 or 64): the
 * kernel instantiation, chosen before the shape (wave_blocks depends on it). */
int dsq_w4_m_block(int m);

#ifdef __cplusplus
}
#endif

#endif
