/* The CPU runtime: op-level known answers (GEMM, linear over every storage
 * type, RMSNorm, RoPE in both layouts with llama3/yarn scaling, attention,
 * SwiGLU, embedding), a tiny synthetic model written both as a Hugging Face
 * folder and as a GGUF (Q/K rows permuted here, independently) that must give
 * the same logits, the forward pass's hooks, decode paths and NaN tracing, the
 * perplexity protocols against a direct computation, and finally the real
 * default model (SmolLM2-135M Q4_1) against logits and a perplexity computed
 * with transformers (tests/integration/make_reference_logits.py). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/perplexity.h"
#include "formats/block_llama.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/hf_names.h"
#include "formats/safetensors.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/vec.h"
#include "quantizers/qtypes.h"
#include "runtime/cpu/ops.h"
#include "runtime/forward.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

static uint64_t g_seed = 0x5eed1234abcdull;

static void randv(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * dsq_test_randn(&g_seed);
}

static float *randm(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    randv(x, n, scale);
    return x;
}

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* ================================================================ GEMM */

/* Reference product in double; bound[i] = sum |a||b| (the scale of rounding). */
static void naive_gemm(dsq_gemm_b bl, int m, int n, int k, const float *A, int lda, const float *B, int ldb, double *C,
                       double *bound)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, b = 0;
            for (int p = 0; p < k; p++) {
                double bv = bl == DSQ_GEMM_BT ? B[j * ldb + p] : B[p * ldb + j];
                s += (double)A[i * lda + p] * bv;
                b += fabs((double)A[i * lda + p] * bv);
            }
            C[i * n + j] = s;
            bound[i * n + j] = b;
        }
}

static void gemm_case(dsq_cpu_isa isa, dsq_gemm_b bl, int m, int n, int k, bool acc)
{
    dsq_cpu_set_isa(isa);
    int lda = k + 3, ldb = (bl == DSQ_GEMM_BT ? k : n) + 5, ldc = n + 2;
    int brows = bl == DSQ_GEMM_BT ? n : k;
    float *A = randm((size_t)m * lda, 1), *B = randm((size_t)brows * ldb, 1), *C = randm((size_t)m * ldc, 1);
    float *C0 = malloc((size_t)m * ldc * sizeof *C0);
    memcpy(C0, C, (size_t)m * ldc * sizeof *C0);
    double *ref = malloc((size_t)m * n * sizeof *ref), *bound = malloc((size_t)m * n * sizeof *bound);
    naive_gemm(bl, m, n, k, A, lda, B, ldb, ref, bound);
    float *scratch = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(n, k));
    dsq_gemm_f32(bl, m, n, k, A, lda, B, ldb, C, ldc, acc, scratch);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double want = ref[i * n + j] + (acc ? C0[i * ldc + j] : 0);
            double tol = 1e-6 * (bound[i * n + j] + fabs(C0[i * ldc + j])) + 1e-6;
            if (fabs(C[i * ldc + j] - want) > tol)
                fail_msg("gemm isa %d %s m=%d n=%d k=%d acc=%d: C[%d][%d] = %g, want %g", isa,
                         bl == DSQ_GEMM_BT ? "BT" : "BN", m, n, k, acc, i, j, C[i * ldc + j], want);
        }
        /* The padding between rows of C is not C: never written. */
        for (int j = n; j < ldc; j++) assert_true(C[i * ldc + j] == C0[i * ldc + j]);
    }
    free(A), free(B), free(C), free(C0), free(ref), free(bound), free(scratch);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
}

static void test_gemm_matches_naive(void **state)
{
    (void)state;
    static const int ms[] = {1, 5, 6, 7, 13, 37}, ns[] = {1, 15, 16, 17, 40, 64}, ks[] = {1, 7, 256, 300, 600};
    /* AVX512 is AUTO's choice named: the AVX2 kernel where the CPU lacks AVX512F */
    dsq_cpu_isa isas[3] = {DSQ_CPU_ISA_SCALAR, DSQ_CPU_ISA_AVX2, DSQ_CPU_ISA_AVX512};
    for (int is = 0; is < (dsq_cpu_has_avx2() ? 3 : 1); is++)
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                    for (int bl = 0; bl < 2; bl++)
                        for (int acc = 0; acc < 2; acc++) gemm_case(isas[is], (dsq_gemm_b)bl, ms[a], ns[b], ks[c], acc);
}

/* The AVX-512 12x32 kernel gives the AVX2 6x16 kernel's bits on every
 * element, whole tiles and edges, one K block and several, overwriting and
 * accumulating (so swapping kernels by CPU never changes a result). */
static void test_gemm_avx512_equals_avx2(void **state)
{
    (void)state;
    if (!dsq_cpu_has(DSQ_CPU_AVX512F) || !dsq_cpu_has_avx2()) DSQ_TEST_SKIP_ENV("this CPU has no AVX512F");
    static const int ms[] = {1, 5, 11, 12, 13, 24, 37, 100}, ns[] = {1, 7, 16, 17, 31, 32, 33, 64, 80, 200},
                     ks[] = {1, 255, 256, 600};
    int wide_checked = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                for (int bl = 0; bl < 2; bl++)
                    for (int acc = 0; acc < 2; acc++) {
                        int m = ms[a], n = ns[b], k = ks[c];
                        int lda = k + 3, ldb = (bl == DSQ_GEMM_BT ? k : n) + 5, ldc = n + 2;
                        int brows = bl == DSQ_GEMM_BT ? n : k;
                        float *A = randm((size_t)m * lda, 1), *B = randm((size_t)brows * ldb, 1);
                        float *C1 = randm((size_t)m * ldc, 1), *C2 = malloc((size_t)m * ldc * sizeof *C2);
                        memcpy(C2, C1, (size_t)m * ldc * sizeof *C2);
                        float *scratch = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(n, k));
                        dsq_cpu_set_isa(DSQ_CPU_ISA_AVX2);
                        dsq_gemm_f32((dsq_gemm_b)bl, m, n, k, A, lda, B, ldb, C1, ldc, acc, scratch);
                        dsq_cpu_set_isa(DSQ_CPU_ISA_AVX512);
                        assert_true(dsq_cpu_use_avx512_gemm());
                        dsq_gemm_f32((dsq_gemm_b)bl, m, n, k, A, lda, B, ldb, C2, ldc, acc, scratch);
                        dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
                        if (memcmp(C1, C2, (size_t)m * ldc * sizeof *C1) != 0)
                            fail_msg("gemm avx512 vs avx2 %s m=%d n=%d k=%d acc=%d: bits differ",
                                     bl == DSQ_GEMM_BT ? "BT" : "BN", m, n, k, acc);
                        wide_checked += m >= 12 && n >= 32;
                        free(A), free(B), free(C1), free(C2), free(scratch);
                    }
    assert_true(wide_checked > 0);
    /* Forcing AVX2 keeps the wide kernel off; AUTO takes it. */
    dsq_cpu_set_isa(DSQ_CPU_ISA_AVX2);
    assert_false(dsq_cpu_use_avx512_gemm());
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    assert_true(dsq_cpu_use_avx512_gemm());
}

/* The SIMD kernels against the scalar reference on the same inputs. */
static void test_scalar_vs_simd(void **state)
{
    (void)state;
    if (!dsq_cpu_has_avx2()) DSQ_TEST_SKIP_ENV("this CPU has no AVX2");
    int m = 50, n = 70, k = 777;
    float *A = randm((size_t)m * k, 1), *B = randm((size_t)n * k, 1);
    float *C1 = malloc((size_t)m * n * sizeof *C1), *C2 = malloc((size_t)m * n * sizeof *C2);
    float *scratch = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(n, k));
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    dsq_gemm_f32(DSQ_GEMM_BT, m, n, k, A, k, B, k, C1, n, false, scratch);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AVX2);
    dsq_gemm_f32(DSQ_GEMM_BT, m, n, k, A, k, B, k, C2, n, false, scratch);
    for (int i = 0; i < m * n; i++) assert_true(fabsf(C1[i] - C2[i]) <= 1e-4f * sqrtf((float)k));
    /* Dot products of every row type, odd lengths for the tails. */
    int len = 1000 + 7;
    uint16_t *h = malloc(len * sizeof *h), *bf = malloc(len * sizeof *bf);
    for (int i = 0; i < len; i++) {
        h[i] = dsq_f32_to_f16(A[i]);
        bf[i] = dsq_f32_to_bf16(A[i]);
    }
    float d[2][3];
    for (int v = 0; v < 2; v++) {
        dsq_cpu_set_isa(v ? DSQ_CPU_ISA_AVX2 : DSQ_CPU_ISA_SCALAR);
        d[v][0] = dsq_vec_dot_f32(len, A, B);
        d[v][1] = dsq_vec_dot_f16_f32(len, h, B);
        d[v][2] = dsq_vec_dot_bf16_f32(len, bf, B);
    }
    for (int j = 0; j < 3; j++) assert_true(fabsf(d[0][j] - d[1][j]) <= 1e-3f);
    /* F16/BF16 rows really are read as such: a dot with the F32 original differs. */
    assert_true(fabsf(d[1][2] - d[1][0]) > 1e-4f);
    float y1[9] = {0}, y2[9] = {0};
    dsq_cpu_set_isa(DSQ_CPU_ISA_SCALAR);
    dsq_vec_axpy(9, 0.5f, A, y1);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AVX2);
    dsq_vec_axpy(9, 0.5f, A, y2);
    for (int i = 0; i < 9; i++) assert_true(fabsf(y1[i] - 0.5f * A[i]) < 1e-6f && fabsf(y2[i] - y1[i]) < 1e-6f);
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    free(A), free(B), free(C1), free(C2), free(scratch), free(h), free(bf);
}

/* ================================================================ linear */

static double rms(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s / (double)n);
}

static void linear_case(dsq_type t, int threads)
{
    const int out = 37, in = 512, ntok = 9;
    dsq_cpu_set_threads(threads);
    float *wf = randm((size_t)out * in, 0.05f), *x = randm((size_t)ntok * in, 1), *bias = randm(out, 1);
    uint64_t nb = 0;
    expect_ok(dsq_type_nbytes(t, (uint64_t)out * in, &nb));
    void *wq = malloc(nb);
    expect_ok(dsq_quantize(t, wf, wq, out, in, NULL));
    float *wd = malloc((size_t)out * in * sizeof *wd);
    expect_ok(dsq_dequantize(t, wq, wd, out, in));
    double *ref = malloc((size_t)ntok * out * sizeof *ref);
    for (int i = 0; i < ntok; i++)
        for (int r = 0; r < out; r++) {
            double s = bias[r];
            for (int p = 0; p < in; p++) s += (double)wd[(size_t)r * in + p] * x[(size_t)i * in + p];
            ref[i * out + r] = s;
        }
    double scale = rms(ref, (size_t)ntok * out);
    dsq_linear W;
    expect_ok(dsq_linear_init(&W, t, wq, out, in));
    expect_ok(dsq_linear_set_bias(&W, DSQ_TYPE_F32, bias, out));
    float *y = malloc((size_t)2 * in * sizeof *y); /* >= ntok * out */
    /* Batched path: F32 activations, so only float rounding separates it from the reference. */
    expect_ok(dsq_linear_forward_gemm(&W, x, y, ntok));
    for (int i = 0; i < ntok * out; i++)
        if (fabs(y[i] - ref[i]) > 1e-5 * scale + 1e-6)
            fail_msg("%s gemm: y[%d] = %g, want %g", dsq_type_name(t), i, y[i], ref[i]);
    /* Decode path: dense rows dotted directly; block types through vec_dot
     * with each activation row quantized to the type's vec_dot_type, so the
     * reference uses x rounded the same way (x -> vec_dot_type -> F32). */
    const dsq_qtype *qt = dsq_qtype_get(t);
    for (int n1 = 1; n1 <= 3; n1 += 2) {
        double *refq = malloc((size_t)n1 * out * sizeof *refq);
        float *xq = malloc((size_t)in * sizeof *xq);
        for (int i = 0; i < n1; i++) {
            const float *xr = x + (size_t)i * in;
            if (qt) {
                uint64_t ab;
                expect_ok(dsq_type_nbytes(qt->vec_dot_type, in, &ab));
                void *a = malloc(ab);
                expect_ok(dsq_quantize(qt->vec_dot_type, xr, a, 1, in, NULL));
                expect_ok(dsq_dequantize(qt->vec_dot_type, a, xq, 1, in));
                free(a);
                xr = xq;
            }
            for (int r = 0; r < out; r++) {
                double sum = bias[r];
                for (int p = 0; p < in; p++) sum += (double)wd[(size_t)r * in + p] * xr[p];
                refq[i * out + r] = sum;
            }
        }
        memset(y, 0, (size_t)ntok * out * sizeof *y);
        expect_ok(dsq_linear_forward_gemv(&W, x, y, n1));
        /* Q8_1 also carries d * sum(q) rounded to F16 on its own, which the
         * dequantized activations do not show: a looser bound there. */
        double tol = qt && qt->vec_dot_type == DSQ_TYPE_Q8_1 ? 3e-3 * scale : 2e-5 * scale + 1e-6;
        for (int i = 0; i < n1 * out; i++)
            if (fabs(y[i] - refq[i]) > tol)
                fail_msg("%s gemv: y[%d] = %g, want %g", dsq_type_name(t), i, y[i], refq[i]);
        assert_true(y[n1 * out] == 0); /* nothing past the rows asked for */
        if (qt) {                      /* the activations really were rounded */
            double diff = 0;
            for (int i = 0; i < out; i++) diff = fmax(diff, fabs(refq[i] - ref[i]));
            assert_true(diff > 1e-4 * scale);
        }
        free(refq), free(xq);
    }
    /* Rows as F32 equal the dequantized matrix. */
    expect_ok(dsq_linear_rows_f32(&W, 3, 2, y));
    assert_memory_equal(y, wd + 3 * in, 2 * in * sizeof(float));
    assert_int_equal(dsq_linear_rows_f32(&W, out - 1, 2, y), DSQ_ERR_ARG);
    dsq_linear_release(&W);
    free(wf), free(x), free(bias), free(wq), free(wd), free(ref), free(y);
    dsq_cpu_set_threads(0);
}

static void test_linear_every_type(void **state)
{
    (void)state;
    static const dsq_type types[] = {DSQ_TYPE_F32,  DSQ_TYPE_F16,  DSQ_TYPE_BF16, DSQ_TYPE_Q4_0,   DSQ_TYPE_Q4_1,
                                     DSQ_TYPE_Q5_0, DSQ_TYPE_Q5_1, DSQ_TYPE_Q8_0, DSQ_TYPE_Q2_K,   DSQ_TYPE_Q3_K,
                                     DSQ_TYPE_Q4_K, DSQ_TYPE_Q5_K, DSQ_TYPE_Q6_K, DSQ_TYPE_IQ4_NL, DSQ_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        linear_case(types[i], 1);
        linear_case(types[i], 2);
    }
    /* Types no storage handles are refused by name. */
    dsq_linear W;
    float dummy[64];
    assert_int_equal(dsq_linear_init(&W, DSQ_TYPE_I32, dummy, 2, 8), DSQ_ERR_UNSUPPORTED);
    assert_int_equal(dsq_linear_init(&W, DSQ_TYPE_Q4_K, dummy, 2, 100), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "block size"));
}

/* ================================================================ small ops */

static void test_rmsnorm_swiglu_add(void **state)
{
    (void)state;
    float x[8] = {1, 2, 3, 4, 0, 0, 0, 0}, w[4] = {1, 1, 2, 0.5f}, y[8];
    dsq_cpu_rmsnorm(x, w, y, 2, 4, 0.0f);
    double r = 1.0 / sqrt(7.5);
    double want[4] = {1 * r, 2 * r, 6 * r, 2 * r};
    for (int i = 0; i < 4; i++) assert_true(fabs(y[i] - want[i]) < 1e-6);
    /* A zero row stays zero (eps keeps it finite)... */
    dsq_cpu_rmsnorm(x, w, y, 2, 4, 1e-5f);
    for (int i = 4; i < 8; i++) assert_true(y[i] == 0);
    /* ...and eps enters under the root. */
    assert_true(fabs(y[0] - 1.0 / sqrt(7.5 + 1e-5)) < 1e-6);
    float g[3] = {0, 1, -2}, u[3] = {3, 2, 1}, o[3];
    dsq_cpu_swiglu(g, u, o, 3);
    assert_true(fabsf(o[0]) < 1e-7f);
    assert_true(fabs(o[1] - 2.0 / (1.0 + exp(-1.0))) < 1e-6);
    assert_true(fabs(o[2] - -2.0 / (1.0 + exp(2.0))) < 1e-6);
    float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 10};
    dsq_cpu_add(a, b, 3);
    assert_true(a[0] == 1.5f && a[1] == 0 && a[2] == 13);
}

static void test_embed(void **state)
{
    (void)state;
    const int V = 10, D = 64;
    float *tab = randm((size_t)V * D, 1);
    uint64_t nb;
    expect_ok(dsq_type_nbytes(DSQ_TYPE_Q8_0, (uint64_t)V * D, &nb));
    void *q = malloc(nb);
    expect_ok(dsq_quantize(DSQ_TYPE_Q8_0, tab, q, V, D, NULL));
    dsq_tensor E = {"emb", DSQ_TYPE_Q8_0, 2, {V, D}, q, nb};
    int32_t toks[3] = {3, 0, 9};
    float out[3 * 64], row[64];
    expect_ok(dsq_cpu_embed(&E, toks, 3, out));
    for (int t = 0; t < 3; t++) {
        expect_ok(dsq_dequantize(DSQ_TYPE_Q8_0, (const uint8_t *)q + (size_t)toks[t] * (nb / V), row, 1, D));
        assert_memory_equal(out + t * D, row, sizeof row);
        for (int i = 0; i < D; i++) assert_true(fabsf(row[i] - tab[toks[t] * D + i]) < 0.05f);
    }
    int32_t bad[2] = {1, 10};
    assert_int_equal(dsq_cpu_embed(&E, bad, 2, out), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "10"));
    bad[1] = -1;
    assert_int_equal(dsq_cpu_embed(&E, bad, 2, out), DSQ_ERR_ARG);
    free(tab), free(q);
}

/* ================================================================ RoPE */

static dsq_arch rope_arch(int head_dim, double theta)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.head_dim = head_dim;
    a.rope_theta = theta;
    a.n_heads = 2;
    a.n_kv_heads = 2;
    a.hidden_size = 2 * head_dim;
    a.max_position_embeddings = 4096;
    return a;
}

/* The rotation written out directly, in double. */
static void rope_direct(dsq_rope_layout lay, const float *x, double *y, int hd, double pos, const double *inv,
                        double mscale)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        int a = lay == DSQ_ROPE_NORM ? 2 * i : i, b = lay == DSQ_ROPE_NORM ? 2 * i + 1 : i + half;
        double th = pos * inv[i], c = cos(th) * mscale, s = sin(th) * mscale;
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[a] * s + x[b] * c;
    }
}

static void check_rope(const dsq_arch *a, dsq_rope_layout lay, const double *inv, double mscale, int pos0, double tol)
{
    int hd = (int)a->head_dim, heads = 2, stride = heads * hd + 4, ntok = 3;
    dsq_rope r;
    expect_ok(dsq_rope_init(&r, a, lay, NULL));
    for (int i = 0; i < hd / 2; i++)
        if (fabs(r.inv_freq[i] - inv[i]) > 1e-6 * inv[i])
            fail_msg("inv_freq[%d] = %g, want %g", i, r.inv_freq[i], inv[i]);
    assert_true(fabs(r.mscale - mscale) < 1e-6);
    float *x = randm((size_t)ntok * stride, 1), *x0 = malloc((size_t)ntok * stride * sizeof *x0);
    memcpy(x0, x, (size_t)ntok * stride * sizeof *x0);
    dsq_cpu_rope(&r, x, ntok, heads, stride, pos0);
    double y[1024];
    for (int t = 0; t < ntok; t++) {
        for (int h = 0; h < heads; h++) {
            rope_direct(lay, x0 + t * stride + h * hd, y, hd, pos0 + t, inv, mscale);
            for (int i = 0; i < hd; i++)
                if (fabs(x[t * stride + h * hd + i] - y[i]) > tol)
                    fail_msg("rope layout %d pos %d dim %d: %g, want %g", lay, pos0 + t, i, x[t * stride + h * hd + i],
                             y[i]);
        }
        for (int i = heads * hd; i < stride; i++) assert_true(x[t * stride + i] == x0[t * stride + i]);
    }
    /* with the angles tabulated up to the second of the three positions: the
     * same floats, from the table and past its end */
    float *xt = malloc((size_t)ntok * stride * sizeof *xt);
    memcpy(xt, x0, (size_t)ntok * stride * sizeof *xt);
    expect_ok(dsq_rope_table(&r, pos0 + 2));
    dsq_cpu_rope(&r, xt, ntok, heads, stride, pos0);
    assert_memory_equal(xt, x, (size_t)ntok * stride * sizeof *xt);
    free(xt);
    dsq_rope_free(&r);
    free(x), free(x0);
}

static void test_rope_plain_and_linear(void **state)
{
    (void)state;
    dsq_arch a = rope_arch(8, 10000);
    double inv[4];
    for (int i = 0; i < 4; i++) inv[i] = pow(10000.0, -2.0 * i / 8);
    check_rope(&a, DSQ_ROPE_NORM, inv, 1, 5, 1e-5);
    check_rope(&a, DSQ_ROPE_NEOX, inv, 1, 5, 1e-5);
    a.rope_scaling = DSQ_ROPE_SCALING_LINEAR;
    a.rope_factor = 4;
    for (int i = 0; i < 4; i++) inv[i] /= 4;
    check_rope(&a, DSQ_ROPE_NORM, inv, 1, 300, 1e-4);
    check_rope(&a, DSQ_ROPE_NEOX, inv, 1, 300, 1e-4);
}

/* HF's _compute_llama3_parameters, in double. */
static void test_rope_llama3_yarn(void **state)
{
    (void)state;
    dsq_arch a = rope_arch(64, 500000);
    a.rope_scaling = DSQ_ROPE_SCALING_LLAMA3;
    a.rope_factor = 8;
    a.rope_low_freq_factor = 1;
    a.rope_high_freq_factor = 4;
    a.rope_original_max_pos = 8192;
    double inv[64];
    int scaled = 0, kept = 0, blended = 0;
    for (int i = 0; i < 32; i++) {
        double f = pow(500000.0, -2.0 * i / 64), wl = 2 * M_PI / f;
        if (wl < 8192.0 / 4) {
            inv[i] = f, kept++;
        } else if (wl > 8192.0 / 1) {
            inv[i] = f / 8, scaled++;
        } else {
            double s = (8192.0 / wl - 1) / (4 - 1);
            inv[i] = (1 - s) * f / 8 + s * f, blended++;
        }
    }
    assert_true(kept > 0 && scaled > 0 && blended > 0); /* all three bands exercised */
    check_rope(&a, DSQ_ROPE_NORM, inv, 1, 1000, 2e-3);
    check_rope(&a, DSQ_ROPE_NEOX, inv, 1, 1000, 2e-3);

    /* yarn: HF's _compute_yarn_parameters (beta_fast 32, beta_slow 1, truncate). */
    a = rope_arch(128, 1000000);
    a.rope_scaling = DSQ_ROPE_SCALING_YARN;
    a.rope_factor = 4;
    a.rope_original_max_pos = 32768;
    double dim = 128, lo = floor(dim * log(32768 / (32 * 2 * M_PI)) / (2 * log(1e6)));
    double hi = ceil(dim * log(32768 / (1 * 2 * M_PI)) / (2 * log(1e6)));
    lo = fmax(lo, 0), hi = fmin(hi, dim - 1);
    for (int i = 0; i < 64; i++) {
        double pf = pow(1e6, 2.0 * i / 128), ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1), ex = 1 - ramp;
        inv[i] = 1 / (4 * pf) * (1 - ex) + 1 / pf * ex;
    }
    double msc = 0.1 * log(4.0) + 1;
    check_rope(&a, DSQ_ROPE_NEOX, inv, msc, 2000, 5e-3);
    /* An explicit attention factor replaces the default one. */
    a.yarn_attn_factor = 1.25;
    check_rope(&a, DSQ_ROPE_NORM, inv, 1.25, 7, 1e-4);
}

/* The two layouts are one rotation seen through llama.cpp's Q/K row
 * permutation: NORM(P x) = P NEOX(x), with P from formats/hf_names.c. And
 * q.k after rotation depends only on the distance of the positions. */
static void test_rope_layouts_consistent(void **state)
{
    (void)state;
    dsq_arch a = rope_arch(16, 10000);
    a.hidden_size = 32;
    dsq_rope rn, rx;
    expect_ok(dsq_rope_init(&rn, &a, DSQ_ROPE_NORM, NULL));
    expect_ok(dsq_rope_init(&rx, &a, DSQ_ROPE_NEOX, NULL));
    float x[32], px[32], y[32];
    randv(x, 32, 1);
    memcpy(px, x, sizeof px);
    expect_ok(dsq_permute_rows(&a, DSQ_PERMUTE_Q, true, px, 32, sizeof(float), NULL));
    assert_memory_not_equal(px, x, sizeof px);
    dsq_cpu_rope(&rx, x, 1, 2, 32, 11);
    memcpy(y, x, sizeof y);
    expect_ok(dsq_permute_rows(&a, DSQ_PERMUTE_Q, true, y, 32, sizeof(float), NULL));
    dsq_cpu_rope(&rn, px, 1, 2, 32, 11);
    for (int i = 0; i < 32; i++) assert_true(fabsf(px[i] - y[i]) < 1e-5f);
    for (int lay = 0; lay < 2; lay++) {
        dsq_rope *r = lay ? &rx : &rn;
        float q[16], k[16], q1[16], k1[16], q2[16], k2[16];
        randv(q, 16, 1);
        randv(k, 16, 1);
        memcpy(q1, q, sizeof q), memcpy(k1, k, sizeof k), memcpy(q2, q, sizeof q), memcpy(k2, k, sizeof k);
        dsq_cpu_rope(r, q1, 1, 1, 16, 3);
        dsq_cpu_rope(r, k1, 1, 1, 16, 1);
        dsq_cpu_rope(r, q2, 1, 1, 16, 40);
        dsq_cpu_rope(r, k2, 1, 1, 16, 38);
        double d1 = 0, d2 = 0, d0 = 0;
        for (int i = 0; i < 16; i++) d1 += q1[i] * k1[i], d2 += q2[i] * k2[i], d0 += q[i] * k[i];
        assert_true(fabs(d1 - d2) < 1e-4);
        if (!(fabs(d1 - d0) > 1e-3)) fail_msg("layout %d: %g %g %g", lay, d0, d1, d2); /* and it did rotate */
    }
    dsq_rope_free(&rn);
    dsq_rope_free(&rx);
}

/* ================================================================ attention */

static void naive_attention(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, double *out,
                            int n, int pos0)
{
    int hd = s->head_dim, hv = s->head_dim_v ? s->head_dim_v : hd, qs = s->n_heads * hd, ks = s->n_kv_heads * hd;
    int vs = s->n_kv_heads * hv, os = s->n_heads * hv, group = s->n_heads / s->n_kv_heads;
    double *p = malloc((size_t)(pos0 + n) * sizeof *p);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < s->n_heads; h++) {
            int pos = pos0 + i, lo = s->window > 0 ? pos - s->window + 1 : 0, g = h / group;
            if (lo < 0) lo = 0;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= pos; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[i * qs + h * hd + e] * kc[j * ks + g * hd + e];
                p[j] = d / sqrt((double)hd);
                mx = fmax(mx, p[j]);
            }
            for (int j = lo; j <= pos; j++) sum += (p[j] = exp(p[j] - mx));
            for (int e = 0; e < hv; e++) {
                double o = 0;
                for (int j = lo; j <= pos; j++) o += p[j] / sum * vc[j * vs + g * hv + e];
                out[i * os + h * hv + e] = o;
            }
        }
    free(p);
}

/* hv: the value head dim (0: hd; MLA's value heads are narrower than its query/key heads). */
static void attention_case_v(int heads, int kv, int hd, int hv, int window, int n, int pos0)
{
    dsq_attn_shape s = {heads, kv, hd, window, false, hv, 0.0f, 0};
    int L = pos0 + n, qs = heads * (hv ? hv : hd);
    float *q = randm((size_t)n * heads * hd, 1), *kc = randm((size_t)L * kv * hd, 1);
    float *vc = randm((size_t)L * kv * (hv ? hv : hd), 1);
    double *ref = malloc((size_t)n * qs * sizeof *ref);
    naive_attention(&s, q, kc, vc, ref, n, pos0);
    float *out = malloc((size_t)n * qs * sizeof *out);
    dsq_status (*fns[3])(const dsq_attn_shape *, const float *, const float *, const float *, float *, int,
                         int) = {dsq_cpu_attention_rows, dsq_cpu_attention_blocked, dsq_cpu_attention};
    for (int f = 0; f < 3; f++) {
        memset(out, 0xff, (size_t)n * qs * sizeof *out); /* NaN everywhere: every output must be written */
        expect_ok(fns[f](&s, q, kc, vc, out, n, pos0));
        for (int i = 0; i < n * qs; i++)
            if (!(fabs(out[i] - ref[i]) < 1e-5))
                fail_msg("attention impl %d (%d heads, %d kv, hd %d, window %d, %d rows at %d): out[%d] = %g, want %g",
                         f, heads, kv, hd, window, n, pos0, i, out[i], ref[i]);
    }
    /* BF16 products (q, k, probabilities and v rounded to 8 bits of
     * mantissa) and the polynomial exp: close, and not the F32 numbers */
    s.bf16 = true;
    memset(out, 0xff, (size_t)n * qs * sizeof *out);
    expect_ok(dsq_cpu_attention_blocked(&s, q, kc, vc, out, n, pos0));
    double worst = 0;
    for (int i = 0; i < n * qs; i++) worst = fmax(worst, fabs(out[i] - ref[i])); /* NaN fails below */
    if (!(worst < 0.03 && worst > 1e-6)) fail_msg("bf16 attention (%d rows at %d): max error %g", n, pos0, worst);
    /* keys and values packed once per kv head or per query block: the same bits */
    float *per_block = malloc((size_t)n * qs * sizeof *per_block);
    const dsq_cpu_isa isas[] = {DSQ_CPU_ISA_AUTO, DSQ_CPU_ISA_AVX512,
                                DSQ_CPU_ISA_SCALAR}; /* AMX, AVX512-BF16, scalar */
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        dsq_cpu_set_isa(isas[k]);
        expect_ok(dsq_cpu_attention_blocked(&s, q, kc, vc, out, n, pos0));
        dsq_cpu_attention_set_kv_packing(false);
        expect_ok(dsq_cpu_attention_blocked(&s, q, kc, vc, per_block, n, pos0));
        dsq_cpu_attention_set_kv_packing(true);
        if (memcmp(out, per_block, (size_t)n * qs * sizeof *out))
            fail_msg("bf16 attention (isa %d, %d heads, %d kv, %d rows at %d): packed keys and values differ", (int)k,
                     heads, kv, n, pos0);
    }
    dsq_cpu_set_isa(DSQ_CPU_ISA_AUTO);
    free(per_block);
    free(q), free(kc), free(vc), free(ref), free(out);
}

static void attention_case(int heads, int kv, int hd, int window, int n, int pos0)
{
    attention_case_v(heads, kv, hd, 0, window, n, pos0);
}

static void test_attention_vs_naive(void **state)
{
    (void)state;
    attention_case(6, 2, 16, 0, 45, 7);  /* GQA, two query blocks, a cache before */
    attention_case(6, 2, 16, 5, 45, 7);  /* sliding window */
    attention_case(4, 4, 12, 0, 33, 0);  /* MHA, head_dim off the SIMD width */
    attention_case(6, 3, 16, 0, 1, 51);  /* one decode step */
    attention_case(2, 1, 8, 9, 3, 20);   /* few rows, windowed */
    attention_case(6, 2, 16, 0, 300, 7); /* several of the taller BF16 blocks */
    attention_case(6, 2, 16, 40, 300, 7);
    attention_case_v(4, 4, 24, 16, 0, 40, 5);              /* value heads narrower than query/key heads (MLA) */
    attention_case_v(4, 2, 12, 20, 0, 3, 9);               /* wider, decode */
    dsq_attn_shape bad = {6, 4, 16, 0, false, 0, 0.0f, 0}; /* heads not a multiple of kv heads */
    float z[16] = {0};
    assert_int_equal(dsq_cpu_attention(&bad, z, z, z, z, 1, 0), DSQ_ERR_ARG);
}

/* ================================================================ tiny model */

#define T_HIDDEN 64
#define T_FFN 96
#define T_LAYERS 2
#define T_HEADS 4
#define T_KV 2
#define T_HD 16
#define T_VOCAB 128

typedef enum { TINY_LLAMA_TIED, TINY_QWEN2, TINY_LLAMA3 } tiny_kind;

static dsq_arch tiny_arch(tiny_kind k)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = k == TINY_QWEN2 ? DSQ_ARCH_QWEN2 : DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "%s",
             k == TINY_QWEN2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, "%s", k == TINY_QWEN2 ? "qwen2" : "llama");
    a.hidden_size = T_HIDDEN;
    a.intermediate_size = T_FFN;
    a.n_layers = T_LAYERS;
    a.n_heads = T_HEADS;
    a.n_kv_heads = T_KV;
    a.head_dim = T_HD;
    a.vocab_size = T_VOCAB;
    a.max_position_embeddings = k == TINY_LLAMA3 ? 131072 : 2048;
    a.rms_norm_eps = 1e-5;
    a.rope_theta = k == TINY_LLAMA3 ? 500000 : 10000;
    if (k == TINY_LLAMA3) {
        a.rope_scaling = DSQ_ROPE_SCALING_LLAMA3;
        a.rope_factor = 8;
        a.rope_low_freq_factor = 1;
        a.rope_high_freq_factor = 4;
        a.rope_original_max_pos = 8192;
    }
    a.tie_word_embeddings = k == TINY_LLAMA_TIED;
    a.attention_bias = k == TINY_QWEN2;
    a.bos_token_id = 1;
    a.eos_token_id = 2;
    snprintf(a.torch_dtype, sizeof a.torch_dtype, "float32");
    expect_ok(dsq_arch_validate(&a, "tiny"));
    return a;
}

typedef struct tiny_tensor {
    char hf[96], gguf[96];
    int n_dims;
    int64_t shape[2];
    int perm_heads; /* >0: Q/K rows to permute for GGUF llama */
    float *data;    /* HF layout */
} tiny_tensor;

typedef struct tiny_model {
    dsq_arch a;
    int n;
    tiny_tensor t[64];
} tiny_model;

static void tiny_add(tiny_model *m, const char *hf, const char *gguf, int n_dims, int64_t d0, int64_t d1, int perm,
                     float scale, float offset)
{
    tiny_tensor *t = &m->t[m->n++];
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->gguf, sizeof t->gguf, "%s", gguf);
    t->n_dims = n_dims;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->perm_heads = perm;
    size_t n = (size_t)d0 * (n_dims == 2 ? (size_t)d1 : 1);
    t->data = randm(n, scale);
    for (size_t i = 0; i < n; i++) t->data[i] += offset;
}

static void tiny_build(tiny_model *m, tiny_kind k)
{
    memset(m, 0, sizeof *m);
    m->a = tiny_arch(k);
    bool llama = k != TINY_QWEN2;
    tiny_add(m, "model.embed_tokens.weight", "token_embd.weight", 2, T_VOCAB, T_HIDDEN, 0, 1, 0);
    tiny_add(m, "model.norm.weight", "output_norm.weight", 1, T_HIDDEN, 0, 0, 0.1f, 1);
    if (k != TINY_LLAMA_TIED) tiny_add(m, "lm_head.weight", "output.weight", 2, T_VOCAB, T_HIDDEN, 0, 0.1f, 0);
    for (int l = 0; l < T_LAYERS; l++) {
        char h[96], g[96];
#define L2(hn, gn, d0, d1, perm, sc)                                                                                   \
    snprintf(h, sizeof h, "model.layers.%d.%s", l, hn), snprintf(g, sizeof g, "blk.%d.%s", l, gn),                     \
        tiny_add(m, h, g, 2, d0, d1, perm, sc, 0)
#define L1(hn, gn, d0, sc, off)                                                                                        \
    snprintf(h, sizeof h, "model.layers.%d.%s", l, hn), snprintf(g, sizeof g, "blk.%d.%s", l, gn),                     \
        tiny_add(m, h, g, 1, d0, 0, 0, sc, off)
        L1("input_layernorm.weight", "attn_norm.weight", T_HIDDEN, 0.1f, 1);
        L1("post_attention_layernorm.weight", "ffn_norm.weight", T_HIDDEN, 0.1f, 1);
        L2("self_attn.q_proj.weight", "attn_q.weight", T_HEADS * T_HD, T_HIDDEN, llama ? T_HEADS : 0, 0.15f);
        L2("self_attn.k_proj.weight", "attn_k.weight", T_KV * T_HD, T_HIDDEN, llama ? T_KV : 0, 0.15f);
        L2("self_attn.v_proj.weight", "attn_v.weight", T_KV * T_HD, T_HIDDEN, 0, 0.15f);
        L2("self_attn.o_proj.weight", "attn_output.weight", T_HIDDEN, T_HEADS * T_HD, 0, 0.1f);
        L2("mlp.gate_proj.weight", "ffn_gate.weight", T_FFN, T_HIDDEN, 0, 0.15f);
        L2("mlp.up_proj.weight", "ffn_up.weight", T_FFN, T_HIDDEN, 0, 0.15f);
        L2("mlp.down_proj.weight", "ffn_down.weight", T_HIDDEN, T_FFN, 0, 0.1f);
        if (k == TINY_QWEN2) {
            L1("self_attn.q_proj.bias", "attn_q.bias", T_HEADS * T_HD, 0.3f, 0);
            L1("self_attn.k_proj.bias", "attn_k.bias", T_KV * T_HD, 0.3f, 0);
            L1("self_attn.v_proj.bias", "attn_v.bias", T_KV * T_HD, 0.3f, 0);
        }
#undef L1
#undef L2
    }
}

static void tiny_free(tiny_model *m)
{
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
}

/* llama.cpp's LlamaModel.permute, written here from its definition:
 * reshape(heads, 2, rows/heads/2, cols).swapaxes(1, 2): GGUF row h*hd + 2i + s
 * is HF row h*hd + s*hd/2 + i. */
static float *gguf_rows(const tiny_tensor *t)
{
    int64_t rows = t->shape[0], cols = t->n_dims == 2 ? t->shape[1] : 1;
    float *o = malloc((size_t)(rows * cols) * sizeof *o);
    if (!t->perm_heads) {
        memcpy(o, t->data, (size_t)(rows * cols) * sizeof *o);
        return o;
    }
    int64_t hd = rows / t->perm_heads;
    for (int64_t h = 0; h < t->perm_heads; h++)
        for (int64_t i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(o + (h * hd + 2 * i + s) * cols, t->data + (h * hd + s * hd / 2 + i) * cols,
                       (size_t)cols * sizeof *o);
    return o;
}

static char *tiny_write_gguf(const tiny_model *m, const char *dir, const char *skip)
{
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/tiny%s.gguf", dir, skip ? "-broken" : "");
    dsq_gguf_writer *w;
    expect_ok(dsq_gguf_writer_new(&w));
    expect_ok(dsq_arch_to_gguf(&m->a, w));
    char key[64]; /* the converter writes the vocabulary size only with a tokenizer */
    snprintf(key, sizeof key, "%s.vocab_size", dsq_arch_gguf_name(&m->a));
    expect_ok(dsq_gguf_set_u32(w, key, T_VOCAB));
    float freqs[T_HD / 2];
    bool llama3 = m->a.rope_scaling == DSQ_ROPE_SCALING_LLAMA3;
    if (llama3) {
        expect_ok(dsq_arch_llama3_rope_freqs(&m->a, freqs, T_HD / 2));
        int64_t shape[1] = {T_HD / 2};
        expect_ok(dsq_gguf_add_tensor(w, "rope_freqs.weight", DSQ_TYPE_F32, 1, shape));
    }
    for (int i = 0; i < m->n; i++)
        if (!skip || strcmp(m->t[i].gguf, skip))
            expect_ok(dsq_gguf_add_tensor(w, m->t[i].gguf, DSQ_TYPE_F32, m->t[i].n_dims, m->t[i].shape));
    expect_ok(dsq_gguf_writer_begin(w, path, true));
    if (llama3) expect_ok(dsq_gguf_writer_write(w, freqs, sizeof freqs));
    for (int i = 0; i < m->n; i++) {
        if (skip && !strcmp(m->t[i].gguf, skip)) continue;
        float *d = gguf_rows(&m->t[i]);
        uint64_t n = (uint64_t)m->t[i].shape[0] * (m->t[i].n_dims == 2 ? (uint64_t)m->t[i].shape[1] : 1);
        expect_ok(dsq_gguf_writer_write(w, d, n * sizeof(float)));
        free(d);
    }
    expect_ok(dsq_gguf_writer_finish(w));
    dsq_gguf_writer_free(w);
    return path;
}

static char *tiny_write_hf(const tiny_model *m, const char *dir)
{
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/hf", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    char *json;
    expect_ok(dsq_arch_to_hf_json(&m->a, &json));
    free(dsq_test_write(path, "config.json", json, strlen(json)));
    free(json);
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(path, "model", 1ull << 30, &w));
    for (int i = 0; i < m->n; i++)
        expect_ok(dsq_st_writer_add(w, m->t[i].hf, DSQ_TYPE_F32, m->t[i].n_dims, m->t[i].shape));
    expect_ok(dsq_st_writer_begin(w));
    for (int i = 0; i < m->n; i++) {
        uint64_t n = (uint64_t)m->t[i].shape[0] * (m->t[i].n_dims == 2 ? (uint64_t)m->t[i].shape[1] : 1);
        expect_ok(dsq_st_writer_write(w, m->t[i].data, n * sizeof(float)));
    }
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
    return path;
}

static float *run_logits(const char *path, const int32_t *toks, int n)
{
    dsq_model *m;
    dsq_ctx *c;
    expect_ok(dsq_model_open(path, &m));
    expect_ok(dsq_ctx_new(m, 64, 2, &c));
    float *lg = malloc((size_t)n * (size_t)m->vocab * sizeof *lg);
    expect_ok(dsq_forward(c, toks, n, 0, lg));
    dsq_ctx_free(c);
    dsq_model_close(m);
    return lg;
}

static void assert_close(const float *a, const float *b, size_t n, float tol, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol)) fail_msg("%s: [%zu] %g vs %g", what, i, a[i], b[i]);
}

static const int32_t g_tiny_toks[11] = {1, 17, 99, 3, 64, 64, 120, 5, 0, 127, 42};

/* Same weights through both sources: GGUF llama (permuted rows, NORM rope)
 * and HF (NEOX rope) must agree; qwen2 GGUF keeps HF's layout and biases. */
static void test_tiny_gguf_equals_hf(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        char *dir = dsq_test_mkdtemp();
        tiny_model tm;
        tiny_build(&tm, (tiny_kind)k);
        char *gg = tiny_write_gguf(&tm, dir, NULL), *hf = tiny_write_hf(&tm, dir);
        dsq_model *mg, *mh;
        expect_ok(dsq_model_open(gg, &mg));
        expect_ok(dsq_model_open(hf, &mh));
        assert_int_equal(mg->rope_layout, k == TINY_QWEN2 ? DSQ_ROPE_NEOX : DSQ_ROPE_NORM);
        assert_int_equal(mh->rope_layout, DSQ_ROPE_NEOX);
        assert_int_equal(mg->tied, k == TINY_LLAMA_TIED);
        assert_int_equal(mh->tied, k == TINY_LLAMA_TIED);
        assert_true((mg->layers[1].lin[DSQ_LLAMA_K].bias != NULL) == (k == TINY_QWEN2));
        assert_true((mh->layers[1].lin[DSQ_LLAMA_K].bias != NULL) == (k == TINY_QWEN2));
        assert_true((mg->rope_freq_factors != NULL) == (k == TINY_LLAMA3));
        dsq_model_close(mg);
        dsq_model_close(mh);
        float *a = run_logits(gg, g_tiny_toks, 11), *b = run_logits(hf, g_tiny_toks, 11);
        assert_close(a, b, 11 * T_VOCAB, 1e-4f, "gguf vs hf logits");
        double spread = 0;
        for (int i = 0; i < T_VOCAB; i++) spread = fmax(spread, fabs(a[10 * T_VOCAB + i] - a[10 * T_VOCAB]));
        assert_true(spread > 0.1); /* the logits carry information */
        free(a), free(b), free(gg), free(hf);
        tiny_free(&tm);
        dsq_test_rmtmp(dir);
    }
}

/* Continuous batching: two sequences prefilled and decoded together, in
 * segments of different lengths and positions, give each sequence the logits
 * it gets alone; a batch that breaks the rules is refused by name. */
static void test_batch_equals_alone(void **state)
{
    (void)state;
    static const int32_t b_toks[9] = {1, 5, 77, 31, 31, 8, 100, 2, 64};
    for (int k = 0; k < 2; k++) {
        char *dir = dsq_test_mkdtemp();
        tiny_model tm;
        tiny_build(&tm, (tiny_kind)k);
        char *hf = tiny_write_hf(&tm, dir);
        float *ra = run_logits(hf, g_tiny_toks, 11), *rb = run_logits(hf, b_toks, 9);
        dsq_model *m;
        dsq_ctx *c;
        expect_ok(dsq_model_open(hf, &m));
        expect_ok(dsq_ctx_new_seqs(m, &dsq_backend_cpu, 16, 3, 2, &c));
        assert_int_equal(dsq_ctx_n_seq(c), 3);
        /* steps: (A rows, B rows) = (6 from 0, 4 from 0), (5 from 6, 1 from 4), (none, 4 from 5) */
        struct {
            int a0, an, b0, bn;
        } steps[] = {{0, 6, 0, 4}, {6, 5, 4, 1}, {0, 0, 5, 4}};
        float *lg = malloc(16 * T_VOCAB * sizeof *lg);
        for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
            int32_t toks[16];
            dsq_seg sg[2];
            int ns = 0, n = 0, rows[16];
            if (steps[st].an) {
                sg[ns++] = (dsq_seg){2, steps[st].a0, steps[st].an};
                for (int i = 0; i < steps[st].an; i++) toks[n++] = g_tiny_toks[steps[st].a0 + i];
            }
            sg[ns++] = (dsq_seg){0, steps[st].b0, steps[st].bn};
            for (int i = 0; i < steps[st].bn; i++) toks[n++] = b_toks[steps[st].b0 + i];
            for (int i = 0; i < n; i++) rows[i] = i;
            expect_ok(dsq_forward_batch(c, toks, sg, ns, rows, n, lg));
            int r = 0;
            for (int i = 0; i < steps[st].an; i++, r++)
                assert_close(lg + (size_t)r * T_VOCAB, ra + (size_t)(steps[st].a0 + i) * T_VOCAB, T_VOCAB, 1e-4f,
                             "batched A");
            for (int i = 0; i < steps[st].bn; i++, r++)
                assert_close(lg + (size_t)r * T_VOCAB, rb + (size_t)(steps[st].b0 + i) * T_VOCAB, T_VOCAB, 1e-4f,
                             "batched B");
        }
        /* only the last row of each segment: the head sees just those */
        int32_t two[2] = {g_tiny_toks[0], b_toks[0]};
        dsq_seg fresh[2] = {{1, 0, 1}, {2, 0, 1}};
        int last[1] = {1};
        expect_ok(dsq_forward_batch(c, two, fresh, 2, last, 1, lg));
        assert_close(lg, rb, T_VOCAB, 1e-4f, "output row selection");
        /* refusals */
        dsq_seg twice[2] = {{0, 0, 1}, {0, 1, 1}}, far[1] = {{1, 15, 2}}, bad_seq[1] = {{3, 0, 1}};
        int back[2] = {1, 0};
        assert_int_equal(dsq_forward_batch(c, two, twice, 2, NULL, 0, NULL), DSQ_ERR_ARG);
        assert_non_null(strstr(dsq_errmsg(), "sequence 0 twice"));
        assert_int_equal(dsq_forward_batch(c, two, far, 1, NULL, 0, NULL), DSQ_ERR_ARG);
        assert_non_null(strstr(dsq_errmsg(), "do not fit a context of 16"));
        assert_int_equal(dsq_forward_batch(c, two, bad_seq, 1, NULL, 0, NULL), DSQ_ERR_ARG);
        assert_non_null(strstr(dsq_errmsg(), "sequence 3 of 3"));
        assert_int_equal(dsq_forward_batch(c, two, fresh, 2, back, 2, lg), DSQ_ERR_ARG);
        assert_non_null(strstr(dsq_errmsg(), "out of order"));
        free(lg), free(ra), free(rb), free(hf);
        dsq_ctx_free(c);
        dsq_model_close(m);
        tiny_free(&tm);
        dsq_test_rmtmp(dir);
    }
}

typedef struct hook_log {
    int lin_calls[T_LAYERS][DSQ_LLAMA_N_LINEARS];
    int layer_calls[T_LAYERS];
    int64_t bad_in;
    float last_hidden[11 * T_HIDDEN];
    int fail_at_layer;
} hook_log;

static dsq_status on_linear(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    hook_log *h = user;
    int64_t want = which == DSQ_LLAMA_O ? T_HEADS * T_HD : which == DSQ_LLAMA_DOWN ? T_FFN : T_HIDDEN;
    if (in != want || n_tok != 11 || !isfinite(x[(size_t)n_tok * (size_t)in - 1])) h->bad_in++;
    h->lin_calls[layer][which]++;
    return DSQ_OK;
}

static dsq_status on_layer(void *user, int layer, const float *hidden, int n_tok, int64_t dim)
{
    hook_log *h = user;
    h->layer_calls[layer]++;
    if (layer == T_LAYERS - 1) memcpy(h->last_hidden, hidden, (size_t)n_tok * (size_t)dim * sizeof(float));
    if (layer == h->fail_at_layer) return dsq_fail(DSQ_ERR_INTERNAL, "hook says stop");
    return DSQ_OK;
}

/* Hooks, the layer-by-layer entry points, incremental decoding against the
 * batch, NaN tracing and argument checks on one tiny GGUF. */
typedef struct cap_o {
    int layer;
    float x[11 * 256];
    int n;
} cap_o;

static dsq_status capture_o(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    cap_o *c = user;
    if (layer != c->layer || which != DSQ_LLAMA_O) return DSQ_OK;
    assert_true((size_t)n_tok * (size_t)in <= sizeof c->x / sizeof *c->x);
    memcpy(c->x, x, (size_t)n_tok * (size_t)in * sizeof *x);
    c->n = n_tok;
    return DSQ_OK;
}

/* Captures the inputs of linears `a` and `b` of one layer. */
typedef struct cap2 {
    int layer, a, b;
    float xa[11 * 256], xb[11 * 256];
} cap2;

static dsq_status capture2(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    cap2 *c = user;
    assert_int_equal(expert, -1);
    if (layer != c->layer) return DSQ_OK;
    assert_true((size_t)n_tok * (size_t)in <= sizeof c->xa / sizeof *c->xa);
    if (which == c->a) memcpy(c->xa, x, (size_t)n_tok * (size_t)in * sizeof *x);
    if (which == c->b) memcpy(c->xb, x, (size_t)n_tok * (size_t)in * sizeof *x);
    return DSQ_OK;
}

/* The tail linear's input computed from the half's normed input is what the
 * pass itself fed the tail: o_proj's input from q's, down_proj's from gate's. */
static void tail_inputs_match_captures(dsq_ctx *c, const dsq_model *m)
{
    static const int first[2] = {DSQ_LLAMA_Q, DSQ_LLAMA_GATE}, tail[2] = {DSQ_LLAMA_O, DSQ_LLAMA_DOWN};
    float hid[11 * T_HIDDEN], tx[11 * 256];
    for (int half = 0; half < 2; half++) {
        cap2 cp = {1, first[half], tail[half], {0}, {0}};
        expect_ok(dsq_forward_embed(c, g_tiny_toks, 11, hid));
        dsq_ctx_set_hooks(c, capture2, NULL, &cp);
        expect_ok(dsq_forward_layer(c, 0, hid, 11, 0));
        expect_ok(dsq_forward_layer(c, 1, hid, 11, 0));
        dsq_ctx_set_hooks(c, NULL, NULL, NULL);
        int64_t nw = dsq_forward_tail_work(c, half, 11);
        float *work = malloc((size_t)(nw ? nw : 1) * sizeof *work);
        expect_ok(dsq_forward_tail_input(c, 1, half, cp.xa, tx, work, 1, 11));
        int64_t w = m->layers[1].lin[tail[half]].in;
        assert_memory_equal(tx, cp.xb, (size_t)(11 * w) * sizeof *tx);
        free(work);
    }
}

static dsq_status stop_at_k(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    (void)x, (void)n_tok, (void)in, (void)expert;
    int *calls = user;
    (*calls)++;
    return layer == 0 && which == DSQ_LLAMA_K ? DSQ_STOP : DSQ_OK;
}

/* DSQ_STOP from a hook ends the pass there: returned as is, no message, no later linear run. */
static void stop_ends_the_pass(dsq_ctx *c)
{
    float hid[11 * T_HIDDEN];
    int calls = 0;
    expect_ok(dsq_forward_embed(c, g_tiny_toks, 11, hid));
    dsq_clear_error();
    dsq_ctx_set_hooks(c, stop_at_k, NULL, &calls);
    assert_int_equal(dsq_forward_layer(c, 0, hid, 11, 0), DSQ_STOP);
    dsq_ctx_set_hooks(c, NULL, NULL, NULL);
    assert_int_equal(calls, 2); /* q, then k stopped it */
    assert_string_equal(dsq_errmsg(), "");
}

static void test_tiny_forward_paths(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA3);
    char *gg = tiny_write_gguf(&tm, dir, NULL);
    float *ref = run_logits(gg, g_tiny_toks, 11);
    dsq_model *m;
    dsq_ctx *c;
    expect_ok(dsq_model_open(gg, &m));
    expect_ok(dsq_ctx_new(m, 16, 2, &c));
    float *lg = malloc(11 * T_VOCAB * sizeof *lg);

    hook_log h;
    memset(&h, 0, sizeof h);
    h.fail_at_layer = -1;
    dsq_ctx_set_hooks(c, on_linear, on_layer, &h);
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, lg));
    assert_close(lg, ref, 11 * T_VOCAB, 0, "with hooks");
    assert_int_equal(h.bad_in, 0);
    for (int l = 0; l < T_LAYERS; l++) {
        assert_int_equal(h.layer_calls[l], 1);
        for (int i = 0; i < DSQ_LLAMA_N_LINEARS; i++) assert_int_equal(h.lin_calls[l][i], 1);
    }
    float *lg2 = malloc(11 * T_VOCAB * sizeof *lg2);
    expect_ok(dsq_forward_head(c, h.last_hidden, 11, lg2));
    assert_close(lg2, ref, 11 * T_VOCAB, 1e-6f, "head on the last layer's hidden state");
    h.fail_at_layer = 1;
    assert_int_equal(dsq_forward(c, g_tiny_toks, 11, 0, lg), DSQ_ERR_INTERNAL);
    assert_non_null(strstr(dsq_errmsg(), "hook says stop"));
    dsq_ctx_set_hooks(c, NULL, NULL, NULL);

    /* Layer by layer, as calibration drives it. */
    float hid[11 * T_HIDDEN];
    expect_ok(dsq_forward_embed(c, g_tiny_toks, 11, hid));
    for (int l = 0; l < T_LAYERS; l++) expect_ok(dsq_forward_layer(c, l, hid, 11, 0));
    expect_ok(dsq_forward_head(c, hid, 11, lg));
    assert_close(lg, ref, 11 * T_VOCAB, 1e-6f, "layer by layer");

    /* Half by half; and the attention tail alone on a captured o_proj input. */
    expect_ok(dsq_forward_embed(c, g_tiny_toks, 11, hid));
    for (int l = 0; l < T_LAYERS; l++) {
        float h0[11 * T_HIDDEN], h1[11 * T_HIDDEN];
        memcpy(h0, hid, sizeof hid);
        cap_o co = {l, {0}, 0};
        dsq_ctx_set_hooks(c, capture_o, NULL, &co);
        expect_ok(dsq_forward_half(c, l, 0, hid, 11, 0));
        dsq_ctx_set_hooks(c, NULL, NULL, NULL);
        assert_int_equal(co.n, 11);
        memcpy(h1, h0, sizeof h0);
        expect_ok(dsq_forward_tail(c, l, 0, co.x, h1, 11));
        assert_memory_equal(h1, hid, sizeof hid);
        expect_ok(dsq_forward_half(c, l, 1, hid, 11, 0));
    }
    expect_ok(dsq_forward_head(c, hid, 11, lg));
    assert_close(lg, ref, 11 * T_VOCAB, 1e-6f, "half by half");
    assert_int_equal(dsq_forward_half(c, T_LAYERS, 0, hid, 11, 0), DSQ_ERR_ARG);
    assert_int_equal(dsq_forward_half(c, -1, 1, hid, 11, 0), DSQ_ERR_ARG);
    assert_int_equal(dsq_forward_half(c, 0, 2, hid, 11, 0), DSQ_ERR_ARG);
    tail_inputs_match_captures(c, m);
    stop_ends_the_pass(c);

    /* BF16 products: close to F32, not equal; back to F32 exactly. */
    dsq_ctx_set_matmul(c, DSQ_MATMUL_BF16);
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, lg));
    double dmax = 0, rmax = 0;
    for (int i = 0; i < 11 * T_VOCAB; i++) {
        dmax = fmax(dmax, fabs((double)lg[i] - ref[i]));
        rmax = fmax(rmax, fabs((double)ref[i]));
    }
    if (!(dmax > 0 && dmax < 0.02 * rmax)) fail_msg("bf16 logits: max diff %g (max |logit| %g)", dmax, rmax);
    dsq_ctx_set_matmul(c, DSQ_MATMUL_DEFAULT);
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, lg));
    assert_close(lg, ref, 11 * T_VOCAB, 0, "F32 again");

    /* Token by token (decode paths) and in two pieces, through the cache. */
    for (int t = 0; t < 11; t++) expect_ok(dsq_forward(c, g_tiny_toks + t, 1, t, lg + t * T_VOCAB));
    assert_close(lg, ref, 11 * T_VOCAB, 1e-4f, "token by token");
    expect_ok(dsq_forward_range(c, g_tiny_toks, 5, 0, 4, lg));
    expect_ok(dsq_forward_range(c, g_tiny_toks + 5, 6, 5, 3, lg + T_VOCAB));
    assert_close(lg, ref + 4 * T_VOCAB, T_VOCAB, 1e-4f, "piece 1 last row");
    assert_close(lg + T_VOCAB, ref + 8 * T_VOCAB, 3 * T_VOCAB, 1e-4f, "piece 2 rows 3..5");

    /* Arguments. */
    assert_int_equal(dsq_forward(c, g_tiny_toks, 11, 6, lg), DSQ_ERR_ARG); /* past the 16-position cache */
    int32_t bad[2] = {5, T_VOCAB};
    assert_int_equal(dsq_forward(c, bad, 2, 0, lg), DSQ_ERR_ARG);
    assert_int_equal(dsq_forward_range(c, g_tiny_toks, 3, 0, 3, lg), DSQ_ERR_ARG);

    /* A NaN planted in layer 1's down projection is traced to layer 1. */
    dsq_linear *W = &m->layers[1].lin[DSQ_LLAMA_DOWN];
    float *w = malloc((size_t)T_HIDDEN * T_FFN * sizeof *w);
    expect_ok(dsq_linear_rows_f32(W, 0, T_HIDDEN, w));
    w[7 * T_FFN + 3] = NAN;
    dsq_linear_release(W);
    expect_ok(dsq_linear_init(W, DSQ_TYPE_F32, w, T_HIDDEN, T_FFN));
    W->owned = w;
    assert_int_equal(dsq_forward(c, g_tiny_toks, 11, 0, lg), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "layer 1"));

    dsq_ctx_free(c);
    dsq_model_close(m);

    /* A GGUF without one of the layer tensors names it. */
    char *broken = tiny_write_gguf(&tm, dir, "blk.1.ffn_up.weight");
    assert_int_equal(dsq_model_open(broken, &m), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "blk.1.ffn_up.weight"));
    free(broken), free(lg), free(lg2), free(ref), free(gg);
    tiny_free(&tm);
    dsq_test_rmtmp(dir);
}

/* Every linear of m replaced by a Q8_0 copy (the tiny widths are multiples of 32). */
static void to_q8_0(dsq_model *m)
{
    for (int l = 0; l < T_LAYERS; l++)
        for (int i = 0; i < DSQ_LLAMA_N_LINEARS; i++) {
            dsq_linear *W = &m->layers[l].lin[i];
            float *w = malloc((size_t)(W->out * W->in) * sizeof *w);
            size_t rb = (size_t)(W->in / 32) * 34, n = (size_t)W->out * rb;
            void *q = malloc(n);
            int64_t out = W->out, in = W->in;
            expect_ok(dsq_linear_rows_f32(W, 0, out, w));
            expect_ok(dsq_quantize(DSQ_TYPE_Q8_0, w, q, out, in, NULL));
            const float *bias = W->bias;
            float *bcopy = NULL;
            if (bias) {
                bcopy = malloc((size_t)out * sizeof *bcopy);
                memcpy(bcopy, bias, (size_t)out * sizeof *bcopy);
            }
            dsq_linear_release(W);
            expect_ok(dsq_linear_init(W, DSQ_TYPE_Q8_0, q, out, in));
            W->owned = q;
            if (bcopy) {
                expect_ok(dsq_linear_set_bias(W, DSQ_TYPE_F32, bcopy, out));
                free(bcopy);
            }
            free(w);
        }
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* DSQ_MATMUL_LLAMACPP: an 11-token prefill over Q8_0 weights takes the
 * decode path's rounded activations, so it equals a token-by-token pass (up to
 * the attention's summation order) and differs from the default F32 prefill. */
static void test_llamacpp_act(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA3);
    char *gg = tiny_write_gguf(&tm, dir, NULL);
    dsq_model *m;
    dsq_ctx *c;
    expect_ok(dsq_model_open(gg, &m));
    to_q8_0(m);
    expect_ok(dsq_ctx_new(m, 16, 2, &c));
    size_t n = 11 * T_VOCAB;
    float *dec = malloc(n * sizeof *dec), *pre = malloc(n * sizeof *pre), *lla = malloc(n * sizeof *lla);
    for (int t = 0; t < 11; t++) expect_ok(dsq_forward(c, g_tiny_toks + t, 1, t, dec + t * T_VOCAB));
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, pre));
    dsq_ctx_set_matmul(c, DSQ_MATMUL_LLAMACPP);
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, lla));
    double d_lla = max_diff(lla, dec, n), d_pre = max_diff(pre, dec, n);
    print_message("max logit difference from decode: llamacpp act %g, default prefill %g\n", d_lla, d_pre);
    if (!(d_lla <= 1e-4 && d_pre > 10 * d_lla && d_pre > 1e-5))
        fail_msg("llamacpp act vs decode %g, default prefill vs decode %g", d_lla, d_pre);
    dsq_ctx_set_matmul(c, DSQ_MATMUL_DEFAULT);
    expect_ok(dsq_forward(c, g_tiny_toks, 11, 0, lla));
    assert_true(max_diff(lla, pre, n) == 0);
    free(dec), free(pre), free(lla), free(gg);
    dsq_ctx_free(c);
    dsq_model_close(m);
    tiny_free(&tm);
    dsq_test_rmtmp(dir);
}

/* ================================================================ perplexity */

/* NLL of the token after each row, from full logits, in double. */
static double nll_at(const float *row, int vocab, int tok)
{
    double mx = row[0], s = 0;
    for (int i = 1; i < vocab; i++) mx = fmax(mx, row[i]);
    for (int i = 0; i < vocab; i++) s += exp(row[i] - mx);
    return -(row[tok] - mx - log(s));
}

/* Both protocols on the tiny model against a direct computation from full
 * logits: which tokens count, BOS replacing each llamacpp chunk's first token,
 * batches smaller than the context. */
static void test_ppl_protocols(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA_TIED);
    char *gg = tiny_write_gguf(&tm, dir, NULL);
    dsq_model *m;
    dsq_ctx *c;
    expect_ok(dsq_model_open(gg, &m));
    expect_ok(dsq_ctx_new(m, 16, 2, &c));
    enum { CTX = 16, NTOK = 70 };
    int32_t toks[NTOK], chunk[CTX];
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)(dsq_test_rand(&g_seed) % T_VOCAB);
    float *lg = malloc(CTX * T_VOCAB * sizeof *lg);
    for (int proto = 0; proto < 2; proto++) {
        double nll = 0, nll2 = 0;
        int count = 0, chunks = 3;
        for (int ch = 0; ch < chunks; ch++) {
            memcpy(chunk, toks + ch * CTX, sizeof chunk);
            if (proto == DSQ_PPL_LLAMACPP) chunk[0] = 1;
            expect_ok(dsq_forward(c, chunk, CTX, 0, lg));
            for (int p = proto == DSQ_PPL_LLAMACPP ? CTX / 2 : 0; p < CTX - 1; p++) {
                double v = nll_at(lg + p * T_VOCAB, T_VOCAB, toks[ch * CTX + p + 1]);
                nll += v, nll2 += v * v, count++;
            }
        }
        double mean = nll / count, ppl = exp(mean);
        double err = sqrt((nll2 / count - mean * mean) / (count - 1)) * ppl;
        for (int batch = 0; batch <= 5; batch += 5) {
            dsq_ppl_opts o;
            dsq_ppl_opts_default(&o);
            o.protocol = (dsq_ppl_protocol)proto;
            o.ctx = CTX;
            o.chunks = chunks;
            o.batch = batch;
            o.add_bos = true;
            o.bos = 1;
            dsq_ppl_result r;
            expect_ok(dsq_ppl_tokens(c, toks, NTOK, &o, &r));
            assert_int_equal(r.n_scored, count);
            assert_int_equal(r.n_chunks, chunks);
            assert_true(fabs(r.ppl - ppl) < 1e-4 * ppl);
            assert_true(fabs(r.ppl_err - err) < 1e-3 * err);
            o.chunks = 0; /* all: 70 / 16 = 4 */
            expect_ok(dsq_ppl_tokens(c, toks, NTOK, &o, &r));
            assert_int_equal(r.n_chunks, 4);
        }
    }
    /* llama-perplexity wants two chunks' worth of text. */
    dsq_ppl_opts o;
    dsq_ppl_opts_default(&o);
    o.ctx = CTX;
    dsq_ppl_result r;
    assert_int_equal(dsq_ppl_tokens(c, toks, 2 * CTX - 1, &o, &r), DSQ_ERR_ARG);
    o.ctx = 32; /* more than the cache holds */
    assert_int_equal(dsq_ppl_tokens(c, toks, NTOK, &o, &r), DSQ_ERR_ARG);
    dsq_ppl_protocol p;
    assert_int_equal(dsq_ppl_protocol_from_name("gptq", &p), DSQ_ERR_ARG);
    expect_ok(dsq_ppl_protocol_from_name("hf", &p));
    assert_int_equal(p, DSQ_PPL_HF);
    free(lg), free(gg);
    dsq_ctx_free(c);
    dsq_model_close(m);
    tiny_free(&tm);
    dsq_test_rmtmp(dir);
}

/* ================================================================ datasets */

static void test_dataset_lookup(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096];
    free(dsq_test_write(dir, "wiki.test.raw", " = Title = \n", 12));
    setenv("DSQ_DATA", dir, 1);
    assert_true(dsq_dataset_known("wikitext2"));
    assert_false(dsq_dataset_known("wikitext3"));
    expect_ok(dsq_dataset_path("wikitext2", DSQ_TEXT_RAW, path, sizeof path));
    assert_non_null(strstr(path, dir));
    char *text;
    size_t len;
    expect_ok(dsq_text_read(path, &text, &len));
    assert_int_equal(len, 12);
    assert_string_equal(text, " = Title = \n");
    free(text);
    /* The HF layout is a different file, looked for under .zst too; the
     * error says which file and where. */
    char *old_cache = getenv("DSQ_CACHE") ? strdup(getenv("DSQ_CACHE")) : NULL;
    char *old_shared = getenv("DSQ_SHARED_DIR") ? strdup(getenv("DSQ_SHARED_DIR")) : NULL;
    setenv("DSQ_CACHE", dir, 1);
    unsetenv("DSQ_SHARED_DIR");
    char *cwd = getcwd(NULL, 0), sub[4096];
    snprintf(sub, sizeof sub, "%s/a", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(chdir(sub), 0); /* no ../shared/datasets from here */
    assert_int_equal(dsq_dataset_path("wikitext2", DSQ_TEXT_HF_JOIN, path, sizeof path), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "wikitext-2-raw-v1.test.hfjoin.txt"));
    assert_non_null(strstr(dsq_errmsg(), dir));
    assert_int_equal(chdir(cwd), 0);
    free(cwd);
    if (old_cache)
        setenv("DSQ_CACHE", old_cache, 1);
    else
        unsetenv("DSQ_CACHE");
    if (old_shared) setenv("DSQ_SHARED_DIR", old_shared, 1);
    free(old_cache), free(old_shared);
    char *zst = dsq_test_shared("datasets/wikitext-2-raw-v1.test.hfjoin.txt.zst");
    if (zst) {
        expect_ok(dsq_text_read(zst, &text, &len));
        assert_int_equal(len, 1296370); /* ../shared/datasets/README.md */
        assert_memory_equal(text, "\n\n = Robert Boulter = \n", 23);
        free(text);
        /* A cut stream is refused, not read short. */
        char *raw;
        size_t rl;
        expect_ok(dsq_read_file(zst, 16 << 20, &raw, &rl));
        char *cut = dsq_test_write(dir, "cut.txt.zst", raw, rl / 2);
        assert_int_equal(dsq_text_read(cut, &text, &len), DSQ_ERR_FORMAT);
        free(raw), free(cut), free(zst);
    }
    unsetenv("DSQ_DATA");
    dsq_test_rmtmp(dir);
}

/* ================================================================ SmolLM2 reference */

typedef struct smol {
    char *model_path;
    cJSON *ref;
    dsq_model *m;
} smol;

static cJSON *load_fixture(void)
{
    char *text;
    size_t len;
    expect_ok(dsq_read_file(DSQ_SOURCE_DIR "/tests/data/ref_smollm2_q4_1.json", 16 << 20, &text, &len));
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

/* Opens the default model when it is the one the fixture was made from. */
static bool smol_open(smol *s)
{
    memset(s, 0, sizeof *s);
    s->model_path = dsq_test_default_model();
    if (!s->model_path) return false;
    s->ref = load_fixture();
    struct stat st;
    assert_int_equal(stat(s->model_path, &st), 0);
    double want = cJSON_GetObjectItem(s->ref, "model_bytes")->valuedouble;
    if ((double)st.st_size != want) {
        dsq_test_fixture_missing("%s has %lld bytes, the fixture was made from a %.0f-byte file", s->model_path,
                                 (long long)st.st_size, want);
        cJSON_Delete(s->ref);
        free(s->model_path);
        return false;
    }
    expect_ok(dsq_model_open(s->model_path, &s->m));
    return true;
}

static void smol_close(smol *s)
{
    dsq_model_close(s->m);
    cJSON_Delete(s->ref);
    free(s->model_path);
}

static void int_array(const cJSON *a, int32_t *out, int n)
{
    assert_int_equal(cJSON_GetArraySize(a), n);
    for (int i = 0; i < n; i++) out[i] = (int32_t)cJSON_GetArrayItem(a, i)->valueint;
}

/* |ours - reference| of the log-softmax over the fixture's columns of one
 * prompt (fixed ids and each position's top ids), and of the logsumexp of the
 * raw logits: the largest and the mean; *agree counts positions whose argmax
 * is the reference's. */
static double compare_prompt(const cJSON *p, const int32_t *fixed, int n_fixed, const float *lg, int64_t vocab, int n,
                             double *mean, int *agree)
{
    double worst = 0, sum = 0;
    int cnt = 0;
    *agree = 0;
    for (int t = 0; t < n; t++) {
        const float *row = lg + (size_t)t * (size_t)vocab;
        double mx = row[0], s = 0;
        int64_t am = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (row[i] > mx) mx = row[i], am = i;
        for (int64_t i = 0; i < vocab; i++) s += exp(row[i] - mx);
        double lse = mx + log(s);
        *agree += am == cJSON_GetArrayItem(cJSON_GetObjectItem(p, "argmax"), t)->valueint;
        double d = fabs(lse - cJSON_GetArrayItem(cJSON_GetObjectItem(p, "logsumexp"), t)->valuedouble);
        worst = fmax(worst, d), sum += d, cnt++;
        const cJSON *fl = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "fixed_logprobs"), t);
        for (int i = 0; i < n_fixed; i++) {
            d = fabs(row[fixed[i]] - lse - cJSON_GetArrayItem(fl, i)->valuedouble);
            worst = fmax(worst, d), sum += d, cnt++;
        }
        const cJSON *ti = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "top_ids"), t);
        const cJSON *tl = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "top_logprobs"), t);
        for (int i = 0; i < cJSON_GetArraySize(ti); i++) {
            d = fabs(row[cJSON_GetArrayItem(ti, i)->valueint] - lse - cJSON_GetArrayItem(tl, i)->valuedouble);
            worst = fmax(worst, d), sum += d, cnt++;
        }
    }
    *mean = sum / cnt;
    return worst;
}

static void test_smollm2_logits(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    int32_t fixed[64], toks[32];
    int_array(cJSON_GetObjectItem(s.ref, "fixed_ids"), fixed, 64);
    dsq_ctx *c;
    expect_ok(dsq_ctx_new(s.m, 64, 0, &c));
    int64_t V = s.m->vocab;
    float *lg = malloc(32 * (size_t)V * sizeof *lg);
    const cJSON *prompts = cJSON_GetObjectItem(s.ref, "prompts");
    for (int pi = 0; pi < cJSON_GetArraySize(prompts); pi++) {
        const cJSON *p = cJSON_GetArrayItem(prompts, pi);
        int_array(cJSON_GetObjectItem(p, "tokens"), toks, 32);
        expect_ok(dsq_forward(c, toks, 32, 0, lg));
        double mean;
        int agree;
        double d = compare_prompt(p, fixed, 64, lg, V, 32, &mean, &agree);
        printf("prompt %d, one batch: max |log-softmax - transformers| = %.2e\n", pi, d);
        assert_true(d < 1e-3);
        assert_int_equal(agree, 32);
        /* Pieces of 8 through the KV cache (blocked attention with a cache before). */
        for (int b = 0; b < 32; b += 8) expect_ok(dsq_forward(c, toks + b, 8, b, lg + (size_t)b * (size_t)V));
        d = compare_prompt(p, fixed, 64, lg, V, 32, &mean, &agree);
        printf("prompt %d, pieces of 8: %.2e\n", pi, d);
        assert_true(d < 1e-3);
        if (pi == 0) {
            /* Decode, one token at a time: vec_dot with activations rounded to
             * Q8_1/Q8_0 blocks as llama.cpp does, about 1% per linear on this
             * model, so only a statistical bound (a wrong row, position or
             * block pairing would be off by whole units). */
            for (int t = 0; t < 32; t++) expect_ok(dsq_forward(c, toks + t, 1, t, lg + (size_t)t * (size_t)V));
            d = compare_prompt(p, fixed, 64, lg, V, 32, &mean, &agree);
            printf("prompt %d, token by token (quantized activations): max %.2e, mean %.2e, argmax agrees %d/32\n", pi,
                   d, mean, agree);
            assert_true(mean < 0.3 && d < 1.5 && agree >= 28);
        }
    }
    free(lg);
    dsq_ctx_free(c);
    smol_close(&s);
}

static void test_smollm2_ppl(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    const cJSON *pr = cJSON_GetObjectItem(s.ref, "ppl");
    int ctx = cJSON_GetObjectItem(pr, "ctx")->valueint, all = cJSON_GetObjectItem(pr, "chunks")->valueint;
    int chunks = UNDER_SANITIZER ? 2 : all; /* sanitizer builds are ~10x slower */
    int n = ctx * all;
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    int_array(cJSON_GetObjectItem(pr, "tokens"), toks, n);
    double ref_nll = 0;
    for (int i = 0; i < chunks; i++)
        ref_nll += cJSON_GetArrayItem(cJSON_GetObjectItem(pr, "chunk_nll"), i)->valuedouble;
    double ref_ppl = exp(ref_nll / ((double)chunks * (ctx - 1)));
    dsq_ctx *c;
    expect_ok(dsq_ctx_new(s.m, ctx, 0, &c));
    dsq_ppl_opts o;
    dsq_ppl_opts_default(&o);
    o.protocol = DSQ_PPL_HF;
    o.ctx = ctx;
    o.chunks = chunks;
    dsq_ppl_result r;
    expect_ok(dsq_ppl_tokens(c, toks, n, &o, &r));
    printf("SmolLM2 WikiText-2 hf ctx %d, %d chunks: ppl %.4f (transformers %.4f), %.1f s, %.0f tok/s\n", ctx, chunks,
           r.ppl, ref_ppl, r.seconds, r.tokens_per_s);
    assert_int_equal(r.n_scored, (int64_t)chunks * (ctx - 1));
    assert_true(fabs(r.ppl / ref_ppl - 1) < 0.002);
    if (chunks == all) assert_true(fabs(ref_ppl - cJSON_GetObjectItem(pr, "ppl")->valuedouble) < 1e-6 * ref_ppl);
    free(toks);
    dsq_ctx_free(c);
    smol_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_matches_naive),      cmocka_unit_test(test_gemm_avx512_equals_avx2),
        cmocka_unit_test(test_scalar_vs_simd),          cmocka_unit_test(test_linear_every_type),
        cmocka_unit_test(test_rmsnorm_swiglu_add),      cmocka_unit_test(test_embed),
        cmocka_unit_test(test_rope_plain_and_linear),   cmocka_unit_test(test_rope_llama3_yarn),
        cmocka_unit_test(test_rope_layouts_consistent), cmocka_unit_test(test_attention_vs_naive),
        cmocka_unit_test(test_tiny_gguf_equals_hf),     cmocka_unit_test(test_tiny_forward_paths),
        cmocka_unit_test(test_batch_equals_alone),      cmocka_unit_test(test_llamacpp_act),
        cmocka_unit_test(test_ppl_protocols),           cmocka_unit_test(test_dataset_lookup),
        cmocka_unit_test(test_smollm2_logits),          cmocka_unit_test(test_smollm2_ppl),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
