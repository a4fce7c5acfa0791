/* The rank-k row updates (kernels/rowupd.h): every path (AVX512, AVX2+FMA,
 * scalar) gives the scalar loop's bits for every width around its vector
 * and chunk sizes, 1 to 9 rows (the groups of four and their rests), strided
 * coefficients and rows, both signs, and leaves y past w untouched; the
 * scalar path is held to a long-double sum within a few roundings. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu.h"
#include "kernels/rowupd.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x70c0ffeeull;

static const dsq_cpu_isa g_isas[] = {DSQ_CPU_ISA_SCALAR, DSQ_CPU_ISA_AVX2, DSQ_CPU_ISA_AUTO};
static const char *const g_isa_names[] = {"scalar", "avx2", "auto (avx512 where present)"};

/* One case of nr rows: y (stride ldy = w + 3, 3 guard values after each row). */
static void f64_case(int64_t nr, int64_t nk, int64_t w, int sign, dsq_cpu_isa isa)
{
    const int64_t cs = 3, ldc = nk * cs + 2, ldx = w + 5, ldy = w + 3;
    const size_t ny = (size_t)(nr * ldy);
    double *c = malloc((size_t)(nr * ldc + 1) * sizeof *c), *X = malloc((size_t)(nk * ldx + 1) * sizeof *X);
    double *y1 = malloc(ny * sizeof *y1), *y2 = malloc(ny * sizeof *y2);
    assert_true(c && X && y1 && y2);
    for (int64_t i = 0; i < nr * ldc + 1; i++) c[i] = dsq_test_randn(&g_seed);
    for (int64_t i = 0; i < nk * ldx + 1; i++) X[i] = dsq_test_randn(&g_seed);
    for (size_t j = 0; j < ny; j++) y1[j] = y2[j] = dsq_test_randn(&g_seed);
    dsq_cpu_set_isa(isa);
    dsq_rowupd_f64(nr, nk, w, y1, ldy, c, ldc, cs, X, ldx, sign);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (int64_t r = 0; r < nr; r++) {
        for (int64_t j = 0; j < w; j++) {
            long double want = y2[r * ldy + j], bound = fabs(y2[r * ldy + j]);
            for (int64_t k = 0; k < nk; k++) {
                want += sign * (long double)c[r * ldc + k * cs] * X[k * ldx + j];
                bound += fabsl((long double)c[r * ldc + k * cs] * X[k * ldx + j]);
            }
            if (!(fabsl(y1[r * ldy + j] - want) <= 1e-15L * (nk + 1) * bound))
                fail_msg("f64 nr %lld nk %lld w %lld: y[%lld][%lld] %.17g, want %.17Lg", (long long)nr, (long long)nk,
                         (long long)w, (long long)r, (long long)j, y1[r * ldy + j], want);
        }
        for (int64_t j = w; j < ldy; j++) assert_true(y1[r * ldy + j] == y2[r * ldy + j]);
    }
    /* bits: the scalar reference, one row at a time */
    for (int64_t r = 0; r < nr; r++) dsq_rowupd_f64_scalar(1, nk, w, y2 + r * ldy, 0, c + r * ldc, 0, cs, X, ldx, sign);
    assert_memory_equal(y1, y2, ny * sizeof *y1);
    free(c), free(X), free(y1), free(y2);
}

static void f32_case(int64_t nr, int64_t nk, int64_t w, int sign, dsq_cpu_isa isa)
{
    const int64_t cs = 2, ldc = nk * cs + 1, ldx = w + 3, ldy = w + 5;
    const size_t ny = (size_t)(nr * ldy);
    float *c = malloc((size_t)(nr * ldc + 1) * sizeof *c), *X = malloc((size_t)(nk * ldx + 1) * sizeof *X);
    float *y1 = malloc(ny * sizeof *y1), *y2 = malloc(ny * sizeof *y2);
    assert_true(c && X && y1 && y2);
    for (int64_t i = 0; i < nr * ldc + 1; i++) c[i] = (float)dsq_test_randn(&g_seed);
    for (int64_t i = 0; i < nk * ldx + 1; i++) X[i] = (float)dsq_test_randn(&g_seed);
    for (size_t j = 0; j < ny; j++) y1[j] = y2[j] = (float)dsq_test_randn(&g_seed);
    dsq_cpu_set_isa(isa);
    dsq_rowupd_f32(nr, nk, w, y1, ldy, c, ldc, cs, X, ldx, sign);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (int64_t r = 0; r < nr; r++) {
        for (int64_t j = 0; j < w; j++) {
            double want = y2[r * ldy + j], bound = fabs(y2[r * ldy + j]);
            for (int64_t k = 0; k < nk; k++) {
                want += sign * (double)c[r * ldc + k * cs] * X[k * ldx + j];
                bound += fabs((double)c[r * ldc + k * cs] * X[k * ldx + j]);
            }
            if (!(fabs(y1[r * ldy + j] - want) <= 1.2e-7 * (double)(nk + 1) * bound))
                fail_msg("f32 nr %lld nk %lld w %lld: y[%lld][%lld] %.9g, want %.9g", (long long)nr, (long long)nk,
                         (long long)w, (long long)r, (long long)j, y1[r * ldy + j], want);
        }
        for (int64_t j = w; j < ldy; j++) assert_true(y1[r * ldy + j] == y2[r * ldy + j]);
    }
    for (int64_t r = 0; r < nr; r++) dsq_rowupd_f32_scalar(1, nk, w, y2 + r * ldy, 0, c + r * ldc, 0, cs, X, ldx, sign);
    assert_memory_equal(y1, y2, ny * sizeof *y1);
    free(c), free(X), free(y1), free(y2);
}

static void test_paths_agree(void **state)
{
    (void)state;
    static const int64_t nrs[] = {1, 2, 3, 4, 5, 9}, nks[] = {0, 1, 2, 7, 64},
                         ws[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 101, 130};
    if (!dsq_cpu_has_avx2_fma()) print_message("no AVX2+FMA on this CPU: its rows run the scalar path\n");
    if (!dsq_cpu_has(DSQ_CPU_AVX512F)) print_message("no AVX512F on this CPU: the auto rows run AVX2 or scalar\n");
    for (size_t p = 0; p < sizeof g_isas / sizeof *g_isas; p++) {
        print_message("path %s\n", g_isa_names[p]);
        for (size_t a = 0; a < sizeof nrs / sizeof *nrs; a++)
            for (size_t b = 0; b < sizeof nks / sizeof *nks; b++)
                for (size_t d = 0; d < sizeof ws / sizeof *ws; d++) {
                    f64_case(nrs[a], nks[b], ws[d], -1, g_isas[p]);
                    f64_case(nrs[a], nks[b], ws[d], 1, g_isas[p]);
                    f32_case(nrs[a], nks[b], ws[d], -1, g_isas[p]);
                    f32_case(nrs[a], nks[b], ws[d], 1, g_isas[p]);
                }
    }
}

/* The one-row form is the nr = 1 update that subtracts. */
static void test_one_row_form(void **state)
{
    (void)state;
    float c[5], X[5 * 9], y1[9], y2[9];
    for (int i = 0; i < 5; i++) c[i] = (float)dsq_test_randn(&g_seed);
    for (int i = 0; i < 45; i++) X[i] = (float)dsq_test_randn(&g_seed);
    for (int i = 0; i < 9; i++) y1[i] = y2[i] = (float)dsq_test_randn(&g_seed);
    dsq_rowupd_sub_f32(5, 9, y1, c, 1, X, 9);
    dsq_rowupd_f32_scalar(1, 5, 9, y2, 0, c, 0, 1, X, 9, -1);
    assert_memory_equal(y1, y2, sizeof y1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_one_row_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
