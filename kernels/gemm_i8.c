/* The INT8 GEMM driver (kernels/gemm_i8.h): weight preparation, path choice,
 * the scalar reference and the split over threads. The SIMD row kernels are
 * gemm_i8_avx2.c, gemm_i8_avxvnni.c and gemm_i8_avx512.c (x86-64 only; other
 * machines run the reference). */
#include "kernels/gemm_i8.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/amx.h"
#include "kernels/cpu.h"

void dsq_gemm_i8_w_free(dsq_gemm_i8_w *w)
{
    if (!w) return;
    free(w->row_sums);
    free(w->m128_off);
    free(w->m128_col);
    free(w->amx_b);
    memset(w, 0, sizeof *w);
}

/* The AMX tile layout of B (see gemm_i8_amx.c): for each panel of 16 rows,
 * for each 4 columns of k, the 16 rows' 4 bytes; zeros past n and k. */
static bool pack_amx(dsq_gemm_i8_w *w)
{
    int64_t panels = (w->n + 15) / 16;
    w->kp = (w->k + 63) / 64 * 64;
    w->amx_b = calloc((size_t)(panels * 16 * w->kp), 1);
    if (!w->amx_b) return false;
    for (int64_t r = 0; r < w->n; r++) {
        uint8_t *panel = w->amx_b + (r / 16) * 16 * w->kp;
        const int8_t *b = w->B + r * w->ldb;
        for (int64_t c = 0; c < w->k; c++) panel[(c / 4) * 64 + (r % 16) * 4 + c % 4] = (uint8_t)b[c];
    }
    return true;
}

dsq_status dsq_gemm_i8_prepare(dsq_gemm_i8_w *w, const int8_t *B, int64_t n, int64_t k, int64_t ldb)
{
    memset(w, 0, sizeof *w);
    if (n <= 0 || k <= 0 || ldb < k || k >= (1 << 17)) /* |sum| <= 128 * 128 * k fits int32 */
        return dsq_fail(DSQ_ERR_ARG, "gemm_i8: bad weight shape %lld x %lld (ldb %lld)", (long long)n, (long long)k,
                        (long long)ldb);
    w->n = n, w->k = k, w->ldb = ldb, w->B = B;
    w->row_sums = malloc((size_t)n * sizeof *w->row_sums);
    w->m128_off = malloc((size_t)(n + 1) * sizeof *w->m128_off);
    if (!w->row_sums || !w->m128_off) goto nomem;
    int64_t total = 0;
    for (int64_t r = 0; r < n; r++) {
        const int8_t *b = B + r * ldb;
        int32_t s = 0;
        for (int64_t c = 0; c < k; c++) {
            s += b[c];
            total += b[c] == -128;
        }
        w->row_sums[r] = s;
    }
    w->m128_col = malloc((size_t)(total ? total : 1) * sizeof *w->m128_col);
    if (!w->m128_col) goto nomem;
    int64_t at = 0;
    for (int64_t r = 0; r < n; r++) {
        w->m128_off[r] = at;
        for (int64_t c = 0; c < k; c++)
            if (B[r * ldb + c] == -128) w->m128_col[at++] = (int32_t)c;
    }
    w->m128_off[n] = at;
    if (dsq_gemm_i8_path_available(DSQ_GEMM_I8_AMX) && !pack_amx(w)) goto nomem;
    return DSQ_OK;
nomem:
    dsq_gemm_i8_w_free(w);
    return dsq_fail(DSQ_ERR_NOMEM, "gemm_i8: out of memory preparing %lld weight rows", (long long)n);
}

const char *dsq_gemm_i8_path_name(dsq_gemm_i8_path p)
{
    static const char *const names[DSQ_GEMM_I8_N_PATHS] = {"scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8"};
    return (unsigned)p < DSQ_GEMM_I8_N_PATHS ? names[p] : "?";
}

bool dsq_gemm_i8_path_available(dsq_gemm_i8_path p)
{
    switch (p) {
    case DSQ_GEMM_I8_SCALAR: return true;
#if defined(__x86_64__) && defined(__GNUC__)
    case DSQ_GEMM_I8_AVX2: return dsq_cpu_has(DSQ_CPU_AVX2);
    case DSQ_GEMM_I8_AVX_VNNI: return dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_AVX_VNNI);
    case DSQ_GEMM_I8_AVX512_VNNI:
        return dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) && dsq_cpu_has(DSQ_CPU_AVX512_VNNI);
    case DSQ_GEMM_I8_AMX: return dsq_cpu_has(DSQ_CPU_AMX_INT8) && dsq_amx_ready();
#endif
    default: return false;
    }
}

dsq_gemm_i8_path dsq_gemm_i8_best_path(void)
{
    /* dsq_cpu_use_avx2() is false exactly when the scalar reference is forced
     * (or the CPU has no AVX2, and then it has none of the others either) */
    if (!dsq_cpu_use_avx2()) return DSQ_GEMM_I8_SCALAR;
    for (int p = DSQ_GEMM_I8_N_PATHS - 1; p > DSQ_GEMM_I8_SCALAR; p--)
        if (dsq_gemm_i8_path_available((dsq_gemm_i8_path)p)) return (dsq_gemm_i8_path)p;
    return DSQ_GEMM_I8_SCALAR;
}

void dsq_gemm_i8_ref(int64_t m, int64_t n, int64_t k, const int8_t *A, int64_t lda, const int8_t *B, int64_t ldb,
                     int32_t *C, int64_t ldc)
{
    for (int64_t t = 0; t < m; t++)
        for (int64_t r = 0; r < n; r++) {
            const int8_t *a = A + t * lda, *b = B + r * ldb;
            int32_t s = 0;
            for (int64_t c = 0; c < k; c++) s += (int32_t)a[c] * b[c];
            C[t * ldc + r] = s;
        }
}

void dsq_gemm_i8_rows(dsq_gemm_i8_path p, const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A,
                      int64_t lda, int32_t *C, int64_t ldc)
{
    if (r1 <= r0 || m <= 0) return;
    switch (p) {
#if defined(__x86_64__) && defined(__GNUC__)
    case DSQ_GEMM_I8_AVX2: dsq_gemm_i8_rows_avx2(w, r0, r1, m, A, lda, C, ldc); return;
    case DSQ_GEMM_I8_AVX_VNNI: dsq_gemm_i8_rows_avx_vnni(w, r0, r1, m, A, lda, C, ldc); return;
    case DSQ_GEMM_I8_AVX512_VNNI: dsq_gemm_i8_rows_avx512_vnni(w, r0, r1, m, A, lda, C, ldc); return;
    case DSQ_GEMM_I8_AMX: dsq_gemm_i8_rows_amx(w, r0, r1, m, A, lda, C, ldc); return;
#endif
    default: dsq_gemm_i8_ref(m, r1 - r0, w->k, A, lda, w->B + r0 * w->ldb, w->ldb, C, ldc); return;
    }
}

bool dsq_gemm_i8_quantize_act(const float *x, int64_t n, float scale_in, int8_t *codes, float *scale)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW)) {
        *scale = dsq_gemm_i8_quantize_act_avx512(x, n, scale_in, codes);
        return true;
    }
#endif
    return false;
}

float dsq_gemm_i8_dot_f32(const int8_t *w, const float *x, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) &&
        dsq_cpu_has(DSQ_CPU_AVX512VL))
        return dsq_gemm_i8_dot_f32_avx512(w, x, n);
#endif
    float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f; /* four chains: no serial add latency */
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        p0 += (float)w[i] * x[i];
        p1 += (float)w[i + 1] * x[i + 1];
        p2 += (float)w[i + 2] * x[i + 2];
        p3 += (float)w[i + 3] * x[i + 3];
    }
    for (; i < n; i++) p0 += (float)w[i] * x[i];
    return (p0 + p1) + (p2 + p3);
}

/* Rows per work item: a multiple of every kernel's row tile, and small enough
 * that a 576-row matrix still feeds a dozen threads. */
#define ROWS_PER_ITEM 32

void dsq_gemm_i8_parallel(const dsq_gemm_i8_w *w, int64_t m, const int8_t *A, int64_t lda, int32_t *C, int64_t ldc)
{
    dsq_gemm_i8_path p = dsq_gemm_i8_best_path();
    if (p == DSQ_GEMM_I8_AMX && (m < 16 || !w->amx_b)) /* a sparse tile, or weights prepared before */
        p = dsq_gemm_i8_path_available(DSQ_GEMM_I8_AVX512_VNNI) ? DSQ_GEMM_I8_AVX512_VNNI : DSQ_GEMM_I8_AVX2;
    int64_t items = (w->n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    int threads = dsq_cpu_threads();
    if (items < threads) threads = (int)items;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        int64_t r0 = it * ROWS_PER_ITEM, r1 = r0 + ROWS_PER_ITEM < w->n ? r0 + ROWS_PER_ITEM : w->n;
        dsq_gemm_i8_rows(p, w, r0, r1, m, A, lda, C + r0, ldc);
    }
}
