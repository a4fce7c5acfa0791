/* Blocking after the GotoBLAS/BLIS layout: for each block of KC columns of A
 * the matching rows of op(B) are packed into 16-wide panels (zero padded), so
 * the micro-kernel streams one panel from L1 while 6 rows of A are broadcast
 * one element at a time (12 rows against two panels with AVX-512). Edge tiles
 * (fewer than 6 rows or 16 columns) run the same kernel on padded copies, or
 * with AVX-512 an edge kernel that masks instead. */
#include "kernels/gemm.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm_kernel.h"

#define MR DSQ_GEMM_MR
#define NR DSQ_GEMM_NR
#define KC DSQ_GEMM_KC

typedef void (*kernel_fn)(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                          bool accumulate);

static int64_t panels_of(int64_t n) { return (n + NR - 1) / NR; }

size_t dsq_gemm_scratch_floats(int64_t n, int64_t k)
{
    int64_t kc = k < KC ? k : KC;
    return (size_t)panels_of(n) * NR * (size_t)kc + MR * KC + MR * NR;
}

float *dsq_gemm_scratch_alloc(size_t floats)
{
    size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

void dsq_gemm_kernel_scalar(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate)
{
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < kc; p++)
        for (int i = 0; i < MR; i++) {
            float a = A[i * lda + p];
            for (int j = 0; j < NR; j++) acc[i][j] += a * Bp[p * NR + j];
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc[i][j] : acc[i][j];
}

/* Packs op(B) rows k0..k0+kc-1 for all n columns into panels of NR. */
static void pack_b(dsq_gemm_b bl, int64_t n, int64_t k0, int64_t kc, const float *B, int64_t ldb, float *Bp)
{
    int64_t np = panels_of(n);
    if (bl == DSQ_GEMM_BT && dsq_cpu_use_avx512_gemm()) {
        for (int64_t q = 0; q < np; q++) {
            int64_t c0 = q * NR, nc = n - c0 < NR ? n - c0 : NR;
            dsq_gemm_pack_bt_avx512(B + c0 * ldb + k0, ldb, nc, kc, Bp + q * NR * kc);
        }
        return;
    }
    for (int64_t q = 0; q < np; q++) {
        float *dst = Bp + q * NR * kc;
        int64_t c0 = q * NR, nc = n - c0 < NR ? n - c0 : NR;
        if (nc < NR) memset(dst, 0, (size_t)(NR * kc) * sizeof(float));
        if (bl == DSQ_GEMM_BT) {
            for (int64_t c = 0; c < nc; c++) {
                const float *src = B + (c0 + c) * ldb + k0;
                for (int64_t p = 0; p < kc; p++) dst[p * NR + c] = src[p];
            }
        } else if (nc == NR) { /* a constant size: inlined vector moves, not a call per row */
            for (int64_t p = 0; p < kc; p++) memcpy(dst + p * NR, B + (k0 + p) * ldb + c0, NR * sizeof(float));
        } else {
            for (int64_t p = 0; p < kc; p++) memcpy(dst + p * NR, B + (k0 + p) * ldb + c0, (size_t)nc * sizeof(float));
        }
    }
}

/* One MR x NR tile that may stick out of C: run on a padded copy. */
static void edge_tile(kernel_fn kern, int64_t kc, const float *A, int64_t lda, int64_t mr, const float *Bp, float *C,
                      int64_t ldc, int64_t nr, bool acc, float *apad, float *ctmp)
{
    if (mr < MR) {
        memset(apad, 0, (size_t)(MR * kc) * sizeof(float));
        for (int64_t i = 0; i < mr; i++) memcpy(apad + i * kc, A + i * lda, (size_t)kc * sizeof(float));
        A = apad;
        lda = kc;
    }
    memset(ctmp, 0, MR * NR * sizeof(float));
    if (acc)
        for (int64_t i = 0; i < mr; i++) memcpy(ctmp + i * NR, C + i * ldc, (size_t)nr * sizeof(float));
    kern(kc, A, lda, Bp, ctmp, NR, acc);
    for (int64_t i = 0; i < mr; i++) memcpy(C + i * ldc, ctmp + i * NR, (size_t)nr * sizeof(float));
}

/* One K block of the product, its B panels packed: the shared arguments of
 * the tile loops below. */
typedef struct kblock {
    kernel_fn kern;
    int64_t m, n, np, kc;
    const float *A; /* at the block's first column */
    int64_t lda;
    const float *Bp;
    float *C;
    int64_t ldc;
    bool acc;
    float *apad, *ctmp;
} kblock;

/* Rows i0..i1-1 of C against panels q0.. in 6x16 tiles. */
static void narrow_tiles(const kblock *b, int64_t i0, int64_t i1, int64_t q0)
{
    for (; i0 < i1; i0 += MR) {
        int64_t mr = i1 - i0 < MR ? i1 - i0 : MR;
        const float *Ab = b->A + i0 * b->lda;
        for (int64_t q = q0; q < b->np; q++) {
            int64_t nr = b->n - q * NR < NR ? b->n - q * NR : NR;
            float *Cb = b->C + i0 * b->ldc + q * NR;
            const float *Bq = b->Bp + q * NR * b->kc;
            if (mr == MR && nr == NR)
                b->kern(b->kc, Ab, b->lda, Bq, Cb, b->ldc, b->acc);
            else
                edge_tile(b->kern, b->kc, Ab, b->lda, mr, Bq, Cb, b->ldc, nr, b->acc, b->apad, b->ctmp);
        }
    }
}

/* Every tile on AVX-512: 12x32 tiles over pairs of panels, and the edges
 * (the last rows, a last odd or partial panel) on the edge kernel, which
 * reads only the rows there are and masks the columns: no padded copies,
 * and the bits per element of the 6x16 kernels. */
static void wide_tiles(const kblock *b)
{
    for (int64_t i0 = 0; i0 < b->m; i0 += DSQ_GEMM_WIDE_MR) {
        const int64_t mr = b->m - i0 < DSQ_GEMM_WIDE_MR ? b->m - i0 : DSQ_GEMM_WIDE_MR;
        const float *Ab = b->A + i0 * b->lda;
        for (int64_t q = 0; q < b->np; q += 2) {
            const int64_t nr = b->n - q * NR < DSQ_GEMM_WIDE_NR ? b->n - q * NR : DSQ_GEMM_WIDE_NR;
            float *Cb = b->C + i0 * b->ldc + q * NR;
            const float *Bq = b->Bp + q * NR * b->kc;
            if (mr == DSQ_GEMM_WIDE_MR && nr == DSQ_GEMM_WIDE_NR)
                dsq_gemm_kernel_avx512(b->kc, Ab, b->lda, Bq, Cb, b->ldc, b->acc);
            else
                dsq_gemm_kernel_avx512_edge(mr, nr, b->kc, Ab, b->lda, Bq, Cb, b->ldc, b->acc);
        }
    }
}

void dsq_gemm_f32(dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float *C, int64_t ldc, bool accumulate, float *scratch)
{
    bool wide = dsq_cpu_use_avx512_gemm();
    kernel_fn kern = dsq_cpu_use_avx2() ? dsq_gemm_kernel_avx2 : dsq_gemm_kernel_scalar;
    int64_t np = panels_of(n);
    int64_t kcmax = k < KC ? k : KC;
    float *Bp = scratch, *apad = scratch + np * NR * kcmax, *ctmp = apad + MR * KC;
    if (k == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t kc = k - k0 < KC ? k - k0 : KC;
        pack_b(bl, n, k0, kc, B, ldb, Bp);
        kblock b = {kern, m, n, np, kc, A + k0, lda, Bp, C, ldc, accumulate || k0 > 0, apad, ctmp};
        if (wide)
            wide_tiles(&b);
        else
            narrow_tiles(&b, 0, m, 0);
    }
}
