/* The INT8 GEMM (kernels/gemm_i8.h): every path this CPU runs against the
 * scalar reference, bit for bit, on random shapes (k on and off multiples of
 * 32 and 64, m = 1..9, padded leading dimensions, row ranges not starting at
 * 0), on the extreme bytes (-128 against -128, 127, -127 everywhere: the
 * cases where vpmaddubsw would saturate and vpsignb wraps), and the threaded
 * driver. Paths the CPU lacks are skipped with a message naming them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/status.h"
#include "kernels/cpu.h"
#include "kernels/gemm_i8.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x18ee5a1dull;

typedef enum { FILL_RANDOM, FILL_EXTREME, FILL_MIXED } fill_kind;

static void fill(int8_t *p, size_t n, fill_kind f)
{
    static const int8_t ext[] = {-128, 127, -127, -128, -128, 127};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = dsq_test_rand(&g_seed);
        if (f == FILL_EXTREME || (f == FILL_MIXED && r % 4 == 0))
            p[i] = ext[(r >> 8) % (sizeof ext)];
        else
            p[i] = (int8_t)(r >> 16);
    }
}

/* One shape on path p: rows [r0, n) of a prepared B against the reference. */
static void check_shape(dsq_gemm_i8_path p, int64_t m, int64_t n, int64_t k, int64_t r0, fill_kind f)
{
    int64_t lda = k + (int64_t)(dsq_test_rand(&g_seed) % 5), ldb = k + (int64_t)(dsq_test_rand(&g_seed) % 3);
    int64_t ldc = n + 3;
    int8_t *A = malloc((size_t)(m * lda)), *B = malloc((size_t)(n * ldb));
    int32_t *C = malloc((size_t)(m * ldc) * sizeof *C), *R = malloc((size_t)(m * n) * sizeof *R);
    assert_true(A && B && C && R);
    fill(A, (size_t)(m * lda), f);
    fill(B, (size_t)(n * ldb), f);
    dsq_gemm_i8_ref(m, n, k, A, lda, B, ldb, R, n);
    dsq_gemm_i8_w w;
    if (dsq_gemm_i8_prepare(&w, B, n, k, ldb) != DSQ_OK) fail_msg("prepare: %s", dsq_errmsg());
    for (int64_t i = 0; i < m * ldc; i++) C[i] = 0x5a5a5a5a;
    dsq_gemm_i8_rows(p, &w, r0, n, m, A, lda, C, ldc);
    for (int64_t t = 0; t < m; t++)
        for (int64_t r = r0; r < n; r++)
            if (C[t * ldc + r - r0] != R[t * n + r])
                fail_msg("%s m=%lld n=%lld k=%lld rows from %lld: C[%lld][%lld] = %d, reference %d",
                         dsq_gemm_i8_path_name(p), (long long)m, (long long)n, (long long)k, (long long)r0,
                         (long long)t, (long long)r, C[t * ldc + r - r0], R[t * n + r]);
    for (int64_t t = 0; t < m; t++) /* nothing written past the range */
        for (int64_t r = n - r0; r < ldc; r++) assert_int_equal(C[t * ldc + r], 0x5a5a5a5a);
    dsq_gemm_i8_w_free(&w);
    free(A), free(B), free(C), free(R);
}

static void test_paths(void **state)
{
    static const int64_t ks[] = {1, 7, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 300, 576, 1000};
    int ran = 0;
    for (int pi = 0; pi < DSQ_GEMM_I8_N_PATHS; pi++) {
        dsq_gemm_i8_path p = (dsq_gemm_i8_path)pi;
        if (!dsq_gemm_i8_path_available(p)) {
            fprintf(stderr, "SKIP: INT8 GEMM path %s: this CPU does not have it\n", dsq_gemm_i8_path_name(p));
            continue;
        }
        ran++;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (int64_t m = 1; m <= 9; m++) {
                int64_t n = 1 + (int64_t)(dsq_test_rand(&g_seed) % 41);
                int64_t r0 = n > 5 ? (int64_t)(dsq_test_rand(&g_seed) % 5) : 0;
                check_shape(p, m, n, ks[ki], r0, (fill_kind)((ki + (size_t)m) % 3));
            }
        check_shape(p, 17, 70, 4096, 0, FILL_MIXED); /* several row blocks and token blocks */
        check_shape(p, 3, 9, 2049, 1, FILL_EXTREME);
    }
    assert_true(ran >= 1); /* the scalar path always runs */
}

/* -128 x -128 everywhere: every product is 16384, the largest int8 product. */
static void test_extreme_sums(void **state)
{
    int64_t k = 4099, n = 6, m = 5;
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(n * k));
    int32_t C[5 * 6];
    memset(A, 0x80, (size_t)(m * k));
    memset(B, 0x80, (size_t)(n * k));
    for (int64_t c = 0; c < k; c++) B[k + c] = 127, B[2 * k + c] = -127, A[k + c] = 127; /* row 1, 2; token 1 */
    dsq_gemm_i8_w w;
    assert_int_equal(dsq_gemm_i8_prepare(&w, B, n, k, k), DSQ_OK);
    for (int pi = 0; pi < DSQ_GEMM_I8_N_PATHS; pi++) {
        if (!dsq_gemm_i8_path_available((dsq_gemm_i8_path)pi)) continue;
        dsq_gemm_i8_rows((dsq_gemm_i8_path)pi, &w, 0, n, m, A, k, C, n);
        assert_int_equal(C[0], 16384 * k);
        assert_int_equal(C[1], -128 * 127 * k);
        assert_int_equal(C[2], 128 * 127 * k);
        assert_int_equal(C[n + 0], -127 * 128 * k);
        assert_int_equal(C[n + 1], 127 * 127 * k);
    }
    dsq_gemm_i8_w_free(&w);
    free(A), free(B);
}

static void test_parallel_and_refusals(void **state)
{
    int64_t m = 13, n = 333, k = 517;
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(n * k));
    int32_t *C = malloc((size_t)(m * n) * sizeof *C), *R = malloc((size_t)(m * n) * sizeof *R);
    fill(A, (size_t)(m * k), FILL_MIXED);
    fill(B, (size_t)(n * k), FILL_MIXED);
    dsq_gemm_i8_ref(m, n, k, A, k, B, k, R, n);
    dsq_gemm_i8_w w;
    assert_int_equal(dsq_gemm_i8_prepare(&w, B, n, k, k), DSQ_OK);
    for (int th = 1; th <= 3; th++) {
        dsq_cpu_set_threads(th);
        memset(C, 0, (size_t)(m * n) * sizeof *C);
        dsq_gemm_i8_parallel(&w, m, A, k, C, n);
        assert_memory_equal(C, R, (size_t)(m * n) * sizeof *C);
    }
    dsq_cpu_set_threads(0);
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_int_equal(dsq_gemm_i8_best_path(), DSQ_GEMM_I8_SCALAR);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    fprintf(stderr, "INT8 GEMM best path here: %s\n", dsq_gemm_i8_path_name(dsq_gemm_i8_best_path()));
    dsq_gemm_i8_w_free(&w);
    dsq_gemm_i8_w bad;
    assert_int_not_equal(dsq_gemm_i8_prepare(&bad, B, n, 0, k), DSQ_OK);
    assert_int_not_equal(dsq_gemm_i8_prepare(&bad, B, n, k, k - 1), DSQ_OK);
    assert_int_not_equal(dsq_gemm_i8_prepare(&bad, B, n, 1 << 17, 1 << 17), DSQ_OK); /* int32 could overflow */
    assert_non_null(strstr(dsq_errmsg(), "gemm_i8"));
    free(A), free(B), free(C), free(R);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_extreme_sums),
        cmocka_unit_test(test_parallel_and_refusals),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
