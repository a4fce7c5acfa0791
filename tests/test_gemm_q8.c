/* The block-scaled int8 GEMM (kernels/gemm_q8.h): the packed paths (the
 * AVX512-VNNI kernel where the CPU has it, and the scalar loop over the same
 * panels) against the unpacked reference bit for bit, on token counts across
 * the kernel's 6-token tiles, row counts on and off the 32-row panels (the
 * masked stores), several block counts, padded leading dimensions, scales of
 * both signs, and the extreme codes (-128 against -128 and 127: the largest
 * sums and the offset correction at its limits). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu.h"
#include "kernels/gemm_q8.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x9a8c0de5ull;

static void fill_codes(int8_t *p, size_t n, bool extreme)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = dsq_test_rand(&g_seed);
        p[i] = extreme ? ((r >> 9) % 3 ? -128 : 127) : (int8_t)(r >> 16);
    }
}

static void fill_scales(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = dsq_test_randn(&g_seed) * 0.01f;
}

/* m tokens x nr rows x k columns on the current dispatch; returns whether it
 * matched the reference (it fails the case itself otherwise). */
static void check_shape(int64_t m, int64_t nr, int64_t k, bool extreme, const char *path)
{
    int64_t nb = k / DSQ_GEMM_Q8_BLOCK, lda = k + 7, ldw = k + 3, ldd = nb + 2, ldy = nr + 5;
    int8_t *A = malloc((size_t)(m * lda)), *W = malloc((size_t)(nr * ldw));
    float *da = malloc((size_t)(m * ldd) * sizeof *da), *dw = malloc((size_t)(nr * ldd) * sizeof *dw);
    int32_t *sa = malloc((size_t)(m * ldd) * sizeof *sa);
    float *y = malloc((size_t)(m * ldy) * sizeof *y), *r = malloc((size_t)(m * nr) * sizeof *r);
    void *P = aligned_alloc(64, (dsq_gemm_q8_packed_bytes(nr, k) + 63) & ~(size_t)63);
    assert_true(A && W && da && dw && sa && y && r && P);
    fill_codes(A, (size_t)(m * lda), extreme);
    fill_codes(W, (size_t)(nr * ldw), extreme);
    fill_scales(da, (size_t)(m * ldd));
    fill_scales(dw, (size_t)(nr * ldd));
    for (int64_t t = 0; t < m; t++) dsq_gemm_q8_block_sums(A + t * lda, k, sa + t * ldd);
    dsq_gemm_q8_ref(m, nr, k, A, lda, da, ldd, W, ldw, dw, ldd, r, nr);
    dsq_gemm_q8_pack(nr, k, W, ldw, dw, ldd, P);
    for (int64_t i = 0; i < m * ldy; i++) y[i] = -7.0f; /* the columns past nr must keep it */
    dsq_gemm_q8(m, nr, k, A, lda, da, sa, ldd, P, y, ldy);
    for (int64_t t = 0; t < m; t++) {
        for (int64_t j = 0; j < nr; j++)
            if (memcmp(&y[t * ldy + j], &r[t * nr + j], sizeof(float)))
                fail_msg("%s m=%lld nr=%lld k=%lld%s: y[%lld][%lld] = %.9g, reference %.9g", path, (long long)m,
                         (long long)nr, (long long)k, extreme ? " (extreme codes)" : "", (long long)t, (long long)j,
                         (double)y[t * ldy + j], (double)r[t * nr + j]);
        for (int64_t j = nr; j < ldy; j++)
            if (y[t * ldy + j] != -7.0f)
                fail_msg("%s m=%lld nr=%lld: wrote past row %lld", path, (long long)m, (long long)nr, (long long)nr);
    }
    free(A), free(W), free(da), free(dw), free(sa), free(y), free(r), free(P);
}

static void sweep(const char *path)
{
    static const int64_t ms[] = {1, 2, 5, 6, 7, 12, 13};
    static const int64_t nrs[] = {1, 15, 16, 17, 31, 32, 33, 70, 128, 161};
    static const int64_t ks[] = {32, 64, 96, 576};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof nrs / sizeof *nrs; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) check_shape(ms[a], nrs[b], ks[c], false, path);
    check_shape(7, 40, 1536, true, path);
    check_shape(6, 32, 64, true, path);
}

static void test_simd(void **state)
{
    (void)state;
    if (!dsq_gemm_q8_simd()) DSQ_TEST_SKIP_ENV("block-scaled int8 GEMM: this CPU has no AVX512 F/BW/VNNI");
    sweep("avx512_vnni");
}

/* The scalar path reads the same panels: run everywhere, it checks the packing. */
static void test_scalar(void **state)
{
    (void)state;
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_false(dsq_gemm_q8_simd());
    sweep("scalar");
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* The definition itself on a case small enough to write down: one token, one
 * row, two blocks; the reference must add block 0 then block 1 by FMA. */
static void test_reference_by_hand(void **state)
{
    (void)state;
    int8_t a[64], w[64];
    for (int i = 0; i < 64; i++) a[i] = (int8_t)(i < 32 ? 1 : -2), w[i] = (int8_t)(i < 32 ? 3 : 5);
    float da[2] = {0.5f, 0.25f}, dw[2] = {2.0f, -1.0f}, y = 0;
    dsq_gemm_q8_ref(1, 1, 64, a, 64, da, 2, w, 64, dw, 2, &y, 1);
    /* block 0: 32 * 3 = 96, scale 1 -> 96; block 1: 32 * -10 = -320, scale -0.25 -> 80 */
    assert_true(y == 176.0f);
    int32_t s[2];
    dsq_gemm_q8_block_sums(a, 64, s);
    assert_int_equal(s[0], 32);
    assert_int_equal(s[1], -64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_by_hand),
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_simd),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
