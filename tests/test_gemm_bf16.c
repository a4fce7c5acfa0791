/* The BF16 GEMM (kernels/gemm_bf16.h) and the linear path on it: both
 * kernels against a double-precision product of the BF16-rounded operands
 * (so a kernel that skipped the rounding, dropped a k pair or mis-packed a
 * panel fails), every edge of the blocking (rows not a multiple of 8, columns
 * not a multiple of 32, odd depths, depths across the 256-wide K blocks,
 * accumulate), B packed once against B packed per call (same bits),
 * round-to-nearest-even on ties, dsq_linear_forward_bf16
 * against the F32 path on dense and quantized storage, and the polynomial
 * exp of the BF16 softmax against exp(). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "kernels/vec.h"
#include "quantizers/qtypes.h"
#include "runtime/cpu/ops.h"
#include "runtime/linear.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0xbf16bf16ull;

static float *randm(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = scale * dsq_test_randn(&g_seed);
    return x;
}

static double r16(float v) { return (double)dsq_bf16_to_f32(dsq_f32_to_bf16(v)); }

static void gemm_case(dsq_gemm_bf16_path path, dsq_gemm_b bl, int m, int n, int k, bool acc)
{
    int64_t lda = dsq_gemm_bf16_lda(k) + 4, ldb = (bl == DSQ_GEMM_BT ? k : n) + 3, ldc = n + 2;
    int brows = bl == DSQ_GEMM_BT ? n : k;
    float *Af = randm((size_t)m * (size_t)k, 1), *B = randm((size_t)brows * (size_t)ldb, 1);
    float *C = randm((size_t)m * (size_t)ldc, 1), *C0 = malloc((size_t)m * (size_t)ldc * sizeof *C0);
    uint16_t *A = malloc((size_t)m * (size_t)lda * sizeof *A);
    assert_non_null(C0);
    assert_non_null(A);
    memcpy(C0, C, (size_t)m * (size_t)ldc * sizeof *C0);
    dsq_gemm_bf16_round_rows(Af, k, m, k, A, lda);
    for (int i = 0; i < m; i++)
        for (int64_t p = k; p < lda; p++) assert_int_equal(A[i * lda + p], 0);
    void *scratch = aligned_alloc(64, (dsq_gemm_bf16_scratch_bytes(n, k) + 63) & ~(size_t)63);
    assert_non_null(scratch);
    dsq_gemm_bf16_on(path, bl, m, n, k, A, lda, B, ldb, C, ldc, acc, scratch);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = acc ? (double)C0[i * ldc + j] : 0, bound = fabs(s);
            for (int p = 0; p < k; p++) {
                double bv = bl == DSQ_GEMM_BT ? B[j * ldb + p] : B[p * ldb + j];
                double t = r16(Af[i * k + p]) * r16((float)bv);
                s += t;
                bound += fabs(t);
            }
            double err = fabs((double)C[i * ldc + j] - s);
            if (err > 2e-6 * bound + 1e-30)
                fail_msg("%s bl %d m %d n %d k %d acc %d: C[%d,%d] = %.9g, want %.9g", dsq_gemm_bf16_path_name(path),
                         bl, m, n, k, acc, i, j, C[i * ldc + j], s);
        }
        for (int j = n; j < ldc; j++) assert_true(C[i * ldc + j] == C0[i * ldc + j]); /* nothing past n */
    }
    free(Af), free(B), free(C), free(C0), free(A), free(scratch);
}

/* Every path the CPU has, against the double product; the AMX cases include
 * token counts around its 16- and 32-row tiles and depths that are not whole
 * 16-pair steps (the padded A copy). */
static void test_gemm_bf16_matches_reference(void **state)
{
    (void)state;
    static const int ms[] = {1, 7, 8, 9, 16, 21, 33, 64}, ns[] = {1, 16, 31, 32, 33, 70},
                     ks[] = {1, 2, 3, 31, 32, 255, 256, 257, 600};
    for (int path = 0; path < DSQ_GEMM_BF16_N_PATHS; path++) {
        if (!dsq_gemm_bf16_path_available((dsq_gemm_bf16_path)path)) {
            print_message("no %s on this CPU: that path is not checked here\n",
                          dsq_gemm_bf16_path_name((dsq_gemm_bf16_path)path));
            continue;
        }
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
                for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                    for (int bl = 0; bl < 2; bl++)
                        for (int acc = 0; acc < 2; acc++)
                            gemm_case((dsq_gemm_bf16_path)path, (dsq_gemm_b)bl, ms[a], ns[b], ks[c], acc);
    }
}

/* B packed once (what a calibration pass multiplies) gives dsq_gemm_bf16's
 * bits on the same path: column ranges inside the packed B, token counts
 * around the AMX tiles, depths past the 16 K blocks the AMX path keeps C in
 * its tiles across, odd depths (the padded A), accumulate. */
static void packed_case(int m, int n_all, int c0, int n, int k, bool acc)
{
    int64_t lda = dsq_gemm_bf16_lda(k) + 2, ldb = k + 3, ldc = n + 1;
    float *Af = randm((size_t)m * (size_t)k, 1), *B = randm((size_t)n_all * (size_t)ldb, 1);
    float *C1 = randm((size_t)m * (size_t)ldc, 1), *C2 = malloc((size_t)m * (size_t)ldc * sizeof *C2);
    uint16_t *A = malloc((size_t)m * (size_t)lda * sizeof *A);
    uint16_t *P = aligned_alloc(64, (dsq_gemm_bf16_packed_bytes(n_all, k) + 63) & ~(size_t)63);
    void *scratch = aligned_alloc(64, (dsq_gemm_bf16_scratch_bytes(n_all, k) + 63) & ~(size_t)63);
    assert_true(C2 && A && P && scratch);
    memcpy(C2, C1, (size_t)m * (size_t)ldc * sizeof *C2);
    dsq_gemm_bf16_round_rows(Af, k, m, k, A, lda);
    dsq_gemm_bf16_pack_all(n_all, k, B, ldb, 0, n_all, P);
    dsq_gemm_bf16_packed(m, n_all, c0, n, k, A, lda, P, C1, ldc, acc, scratch);
    dsq_gemm_bf16(DSQ_GEMM_BT, m, n, k, A, lda, B + (size_t)c0 * (size_t)ldb, ldb, C2, ldc, acc, scratch);
    if (memcmp(C1, C2, (size_t)m * (size_t)ldc * sizeof *C1) != 0)
        fail_msg("packed %s m %d n_all %d c0 %d n %d k %d acc %d: bits differ from the per-call packing",
                 dsq_gemm_bf16_path_name(dsq_gemm_bf16_path_for(m)), m, n_all, c0, n, k, acc);
    free(Af), free(B), free(C1), free(C2), free(A), free(P), free(scratch);
}

static void test_packed_equals_per_call(void **state)
{
    (void)state;
    /* 300 tokens: a whole group of row blocks, one more block and a partial one;
     * 768 deep: unpadded K blocks in a whole chunk and a partial one */
    static const int ms[] = {1, 16, 20, 32, 33, 70, 300}, ks[] = {1, 31, 256, 600, 768, 4097 + 256};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
            for (int acc = 0; acc < 2; acc++) {
                /* past 16 K blocks: two token counts suffice (the depth loop is the same for all) */
                if (ks[c] > 4096 && ms[a] != 20 && ms[a] != 33) continue;
                if (ms[a] == 300 && ks[c] != 256 && ks[c] != 768) continue;
                packed_case(ms[a], 96, 0, 96, ks[c], acc);
                packed_case(ms[a], 130, 64, 66, ks[c], acc); /* the last columns, a partial panel */
                packed_case(ms[a], 130, 32, 32, ks[c], acc); /* one panel in the middle */
            }
    print_message("packed B checked on the %s path (16+ tokens) and %s (fewer)\n",
                  dsq_gemm_bf16_path_name(dsq_gemm_bf16_path_for(16)),
                  dsq_gemm_bf16_path_name(dsq_gemm_bf16_path_for(1)));
}

/* dsq_gemm_bf16 takes AMX from 16 rows where it runs, AVX512-BF16 below. */
static void test_path_choice(void **state)
{
    (void)state;
    if (!dsq_cpu_has_avx512bf16()) {
        assert_int_equal(dsq_gemm_bf16_path_for(64), dsq_cpu_has_avx2() ? DSQ_GEMM_BF16_AVX2 : DSQ_GEMM_BF16_SCALAR);
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR); /* masked off: the AVX2 copy never runs */
        assert_int_equal(dsq_gemm_bf16_path_for(64), DSQ_GEMM_BF16_SCALAR);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        return;
    }
    bool amx = dsq_gemm_bf16_path_available(DSQ_GEMM_BF16_AMX);
    assert_int_equal(dsq_gemm_bf16_path_for(15), DSQ_GEMM_BF16_AVX512);
    assert_int_equal(dsq_gemm_bf16_path_for(16), amx ? DSQ_GEMM_BF16_AMX : DSQ_GEMM_BF16_AVX512);
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    assert_int_equal(dsq_gemm_bf16_path_for(64), DSQ_GEMM_BF16_SCALAR);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* The AVX512-BF16 and AVX2 kernels give the scalar kernel's bits on every edge of the
 * blocking (the AMX path has no bit-level reference: kernels/gemm_bf16.h). */
static void path_case(dsq_gemm_bf16_path fast, dsq_gemm_bf16_path ref, dsq_gemm_b bl, int m, int n, int k, bool acc)
{
    int64_t lda = dsq_gemm_bf16_lda(k) + 2, ldb = (bl == DSQ_GEMM_BT ? k : n) + 1, ldc = n + 3;
    int brows = bl == DSQ_GEMM_BT ? n : k;
    float *Af = randm((size_t)m * (size_t)k, 1), *B = randm((size_t)brows * (size_t)ldb, 1);
    float *C1 = randm((size_t)m * (size_t)ldc, 1), *C2 = malloc((size_t)m * (size_t)ldc * sizeof *C2);
    uint16_t *A = malloc((size_t)m * (size_t)lda * sizeof *A);
    void *scratch = aligned_alloc(64, (dsq_gemm_bf16_scratch_bytes(n, k) + 63) & ~(size_t)63);
    assert_non_null(C2);
    assert_non_null(A);
    assert_non_null(scratch);
    memcpy(C2, C1, (size_t)m * (size_t)ldc * sizeof *C2);
    dsq_gemm_bf16_round_rows(Af, k, m, k, A, lda);
    dsq_gemm_bf16_on(fast, bl, m, n, k, A, lda, B, ldb, C1, ldc, acc, scratch);
    dsq_gemm_bf16_on(ref, bl, m, n, k, A, lda, B, ldb, C2, ldc, acc, scratch);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++)
            if (memcmp(&C1[i * ldc + j], &C2[i * ldc + j], sizeof *C1))
                fail_msg("%s vs %s, bl %d m %d n %d k %d acc %d: C[%d,%d] = %.9g, reference %.9g",
                         dsq_gemm_bf16_path_name(fast), dsq_gemm_bf16_path_name(ref), bl, m, n, k, acc, i, j,
                         C1[i * ldc + j], C2[i * ldc + j]);
    free(Af), free(B), free(C1), free(C2), free(A), free(scratch);
}

static void test_avx512_gives_scalar_bits(void **state)
{
    (void)state;
    static const int ms[] = {1, 7, 8, 9, 21}, ns[] = {1, 31, 32, 33, 70}, ks[] = {1, 2, 3, 255, 256, 257, 600};
    static const dsq_gemm_bf16_path fast[] = {DSQ_GEMM_BF16_AVX512, DSQ_GEMM_BF16_AVX2};
    for (int f = 0; f < 2; f++) {
        if (!dsq_gemm_bf16_path_available(fast[f])) {
            print_message("no %s on this CPU: its bits are not compared with the scalar kernel's here\n",
                          dsq_gemm_bf16_path_name(fast[f]));
            continue;
        }
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
                for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                    for (int bl = 0; bl < 2; bl++)
                        path_case(fast[f], DSQ_GEMM_BF16_SCALAR, (dsq_gemm_b)bl, ms[a], ns[b], ks[c], (a + b + c) % 2);
    }
}

/* Ties round to even, in both conversions (A rows and the packed B):
 * 1 + 2^-8 lies halfway between BF16 1 and 1 + 2^-7 and must become 1;
 * 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6 and must go up. */
static void test_round_to_nearest_even(void **state)
{
    (void)state;
    for (int is = 0; is < (dsq_cpu_has_avx512bf16() ? 2 : 1); is++) {
        dsq_cpu_set_isa(is ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
        float a[40], b[2 * 40];
        for (int i = 0; i < 40; i++) a[i] = i % 2 ? 1.0f + 3.0f / 256.0f : 1.0f + 1.0f / 256.0f;
        uint16_t ab[40];
        dsq_gemm_bf16_round_rows(a, 40, 1, 40, ab, 40);
        for (int i = 0; i < 40; i++) assert_int_equal(ab[i], i % 2 ? 0x3f82 : 0x3f80);
        /* B = [[1 + 2^-8], [1 + 3 * 2^-8]] (k = 2, n = 1) times A = [1, 1] */
        uint16_t one[2] = {dsq_f32_to_bf16(1.0f), dsq_f32_to_bf16(1.0f)};
        b[0] = a[0];
        b[1] = a[1];
        float c = 0;
        void *scratch = aligned_alloc(64, (dsq_gemm_bf16_scratch_bytes(1, 2) + 63) & ~(size_t)63);
        dsq_gemm_bf16(DSQ_GEMM_BN, 1, 1, 2, one, 2, b, 1, &c, 1, false, scratch);
        assert_true(c == 1.0f + (1.0f + 1.0f / 64.0f));
        free(scratch);
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* The linear path: equal to the F32 path on BF16-exact inputs (dense F32
 * rows and Q8_0 blocks, whose dequantized values are not BF16-exact, so there
 * only the rounding bound holds), bias added, tile and token-block edges. */
static void linear_case(dsq_type t, int out, int in, int n_tok)
{
    float *w = randm((size_t)out * (size_t)in, 0.5f), *x = randm((size_t)n_tok * (size_t)in, 1.0f);
    float *bias = randm((size_t)out, 1.0f);
    for (size_t i = 0; i < (size_t)n_tok * (size_t)in; i++) x[i] = (float)r16(x[i]);
    if (t == DSQ_TYPE_F32)
        for (size_t i = 0; i < (size_t)out * (size_t)in; i++) w[i] = (float)r16(w[i]);
    const dsq_type_info *tr = dsq_type_get(t);
    size_t rb = (size_t)in / tr->block_elems * tr->block_bytes;
    uint8_t *data = malloc(rb * (size_t)out);
    assert_non_null(data);
    if (t == DSQ_TYPE_F32)
        memcpy(data, w, (size_t)out * (size_t)in * sizeof *w);
    else
        assert_int_equal(dsq_quantize(t, w, data, out, in, NULL), DSQ_OK);
    dsq_linear W;
    assert_int_equal(dsq_linear_init(&W, t, data, out, in), DSQ_OK);
    W.bias = bias;
    float *y32 = malloc((size_t)n_tok * (size_t)out * sizeof *y32),
          *y16 = malloc((size_t)n_tok * (size_t)out * sizeof *y16);
    assert_non_null(y32);
    assert_non_null(y16);
    assert_int_equal(dsq_linear_forward_gemm(&W, x, y32, n_tok), DSQ_OK);
    assert_int_equal(dsq_linear_forward_bf16(&W, x, y16, n_tok), DSQ_OK);
    double worst = 0;
    for (size_t i = 0; i < (size_t)n_tok * (size_t)out; i++) {
        double d = fabs((double)y32[i] - (double)y16[i]);
        if (d > worst) worst = d;
    }
    /* F32 weights are BF16-exact: only summation order differs. Q8_0 values
     * get rounded: relative error up to 2^-9 each on |w| ~ 0.5, |x| ~ 1, so
     * the sum of in of them has a spread near sqrt(in) * 0.5 * 2^-9 / sqrt(3);
     * 8 of those bounds the worst output. */
    double tol = t == DSQ_TYPE_F32 ? 1e-4 : 8.0 * sqrt((double)in) * 0.5 / 512.0 / sqrt(3.0);
    if (worst > tol)
        fail_msg("%s %d x %d, %d tokens: max |bf16 - f32| %.3g > %.3g", tr->name, out, in, n_tok, worst, tol);
    if (t != DSQ_TYPE_F32) assert_true(worst > 0); /* the rounding did happen */
    free(w), free(x), free(bias), free(data), free(y32), free(y16);
}

static void test_linear_bf16(void **state)
{
    (void)state;
    linear_case(DSQ_TYPE_F32, 70, 96, 9);
    linear_case(DSQ_TYPE_F32, 300, 64, 1100); /* two token blocks, tiles of 256 and 44 rows */
    linear_case(DSQ_TYPE_F32, 33, 578, 40);   /* depth over two K blocks, odd panel count */
    linear_case(DSQ_TYPE_Q8_0, 64, 256, 17);
}

static void test_exp_sum(void **state)
{
    (void)state;
    for (int is = 0; is < 2; is++) {
        dsq_cpu_set_isa(is ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
        for (int n = 1; n <= 203; n += 7) { /* every tail length of the 8-wide loop */
            float x[203];
            for (int i = 0; i < n; i++) x[i] = -90.0f + 100.0f * (float)i / (float)n + 0.013f * (float)(i % 5);
            float shift = 3.5f, orig[203];
            memcpy(orig, x, sizeof orig);
            double want_sum = 0;
            for (int i = 0; i < n; i++) want_sum += exp((double)(orig[i] - shift));
            float sum = dsq_vec_exp_sum(n, x, shift);
            for (int i = 0; i < n; i++) {
                double want = exp((double)(orig[i] - shift));
                double tol = (double)orig[i] - shift > -87.0 ? 4e-7 * want : 1e-37;
                if (!(fabs(x[i] - want) <= tol))
                    fail_msg("isa %d: exp(%.7g) = %.9g, want %.9g", is, orig[i] - shift, x[i], want);
            }
            if (!(fabs(sum - want_sum) <= 1e-7 * n * want_sum + 1e-37 * n))
                fail_msg("isa %d n %d: sum %.9g, want %.9g", is, n, sum, want_sum);
        }
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* The softmax row's max: the largest value on both paths, every tail
 * length, the maximum anywhere in the row, NaNs skipped, -inf for no values. */
static void test_vec_max(void **state)
{
    (void)state;
    for (int is = 0; is < 2; is++) {
        dsq_cpu_set_isa(is ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
        assert_true(isinf(dsq_vec_max(0, NULL)) && dsq_vec_max(0, NULL) < 0);
        for (int n = 1; n <= 40; n++)
            for (int at = 0; at < n; at++) {
                float x[40];
                for (int i = 0; i < n; i++) x[i] = -50.0f + (float)((i * 7) % 13);
                x[at] = 100.0f + (float)at;
                if (n > 2) x[(at + 1) % n] = NAN;
                float m = dsq_vec_max(n, x);
                if (m != 100.0f + (float)at) fail_msg("isa %d n %d: max %g, want %g", is, n, m, 100.0 + at);
            }
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

/* The sums of squared differences and of products in double lanes: the
 * same bits on both paths, every tail length, and within rounding of the
 * plain double sums. */
static void test_vec_sq_diff(void **state)
{
    (void)state;
    float *a = randm(203, 2.0f), *b = randm(203, 1.0f);
    for (int n = 0; n <= 203; n += 3) {
        double want = 0;
        for (int i = 0; i < n; i++) want += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
        double ref = dsq_vec_sq_diff(n, a, b);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        double got = dsq_vec_sq_diff(n, a, b);
        if (memcmp(&ref, &got, sizeof ref)) fail_msg("n %d: %.17g vs the scalar lanes' %.17g", n, got, ref);
        if (!(fabs(got - want) <= 1e-13 * want)) fail_msg("n %d: %.17g vs %.17g", n, got, want);
        double dot = 0;
        for (int i = 0; i < n; i++) dot += (double)a[i] * b[i];
        dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
        ref = dsq_vec_dot_f64(n, a, b);
        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
        got = dsq_vec_dot_f64(n, a, b);
        if (memcmp(&ref, &got, sizeof ref)) fail_msg("dot n %d: %.17g vs the scalar lanes' %.17g", n, got, ref);
        if (!(fabs(got - dot) <= 1e-13 * (fabs(dot) + 1))) fail_msg("dot n %d: %.17g vs %.17g", n, got, dot);
    }
    free(a), free(b);
}

/* silu(g) * u with the polynomial exp, against double, every tail length,
 * and the chunked op over a large buffer. */
static void test_swiglu_fast(void **state)
{
    (void)state;
    for (int is = 0; is < 2; is++) {
        dsq_cpu_set_isa(is ? DSQ_CPU_ISA_AUTO : DSQ_CPU_ISA_SCALAR);
        for (int n = 1; n <= 40; n++) {
            float g[40], u[40], o[40];
            for (int i = 0; i < n; i++) g[i] = -100.0f + 200.0f * (float)i / (float)n, u[i] = 0.5f + 0.1f * (float)i;
            dsq_vec_swiglu(n, g, u, o);
            for (int i = 0; i < n; i++) {
                double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                if (!(fabs(o[i] - want) <= 1e-6 * fabs(want) + 1e-30))
                    fail_msg("isa %d: swiglu(%g, %g) = %.9g, want %.9g", is, g[i], u[i], o[i], want);
            }
        }
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    size_t n = 100003;
    float *g = randm(n, 3.0f), *u = randm(n, 1.0f), *o = malloc(n * sizeof *o), *r = malloc(n * sizeof *r);
    assert_non_null(o);
    assert_non_null(r);
    dsq_cpu_swiglu(g, u, r, n);
    dsq_cpu_swiglu_fast(g, u, o, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(o[i] - r[i]) <= 1e-6f * fabsf(r[i]) + 1e-30f)) fail_msg("element %zu: %g vs %g", i, o[i], r[i]);
    dsq_cpu_swiglu_fast(g, u, g, n); /* in place */
    assert_memory_equal(g, o, n * sizeof *o);
    free(g), free(u), free(o), free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_bf16_matches_reference),
        cmocka_unit_test(test_avx512_gives_scalar_bits),
        cmocka_unit_test(test_path_choice),
        cmocka_unit_test(test_packed_equals_per_call),
        cmocka_unit_test(test_round_to_nearest_even),
        cmocka_unit_test(test_linear_bf16),
        cmocka_unit_test(test_exp_sum),
        cmocka_unit_test(test_vec_max),
        cmocka_unit_test(test_vec_sq_diff),
        cmocka_unit_test(test_swiglu_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
