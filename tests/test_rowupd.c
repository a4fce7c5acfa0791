/* The rank-k row updates (kernels/rowupd.h): the AVX512 path gives the
 * scalar loop's bits for every width around its 8/16-lane and 32/64-element
 * blocks, strided coefficients, both signs, and leaves y past w untouched;
 * the scalar path is held to a double-precision sum. */
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

static void f64_case(int64_t nk, int64_t w, int sign, bool simd)
{
    const int64_t cs = 3, ldx = w + 5, pad = 4;
    double *c = malloc((size_t)(nk * cs + 1) * sizeof *c), *X = malloc((size_t)(nk * ldx + 1) * sizeof *X);
    double *y1 = malloc((size_t)(w + pad) * sizeof *y1), *y2 = malloc((size_t)(w + pad) * sizeof *y2);
    assert_non_null(c);
    assert_non_null(X);
    assert_non_null(y1);
    assert_non_null(y2);
    for (int64_t i = 0; i < nk * cs + 1; i++) c[i] = dsq_test_randn(&g_seed);
    for (int64_t i = 0; i < nk * ldx + 1; i++) X[i] = dsq_test_randn(&g_seed);
    for (int64_t j = 0; j < w + pad; j++) y1[j] = y2[j] = dsq_test_randn(&g_seed);
    dsq_cpu_set_isa(simd ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
    if (sign < 0) dsq_rowupd_sub_f64(nk, w, y1, c, cs, X, ldx);
    else dsq_rowupd_add_f64(nk, w, y1, c, cs, X, ldx);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (int64_t j = 0; j < w; j++) {
        double want = y2[j], bound = fabs(y2[j]);
        for (int64_t k = 0; k < nk; k++) {
            want += sign * c[k * cs] * X[k * ldx + j];
            bound += fabs(c[k * cs] * X[k * ldx + j]);
        }
        if (!(fabs(y1[j] - want) <= 1e-14 * bound)) fail_msg("f64 nk %lld w %lld: y[%lld] %.17g, want %.17g", (long long)nk, (long long)w, (long long)j, y1[j], want);
    }
    for (int64_t j = w; j < w + pad; j++) assert_true(y1[j] == y2[j]);
    /* bits: the same update through the scalar reference */
    dsq_rowupd_f64_scalar(nk, w, y2, c, cs, X, ldx, sign);
    assert_memory_equal(y1, y2, (size_t)(w + pad) * sizeof *y1);
    free(c), free(X), free(y1), free(y2);
}

static void f32_case(int64_t nk, int64_t w, bool simd)
{
    const int64_t cs = 2, ldx = w + 3, pad = 5;
    float *c = malloc((size_t)(nk * cs + 1) * sizeof *c), *X = malloc((size_t)(nk * ldx + 1) * sizeof *X);
    float *y1 = malloc((size_t)(w + pad) * sizeof *y1), *y2 = malloc((size_t)(w + pad) * sizeof *y2);
    assert_non_null(c);
    assert_non_null(X);
    assert_non_null(y1);
    assert_non_null(y2);
    for (int64_t i = 0; i < nk * cs + 1; i++) c[i] = dsq_test_randn(&g_seed);
    for (int64_t i = 0; i < nk * ldx + 1; i++) X[i] = dsq_test_randn(&g_seed);
    for (int64_t j = 0; j < w + pad; j++) y1[j] = y2[j] = dsq_test_randn(&g_seed);
    dsq_cpu_set_isa(simd ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
    dsq_rowupd_sub_f32(nk, w, y1, c, cs, X, ldx);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (int64_t j = 0; j < w; j++) {
        double want = y2[j], bound = fabs(y2[j]);
        for (int64_t k = 0; k < nk; k++) {
            want -= (double)c[k * cs] * X[k * ldx + j];
            bound += fabs((double)c[k * cs] * X[k * ldx + j]);
        }
        if (!(fabs(y1[j] - want) <= 2e-6 * bound)) fail_msg("f32 nk %lld w %lld: y[%lld] %.9g, want %.9g", (long long)nk, (long long)w, (long long)j, y1[j], want);
    }
    for (int64_t j = w; j < w + pad; j++) assert_true(y1[j] == y2[j]);
    dsq_rowupd_sub_f32_scalar(nk, w, y2, c, cs, X, ldx);
    assert_memory_equal(y1, y2, (size_t)(w + pad) * sizeof *y1);
    free(c), free(X), free(y1), free(y2);
}

static void test_paths_agree(void **state)
{
    (void)state;
    static const int64_t nks[] = {0, 1, 2, 7, 64}, ws[] = {0, 1, 7, 8, 9, 16, 31, 32, 33, 63, 64, 65, 130};
    bool simd = dsq_cpu_has(DSQ_CPU_AVX512F);
    if (!simd) print_message("no AVX512F on this CPU: only the scalar rows are checked\n");
    for (int s = 0; s < (simd ? 2 : 1); s++)
        for (size_t a = 0; a < sizeof nks / sizeof *nks; a++)
            for (size_t b = 0; b < sizeof ws / sizeof *ws; b++) {
                f64_case(nks[a], ws[b], -1, s == 1);
                f64_case(nks[a], ws[b], 1, s == 1);
                f32_case(nks[a], ws[b], s == 1);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
