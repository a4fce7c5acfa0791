/* The CUDA W4A16 kernel: its host side everywhere (repacking against the INT
 * group storage, the documented tile layout, refusals, launch shapes, the
 * exact reference), and on a GPU the kernel against that reference. */
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
#include "quantizers/intq.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/w4a16_pack.h"
#include "tests/helpers/testutil.h"

/* Random 4-bit groups: codes and zeros 0..15, scales 0.002..0.05. */
static void make_intq(dsq_intq *q, int64_t n, int64_t k, int group, uint64_t seed)
{
    memset(q, 0, sizeof *q);
    q->rows = n, q->cols = k, q->bits = 4, q->group_size = group, q->n_groups = k / group, q->sym = false;
    q->codes = malloc((size_t)(n * k));
    q->scales = malloc((size_t)(n * q->n_groups) * sizeof(float));
    q->zeros = malloc((size_t)(n * q->n_groups));
    uint64_t r = seed;
    for (int64_t i = 0; i < n * k; i++) q->codes[i] = (uint8_t)(dsq_test_rand(&r) % 16);
    for (int64_t i = 0; i < n * q->n_groups; i++) {
        q->scales[i] = 0.002f + 0.048f * (float)(dsq_test_rand(&r) % 10000) / 10000.0f;
        q->zeros[i] = (uint8_t)(dsq_test_rand(&r) % 16);
    }
}

static void free_intq(dsq_intq *q)
{
    free(q->codes);
    free(q->scales);
    free(q->zeros);
}

static void test_pack_roundtrip(void **state)
{
    (void)state;
    const int groups[] = {32, 64, 128, 192};
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        dsq_intq q;
        int64_t n = 48, k = 384;
        make_intq(&q, n, k, groups[gi], 7 + gi);
        dsq_w4_packed p;
        assert_int_equal(dsq_w4_pack(&q, &p), DSQ_OK);
        float *deq = malloc((size_t)(n * k) * sizeof *deq);
        assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < k; c++) {
                assert_int_equal(dsq_w4_code(&p, r, c), q.codes[r * k + c]);
                /* the kernel's F16 weight: the plain dequantization up to F16 roundings */
                float w = dsq_f16_to_f32(dsq_w4_weight(&p, r, c)), s = q.scales[r * q.n_groups + c / groups[gi]];
                assert_true(fabsf(w - deq[r * k + c]) <= 16 * s * 0x1p-10f);
            }
        free(deq);
        dsq_w4_packed_free(&p);
        free_intq(&q);
    }
}

/* The layout as w4a16_pack.h documents it, independent of dsq_w4_code. */
static void test_pack_layout_documented(void **state)
{
    (void)state;
    dsq_intq q;
    int64_t n = 32, k = 128;
    make_intq(&q, n, k, 64, 3);
    memset(q.codes, 0, (size_t)(n * k));
    /* row 17 column 100: tile (1, 1); tile row 1 (nh 0, g 1), tile column 36 (ks 2,
     * j 0, t 2, first of its pair): lane 6, pair 4, word 1, nibble 0 */
    q.codes[17 * k + 100] = 11;
    /* row 2 column 7: tile 0; g 2, ks 0, j 0, t 3, second of its pair: lane 11,
     * pair 0, word 0, nibble 4 */
    q.codes[2 * k + 7] = 5;
    dsq_w4_packed p;
    assert_int_equal(dsq_w4_pack(&q, &p), DSQ_OK);
    size_t tile1 = (size_t)(1 * (k / 64) + 1) * DSQ_W4_TILE_WORDS;
    assert_int_equal(p.qw[tile1 + 6 * 4 + 1], 11u);
    assert_int_equal(p.qw[11 * 4 + 0], 5u << 16);
    size_t nz = 0;
    for (size_t i = 0; i < (size_t)(n / 16 * k / 64 * DSQ_W4_TILE_WORDS); i++) nz += p.qw[i] != 0;
    assert_int_equal(nz, 2);
    /* the scale word of row 17, group 1: F16 scale low, F16 -zero*scale high */
    uint32_t w = p.sz[1 * n + 17];
    uint16_t s16 = dsq_f32_to_f16(q.scales[17 * 2 + 1]);
    assert_int_equal(w & 0xffffu, s16);
    assert_int_equal(w >> 16, dsq_f32_to_f16(-(float)q.zeros[17 * 2 + 1] * dsq_f16_to_f32(s16)));
    dsq_w4_packed_free(&p);
    free_intq(&q);
}

static void expect_refusal(dsq_intq *q, dsq_status want, const char *words)
{
    dsq_w4_packed p;
    assert_int_equal(dsq_w4_pack(q, &p), want);
    assert_non_null(strstr(dsq_errmsg(), words));
    assert_null(p.qw);
}

static void test_pack_refusals(void **state)
{
    (void)state;
    dsq_intq q;
    make_intq(&q, 32, 128, 64, 5);
    q.bits = 3;
    expect_refusal(&q, DSQ_ERR_UNSUPPORTED, "3-bit");
    q.bits = 4;
    int32_t gidx[128] = {0};
    q.g_idx = gidx;
    expect_refusal(&q, DSQ_ERR_UNSUPPORTED, "g_idx");
    q.g_idx = NULL;
    q.rows = 24;
    expect_refusal(&q, DSQ_ERR_UNSUPPORTED, "output rows");
    q.rows = 32;
    q.cols = 96, q.n_groups = 2, q.group_size = 48;
    expect_refusal(&q, DSQ_ERR_UNSUPPORTED, "input columns");
    q.cols = 128, q.group_size = 48, q.n_groups = 2;
    expect_refusal(&q, DSQ_ERR_UNSUPPORTED, "group size 48");
    q.group_size = 64;
    q.zeros[5] = 16;
    expect_refusal(&q, DSQ_ERR_FORMAT, "zero 16");
    q.zeros[5] = 0;
    q.scales[9] = NAN;
    expect_refusal(&q, DSQ_ERR_NUMERIC, "row 4 group 1");
    q.scales[9] = 1e6f;
    expect_refusal(&q, DSQ_ERR_NUMERIC, "does not fit F16");
    q.scales[9] = 0.01f;
    q.codes[300] = 16;
    expect_refusal(&q, DSQ_ERR_FORMAT, "row 2 column 44");
    free_intq(&q);
}

static void test_launch_shapes(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{16, 64},      {48, 640},     {4096, 4096}, {14336, 4096},
                                 {4096, 14336}, {8192, 28672}, {1024, 8192}};
    const int ms[] = {1, 4, 16, 17, 32, 33, 64, 256};
    const int waves[] = {1, 4 * 108, 7 * 132};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++)
            for (size_t l = 0; l < sizeof waves / sizeof waves[0]; l++) {
                int64_t n = shapes[i][0], k = shapes[i][1];
                dsq_w4_shape s = dsq_w4_launch_shape(n, k, ms[j], waves[l]);
                assert_true(s.slice % 64 == 0 && s.slice > 0 && s.slice <= DSQ_W4_MAX_SLICE);
                assert_true((int64_t)s.splits * s.slice >= k);      /* every column covered */
                assert_true((int64_t)(s.splits - 1) * s.slice < k); /* no empty slice */
                int64_t rows_per_block = DSQ_W4_WARPS * DSQ_W4_ROW_TILES_PER_WARP * 16;
                assert_true((int64_t)s.blocks_n * rows_per_block >= n &&
                            (int64_t)(s.blocks_n - 1) * rows_per_block < n);
                assert_int_equal(s.m_block, ms[j] <= 16 ? 16 : ms[j] <= 32 ? 32 : 64);
                assert_int_equal(s.m_blocks, (ms[j] + s.m_block - 1) / s.m_block);
                int64_t blocks = (int64_t)s.blocks_n * s.splits * s.m_blocks,
                        most = (int64_t)s.blocks_n * (k / 64) * s.m_blocks;
                int64_t want = waves[l], have = (int64_t)s.blocks_n * s.m_blocks;
                assert_true(blocks >= (want < most ? want : most) / 2); /* the GPU is filled when k allows */
                if (have <= want && k <= DSQ_W4_MAX_SLICE) assert_true(blocks <= want); /* and in one wave */
            }
}

/* The reference against a plain F32 product of the dequantized weights. */
static void test_reference_matches_dequantized(void **state)
{
    (void)state;
    dsq_intq q;
    int64_t n = 32, k = 256;
    make_intq(&q, n, k, 128, 11);
    dsq_w4_packed p;
    assert_int_equal(dsq_w4_pack(&q, &p), DSQ_OK);
    float *deq = malloc((size_t)(n * k) * sizeof *deq), x[3 * 256];
    assert_int_equal(dsq_intq_dequantize(&q, deq), DSQ_OK);
    uint64_t r = 9;
    for (int i = 0; i < 3 * 256; i++) x[i] = dsq_test_randn(&r);
    double y[3 * 32], mag[3 * 32];
    assert_int_equal(dsq_w4_reference(&p, x, 3, y, mag), DSQ_OK);
    for (int i = 0; i < 3; i++)
        for (int64_t o = 0; o < n; o++) {
            double want = 0, a = 0;
            for (int64_t c = 0; c < k; c++) {
                want += (double)x[i * k + c] * deq[o * k + c];
                a += fabs((double)x[i * k + c] * deq[o * k + c]);
            }
            assert_true(fabs(y[i * n + o] - want) <= 2e-3 * a); /* F16 roundings of x and w only */
            assert_true(fabs(mag[i * n + o] - a) <= 2e-3 * a);
        }
    free(deq);
    dsq_w4_packed_free(&p);
    free_intq(&q);
}

/* One GPU product against the reference; returns the worst |err| / (sum |x w|). */
static double device_case(int64_t n, int64_t k, int group, int m, uint64_t seed)
{
    dsq_intq q;
    make_intq(&q, n, k, group, seed);
    dsq_w4_packed p;
    assert_int_equal(dsq_w4_pack(&q, &p), DSQ_OK);
    float *x = malloc((size_t)m * (size_t)k * sizeof *x), *y = malloc((size_t)m * (size_t)n * sizeof *y);
    uint16_t *xh = malloc((size_t)m * (size_t)k * sizeof *xh);
    double *ref = malloc((size_t)m * (size_t)n * sizeof *ref), *mag = malloc((size_t)m * (size_t)n * sizeof *mag);
    uint64_t r = seed * 31 + 1;
    for (int64_t i = 0; i < m * k; i++) {
        x[i] = dsq_test_randn(&r);
        xh[i] = dsq_f32_to_f16(x[i]);
    }
    assert_int_equal(dsq_w4_reference(&p, x, m, ref, mag), DSQ_OK);
    dsq_cuda_w4 *w = NULL;
    void *dx = NULL, *dy = NULL;
    assert_int_equal(dsq_cuda_w4_upload(&p, &w), DSQ_OK);
    assert_int_equal(dsq_cuda_malloc(&dx, (size_t)m * (size_t)k * 2, "x"), DSQ_OK);
    assert_int_equal(dsq_cuda_malloc(&dy, (size_t)m * (size_t)n * 4, "y"), DSQ_OK);
    assert_int_equal(dsq_cuda_upload(dx, xh, (size_t)m * (size_t)k * 2), DSQ_OK);
    assert_int_equal(dsq_cuda_w4a16(w, dx, dy, m), DSQ_OK);
    assert_int_equal(dsq_cuda_sync("W4A16 test"), DSQ_OK);
    assert_int_equal(dsq_cuda_download(y, dy, (size_t)m * (size_t)n * 4), DSQ_OK);
    double worst = 0;
    for (int64_t i = 0; i < m * n; i++) {
        double e = fabs(y[i] - ref[i]) / (mag[i] + 1e-30);
        if (e > worst) worst = e;
    }
    fprintf(stderr, "W4A16 %lld x %lld group %d, %d rows: worst |GPU - exact| / sum|xw| = %.3g\n", (long long)n,
            (long long)k, group, m, worst);
    dsq_cuda_free(dx);
    dsq_cuda_free(dy);
    dsq_cuda_w4_free(w);
    free(x);
    free(y);
    free(xh);
    free(ref);
    free(mag);
    dsq_w4_packed_free(&p);
    free_intq(&q);
    return worst;
}

static void test_device_w4a16(void **state)
{
    (void)state;
    if (!dsq_cuda_available()) DSQ_TEST_SKIP_ENV("no CUDA device visible");
    /* F32 accumulation of F16 products: ~1e-6 relative in practice; 1e-3 still
     * catches a wrong code, scale, tile or slice (errors of order 1) */
    const struct {
        int64_t n, k;
        int group, m;
    } cases[] = {{16, 64, 64, 1},     {48, 640, 32, 3},    {64, 1024, 128, 16},
                 {80, 2048, 128, 17}, {256, 4096, 128, 1}, {128, 768, 768, 64},
                 {512, 512, 64, 100}, {64, 256, 128, 32},  {32, 8192, 128, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_true(device_case(cases[i].n, cases[i].k, cases[i].group, cases[i].m, 100 + i) < 1e-3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_roundtrip),
        cmocka_unit_test(test_pack_layout_documented),
        cmocka_unit_test(test_pack_refusals),
        cmocka_unit_test(test_launch_shapes),
        cmocka_unit_test(test_reference_matches_dequantized),
        cmocka_unit_test(test_device_w4a16),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
