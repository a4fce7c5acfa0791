#include "runtime/cpu/qgemm_i8.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm_q8.h"
#include "quantizers/qtypes.h"
#include "quantizers/quant_common.h"

#define QK 32

/* One block of weights as int8 codes (the values the type's vec_dot
 * multiplies) and its scale: the integer each llama.cpp dot adds per block. */
typedef void (*unpack_fn)(const void *blk, int8_t *codes, float *d);

static void unpack_q8_0(const void *blk, int8_t *codes, float *d)
{
    const dsq_block_q8_0 *b = blk;
    *d = dsq_f16_to_f32(b->d);
    memcpy(codes, b->qs, QK);
}

static void unpack_q4_0(const void *blk, int8_t *codes, float *d)
{
    const dsq_block_q4_0 *b = blk;
    *d = dsq_f16_to_f32(b->d);
    for (int j = 0; j < QK / 2; j++) {
        codes[j] = (int8_t)((b->qs[j] & 15) - 8);
        codes[j + QK / 2] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

static void unpack_q5_0(const void *blk, int8_t *codes, float *d)
{
    const dsq_block_q5_0 *b = blk;
    *d = dsq_f16_to_f32(b->d);
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    for (int j = 0; j < QK / 2; j++) {
        codes[j] = (int8_t)(((b->qs[j] & 15) | ((qh >> j) & 1) << 4) - 16);
        codes[j + QK / 2] = (int8_t)(((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
}

static void unpack_iq4_nl(const void *blk, int8_t *codes, float *d)
{
    const dsq_block_iq4_nl *b = blk;
    *d = dsq_f16_to_f32(b->d);
    for (int j = 0; j < QK / 2; j++) {
        codes[j] = dsq_kvalues_iq4nl[b->qs[j] & 15];
        codes[j + QK / 2] = dsq_kvalues_iq4nl[b->qs[j] >> 4];
    }
}

static unpack_fn unpacker(dsq_type t, size_t *block_bytes)
{
    switch (t) {
    case DSQ_TYPE_Q8_0: *block_bytes = sizeof(dsq_block_q8_0); return unpack_q8_0;
    case DSQ_TYPE_Q4_0: *block_bytes = sizeof(dsq_block_q4_0); return unpack_q4_0;
    case DSQ_TYPE_Q5_0: *block_bytes = sizeof(dsq_block_q5_0); return unpack_q5_0;
    case DSQ_TYPE_IQ4_NL: *block_bytes = sizeof(dsq_block_iq4_nl); return unpack_iq4_nl;
    default: return NULL;
    }
}

bool dsq_qgemm_i8_type(dsq_type t)
{
    size_t bb;
    const dsq_qtype *q = dsq_qtype_get(t);
    return unpacker(t, &bb) && q && q->vec_dot_type == DSQ_TYPE_Q8_0;
}

/* Rows per tile: the packed tile stays within a core's L2, and there are
 * enough tiles for the threads. Each tile is unpacked and packed once and
 * then multiplied with every token, TOKEN_BLOCK tokens at a time, so that
 * their codes stay in L2 while every panel of the tile passes over them. */
#define TILE_BYTES (512 << 10)
#define TOKEN_BLOCK 256

static int64_t tile_rows(int64_t out, int64_t in, int threads)
{
    int64_t nc = 256;
    while (nc > DSQ_GEMM_Q8_NR && nc * in > TILE_BYTES) nc /= 2;
    while (nc > DSQ_GEMM_Q8_NR && (out + nc - 1) / nc < 4 * threads) nc /= 2;
    return nc;
}

/* Activations as the kernel reads them: codes, block scales, block sums. */
typedef struct acts {
    int8_t *q;
    float *d;
    int32_t *s;
} acts;

static void quantize_token(const float *x, int64_t in, dsq_block_q8_0 *blocks, int8_t *q, float *d, int32_t *s)
{
    dsq_qtype_get(DSQ_TYPE_Q8_0)->quantize_row(x, blocks, in, NULL);
    for (int64_t b = 0; b < in / QK; b++) unpack_q8_0(&blocks[b], q + b * QK, &d[b]);
    dsq_gemm_q8_block_sums(q, in, s);
}

dsq_status dsq_qgemm_i8(dsq_type t, const void *w, size_t row_bytes, int64_t out, int64_t in, const float *x, float *y,
                        int n_tok)
{
    size_t bb = 0;
    unpack_fn unpack = unpacker(t, &bb);
    if (!unpack || in % QK || n_tok <= 0)
        return dsq_fail(DSQ_ERR_ARG, "qgemm_i8: %s weights with rows of %lld", dsq_type_name(t), (long long)in);
    int64_t nb = in / QK;
    int threads = dsq_cpu_threads();
    int64_t nc = tile_rows(out, in, threads), ntiles = (out + nc - 1) / nc;
    if (ntiles < threads) threads = (int)ntiles;
    size_t packed = (dsq_gemm_q8_packed_bytes(nc, in) + 63) & ~(size_t)63;
    size_t per = packed + (((size_t)nc * (size_t)in + (size_t)nc * (size_t)nb * sizeof(float) + 63) & ~(size_t)63);
    acts a = {malloc((size_t)n_tok * (size_t)in), malloc((size_t)n_tok * (size_t)nb * sizeof(float)),
              malloc((size_t)n_tok * (size_t)nb * sizeof(int32_t))};
    dsq_block_q8_0 *blocks = malloc((size_t)dsq_cpu_threads() * (size_t)nb * sizeof *blocks);
    char *scratch = aligned_alloc(64, per * (size_t)threads);
    if (!a.q || !a.d || !a.s || !blocks || !scratch) {
        free(a.q), free(a.d), free(a.s), free(blocks), free(scratch);
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory for the int8 products of %d tokens",
                        (long long)out, (long long)in, n_tok);
    }
#pragma omp parallel num_threads(threads)
    {
        dsq_block_q8_0 *tb = blocks + (size_t)omp_get_thread_num() * (size_t)nb;
#pragma omp for schedule(static)
        for (int i = 0; i < n_tok; i++)
            quantize_token(x + (size_t)i * (size_t)in, in, tb, a.q + (size_t)i * (size_t)in, a.d + (size_t)i * nb,
                           a.s + (size_t)i * nb);
        char *mine = scratch + per * (size_t)omp_get_thread_num();
        int8_t *codes = (int8_t *)(mine + packed);
        float *scales = (float *)(codes + (size_t)nc * (size_t)in);
#pragma omp for schedule(dynamic, 1)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            int64_t r0 = tile * nc, nr = out - r0 < nc ? out - r0 : nc;
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *row = (const uint8_t *)w + (size_t)(r0 + r) * row_bytes;
                for (int64_t b = 0; b < nb; b++) unpack(row + b * bb, codes + r * in + b * QK, &scales[r * nb + b]);
            }
            dsq_gemm_q8_pack(nr, in, codes, in, scales, nb, mine);
            for (int64_t t0 = 0; t0 < n_tok; t0 += TOKEN_BLOCK) {
                int64_t nt = n_tok - t0 < TOKEN_BLOCK ? n_tok - t0 : TOKEN_BLOCK;
                dsq_gemm_q8(nt, nr, in, a.q + t0 * in, in, a.d + t0 * nb, a.s + t0 * nb, nb, mine, y + t0 * out + r0,
                            out);
            }
        }
    }
    free(a.q), free(a.d), free(a.s), free(blocks), free(scratch);
    return DSQ_OK;
}
