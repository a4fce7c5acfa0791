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

static void acts_free(acts *a) { free(a->q), free(a->d), free(a->s); }

/* Each token's row rounded to Q8_0 by the quant-type table's quantizer (the
 * decode path's own activation rounding), then taken apart for the kernel. */
static dsq_status acts_make(const float *x, int64_t in, int n_tok, acts *a)
{
    int64_t nb = in / QK;
    int threads = n_tok < dsq_cpu_threads() ? n_tok : dsq_cpu_threads();
    a->q = malloc((size_t)n_tok * (size_t)in);
    a->d = malloc((size_t)n_tok * (size_t)nb * sizeof(float));
    a->s = malloc((size_t)n_tok * (size_t)nb * sizeof(int32_t));
    dsq_block_q8_0 *blocks = malloc((size_t)threads * (size_t)nb * sizeof *blocks);
    if (!a->q || !a->d || !a->s || !blocks) {
        acts_free(a);
        free(blocks);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %d activation rows of %lld", n_tok, (long long)in);
    }
    dsq_quantize_row_fn quantize = dsq_qtype_get(DSQ_TYPE_Q8_0)->quantize_row;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int i = 0; i < n_tok; i++) {
        dsq_block_q8_0 *tb = blocks + (size_t)omp_get_thread_num() * (size_t)nb;
        int8_t *q = a->q + (size_t)i * (size_t)in;
        quantize(x + (size_t)i * (size_t)in, tb, in, NULL);
        for (int64_t b = 0; b < nb; b++) unpack_q8_0(&tb[b], q + b * QK, &a->d[(size_t)i * nb + b]);
        dsq_gemm_q8_block_sums(q, in, a->s + (size_t)i * nb);
    }
    free(blocks);
    return DSQ_OK;
}

/* Rows [r0, r0 + nr), packed in the panels at P, for every token,
 * TOKEN_BLOCK tokens at a time. */
static void tokens_by_block(const acts *a, int n_tok, int64_t in, const void *P, int64_t r0, int64_t nr, float *y,
                            int64_t out)
{
    int64_t nb = in / QK;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOKEN_BLOCK) {
        int64_t nt = n_tok - t0 < TOKEN_BLOCK ? n_tok - t0 : TOKEN_BLOCK;
        dsq_gemm_q8(nt, nr, in, a->q + t0 * in, in, a->d + t0 * nb, a->s + t0 * nb, nb, P, y + t0 * out + r0, out);
    }
}

/* Rows [r0, r0 + nr) of w unpacked and packed into P. */
static void pack_rows(unpack_fn unpack, size_t bb, const void *w, size_t row_bytes, int64_t r0, int64_t nr, int64_t in,
                      int8_t *codes, float *scales, void *P)
{
    int64_t nb = in / QK;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)(r0 + r) * row_bytes;
        for (int64_t b = 0; b < nb; b++) unpack(row + b * bb, codes + r * in + b * QK, &scales[r * nb + b]);
    }
    dsq_gemm_q8_pack(nr, in, codes, in, scales, nb, P);
}

static dsq_status check(dsq_type t, int64_t in, unpack_fn *unpack, size_t *bb)
{
    *unpack = unpacker(t, bb);
    if (!*unpack || in % QK || in <= 0)
        return dsq_fail(DSQ_ERR_ARG, "qgemm_i8: %s weights with rows of %lld", dsq_type_name(t), (long long)in);
    return DSQ_OK;
}

dsq_status dsq_qgemm_i8(dsq_type t, const void *w, size_t row_bytes, int64_t out, int64_t in, const float *x, float *y,
                        int n_tok)
{
    size_t bb = 0;
    unpack_fn unpack;
    DSQ_TRY(check(t, in, &unpack, &bb));
    if (n_tok <= 0) return DSQ_OK;
    int64_t nb = in / QK;
    int threads = dsq_cpu_threads();
    int64_t nc = tile_rows(out, in, threads), ntiles = (out + nc - 1) / nc;
    if (ntiles < threads) threads = (int)ntiles;
    size_t packed = (dsq_gemm_q8_packed_bytes(nc, in) + 63) & ~(size_t)63;
    size_t per = packed + (((size_t)nc * (size_t)in + (size_t)nc * (size_t)nb * sizeof(float) + 63) & ~(size_t)63);
    acts a;
    DSQ_TRY(acts_make(x, in, n_tok, &a));
    char *scratch = aligned_alloc(64, per * (size_t)threads);
    if (!scratch) {
        acts_free(&a);
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory for the int8 products of %d tokens",
                        (long long)out, (long long)in, n_tok);
    }
#pragma omp parallel num_threads(threads)
    {
        char *mine = scratch + per * (size_t)omp_get_thread_num();
        int8_t *codes = (int8_t *)(mine + packed);
        float *scales = (float *)(codes + (size_t)nc * (size_t)in);
#pragma omp for schedule(dynamic, 1)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            int64_t r0 = tile * nc, nr = out - r0 < nc ? out - r0 : nc;
            pack_rows(unpack, bb, w, row_bytes, r0, nr, in, codes, scales, mine);
            tokens_by_block(&a, n_tok, in, mine, r0, nr, y, out);
        }
    }
    acts_free(&a);
    free(scratch);
    return DSQ_OK;
}

size_t dsq_qgemm_i8_packed_bytes(int64_t out, int64_t in) { return dsq_gemm_q8_packed_bytes(out, in); }

dsq_status dsq_qgemm_i8_pack(dsq_type t, const void *w, size_t row_bytes, int64_t out, int64_t in, void *P)
{
    size_t bb = 0;
    unpack_fn unpack;
    DSQ_TRY(check(t, in, &unpack, &bb));
    int64_t panels = (out + DSQ_GEMM_Q8_NR - 1) / DSQ_GEMM_Q8_NR;
    int threads = panels < dsq_cpu_threads() ? (int)panels : dsq_cpu_threads();
    size_t per = (size_t)DSQ_GEMM_Q8_NR * (size_t)in + (size_t)DSQ_GEMM_Q8_NR * (size_t)(in / QK) * sizeof(float);
    char *scratch = malloc(per * (size_t)threads);
    if (!scratch)
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory packing it for the int8 kernel",
                        (long long)out, (long long)in);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t p = 0; p < panels; p++) {
        int8_t *codes = (int8_t *)(scratch + per * (size_t)omp_get_thread_num());
        float *scales = (float *)(codes + (size_t)DSQ_GEMM_Q8_NR * (size_t)in);
        int64_t r0 = p * DSQ_GEMM_Q8_NR, nr = out - r0 < DSQ_GEMM_Q8_NR ? out - r0 : DSQ_GEMM_Q8_NR;
        pack_rows(unpack, bb, w, row_bytes, r0, nr, in, codes, scales, (char *)P + dsq_gemm_q8_packed_bytes(r0, in));
    }
    free(scratch);
    return DSQ_OK;
}

/* Rows per work item of the packed product: whole groups of four panels (the
 * decode kernel's unit) and a few items per thread. */
#define PACKED_ROWS 128

dsq_status dsq_qgemm_i8_packed(const void *P, int64_t out, int64_t in, const float *x, float *y, int n_tok)
{
    if (in % QK || in <= 0) return dsq_fail(DSQ_ERR_ARG, "qgemm_i8: rows of %lld", (long long)in);
    if (n_tok <= 0) return DSQ_OK;
    acts a;
    DSQ_TRY(acts_make(x, in, n_tok, &a));
    int64_t items = (out + PACKED_ROWS - 1) / PACKED_ROWS;
    int threads = items < dsq_cpu_threads() ? (int)items : dsq_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        int64_t r0 = it * PACKED_ROWS, nr = out - r0 < PACKED_ROWS ? out - r0 : PACKED_ROWS;
        tokens_by_block(&a, n_tok, in, (const char *)P + dsq_gemm_q8_packed_bytes(r0, in), r0, nr, y, out);
    }
    acts_free(&a);
    return DSQ_OK;
}
