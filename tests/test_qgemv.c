/* The decode-path kernels of runtime/cpu/qgemv.h against the scalar
 * references of the quant-type table (quantizers/quants_ref.h), for every
 * type they cover: several row lengths (odd block counts included, for the
 * two-accumulator loops), several rows at a stride, weights and activations
 * with outliers and rows at the extreme levels (the 8-bit products saturate
 * there if a kernel gets the signed/unsigned split wrong), nothing written
 * past the rows asked for; the dispatcher's choices; a linear layer's
 * decode path giving the same answer with the kernels and with the scalar
 * ISA; and the multi-token kernels giving the one-token kernels' bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "quantizers/kquants_ref.h"
#include "quantizers/qtypes.h"
#include "quantizers/quants_ref.h"
#include "kernels/gemm_q8.h"
#include "runtime/cpu/qgemm_i8.h"
#include "runtime/cpu/qgemv.h"
#include "runtime/linear.h"
#include "tests/helpers/testutil.h"

typedef void (*ref_dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct kcase {
    dsq_type t;
    ref_dot_fn ref;
} kcase;

static const kcase g_cases[] = {
    {DSQ_TYPE_Q4_0, dsq_vec_dot_q4_0_q8_0_ref}, {DSQ_TYPE_Q4_1, dsq_vec_dot_q4_1_q8_1_ref},
    {DSQ_TYPE_Q5_0, dsq_vec_dot_q5_0_q8_0_ref}, {DSQ_TYPE_Q5_1, dsq_vec_dot_q5_1_q8_1_ref},
    {DSQ_TYPE_Q8_0, dsq_vec_dot_q8_0_q8_0_ref}, {DSQ_TYPE_IQ4_NL, dsq_vec_dot_iq4_nl_q8_0_ref},
    {DSQ_TYPE_Q2_K, dsq_vec_dot_q2_K_q8_K_ref}, {DSQ_TYPE_Q3_K, dsq_vec_dot_q3_K_q8_K_ref},
    {DSQ_TYPE_Q4_K, dsq_vec_dot_q4_K_q8_K_ref}, {DSQ_TYPE_Q5_K, dsq_vec_dot_q5_K_q8_K_ref},
    {DSQ_TYPE_Q6_K, dsq_vec_dot_q6_K_q8_K_ref}, {DSQ_TYPE_IQ4_XS, dsq_vec_dot_iq4_xs_q8_K_ref},
};

#define NROWS 6

static uint64_t g_seed = 0x7165676d76ull;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static size_t nbytes(dsq_type t, int64_t n)
{
    uint64_t b = 0;
    assert_int_equal(dsq_type_nbytes(t, (uint64_t)n, &b), DSQ_OK);
    return (size_t)b;
}

/* Row r of the weights: r 0: all +-big (extreme levels), r 1: N(0,1) with
 * outliers, others N(0, 1/(r+1)) so the scales differ between rows. */
static void fill_weights(float *w, int64_t n, int r)
{
    for (int64_t i = 0; i < n; i++) {
        float v = dsq_test_randn(&g_seed);
        if (r == 0)
            v = (i % 3 ? 4.0f : -4.0f);
        else if (r == 1 && i % 37 == 5)
            v *= 25.0f;
        else
            v /= (float)(r + 1);
        w[i] = v;
    }
}

static void check_type(const kcase *kc, int64_t n)
{
    dsq_type at = dsq_qtype_get(kc->t)->vec_dot_type;
    size_t rb = nbytes(kc->t, n), ab = nbytes(at, n);
    float *wf = xmalloc((size_t)n * NROWS * sizeof *wf), *xf = xmalloc((size_t)n * sizeof *xf);
    for (int r = 0; r < NROWS; r++) fill_weights(wf + (size_t)r * n, n, r);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: N(0,1) activations with outliers; pass 1: all at +-amax (every level +-127) */
        for (int64_t i = 0; i < n; i++)
            xf[i] = pass ? (i % 2 ? 3.0f : -3.0f) : dsq_test_randn(&g_seed) * (i % 53 == 7 ? 20 : 1);
        uint8_t *wq = xmalloc(rb * NROWS), *act = xmalloc(ab);
        assert_int_equal(dsq_quantize(kc->t, wf, wq, NROWS, n, NULL), DSQ_OK);
        assert_int_equal(dsq_quantize(at, xf, act, 1, n, NULL), DSQ_OK);
        float *wd = xmalloc((size_t)n * NROWS * sizeof *wd), *xd = xmalloc((size_t)n * sizeof *xd);
        assert_int_equal(dsq_dequantize(kc->t, wq, wd, NROWS, n), DSQ_OK);
        assert_int_equal(dsq_dequantize(at, act, xd, 1, n), DSQ_OK);
        dsq_qgemv_fn kern = dsq_qgemv_kernel(kc->t);
        assert_non_null(kern);
        float y[NROWS + 1];
        for (int r = 0; r <= NROWS; r++) y[r] = -12345.0f;
        kern(n, wq, rb, NROWS - 1, act, y); /* all rows but the last */
        assert_true(y[NROWS - 1] == -12345.0f && y[NROWS] == -12345.0f);
        kern(n, wq + rb * (NROWS - 1), rb, 1, act, y + NROWS - 1);
        for (int r = 0; r < NROWS; r++) {
            float want;
            kc->ref(n, &want, wq + rb * (size_t)r, act);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[(size_t)r * n + i] * xd[i]);
            /* Q8_1 carries d * sum(q) rounded to F16 on its own: both sides use it, so the same bound holds */
            double tol = 2e-6 * mag + 1e-6;
            if (!(fabs((double)y[r] - want) <= tol))
                fail_msg("%s n=%lld row %d pass %d: kernel %.9g, reference %.9g (tolerance %.3g)", dsq_type_name(kc->t),
                         (long long)n, r, pass, y[r], want, tol);
        }
        free(wq), free(act), free(wd), free(xd);
    }
    free(wf), free(xf);
}

/* The kernels are never used on a CPU without them: a skip, not a failure. */
#define REQUIRE_AVX2()                                                                                                 \
    do {                                                                                                               \
        if (!dsq_cpu_has_avx2()) DSQ_TEST_SKIP_ENV("this CPU has no AVX2/FMA/F16C; the kernels are never used here");  \
    } while (0)

static void test_kernels_match_reference(void **state)
{
    (void)state;
    REQUIRE_AVX2();
    for (size_t c = 0; c < sizeof g_cases / sizeof *g_cases; c++) {
        bool k = dsq_type_get((int)g_cases[c].t)->block_elems == 256;
        const int64_t sizes_k[] = {256, 768, 4096}, sizes_l[] = {32, 96, 576, 4096};
        const int64_t *sizes = k ? sizes_k : sizes_l;
        int ns = k ? 3 : 4;
        for (int s = 0; s < ns; s++) check_type(&g_cases[c], sizes[s]);
    }
}

static void test_dispatch(void **state)
{
    (void)state;
    REQUIRE_AVX2();
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    for (size_t c = 0; c < sizeof g_cases / sizeof *g_cases; c++) assert_non_null(dsq_qgemv_kernel(g_cases[c].t));
    /* no kernel for dense types, activation types or types without one */
    assert_null(dsq_qgemv_kernel(DSQ_TYPE_F32));
    assert_null(dsq_qgemv_kernel(DSQ_TYPE_BF16));
    assert_null(dsq_qgemv_kernel(DSQ_TYPE_Q8_K));
    assert_null(dsq_qgemv_kernel(DSQ_TYPE_IQ2_XXS));
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_null(dsq_qgemv_kernel(DSQ_TYPE_Q4_K));
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* runtime/linear.c really takes the kernels: with the scalar ISA forced the
 * decode path falls back to the table's vec_dot and must agree. */
static void test_linear_decode_path(void **state)
{
    (void)state;
    REQUIRE_AVX2();
    const int64_t out = 41, in = 512;
    const int ntok = 3;
    const dsq_type types[] = {DSQ_TYPE_Q4_1, DSQ_TYPE_Q5_0, DSQ_TYPE_Q4_K, DSQ_TYPE_Q6_K};
    float *wf = xmalloc((size_t)out * in * sizeof *wf), *x = xmalloc((size_t)ntok * in * sizeof *x);
    for (int64_t i = 0; i < out * in; i++) wf[i] = 0.05f * dsq_test_randn(&g_seed);
    for (int64_t i = 0; i < ntok * in; i++) x[i] = dsq_test_randn(&g_seed);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        void *wq = xmalloc(nbytes(types[k], out * in));
        assert_int_equal(dsq_quantize(types[k], wf, wq, out, in, NULL), DSQ_OK);
        dsq_linear W;
        assert_int_equal(dsq_linear_init(&W, types[k], wq, out, in), DSQ_OK);
        float y[2][3 * 41];
        for (int v = 0; v < 2; v++) {
            dsq_cpu_set_isa(v ? DSQ_CPU_ISA_SCALAR : DSQ_CPU_ISA_AUTO);
            assert_int_equal(dsq_linear_forward_gemv(&W, x, y[v], ntok), DSQ_OK);
        }
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        for (int i = 0; i < ntok * out; i++)
            if (fabsf(y[0][i] - y[1][i]) > 1e-4f * (1 + fabsf(y[1][i])))
                fail_msg("%s: row %d: kernel %g, vec_dot %g", dsq_type_name(types[k]), i, y[0][i], y[1][i]);
        dsq_linear_release(&W);
        free(wq);
    }
    free(wf), free(x);
}

/* The multi-token kernels give the one-token kernel's bits for every
 * (row, token): directly, for 1 to DSQ_QGEMM_TOKENS tokens with strided
 * activations and outputs, and through a linear's decode path for token
 * counts that leave a single token, a partial group, or whole groups (each
 * token's product against the same product computed alone). */
/* The largest difference between two rows of n outputs, relative to the
 * largest |b|: a summation-order bound. */
static double row_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

static void test_multi_token_bits(void **state)
{
    (void)state;
    REQUIRE_AVX2();
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    const dsq_type types[] = {DSQ_TYPE_Q8_0, DSQ_TYPE_Q4_0, DSQ_TYPE_Q5_0, DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q4_K};
    const int64_t out = 37, ins[] = {800, 800, 800, 800, 768}; /* 25 blocks of 32 (pairs and a last one), 3 of 256 */
    enum { NTOK = 9 };
    float *wf = xmalloc((size_t)out * 800 * sizeof *wf), *x = xmalloc((size_t)NTOK * 800 * sizeof *x);
    for (int64_t i = 0; i < out * 800; i++) wf[i] = 0.05f * dsq_test_randn(&g_seed) * (i % 97 == 0 ? 12.0f : 1.0f);
    for (int64_t i = 0; i < NTOK * 800; i++) x[i] = dsq_test_randn(&g_seed) * (i % 53 == 0 ? 20.0f : 1.0f);
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        const int64_t in = ins[k];
        const dsq_type t = types[k], at = dsq_qtype_get(t)->vec_dot_type;
        void *wq = xmalloc(nbytes(t, out * in));
        assert_int_equal(dsq_quantize(t, wf, wq, out, in, NULL), DSQ_OK);
        const size_t ab = nbytes(at, in), rb = nbytes(t, in);
        uint8_t *act = xmalloc(ab * NTOK);
        for (int j = 0; j < NTOK; j++) dsq_qtype_get(at)->quantize_row(x + j * in, act + ab * j, in, NULL);
        dsq_qgemv_fn one = dsq_qgemv_kernel(t);
        dsq_qgemm_fn multi = dsq_qgemm_kernel(t);
        assert_non_null(one);
        assert_non_null(multi);
        for (int nt = 1; nt <= DSQ_QGEMM_TOKENS; nt++) {
            float ym[DSQ_QGEMM_TOKENS * 40], y1[40];
            memset(ym, 0xff, sizeof ym);
            multi(in, wq, rb, out, act + ab, ab, nt, ym, 40);
            for (int j = 0; j < nt; j++) {
                one(in, wq, rb, out, act + ab * (1 + j), y1);
                if (memcmp(ym + j * 40, y1, (size_t)out * sizeof *y1))
                    fail_msg("%s: %d tokens, token %d differs from the one-token kernel", dsq_type_name(t), nt, j);
                for (int r = out; r < 40; r++) assert_true(isnan(ym[j * 40 + r])); /* nothing past the rows */
            }
        }
        dsq_linear W;
        assert_int_equal(dsq_linear_init(&W, t, wq, out, in), DSQ_OK);
        float *y = xmalloc((size_t)NTOK * out * sizeof *y), y1[37];
        const int counts[] = {2, 5, 8, 9};
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            assert_int_equal(dsq_linear_forward_gemv(&W, x, y, counts[c]), DSQ_OK);
            /* batches of the Q8_0-paired types take the int8 GEMM: the same
             * sums, added in another order (test_int8_batches) */
            bool int8 = counts[c] > DSQ_LINEAR_GEMV_MAX_TOKENS && dsq_qgemm_i8_type(t) && dsq_gemm_q8_simd();
            for (int j = 0; j < counts[c]; j++) {
                assert_int_equal(dsq_linear_forward_gemv(&W, x + j * in, y1, 1), DSQ_OK);
                if (int8 ? row_diff(y + j * out, y1, out) > 1e-5 : memcmp(y + j * out, y1, sizeof y1) != 0)
                    fail_msg("%s: %d tokens: token %d differs from its product alone", dsq_type_name(t), counts[c], j);
            }
        }
        dsq_linear_release(&W);
        free(y), free(act), free(wq);
    }
    assert_null(dsq_qgemm_kernel(DSQ_TYPE_Q6_K));
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_null(dsq_qgemm_kernel(DSQ_TYPE_Q8_0));
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    free(wf), free(x);
}

/* dsq_linear_q8_pack: Q8_0 only, and only where the kernel runs; the packed
 * copy gives the per-call packing's bits (each row's sum runs over the blocks
 * in order on every tiling), for a batch and for each decode step alone. y
 * holds the unpacked int8 batch of NTOK tokens on entry. */
static void check_packed(dsq_linear *W, const float *x, float *y, bool scalar)
{
    enum { NTOK = 300 };
    assert_int_equal(dsq_linear_q8_pack(W), DSQ_OK);
    bool expect = W->type == DSQ_TYPE_Q8_0 && !scalar && dsq_gemm_q8_simd();
    if (expect != (W->q8_packed != NULL))
        fail_msg("%s: packed %d, expected %d", dsq_type_name(W->type), W->q8_packed != NULL, expect);
    if (!W->q8_packed) return;
    float *yp = xmalloc((size_t)NTOK * W->out * sizeof *yp), y1[70];
    assert_int_equal(dsq_linear_forward_int8act(W, x, yp, NTOK), DSQ_OK);
    if (memcmp(yp, y, (size_t)NTOK * W->out * sizeof *y)) fail_msg("q8_0: the packed batch differs from the per-call one");
    for (int j = 0; j < NTOK; j += 37) {
        assert_int_equal(dsq_linear_forward_gemv(W, x + (int64_t)j * W->in, y1, 1), DSQ_OK);
        if (memcmp(y1, y + (int64_t)j * W->out, (size_t)W->out * sizeof *y1))
            fail_msg("q8_0: the packed decode step of token %d differs from its batch row", j);
    }
    free(yp);
}

/* dsq_linear_forward_int8act: batches of the Q8_0-paired types give each
 * token's decode-path product (the int8 GEMM where the CPU has it: within a
 * summation-order bound; with the scalar ISA forced: the decode path itself,
 * bit for bit), across the kernel's token blocks (300 tokens) and a row
 * count off its 32-row panels, with a bias; they differ from the F32-activation
 * batch; every other type is the F32-activation batch exactly. */
static void test_int8_batches(void **state)
{
    (void)state;
    const dsq_type types[] = {DSQ_TYPE_Q8_0, DSQ_TYPE_Q4_0, DSQ_TYPE_Q5_0, DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q4_K};
    const int64_t out = 70, in = 768;
    enum { NTOK = 300 };
    float *wf = xmalloc((size_t)out * in * sizeof *wf), *x = xmalloc((size_t)NTOK * in * sizeof *x);
    float *y = xmalloc((size_t)NTOK * out * sizeof *y), *yg = xmalloc((size_t)NTOK * out * sizeof *yg), bias[70];
    for (int64_t i = 0; i < out * in; i++) wf[i] = 0.05f * dsq_test_randn(&g_seed) * (i % 97 == 0 ? 12.0f : 1.0f);
    for (int64_t i = 0; i < NTOK * in; i++) x[i] = dsq_test_randn(&g_seed) * (i % 53 == 0 ? 20.0f : 1.0f);
    for (int r = 0; r < out; r++) bias[r] = 0.1f * (float)(r % 7) - 0.3f;
    if (!dsq_gemm_q8_simd()) fprintf(stderr, "SKIP: int8 GEMM kernel: this CPU has no AVX512 F/BW/VNNI (the scalar ISA case still runs)\n");
    for (int isa = 0; isa < 2; isa++) {
        dsq_cpu_set_isa(isa ? DSQ_CPU_ISA_SCALAR : DSQ_CPU_ISA_AUTO);
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
            const dsq_type t = types[k];
            void *wq = xmalloc(nbytes(t, out * in));
            assert_int_equal(dsq_quantize(t, wf, wq, out, in, NULL), DSQ_OK);
            dsq_linear W;
            assert_int_equal(dsq_linear_init(&W, t, wq, out, in), DSQ_OK);
            assert_int_equal(dsq_linear_set_bias(&W, DSQ_TYPE_F32, bias, out), DSQ_OK);
            const int counts[] = {8, 13, NTOK};
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                const int n = counts[c];
                assert_int_equal(dsq_linear_forward_int8act(&W, x, y, n), DSQ_OK);
                assert_int_equal(dsq_linear_forward_gemm(&W, x, yg, n), DSQ_OK);
                if (!dsq_qgemm_i8_type(t)) {
                    if (memcmp(y, yg, (size_t)n * out * sizeof *y))
                        fail_msg("%s: int8act differs from the F32 batch for a type it does not cover", dsq_type_name(t));
                    continue;
                }
                double d_f32 = 0;
                for (int j = 0; j < n; j++) {
                    float y1[70];
                    assert_int_equal(dsq_linear_forward_gemv(&W, x + (int64_t)j * in, y1, 1), DSQ_OK);
                    double d = row_diff(y + (int64_t)j * out, y1, out);
                    if (isa ? d != 0 : d > 1e-5)
                        fail_msg("%s%s: %d tokens: token %d is %g from its decode product", dsq_type_name(t),
                                 isa ? " (scalar ISA)" : "", n, j, d);
                    d_f32 = fmax(d_f32, row_diff(y + (int64_t)j * out, yg + (int64_t)j * out, out));
                }
                if (!(d_f32 > 1e-4)) /* the activations really were rounded */
                    fail_msg("%s: %d tokens: int8act equals the F32 batch (%g)", dsq_type_name(t), n, d_f32);
            }
            check_packed(&W, x, y, isa != 0);
            dsq_linear_release(&W);
            free(wq);
        }
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    assert_false(dsq_qgemm_i8_type(DSQ_TYPE_Q4_1)); /* Q8_1 activations */
    assert_false(dsq_qgemm_i8_type(DSQ_TYPE_Q6_K));
    free(wf), free(x), free(y), free(yg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_match_reference),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_linear_decode_path),
        cmocka_unit_test(test_multi_token_bits),
        cmocka_unit_test(test_int8_batches),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
