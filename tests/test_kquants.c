/* k-quants: q2_K, q3_K, q4_K, q5_K, q6_K and the q8_K activation type.
 *
 * - reference vectors: ../shared/vectors/kquants.gguf holds ggml's bytes for 10
 *   distributions, plain and with an imatrix; the dispatching (AVX2 when
 *   available) and the scalar quantizers must reproduce them byte for byte,
 *   and the dequantizer the .deq tensors bit for bit.
 * - all-zero rows: every byte 0 (README note 5), without ../shared.
 * - round trip: each element dequantizes to the nearest point of its
 *   sub-block's grid (decoded here from the block bytes, so a wrong bit or
 *   nibble order fails), and the relative RMS error stays under a bound per
 *   type (a wrong scale or min fails).
 * - q8_K: round-trip error within half a step, bsums, the sign of d.
 * - SIMD against scalar: identical bytes on rows built to reach every branch.
 * - dot products against a double-precision dot of the dequantized rows, and
 *   the qtype table entries. */
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
#include "formats/gguf.h"
#include "kernels/cpu.h"
#include "quantizers/kquants_internal.h"
#include "quantizers/kquants_ref.h"
#include "quantizers/qtypes.h"
#include "quantizers/quants.h"
#include "tests/helpers/testutil.h"

typedef void (*quant_fn)(const float *x, void *y, int64_t n, const float *qw);
typedef void (*deq_fn)(const void *x, float *y, int64_t n);
typedef void (*dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct kcase {
    const char *name;
    dsq_type type;
    int block_bytes;
    int sub;        /* sub-block size: one scale per sub elements */
    int lmin, lmax; /* level range of the grid a*l + b */
    quant_fn quant, quant_ref;
    deq_fn deq;
    dot_fn dot, dot_ref;
    double rms_plain, rms_imat; /* bounds on RMS(x - deq) / RMS(x) for N(0,1) rows */
} kcase;

#define KC(t, T, bb, sub, lo, hi, rp, ri)                                                          \
    {#t, DSQ_TYPE_##T, bb, sub, lo, hi, dsq_quantize_row_##t, dsq_quantize_row_##t##_ref,          \
     dsq_dequantize_row_##t, dsq_vec_dot_##t##_q8_K, dsq_vec_dot_##t##_q8_K_ref, rp, ri}

/* RMS bounds: 1.3x what ggml's algorithms give on Gaussian rows (q2_K 0.30,
 * q3_K 0.154, q4_K 0.073, q5_K 0.036, q6_K 0.018; imatrix alike). A wrong scale,
 * min or level order is far outside them. */
static const kcase g_cases[] = {
    KC(q2_K, Q2_K, 84, 16, 0, 3, 0.39, 0.39),     KC(q3_K, Q3_K, 110, 16, -4, 3, 0.20, 0.20),
    KC(q4_K, Q4_K, 144, 32, 0, 15, 0.095, 0.097), KC(q5_K, Q5_K, 176, 32, 0, 31, 0.047, 0.048),
    KC(q6_K, Q6_K, 210, 16, -32, 31, 0.024, 0.024),
};
#define N_CASES (sizeof g_cases / sizeof g_cases[0])

static size_t row_bytes(const kcase *c, int64_t n) { return (size_t)(n / 256) * (size_t)c->block_bytes; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* ================================ reference vectors ================================ */

typedef struct tally {
    int quant, quant_ok, deq, deq_ok;
} tally;

static bool get_tensor(dsq_gguf *g, const char *name, dsq_tensor *t)
{
    int64_t i = dsq_gguf_find_tensor(g, name);
    if (i < 0) return false;
    assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, t), DSQ_OK);
    return true;
}

/* Quantizes input (with imat when non-NULL) through the dispatching and the
 * scalar function and compares with tensor <expect>; dequantizes <expect> and
 * compares with <expect>.deq bitwise. */
static void check_variant(dsq_gguf *g, tally *t, const kcase *c, const dsq_tensor *in, const float *imat,
                          const char *expect)
{
    dsq_tensor qt, dt;
    char name[128];
    if (!get_tensor(g, expect, &qt)) fail_msg("vector file lacks %s", expect);
    snprintf(name, sizeof name, "%s.deq", expect);
    if (!get_tensor(g, name, &dt)) fail_msg("vector file lacks %s", name);
    const int64_t rows = in->shape[0], cols = in->shape[1];
    const size_t rb = row_bytes(c, cols);
    assert_int_equal(qt.type, c->type);
    assert_int_equal(qt.nbytes, (uint64_t)rows * rb);
    assert_int_equal(dt.nbytes, (uint64_t)(rows * cols) * sizeof(float));

    uint8_t *got = malloc(rb), *got_ref = malloc(rb);
    float *deq = malloc((size_t)cols * sizeof(float));
    bool q_ok = true, d_ok = true;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)in->data + r * cols;
        const uint8_t *want = (const uint8_t *)qt.data + (size_t)r * rb;
        memset(got, 0xA5, rb);
        memset(got_ref, 0x5A, rb);
        c->quant(x, got, cols, imat);
        c->quant_ref(x, got_ref, cols, imat);
        if (memcmp(got, want, rb) || memcmp(got_ref, want, rb)) {
            if (q_ok) fprintf(stderr, "MISMATCH %s row %lld\n", expect, (long long)r);
            q_ok = false;
        }
        c->deq(want, deq, cols);
        if (memcmp(deq, (const float *)dt.data + r * cols, (size_t)cols * sizeof(float))) {
            if (d_ok) fprintf(stderr, "MISMATCH %s.deq row %lld\n", expect, (long long)r);
            d_ok = false;
        }
    }
    t->quant++;
    t->quant_ok += q_ok;
    t->deq++;
    t->deq_ok += d_ok;
    free(got);
    free(got_ref);
    free(deq);
}

static void check_distribution(dsq_gguf *g, tally *t, const char *dist)
{
    dsq_tensor in, im;
    char name[128];
    snprintf(name, sizeof name, "input.%s", dist);
    assert_true(get_tensor(g, name, &in));
    snprintf(name, sizeof name, "imatrix.%s", dist);
    assert_true(get_tensor(g, name, &im));
    assert_int_equal(in.type, DSQ_TYPE_F32);
    assert_int_equal(in.n_dims, 2);
    assert_int_equal(im.nbytes, (uint64_t)in.shape[1] * sizeof(float));
    for (size_t k = 0; k < N_CASES; k++) {
        snprintf(name, sizeof name, "%s.%s", g_cases[k].name, dist);
        check_variant(g, t, &g_cases[k], &in, NULL, name);
        snprintf(name, sizeof name, "%s.%s.imat", g_cases[k].name, dist);
        check_variant(g, t, &g_cases[k], &in, im.data, name);
    }
}

static void test_reference_vectors(void **state)
{
    (void)state;
    char *path = dsq_test_shared("vectors/kquants.gguf");
    if (!path) DSQ_TEST_SKIP();
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    const dsq_gguf_array *dists;
    assert_int_equal(dsq_gguf_get_arr(g, "vectors.distributions", DSQ_GGUF_STRING, &dists), DSQ_OK);
    assert_int_equal(dists->n, 10);
    tally t = {0};
    for (uint64_t i = 0; i < dists->n; i++) check_distribution(g, &t, ((const dsq_gguf_str *)dists->data)[i].ptr);
    printf("reference vectors: %d/%d quantized tensors byte-identical, %d/%d dequantized bitwise "
           "(q2_K..q6_K x 10 distributions x plain/imat; dispatching and scalar)\n",
           t.quant_ok, t.quant, t.deq_ok, t.deq);
    assert_int_equal(t.quant, 100);
    assert_int_equal(t.quant_ok, t.quant);
    assert_int_equal(t.deq_ok, t.deq);
    dsq_gguf_close(g);
    free(path);
}

/* ================================ all-zero rows ================================ */

/* README note 5: k-quants encode an all-zero row as all-zero bytes, plain and with an imatrix. */
static void test_zero_rows(void **state)
{
    (void)state;
    float x[512] = {0}, w[512], y[512];
    uint8_t q[2 * 292];
    for (int i = 0; i < 512; i++) w[i] = 1.0f + (float)(i % 5);
    for (size_t k = 0; k < N_CASES; k++) {
        const kcase *c = &g_cases[k];
        for (int v = 0; v < 4; v++) {
            memset(q, 0xCC, sizeof q);
            (v & 2 ? c->quant_ref : c->quant)(x, q, 512, v & 1 ? w : NULL);
            for (size_t i = 0; i < row_bytes(c, 512); i++)
                if (q[i]) fail_msg("%s variant %d: byte %zu is 0x%02x, want 0", c->name, v, i, q[i]);
            c->deq(q, y, 512);
            for (int i = 0; i < 512; i++) assert_true(y[i] == 0.0f);
        }
    }
    for (int v = 0; v < 2; v++) {
        memset(q, 0xCC, sizeof q);
        (v ? dsq_quantize_row_q8_K_ref : dsq_quantize_row_q8_K)(x, q, 512, NULL);
        for (size_t i = 0; i < 2 * 292; i++)
            if (q[i]) fail_msg("q8_K: byte %zu is 0x%02x, want 0", i, q[i]);
    }
}

/* ================================ round trip ================================ */

/* Sub-block s of block blk: value = a*l + b for level l in [c->lmin, c->lmax]. */
static void sub_grid(const kcase *c, const uint8_t *blk, int s, double *a, double *b)
{
    double d, dmin;
    int sc, m;
    *a = *b = 0;
    switch (c->type) {
    case DSQ_TYPE_Q2_K:
        d = dsq_f16_to_f32(rd16(blk + 80));
        dmin = dsq_f16_to_f32(rd16(blk + 82));
        *a = d * (blk[s] & 15);
        *b = -dmin * (blk[s] >> 4);
        return;
    case DSQ_TYPE_Q3_K: {
        const uint8_t *sb = blk + 96;
        sc = (s < 8 ? sb[s] & 15 : sb[s - 8] >> 4) | (((sb[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
        *a = dsq_f16_to_f32(rd16(blk + 108)) * (sc - 32);
        *b = 0;
        return;
    }
    case DSQ_TYPE_Q4_K:
    case DSQ_TYPE_Q5_K: {
        const uint8_t *sb = blk + 4;
        if (s < 4) {
            sc = sb[s] & 63;
            m = sb[s + 4] & 63;
        } else {
            sc = (sb[s + 4] & 15) | ((sb[s - 4] >> 6) << 4);
            m = (sb[s + 4] >> 4) | ((sb[s] >> 6) << 4);
        }
        *a = dsq_f16_to_f32(rd16(blk)) * sc;
        *b = -(double)dsq_f16_to_f32(rd16(blk + 2)) * m;
        return;
    }
    case DSQ_TYPE_Q6_K:
        *a = dsq_f16_to_f32(rd16(blk + 208)) * (int8_t)blk[192 + s];
        *b = 0;
        return;
    default: fail_msg("no grid for %s", c->name);
    }
}

/* Checks every element of a row against its sub-block grid and returns
 * RMS(x - y) / RMS(x). */
static double check_row_grid(const kcase *c, const float *x, const float *y, const uint8_t *q, int64_t n,
                             const char *what)
{
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        double a, b;
        sub_grid(c, q + (size_t)(i / 256) * c->block_bytes, (int)(i % 256) / c->sub, &a, &b);
        double err = fabs((double)x[i] - y[i]);
        se += err * err;
        sx += (double)x[i] * x[i];
        if (a == 0) continue; /* ggml keeps the search's levels where the stored scale is 0 */
        double best = INFINITY;
        for (int l = c->lmin; l <= c->lmax; l++) best = fmin(best, fabs(a * l + b - x[i]));
        double slack = 1e-5 * (fabs(a) * (c->lmax - c->lmin) + fabs(b) + fabs(x[i]));
        if (err > best + slack)
            fail_msg("%s %s element %lld: %g -> %g, but the grid has a point %g away", c->name, what, (long long)i,
                     x[i], y[i], best);
    }
    return sx > 0 ? sqrt(se / sx) : 0;
}

static void test_roundtrip(void **state)
{
    (void)state;
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *w = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N / 256 * 210);
    uint64_t seed = 0x4b51;
    for (size_t k = 0; k < N_CASES; k++) {
        const kcase *c = &g_cases[k];
        double worst[2] = {0, 0};
        for (int kind = 0; kind < 12; kind++) {
            const bool imat = kind & 1;
            const float scale = (float)pow(10.0, kind / 2 % 3 - 1);
            for (int i = 0; i < N; i++) {
                x[i] = dsq_test_randn(&seed) * scale;
                w[i] = expf(dsq_test_randn(&seed));
            }
            c->quant(x, q, N, imat ? w : NULL);
            c->deq(q, y, N);
            double rel = check_row_grid(c, x, y, q, N, imat ? "imat" : "plain");
            if (rel > worst[imat]) worst[imat] = rel;
        }
        printf("round trip %s: relative RMS error %.4f plain, %.4f imat\n", c->name, worst[0], worst[1]);
        assert_true(worst[0] > 0 && worst[0] < c->rms_plain);
        assert_true(worst[1] > 0 && worst[1] < c->rms_imat);
    }
    free(x);
    free(w);
    free(y);
    free(q);
}

static void test_q8_K(void **state)
{
    (void)state;
    enum { N = 1024 };
    float x[N], y[N];
    uint8_t q[N / 256 * 292], q2[sizeof q];
    uint64_t seed = 8;
    for (int kind = 0; kind < 6; kind++) {
        for (int i = 0; i < N; i++) x[i] = dsq_test_randn(&seed) * (kind < 3 ? 1.0f : 1e-20f) + (kind % 3 == 2 ? 5.f : 0);
        if (kind == 1) x[300] = -50.f; /* negative max: d must be positive then */
        dsq_quantize_row_q8_K(x, q, N, NULL);
        dsq_quantize_row_q8_K_ref(x, q2, N, NULL);
        assert_memory_equal(q, q2, sizeof q);
        dsq_dequantize_row_q8_K(q, y, N);
        for (int b = 0; b < N / 256; b++) {
            const uint8_t *blk = q + b * 292;
            float d;
            memcpy(&d, blk, 4);
            float amax = 0, max = 0;
            for (int j = 0; j < 256; j++)
                if (fabsf(x[b * 256 + j]) > amax) {
                    amax = fabsf(x[b * 256 + j]);
                    max = x[b * 256 + j];
                }
            assert_true(d != 0 && (d < 0) == (max > 0)); /* d = max / -127 */
            for (int s = 0; s < 16; s++) {
                int sum = 0;
                for (int j = 0; j < 16; j++) sum += (int8_t)blk[4 + 16 * s + j];
                int16_t bs;
                memcpy(&bs, blk + 260 + 2 * s, 2);
                assert_int_equal(bs, sum);
            }
            for (int j = 0; j < 256; j++) {
                double err = fabs((double)x[b * 256 + j] - y[b * 256 + j]);
                if (err > 0.5001 * fabs(d)) fail_msg("q8_K kind %d: %g -> %g, step %g", kind, x[b * 256 + j], y[b * 256 + j], d);
            }
        }
    }
}

/* ================================ SIMD against scalar ================================ */

/* Rows that reach every branch of the searches: zero and signed-zero
 * sub-blocks, constant and near-constant ones (flat ranges, D <= 0), single
 * outliers, grid ties, all-positive and all-negative sub-blocks, tiny values
 * around GROUP_MAX_EPS and subnormals, huge values, zero imatrix weights. */
static float edge_value(int kind, uint64_t *seed, int i, float s)
{
    float r = dsq_test_randn(seed);
    switch (kind) {
    case 0: return r * s;
    case 1: return 0.0f;
    case 2: return (i % 3) ? -0.0f : 0.0f;
    case 3: return s;
    case 4: return s * (1.0f + 1e-7f * r);
    case 5: return i % 16 == 5 ? -40.f * s : 0.01f * r * s;
    case 6: return (float)((int)(dsq_test_rand(seed) % 8) - 4) * s;
    case 7: return fabsf(r) * s + s;
    case 8: return -fabsf(r) * s;
    case 9: return r * 1e-15f;
    case 10: return r * 1e-40f;
    case 11: return r * 1e18f;
    default: return (float)(i % 2 ? 1 : -1) * 3.0f * s;
    }
}

static void fill_edge_row(float *x, float *w, int64_t n, uint64_t *seed, int round)
{
    for (int64_t i = 0; i < n; i++) {
        int sb = (int)(i / 16);
        int kind = (int)((sb * 7 + round * 3) % 13);
        float s = (float)pow(10.0, (double)((sb + round) % 7) - 3);
        x[i] = edge_value(kind, seed, (int)i, s);
        w[i] = (round % 3 == 2 && i % 5 == 0) ? 0.0f : expf(2 * dsq_test_randn(seed));
    }
}

/* Every copy of the row quantizers this CPU can run, by name; the rows of
 * g_cases in order (q2_K..q6_K). */
typedef struct kcopy {
    const char *isa;
    bool runs;
    quant_fn fn[5];
} kcopy;

static int simd_copies(kcopy *out)
{
    int n = 0;
#if DSQ_KQ_HAVE_AVX2
    out[n++] = (kcopy){"AVX2",
                       dsq_cpu_has(DSQ_CPU_AVX2),
                       {dsq_kq_avx2_quantize_row_q2_K, dsq_kq_avx2_quantize_row_q3_K, dsq_kq_avx2_quantize_row_q4_K,
                        dsq_kq_avx2_quantize_row_q5_K, dsq_kq_avx2_quantize_row_q6_K}};
    out[n++] = (kcopy){"AVX-512F",
                       dsq_cpu_has(DSQ_CPU_AVX512F),
                       {dsq_kq_avx512_quantize_row_q2_K, dsq_kq_avx512_quantize_row_q3_K,
                        dsq_kq_avx512_quantize_row_q4_K, dsq_kq_avx512_quantize_row_q5_K,
                        dsq_kq_avx512_quantize_row_q6_K}};
#endif
    (void)out;
    return n;
}

/* The dispatched function and each SIMD copy against the scalar reference,
 * on rows of an even and an odd number of super-blocks (16 lanes carry two
 * q4_K/q5_K super-blocks, so an odd count takes the padded last pass). */
static void test_simd_matches_scalar(void **state)
{
    (void)state;
    assert_int_equal(N_CASES, 5);
    kcopy copies[2];
    const int n_copies = simd_copies(copies);
    for (int c = 0; c < n_copies; c++)
        printf("k-quant %s copy: %s\n", copies[c].isa,
               copies[c].runs ? "compared with the scalar reference" : "not run, this CPU lacks it");
    if (!n_copies) printf("k-quant SIMD copies not built for this architecture: scalar compared with itself\n");
    enum { N = 2304 };
    const int64_t lens[] = {2048, 2304};
    float *x = malloc(N * sizeof(float)), *w = malloc(N * sizeof(float));
    uint8_t *q1 = malloc(N / 256 * 292), *q2 = malloc(N / 256 * 292);
    uint64_t seed = 77;
    int rows = 0;
    for (int round = 0; round < 40; round++) {
        const int64_t n = lens[round % 2];
        fill_edge_row(x, w, n, &seed, round);
        if (round >= 30) /* plain rows, each super-block its own spread: its own sigma^2 */
            for (int64_t i = 0; i < n; i++) x[i] = dsq_test_randn(&seed) * (float)(1 + i / 256);
        for (size_t k = 0; k < N_CASES; k++) {
            const kcase *c = &g_cases[k];
            for (int imat = 0; imat < 2; imat++) {
                c->quant_ref(x, q2, n, imat ? w : NULL);
                c->quant(x, q1, n, imat ? w : NULL);
                if (memcmp(q1, q2, row_bytes(c, n)))
                    fail_msg("%s%s round %d: dispatched bytes differ from scalar", c->name, imat ? " imat" : "", round);
                for (int v = 0; v < n_copies; v++) {
                    if (!copies[v].runs) continue;
                    memset(q1, 0xA5, row_bytes(c, n));
                    copies[v].fn[k](x, q1, n, imat ? w : NULL);
                    if (memcmp(q1, q2, row_bytes(c, n)))
                        fail_msg("%s%s round %d, %lld values: %s bytes differ from scalar", c->name,
                                 imat ? " imat" : "", round, (long long)n, copies[v].isa);
                    rows++;
                }
            }
        }
        dsq_quantize_row_q8_K(x, q1, n, NULL);
        dsq_quantize_row_q8_K_ref(x, q2, n, NULL);
        if (memcmp(q1, q2, (size_t)n / 256 * 292)) fail_msg("q8_K round %d: SIMD bytes differ from scalar", round);
    }
    printf("SIMD copies == scalar on %d edge rows\n", rows);
    free(x);
    free(w);
    free(q1);
    free(q2);
}

/* ================================ dot products ================================ */

static void test_vec_dot(void **state)
{
    (void)state;
    enum { N = 1024 };
    float x[N], a[N], xd[N], ad[N];
    uint8_t qx[N / 256 * 210], qa[N / 256 * 292];
    uint64_t seed = 5;
    for (size_t k = 0; k < N_CASES; k++) {
        const kcase *c = &g_cases[k];
        const dsq_qtype *qt = dsq_qtype_get(c->type);
        assert_non_null(qt);
        assert_ptr_equal(qt->vec_dot, c->dot);
        assert_int_equal(qt->vec_dot_type, DSQ_TYPE_Q8_K);
        for (int kind = 0; kind < 8; kind++) {
            for (int i = 0; i < N; i++) {
                x[i] = dsq_test_randn(&seed) + (kind & 1 ? 0.7f : 0.0f);
                a[i] = dsq_test_randn(&seed) * (kind & 2 ? 100.f : 0.01f) + (kind & 4 ? 0.3f : 0.0f);
            }
            /* through the table as well: dsq_quantize must land on the same bytes */
            assert_int_equal(dsq_quantize(c->type, x, qx, 1, N, NULL), DSQ_OK);
            uint8_t direct[sizeof qx];
            c->quant(x, direct, N, NULL);
            assert_memory_equal(qx, direct, row_bytes(c, N));
            dsq_quantize_row_q8_K(a, qa, N, NULL);
            c->deq(qx, xd, N);
            dsq_dequantize_row_q8_K(qa, ad, N);
            double exact = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double ga, gb;
                sub_grid(c, qx + (size_t)(i / 256) * c->block_bytes, (i % 256) / c->sub, &ga, &gb);
                exact += (double)xd[i] * ad[i];
                mag += (fabs(xd[i]) + 2 * fabs(gb)) * fabs(ad[i]); /* the min term is summed apart */
            }
            float s1 = NAN, s2 = NAN;
            c->dot(N, &s1, qx, qa);
            c->dot_ref(N, &s2, qx, qa);
            const double tol = 1e-5 * mag + 1e-30;
            if (fabs(s1 - exact) > tol || fabs(s2 - exact) > tol)
                fail_msg("%s kind %d: dot %g (SIMD) %g (scalar), exact %g, tolerance %g", c->name, kind, s1, s2, exact, tol);
        }
    }
}

int main(void)
{
#ifdef DSQ_SHARED_DIR
    /* tests/helpers is compiled without this definition; hand it over (a user's setting wins) */
    setenv("DSQ_SHARED_DIR", DSQ_SHARED_DIR, 0);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_vectors), cmocka_unit_test(test_zero_rows),
        cmocka_unit_test(test_roundtrip),         cmocka_unit_test(test_q8_K),
        cmocka_unit_test(test_simd_matches_scalar), cmocka_unit_test(test_vec_dot),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
