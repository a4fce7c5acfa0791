/* The CUDA library products (cuBLAS dense F16/BF16, cuBLASLt FP8 and INT8)
 * against exact CPU references on the same inputs. Everywhere: the calls'
 * refusals; on a GPU: the numbers. */
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
#include "kernels/fp8.h"
#include "runtime/cuda/cuda_backend.h"
#include "tests/helpers/testutil.h"

static void test_refusals_without_device(void **state)
{
    (void)state;
    if (dsq_cuda_available()) DSQ_TEST_SKIP_ENV("a CUDA device is visible; the device cases run instead");
    void *p = &p;
    assert_int_not_equal(dsq_cuda_malloc(&p, 16, "test buffer"), DSQ_OK);
    assert_null(p);
    assert_int_equal(dsq_cuda_gemm_dense(DSQ_TYPE_F16, DSQ_TYPE_F32, 4, 16, 16, NULL, NULL, NULL), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "CUDA"));
    assert_int_equal(dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_TENSOR, DSQ_TYPE_F32, 4, 16, 16, NULL, NULL, NULL, NULL, NULL),
                     DSQ_ERR_UNSUPPORTED);
    dsq_cuda_info info;
    assert_int_equal(dsq_cuda_get_info(&info), DSQ_ERR_UNSUPPORTED);
}

/* Device buffers of a case, uploaded from host arrays. */
static void *up(const void *h, size_t bytes)
{
    void *d = NULL;
    assert_int_equal(dsq_cuda_malloc(&d, bytes, "test input"), DSQ_OK);
    assert_int_equal(dsq_cuda_upload(d, h, bytes), DSQ_OK);
    return d;
}

static void dense_case(dsq_type ab, dsq_type out, int m, int n, int k)
{
    uint64_t r = (uint64_t)(m * 131 + n * 7 + k);
    uint16_t *x = malloc((size_t)m * k * 2), *w = malloc((size_t)n * k * 2);
    for (int i = 0; i < m * k; i++) {
        float v = dsq_test_randn(&r);
        x[i] = ab == DSQ_TYPE_F16 ? dsq_f32_to_f16(v) : dsq_f32_to_bf16(v);
    }
    for (int i = 0; i < n * k; i++) {
        float v = 0.05f * dsq_test_randn(&r);
        w[i] = ab == DSQ_TYPE_F16 ? dsq_f32_to_f16(v) : dsq_f32_to_bf16(v);
    }
    void *dx = up(x, (size_t)m * k * 2), *dw = up(w, (size_t)n * k * 2), *dy = NULL;
    size_t yb = out == DSQ_TYPE_F32 ? 4 : 2;
    assert_int_equal(dsq_cuda_malloc(&dy, (size_t)m * n * yb, "y"), DSQ_OK);
    assert_int_equal(dsq_cuda_gemm_dense(ab, out, m, n, k, dx, dw, dy), DSQ_OK);
    assert_int_equal(dsq_cuda_sync("dense test"), DSQ_OK);
    void *y = calloc((size_t)m * n, yb);
    assert_int_equal(dsq_cuda_download(y, dy, (size_t)m * n * yb), DSQ_OK);
    float (*cvt)(uint16_t) = ab == DSQ_TYPE_F16 ? dsq_f16_to_f32 : dsq_bf16_to_f32;
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int o = 0; o < n; o++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < k; c++) {
                double p = (double)cvt(x[i * k + c]) * cvt(w[o * k + c]);
                acc += p;
                mag += fabs(p);
            }
            double got = out == DSQ_TYPE_F32 ? ((float *)y)[i * n + o] : cvt(((uint16_t *)y)[i * n + o]);
            double tol = 1e-4 * mag + (out == DSQ_TYPE_F32 ? 0 : fabs(acc) * 0x1p-7);
            double e = fabs(got - acc) / (tol + 1e-30);
            if (e > worst) worst = e;
        }
    fprintf(stderr, "dense %s -> %s %d x %d x %d: worst error / tolerance %.3g\n", dsq_type_name(ab),
            dsq_type_name(out), m, n, k, worst);
    assert_true(worst <= 1.0);
    dsq_cuda_free(dx);
    dsq_cuda_free(dw);
    dsq_cuda_free(dy);
    free(x);
    free(w);
    free(y);
}

static void test_device_dense(void **state)
{
    (void)state;
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    dense_case(DSQ_TYPE_F16, DSQ_TYPE_F32, 3, 64, 256);
    dense_case(DSQ_TYPE_BF16, DSQ_TYPE_F32, 70, 96, 512);
    dense_case(DSQ_TYPE_BF16, DSQ_TYPE_BF16, 33, 48, 128);
    dense_case(DSQ_TYPE_F16, DSQ_TYPE_F16, 1, 32, 64);
}

/* A random E4M3 code that is not NaN. */
static uint8_t rand_e4m3(uint64_t *r)
{
    uint8_t c;
    do c = (uint8_t)dsq_test_rand(r);
    while ((c & 0x7f) == 0x7f);
    return c;
}

static void fp8_case(dsq_cuda_scale sc, dsq_type out, int m, int n, int k)
{
    const float *tab = dsq_fp8_e4m3_table();
    uint64_t r = (uint64_t)(m * 17 + n * 3 + k + sc);
    uint8_t *x = malloc((size_t)m * k), *w = malloc((size_t)n * k);
    for (int i = 0; i < m * k; i++) x[i] = rand_e4m3(&r);
    for (int i = 0; i < n * k; i++) w[i] = rand_e4m3(&r);
    int nsx = sc == DSQ_CUDA_SCALE_ROWCOL ? m : 1, nsw = sc == DSQ_CUDA_SCALE_ROWCOL ? n : 1;
    float *sx = malloc((size_t)nsx * 4), *sw = malloc((size_t)nsw * 4);
    for (int i = 0; i < nsx; i++) sx[i] = 0.001f * (1 + (float)(dsq_test_rand(&r) % 100));
    for (int i = 0; i < nsw; i++) sw[i] = 0.001f * (1 + (float)(dsq_test_rand(&r) % 100));
    void *dx = up(x, (size_t)m * k), *dw = up(w, (size_t)n * k), *dsx = up(sx, (size_t)nsx * 4),
         *dsw = up(sw, (size_t)nsw * 4), *dy = NULL;
    size_t yb = out == DSQ_TYPE_F32 ? 4 : 2;
    assert_int_equal(dsq_cuda_malloc(&dy, (size_t)m * n * yb, "y"), DSQ_OK);
    dsq_status st = dsq_cuda_gemm_fp8(sc, out, m, n, k, dx, dsx, dw, dsw, dy);
    if (st != DSQ_OK) fprintf(stderr, "FP8: %s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    assert_int_equal(dsq_cuda_sync("FP8 test"), DSQ_OK);
    void *y = calloc((size_t)m * n, yb);
    assert_int_equal(dsq_cuda_download(y, dy, (size_t)m * n * yb), DSQ_OK);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int o = 0; o < n; o++) {
            double acc = 0, mag = 0, s = (double)sx[nsx > 1 ? i : 0] * sw[nsw > 1 ? o : 0];
            for (int c = 0; c < k; c++) {
                double p = (double)tab[x[i * k + c]] * tab[w[o * k + c]];
                acc += p;
                mag += fabs(p);
            }
            acc *= s, mag *= s;
            double got = out == DSQ_TYPE_F32 ? ((float *)y)[i * n + o] : dsq_bf16_to_f32(((uint16_t *)y)[i * n + o]);
            /* FP8 tensor cores accumulate with fewer bits than F32 (DeepSeek-V3's report) */
            double tol = 2e-3 * mag + (out == DSQ_TYPE_F32 ? 0 : fabs(acc) * 0x1p-7);
            double e = fabs(got - acc) / (tol + 1e-30);
            if (e > worst) worst = e;
        }
    fprintf(stderr, "FP8 %s -> %s %d x %d x %d: worst error / tolerance %.3g\n",
            sc == DSQ_CUDA_SCALE_ROWCOL ? "per-row" : "per-tensor", dsq_type_name(out), m, n, k, worst);
    assert_true(worst <= 1.0);
    dsq_cuda_free(dx);
    dsq_cuda_free(dw);
    dsq_cuda_free(dsx);
    dsq_cuda_free(dsw);
    dsq_cuda_free(dy);
    free(x), free(w), free(sx), free(sw), free(y);
}

static void test_device_fp8(void **state)
{
    (void)state;
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    dsq_cuda_info info = {{0}, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(dsq_cuda_get_info(&info), DSQ_OK);
    if (info.cc_major * 10 + info.cc_minor < 89) {
        assert_int_equal(
            dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_TENSOR, DSQ_TYPE_F32, 16, 16, 16, NULL, NULL, NULL, NULL, NULL),
            DSQ_ERR_UNSUPPORTED);
        DSQ_TEST_SKIP_ENV("GPU below sm_89: the FP8 refusal was checked");
    }
    fp8_case(DSQ_CUDA_SCALE_TENSOR, DSQ_TYPE_F32, 16, 64, 256);
    fp8_case(DSQ_CUDA_SCALE_TENSOR, DSQ_TYPE_BF16, 40, 128, 512);
    fp8_case(DSQ_CUDA_SCALE_ROWCOL, DSQ_TYPE_F32, 24, 96, 384);
    fp8_case(DSQ_CUDA_SCALE_ROWCOL, DSQ_TYPE_BF16, 128, 256, 1024);
}

/* DeepSeek-V3's block scales in the layout cuBLASLt reads (found on the H200
 * by trying the transposes: docs/cuda.md): activation scales [k/128][m], m
 * fastest; weight scales [n/128][ld], ld = k/128 rounded up to 4. */
static void fp8_block_case(int m, int n, int k)
{
    const float *tab = dsq_fp8_e4m3_table();
    uint64_t r = (uint64_t)(m * 29 + n + k);
    int kb = (k + 127) / 128, nb = (n + 127) / 128, ld = dsq_cuda_fp8_block_ld(k);
    uint8_t *x = malloc((size_t)m * k), *w = malloc((size_t)n * k);
    for (int i = 0; i < m * k; i++) x[i] = rand_e4m3(&r);
    for (int i = 0; i < n * k; i++) w[i] = rand_e4m3(&r);
    float *sx = malloc((size_t)m * kb * 4), *sw = calloc((size_t)nb * ld, 4);
    for (int i = 0; i < m * kb; i++) sx[i] = 0.5f + (float)(dsq_test_rand(&r) % 1000) / 666.0f;
    for (int i = 0; i < nb; i++)
        for (int b = 0; b < kb; b++) sw[i * ld + b] = 0.5f + (float)(dsq_test_rand(&r) % 1000) / 666.0f;
    void *dx = up(x, (size_t)m * k), *dw = up(w, (size_t)n * k), *dsx = up(sx, (size_t)m * kb * 4),
         *dsw = up(sw, (size_t)nb * ld * 4), *dy = NULL;
    assert_int_equal(dsq_cuda_malloc(&dy, (size_t)m * n * 4, "y"), DSQ_OK);
    dsq_status st = dsq_cuda_gemm_fp8(DSQ_CUDA_SCALE_BLOCK128, DSQ_TYPE_F32, m, n, k, dx, dsx, dw, dsw, dy);
    if (st != DSQ_OK) fprintf(stderr, "FP8 block scales: %s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    assert_int_equal(dsq_cuda_sync("FP8 block test"), DSQ_OK);
    float *y = calloc((size_t)m * n, 4);
    assert_int_equal(dsq_cuda_download(y, dy, (size_t)m * n * 4), DSQ_OK);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int o = 0; o < n; o++) {
            double acc = 0, mag = 0;
            for (int b = 0; b < kb; b++) {
                double part = 0, pm = 0;
                for (int c = b * 128; c < k && c < (b + 1) * 128; c++) {
                    double p = (double)tab[x[i * k + c]] * tab[w[o * k + c]];
                    part += p;
                    pm += fabs(p);
                }
                double s12 = (double)sx[b * m + i] * sw[(o / 128) * ld + b];
                acc += part * s12;
                mag += pm * s12;
            }
            double e = fabs(y[i * n + o] - acc) / (2e-3 * mag + 1e-30);
            if (!(e <= worst)) worst = e; /* NaN counts as worst */
        }
    fprintf(stderr, "FP8 block scales %d x %d x %d: worst error / tolerance %.3g\n", m, n, k, worst);
    assert_true(worst <= 1.0);
    dsq_cuda_free(dx), dsq_cuda_free(dw), dsq_cuda_free(dsx), dsq_cuda_free(dsw), dsq_cuda_free(dy);
    free(x), free(w), free(sx), free(sw), free(y);
}

static void test_device_fp8_block(void **state)
{
    (void)state;
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    dsq_cuda_info info = {{0}, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(dsq_cuda_get_info(&info), DSQ_OK);
    if (info.cc_major * 10 + info.cc_minor < 89) DSQ_TEST_SKIP_ENV("GPU below sm_89");
    fp8_block_case(64, 256, 512);
    fp8_block_case(200, 384, 640);
    fp8_block_case(32, 128, 1152);
}

static void i8_case(dsq_type out, int m, int n, int k)
{
    uint64_t r = (uint64_t)(m * 5 + n * 11 + k);
    int8_t *x = malloc((size_t)m * k), *w = malloc((size_t)n * k);
    for (int i = 0; i < m * k; i++) x[i] = (int8_t)(dsq_test_rand(&r) % 255 - 127);
    for (int i = 0; i < n * k; i++) w[i] = (int8_t)(dsq_test_rand(&r) % 255 - 127);
    float *sx = malloc((size_t)m * 4), *sw = malloc((size_t)n * 4);
    for (int i = 0; i < m; i++) sx[i] = 1e-3f * (1 + (float)(dsq_test_rand(&r) % 1000));
    for (int i = 0; i < n; i++) sw[i] = 1e-4f * (1 + (float)(dsq_test_rand(&r) % 1000));
    void *dx = up(x, (size_t)m * k), *dw = up(w, (size_t)n * k), *dsx = up(sx, (size_t)m * 4),
         *dsw = up(sw, (size_t)n * 4), *dy = NULL, *dacc = NULL;
    size_t yb = out == DSQ_TYPE_F32 ? 4 : 2;
    assert_int_equal(dsq_cuda_malloc(&dy, (size_t)m * n * yb, "y"), DSQ_OK);
    assert_int_equal(dsq_cuda_malloc(&dacc, (size_t)m * n * 4, "acc"), DSQ_OK);
    dsq_status st = dsq_cuda_gemm_i8(out, m, n, k, dx, dsx, dw, dsw, dacc, dy);
    if (st != DSQ_OK) fprintf(stderr, "INT8: %s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    assert_int_equal(dsq_cuda_sync("INT8 test"), DSQ_OK);
    void *y = calloc((size_t)m * n, yb);
    assert_int_equal(dsq_cuda_download(y, dy, (size_t)m * n * yb), DSQ_OK);
    size_t bad = 0;
    for (int i = 0; i < m; i++)
        for (int o = 0; o < n; o++) {
            int32_t acc = 0;
            for (int c = 0; c < k; c++) acc += (int32_t)x[i * k + c] * w[o * k + c];
            float want = (float)acc * sx[i] * sw[o]; /* the epilogue's two roundings, in its order */
            bool same = out == DSQ_TYPE_F32 ? ((float *)y)[i * n + o] == want
                                            : ((uint16_t *)y)[i * n + o] == dsq_f32_to_bf16(want);
            if (!same && bad++ < 5) fprintf(stderr, "INT8 y[%d][%d]: want %.9g\n", i, o, (double)want);
        }
    fprintf(stderr, "INT8 -> %s %d x %d x %d: %zu of %d outputs differ from the exact int32 result\n",
            dsq_type_name(out), m, n, k, bad, m * n);
    assert_int_equal(bad, 0);
    dsq_cuda_free(dx), dsq_cuda_free(dw), dsq_cuda_free(dsx), dsq_cuda_free(dsw), dsq_cuda_free(dy);
    dsq_cuda_free(dacc);
    free(x), free(w), free(sx), free(sw), free(y);
}

static void test_device_i8(void **state)
{
    (void)state;
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    i8_case(DSQ_TYPE_F32, 16, 64, 256);
    i8_case(DSQ_TYPE_F32, 37, 96, 1024);
    i8_case(DSQ_TYPE_BF16, 128, 128, 512);
    assert_int_equal(dsq_cuda_gemm_i8(DSQ_TYPE_F32, 4, 16, 18, NULL, NULL, NULL, NULL, NULL, NULL),
                     DSQ_ERR_UNSUPPORTED); /* k not a multiple of 4: refused before any launch */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals_without_device),
        cmocka_unit_test(test_device_dense),
        cmocka_unit_test(test_device_fp8),
        cmocka_unit_test(test_device_fp8_block),
        cmocka_unit_test(test_device_i8),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
