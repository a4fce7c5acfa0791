/* Host side of the CUDA W4A16 kernel: repacking, its exact dequantization
 * and its launch shape (the layout is described in w4a16_pack.h). */
#include "runtime/cuda/w4a16_pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "quantizers/intq.h"

/* The word holding code (row, col) and the code's bit offset in it (the
 * fragment layout of w4a16_pack.h). */
static size_t tile_word(const dsq_w4_packed *p, int64_t row, int64_t col, int *shift)
{
    int64_t tile = (row / DSQ_W4_TILE_N) * (p->k / DSQ_W4_TILE_K) + col / DSQ_W4_TILE_K;
    int n = (int)(row % DSQ_W4_TILE_N), c = (int)(col % DSQ_W4_TILE_K);
    int nh = n / 8, g = n % 8, ks = c / 16, cc = c % 16;
    int j = cc / 8, t = (cc % 8) / 2, second = cc % 2;
    int lane = 4 * g + t, r = (nh * 4 + ks) * 2 + j;
    *shift = 4 * (r % 4 + 4 * second);
    return (size_t)tile * DSQ_W4_TILE_WORDS + (size_t)lane * 4 + (size_t)(r / 4);
}

static dsq_status check_shape(const dsq_intq *q)
{
    if (q->bits != 4) return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA W4A16: %d-bit codes (only 4-bit)", q->bits);
    if (q->g_idx)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "CUDA W4A16: act-order g_idx is not supported (quantize without desc_act)");
    if (q->rows <= 0 || q->rows % DSQ_W4_TILE_N)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA W4A16: %lld output rows, not a multiple of %d", (long long)q->rows,
                        DSQ_W4_TILE_N);
    if (q->cols <= 0 || q->cols % DSQ_W4_TILE_K)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA W4A16: %lld input columns, not a multiple of %d", (long long)q->cols,
                        DSQ_W4_TILE_K);
    if (q->group_size <= 0 || q->group_size % 32 || q->cols % q->group_size)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "CUDA W4A16: group size %d must be a multiple of 32 that divides the %lld columns",
                        q->group_size, (long long)q->cols);
    if (q->n_groups != q->cols / q->group_size)
        return dsq_fail(DSQ_ERR_ARG, "CUDA W4A16: %lld groups for %lld columns of group %d", (long long)q->n_groups,
                        (long long)q->cols, q->group_size);
    return DSQ_OK;
}

/* The scale word of one (row, group): F16 scale, F16 -zero*scale. */
static dsq_status scale_word(const dsq_intq *q, int64_t row, int64_t g, uint32_t *out)
{
    float s = q->scales[row * q->n_groups + g];
    int z = q->zeros ? q->zeros[row * q->n_groups + g] : 8;
    if (!isfinite(s) || fabsf(s) > 65504.0f)
        return dsq_fail(DSQ_ERR_NUMERIC, "CUDA W4A16: scale %g of row %lld group %lld does not fit F16", (double)s,
                        (long long)row, (long long)g);
    if (z > 15)
        return dsq_fail(DSQ_ERR_FORMAT, "CUDA W4A16: zero %d of row %lld group %lld above 15", z, (long long)row,
                        (long long)g);
    uint16_t s16 = dsq_f32_to_f16(s);
    /* -z * s16 is exact in F32 (4 by 11 significant bits): one rounding, to F16 */
    uint16_t mz16 = dsq_f32_to_f16(-(float)z * dsq_f16_to_f32(s16));
    *out = (uint32_t)s16 | (uint32_t)mz16 << 16;
    return DSQ_OK;
}

dsq_status dsq_w4_pack(const dsq_intq *q, dsq_w4_packed *out)
{
    memset(out, 0, sizeof *out);
    dsq_status st = check_shape(q);
    if (st != DSQ_OK) return st;
    dsq_w4_packed p = {q->rows, q->cols, q->group_size, NULL, NULL};
    size_t n_words = (size_t)(q->rows / DSQ_W4_TILE_N) * (size_t)(q->cols / DSQ_W4_TILE_K) * DSQ_W4_TILE_WORDS;
    size_t n_sz = (size_t)q->n_groups * (size_t)q->rows;
    p.qw = calloc(n_words, sizeof *p.qw);
    p.sz = malloc(n_sz * sizeof *p.sz);
    if (!p.qw || !p.sz) {
        dsq_w4_packed_free(&p);
        return dsq_fail(DSQ_ERR_NOMEM, "CUDA W4A16: %zu bytes for the repacked weights",
                        (n_words + n_sz) * sizeof(uint32_t));
    }
    for (int64_t r = 0; r < q->rows; r++) {
        for (int64_t c = 0; c < q->cols; c++) {
            uint8_t code = q->codes[r * q->cols + c];
            if (code > 15) {
                dsq_w4_packed_free(&p);
                return dsq_fail(DSQ_ERR_FORMAT, "CUDA W4A16: code %u at row %lld column %lld above 15", code,
                                (long long)r, (long long)c);
            }
            int shift;
            size_t word = tile_word(&p, r, c, &shift);
            p.qw[word] |= (uint32_t)code << shift;
        }
        for (int64_t g = 0; g < q->n_groups; g++) {
            st = scale_word(q, r, g, &p.sz[g * q->rows + r]);
            if (st != DSQ_OK) {
                dsq_w4_packed_free(&p);
                return st;
            }
        }
    }
    *out = p;
    return DSQ_OK;
}

void dsq_w4_packed_free(dsq_w4_packed *p)
{
    free(p->qw);
    free(p->sz);
    p->qw = NULL;
    p->sz = NULL;
}

int dsq_w4_code(const dsq_w4_packed *p, int64_t row, int64_t col)
{
    int shift;
    size_t word = tile_word(p, row, col, &shift);
    return (int)(p->qw[word] >> shift) & 15;
}

uint16_t dsq_w4_weight(const dsq_w4_packed *p, int64_t row, int64_t col)
{
    uint32_t w = p->sz[(col / p->group) * p->n + row];
    float s = dsq_f16_to_f32((uint16_t)(w & 0xffffu)), mz = dsq_f16_to_f32((uint16_t)(w >> 16));
    /* q * s has at most 15 significant bits and mz is -z * s rounded: the sum
     * is exact in F32, so the F16 rounding below is the kernel's single one */
    return dsq_f32_to_f16((float)dsq_w4_code(p, row, col) * s + mz);
}

dsq_status dsq_w4_reference(const dsq_w4_packed *p, const float *x, int m, double *y, double *mag)
{
    double *wr = malloc((size_t)p->k * sizeof *wr);
    if (!wr) return dsq_fail(DSQ_ERR_NOMEM, "CUDA W4A16 reference: %lld columns", (long long)p->k);
    for (int64_t r = 0; r < p->n; r++) {
        for (int64_t c = 0; c < p->k; c++) wr[c] = dsq_f16_to_f32(dsq_w4_weight(p, r, c));
        for (int i = 0; i < m; i++) {
            double acc = 0, a = 0;
            for (int64_t c = 0; c < p->k; c++) {
                double xv = dsq_f16_to_f32(dsq_f32_to_f16(x[(size_t)i * p->k + c]));
                acc += xv * wr[c];
                a += fabs(xv * wr[c]);
            }
            y[(size_t)i * p->n + r] = acc;
            if (mag) mag[(size_t)i * p->n + r] = a;
        }
    }
    free(wr);
    return DSQ_OK;
}

int dsq_w4_m_block(int m) { return m <= 16 ? 16 : m <= 32 ? 32 : 64; }

dsq_w4_shape dsq_w4_launch_shape(int64_t n, int64_t k, int m, int wave_blocks)
{
    dsq_w4_shape s;
    int64_t row_tiles = n / DSQ_W4_TILE_N, k_tiles = k / DSQ_W4_TILE_K;
    const int per_block = DSQ_W4_WARPS * DSQ_W4_ROW_TILES_PER_WARP;
    s.blocks_n = (int)((row_tiles + per_block - 1) / per_block);
    s.m_block = dsq_w4_m_block(m);
    s.m_blocks = (m + s.m_block - 1) / s.m_block;
    /* as many slices as keep the grid within one wave (each slice reads its weights once either way: slicing
     * adds only the atomic adds of the partial sums; a second, partial wave
     * would leave most of the GPU idle at its end), at least k / MAX_SLICE */
    int64_t want = wave_blocks > 0 ? wave_blocks : 1;
    int64_t have = (int64_t)s.blocks_n * s.m_blocks;
    int64_t splits = want / have;
    int64_t min_splits = (k_tiles * DSQ_W4_TILE_K + DSQ_W4_MAX_SLICE - 1) / DSQ_W4_MAX_SLICE;
    if (splits < min_splits) splits = min_splits;
    if (splits > k_tiles) splits = k_tiles;
    if (splits < 1) splits = 1;
    int64_t tiles_per = (k_tiles + splits - 1) / splits;
    s.slice = (int)(tiles_per * DSQ_W4_TILE_K);
    s.splits = (int)((k_tiles + tiles_per - 1) / tiles_per);
    return s;
}
