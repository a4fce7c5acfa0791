/* Legacy (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1) and IQ4 (iq4_nl, iq4_xs) block types.
 *
 * - reference vectors: ../shared/vectors/kquants.gguf holds ggml's own bytes for
 *   every distribution; our quantizers (dispatching and scalar) must reproduce
 *   them byte for byte, and our dequantizers the .deq tensors bit for bit.
 * - all-zero blocks: the exact encodings of README note 5, without ../shared.
 * - round trip: max |x - deq(q(x))| per block within a bound from the stored
 *   block scale (catches a wrong scale, offset or nibble/bit order).
 * - SIMD against scalar: identical bytes and floats, edge blocks included.
 * - dot products against a double-precision dot of the dequantized rows. */
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
#include "formats/gguf.h"
#include "quantizers/qtypes.h"
#include "quantizers/quant_common.h"
#include "quantizers/quants.h"
#include "quantizers/quants_ref.h"
#include "tests/helpers/testutil.h"

typedef void (*quant_fn)(const float *x, void *y, int64_t n, const float *qw);
typedef void (*deq_fn)(const void *x, float *y, int64_t n);
typedef void (*dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct qcase {
    const char *name;
    dsq_type type;
    int block_elems, block_bytes;
    quant_fn quant, quant_ref;
    deq_fn deq, deq_ref;
    bool has_imat; /* the vector file has a .imat variant */
} qcase;

static void iq4_nl_ntry_minus1(const float *x, void *y, int64_t n, const float *qw)
{
    (void)qw;
    dsq_quantize_row_iq4_nl_ref(x, y, n);
}

#define QC(t, T, be, bb, qref, im)                                                                 \
    {#t, DSQ_TYPE_##T, be, bb, dsq_quantize_row_##t, qref, dsq_dequantize_row_##t, dsq_dequantize_row_##t##_ref, im}

static const qcase g_cases[] = {
    QC(q4_0, Q4_0, 32, 18, dsq_quantize_row_q4_0_ref, true),
    QC(q4_1, Q4_1, 32, 20, dsq_quantize_row_q4_1_ref, true),
    QC(q5_0, Q5_0, 32, 22, dsq_quantize_row_q5_0_ref, true),
    QC(q5_1, Q5_1, 32, 24, dsq_quantize_row_q5_1_ref, true),
    QC(q8_0, Q8_0, 32, 34, dsq_quantize_row_q8_0_ref, false),
    QC(q8_1, Q8_1, 32, 36, dsq_quantize_row_q8_1_ref, false),
    QC(iq4_nl, IQ4_NL, 32, 18, dsq_quantize_row_iq4_nl_scalar, true),
    QC(iq4_xs, IQ4_XS, 256, 136, dsq_quantize_row_iq4_xs_ref, true),
};
#define N_CASES (sizeof g_cases / sizeof g_cases[0])

static size_t row_bytes(const qcase *c, int64_t n) { return (size_t)(n / c->block_elems) * (size_t)c->block_bytes; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* ================================ reference vectors ================================ */

typedef struct vecfile {
    dsq_gguf *g;
    int n_quant, n_quant_ok, n_deq, n_deq_ok;
} vecfile;

static bool get_tensor(dsq_gguf *g, const char *name, dsq_tensor *t)
{
    int64_t i = dsq_gguf_find_tensor(g, name);
    if (i < 0) return false;
    assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, t), DSQ_OK);
    return true;
}

/* max |x| of block b below GROUP_MAX_EPS: ggml's _ref leaves those levels undefined (note 2) */
static bool block_is_zero(const float *x, int b)
{
    for (int j = 0; j < 32; j++)
        if (fabsf(x[b * 32 + j]) >= DSQ_GROUP_MAX_EPS) return false;
    return true;
}

static bool same_quant_bytes(const uint8_t *got, const uint8_t *want, size_t n, const float *in, bool d_only_zero)
{
    if (!d_only_zero) return memcmp(got, want, n) == 0;
    for (size_t b = 0; b < n / 18; b++) {
        size_t cmp = block_is_zero(in, (int)b) ? 2 : 18;
        if (memcmp(got + 18 * b, want + 18 * b, cmp)) return false;
    }
    return true;
}

/* Quantizes input.<dist> (with imatrix.<dist> when imat) with both the dispatching
 * and the scalar function, compares with <expect>, and dequantizes <expect>
 * with both dequantizers, comparing with <expect>.deq bit for bit. */
static void check_variant(vecfile *vf, const qcase *c, quant_fn qpub, quant_fn qref, const dsq_tensor *in,
                          const float *imat, const char *expect, bool d_only_zero)
{
    dsq_tensor qt, dt;
    char name[128];
    if (!get_tensor(vf->g, expect, &qt)) fail_msg("vector file lacks %s", expect);
    snprintf(name, sizeof name, "%s.deq", expect);
    if (!get_tensor(vf->g, name, &dt)) fail_msg("vector file lacks %s", name);
    const int64_t rows = in->shape[0], cols = in->shape[1];
    const size_t rb = row_bytes(c, cols);
    assert_int_equal(qt.type, c->type);
    assert_int_equal(qt.nbytes, rows * rb);
    assert_int_equal(dt.nbytes, rows * cols * sizeof(float));

    uint8_t *got = malloc(rb), *got_ref = malloc(rb);
    float *deq = malloc((size_t)cols * sizeof(float)), *deq_ref = malloc((size_t)cols * sizeof(float));
    bool q_ok = true, d_ok = true;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)in->data + r * cols;
        const uint8_t *want = (const uint8_t *)qt.data + r * rb;
        const float *want_deq = (const float *)dt.data + r * cols;
        memset(got, 0xA5, rb);
        memset(got_ref, 0x5A, rb);
        qpub(x, got, cols, imat);
        qref(x, got_ref, cols, imat);
        if (!same_quant_bytes(got, want, rb, x, d_only_zero) || !same_quant_bytes(got_ref, want, rb, x, d_only_zero)) {
            if (q_ok) fprintf(stderr, "MISMATCH %s row %lld\n", expect, (long long)r);
            q_ok = false;
        }
        c->deq(want, deq, cols);
        c->deq_ref(want, deq_ref, cols);
        if (memcmp(deq, want_deq, (size_t)cols * sizeof(float)) || memcmp(deq_ref, want_deq, (size_t)cols * sizeof(float))) {
            if (d_ok) fprintf(stderr, "MISMATCH %s.deq row %lld\n", expect, (long long)r);
            d_ok = false;
        }
    }
    vf->n_quant++;
    vf->n_quant_ok += q_ok;
    vf->n_deq++;
    vf->n_deq_ok += d_ok;
    free(got);
    free(got_ref);
    free(deq);
    free(deq_ref);
}

static void check_distribution(vecfile *vf, const char *dist)
{
    dsq_tensor in, im;
    char name[128];
    snprintf(name, sizeof name, "input.%s", dist);
    assert_true(get_tensor(vf->g, name, &in));
    snprintf(name, sizeof name, "imatrix.%s", dist);
    assert_true(get_tensor(vf->g, name, &im));
    assert_int_equal(in.type, DSQ_TYPE_F32);
    assert_int_equal(in.n_dims, 2);
    assert_int_equal(im.nbytes, (uint64_t)in.shape[1] * sizeof(float));
    for (size_t k = 0; k < N_CASES; k++) {
        const qcase *c = &g_cases[k];
        if (c->type == DSQ_TYPE_Q8_1) continue; /* an activation type: not in the file */
        snprintf(name, sizeof name, "%s.%s", c->name, dist);
        check_variant(vf, c, c->quant, c->quant_ref, &in, NULL, name, false);
        if (c->has_imat) {
            snprintf(name, sizeof name, "%s.%s.imat", c->name, dist);
            check_variant(vf, c, c->quant, c->quant_ref, &in, im.data, name, false);
        }
        if (c->type == DSQ_TYPE_IQ4_NL) {
            snprintf(name, sizeof name, "iq4_nl.%s.ref", dist);
            check_variant(vf, c, iq4_nl_ntry_minus1, iq4_nl_ntry_minus1, &in, NULL, name, true);
        }
    }
}

static void test_reference_vectors(void **state)
{
    (void)state;
    char *path = dsq_test_shared("vectors/kquants.gguf");
    if (!path) DSQ_TEST_SKIP();
    vecfile vf = {0};
    assert_int_equal(dsq_gguf_open(path, &vf.g), DSQ_OK);
    const dsq_gguf_array *dists;
    assert_int_equal(dsq_gguf_get_arr(vf.g, "vectors.distributions", DSQ_GGUF_STRING, &dists), DSQ_OK);
    assert_int_equal(dists->n, 10);
    for (uint64_t i = 0; i < dists->n; i++) check_distribution(&vf, ((const dsq_gguf_str *)dists->data)[i].ptr);
    printf("reference vectors: %d/%d quantized tensors byte-identical, %d/%d dequantized bitwise "
           "(q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl iq4_xs; dispatching and scalar)\n",
           vf.n_quant_ok, vf.n_quant, vf.n_deq_ok, vf.n_deq);
    /* per distribution: 4 legacy x 2 + q8_0 + iq4_nl x 3 + iq4_xs x 2 */
    assert_int_equal(vf.n_quant, 140);
    assert_int_equal(vf.n_quant_ok, vf.n_quant);
    assert_int_equal(vf.n_deq_ok, vf.n_deq);
    dsq_gguf_close(vf.g);
    free(path);
}

/* ================================ all-zero blocks ================================ */

static void expect_block(const uint8_t *b, const uint8_t *want, size_t n, const char *what)
{
    if (memcmp(b, want, n)) {
        for (size_t i = 0; i < n; i++) fprintf(stderr, "%02x%s", b[i], i + 1 < n ? " " : "\n");
        fail_msg("%s: unexpected all-zero encoding", what);
    }
}

/* README note 5: the sign of a zero fp16 d and the filler levels decide bytes. */
static void test_zero_blocks(void **state)
{
    (void)state;
    float x[512] = {0}, w[512];
    for (int i = 0; i < 512; i++) w[i] = 1.0f + (float)(i % 7);
    uint8_t b[2][512 / 32 * 36], want[136];
    for (int v = 0; v < 2; v++) {
        const float *qw = v ? w : NULL;
        for (int pass = 0; pass < 2; pass++) {
            quant_fn f4_0 = pass ? dsq_quantize_row_q4_0_ref : dsq_quantize_row_q4_0;
            quant_fn f5_0 = pass ? dsq_quantize_row_q5_0_ref : dsq_quantize_row_q5_0;
            quant_fn fnl = pass ? dsq_quantize_row_iq4_nl_scalar : dsq_quantize_row_iq4_nl;
            quant_fn fxs = pass ? dsq_quantize_row_iq4_xs_ref : dsq_quantize_row_iq4_xs;
            memset(want, 0, sizeof want);
            f4_0(x, b[pass], 64, qw);
            if (!v) {
                want[1] = 0x80;
                memset(want + 2, 0x88, 16);
            }
            expect_block(b[pass], want, 18, "q4_0");
            memset(want, 0, sizeof want);
            f5_0(x, b[pass], 64, qw);
            if (!v) {
                want[1] = 0x80;
                memset(want + 2, 0xFF, 4);
            }
            expect_block(b[pass], want, 22, "q5_0");
            memset(want, 0, sizeof want);
            for (size_t k = 0; k < N_CASES; k++) {
                const qcase *c = &g_cases[k];
                if (c->type != DSQ_TYPE_Q4_1 && c->type != DSQ_TYPE_Q5_1 && c->type != DSQ_TYPE_Q8_0 &&
                    c->type != DSQ_TYPE_Q8_1)
                    continue;
                (pass ? c->quant_ref : c->quant)(x, b[pass], 512, qw);
                for (size_t i = 0; i < row_bytes(c, 512); i++)
                    if (b[pass][i]) fail_msg("%s: all-zero row gave a nonzero byte at %zu", c->name, i);
            }
            fnl(x, b[pass], 64, qw);
            memset(want + 2, 0x88, 16);
            expect_block(b[pass], want, 18, "iq4_nl");
            fxs(x, b[pass], 256, qw);
            memset(want, 0, sizeof want);
            want[1] = 0x80;
            want[2] = want[3] = 0xAA;
            memset(want + 8, 0x88, 128);
            expect_block(b[pass], want, 136, "iq4_xs");
        }
    }
    /* the ntry = -1 entry: d = 0 (its levels are ours to choose: level 8 again) */
    dsq_quantize_row_iq4_nl_ref(x, b[0], 32);
    assert_int_equal(rd16(b[0]), 0);
}

/* ================================ round trip ================================ */

/* Largest |x - deq| allowed in block b, from the scales stored in the block.
 * Plain: half a level (a full level where ggml clamps the extreme element)
 * plus what rounding d and m to fp16 moves the levels. imatrix variants pick
 * their scale by a weighted search, so the extreme element may sit up to two
 * levels outside the grid. iq4: the grid gaps reach 24 units of d. */
static double block_bound(const qcase *c, const uint8_t *q, int b, bool imat)
{
    const double f16 = 1.0 / 1024; /* fp16 relative rounding, doubled */
    if (c->type == DSQ_TYPE_IQ4_XS) {
        const uint8_t *sb = q + (size_t)(b / 8) * 136;
        const int ib = b % 8, ls = ((sb[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((rd16(sb + 2) >> 2 * ib) & 3) << 4);
        return fabs(dsq_f16_to_f32(rd16(sb)) * (ls - 32)) * (imat ? 32 : 24) + 1e-30;
    }
    const uint8_t *blk = q + (size_t)b * c->block_bytes;
    const double d = fabs(dsq_f16_to_f32(rd16(blk)));
    const double m = (c->type == DSQ_TYPE_Q4_1 || c->type == DSQ_TYPE_Q5_1) ? fabs(dsq_f16_to_f32(rd16(blk + 2))) : 0;
    switch (c->type) {
    case DSQ_TYPE_Q4_0: return d * ((imat ? 2.5 : 1.0) + 8 * f16);
    case DSQ_TYPE_Q5_0: return d * ((imat ? 2.5 : 1.0) + 16 * f16);
    case DSQ_TYPE_Q4_1: return d * ((imat ? 2.0 : 0.5) + 15 * f16) + m * f16;
    case DSQ_TYPE_Q5_1: return d * ((imat ? 2.0 : 0.5) + 31 * f16) + m * f16;
    case DSQ_TYPE_Q8_0:
    case DSQ_TYPE_Q8_1: return d * (0.5 + 127 * f16);
    case DSQ_TYPE_IQ4_NL: return d * (imat ? 32 : 24);
    default: fail_msg("no bound for %s", c->name);
    }
    return 0;
}

static void fill_random_row(float *x, float *w, int64_t n, uint64_t *seed, int kind)
{
    const float scale = (float)(0.1 * pow(10.0, kind % 3)); /* fp16 scales stay normal */
    for (int64_t i = 0; i < n; i++) {
        x[i] = dsq_test_randn(seed) * scale;
        if (kind % 4 == 3) x[i] = fabsf(x[i]) + scale; /* all positive, away from zero */
        w[i] = expf(dsq_test_randn(seed));
    }
}

static void test_roundtrip_bounds(void **state)
{
    (void)state;
    enum { N = 2048 };
    float *x = malloc(N * sizeof(float)), *w = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N / 32 * 36);
    uint64_t seed = 0x1234;
    for (size_t k = 0; k < N_CASES; k++) {
        const qcase *c = &g_cases[k];
        double worst = 0;
        for (int kind = 0; kind < 24; kind++) {
            const bool imat = kind & 1;
            fill_random_row(x, w, N, &seed, kind / 2);
            c->quant(x, q, N, imat ? w : NULL);
            c->deq(q, y, N);
            for (int b = 0; b < N / 32; b++) {
                const double bound = block_bound(c, q, b, imat);
                for (int j = 0; j < 32; j++) {
                    const double err = fabs((double)x[b * 32 + j] - y[b * 32 + j]);
                    if (err / bound > worst) worst = err / bound;
                    if (err > bound)
                        fail_msg("%s%s kind %d block %d elem %d: |%g - %g| > bound %g", c->name, imat ? " imat" : "",
                                 kind, b, j, x[b * 32 + j], y[b * 32 + j], bound);
                }
            }
        }
        printf("round trip %-6s: worst error is %.2f of the bound\n", c->name, worst);
    }
    free(x);
    free(w);
    free(y);
    free(q);
}

/* ================================ SIMD against scalar ================================ */

/* Rows that reach every branch: random scales, all-zero blocks, blocks with
 * -0.0 and +0.0, constant blocks, a lone outlier, exact grid points (ties),
 * subnormal-scale blocks (1/d overflows), huge values, and blocks whose
 * importance weights are all zero. */
static void fill_edge_row(float *x, float *w, int64_t n, uint64_t *seed, int kind)
{
    fill_random_row(x, w, n, seed, kind);
    for (int64_t b = 0; b < n / 32; b++) {
        float *xb = x + b * 32;
        switch ((b + kind) % 11) {
        case 0: memset(xb, 0, 32 * sizeof(float)); break;
        case 1:
            for (int j = 0; j < 32; j++) xb[j] = (j % 3) ? -0.0f : 0.0f;
            break;
        case 2:
            for (int j = 0; j < 32; j++) xb[j] = 0.75f;
            break;
        case 3:
            for (int j = 0; j < 32; j++) xb[j] = j == 17 ? -40.0f : 0.0f;
            break;
        case 4:
            for (int j = 0; j < 32; j++) xb[j] = (float)((int)(dsq_test_rand(seed) % 16) - 8) * 0.25f;
            break;
        case 5:
            for (int j = 0; j < 32; j++) xb[j] = dsq_test_randn(seed) * 1e-39f;
            break;
        case 6:
            for (int j = 0; j < 32; j++) xb[j] = dsq_test_randn(seed) * 1e20f;
            break;
        case 7:
            for (int j = 0; j < 32; j++) xb[j] = (j % 2 ? 1 : -1) * 3.0f; /* +-max tie: the first wins */
            break;
        case 8:
            for (int j = 0; j < 32; j++) w[b * 32 + j] = 0.0f; /* a dead block: 0/0 scales */
            break;
        default: break;
        }
    }
    if (kind % 5 == 4)
        for (int64_t i = 0; i < n; i += 7) w[i] = 0.0f; /* dead imatrix channels */
}

static void test_simd_matches_scalar(void **state)
{
    (void)state;
    printf("SIMD paths %s\n", dsq_cpu_has_avx2_fma() ? "active (AVX2+FMA)" : "inactive: comparing scalar with itself");
    /* 13 and 3 blocks: lengths that are not a multiple of the SIMD width */
    const int64_t lens[] = {32 * 13, 256 * 3, 4096};
    for (size_t k = 0; k < N_CASES; k++) {
        const qcase *c = &g_cases[k];
        uint64_t seed = 99 + k;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            if (n % c->block_elems) continue;
            float *x = malloc((size_t)n * sizeof(float)), *w = malloc((size_t)n * sizeof(float));
            float *y1 = malloc((size_t)n * sizeof(float)), *y2 = malloc((size_t)n * sizeof(float));
            uint8_t *q1 = malloc(row_bytes(c, n)), *q2 = malloc(row_bytes(c, n));
            for (int kind = 0; kind < 22; kind++) {
                fill_edge_row(x, w, n, &seed, kind);
                const float *qw = (kind & 1) ? w : NULL;
                c->quant(x, q1, n, qw);
                c->quant_ref(x, q2, n, qw);
                if (memcmp(q1, q2, row_bytes(c, n))) fail_msg("%s n=%lld kind %d: SIMD bytes differ", c->name, (long long)n, kind);
                c->deq(q1, y1, n);
                c->deq_ref(q1, y2, n);
                if (memcmp(y1, y2, (size_t)n * sizeof(float)))
                    fail_msg("%s n=%lld kind %d: SIMD dequantization differs", c->name, (long long)n, kind);
            }
            free(x);
            free(w);
            free(y1);
            free(y2);
            free(q1);
            free(q2);
        }
    }
}

/* ================================ dot products ================================ */

typedef struct dcase {
    const char *name;
    dsq_type wtype, atype;
    dot_fn dot, dot_ref;
} dcase;

static const dcase g_dots[] = {
    {"q4_0*q8_0", DSQ_TYPE_Q4_0, DSQ_TYPE_Q8_0, dsq_vec_dot_q4_0_q8_0, dsq_vec_dot_q4_0_q8_0_ref},
    {"q4_1*q8_1", DSQ_TYPE_Q4_1, DSQ_TYPE_Q8_1, dsq_vec_dot_q4_1_q8_1, dsq_vec_dot_q4_1_q8_1_ref},
    {"q5_0*q8_0", DSQ_TYPE_Q5_0, DSQ_TYPE_Q8_0, dsq_vec_dot_q5_0_q8_0, dsq_vec_dot_q5_0_q8_0_ref},
    {"q5_1*q8_1", DSQ_TYPE_Q5_1, DSQ_TYPE_Q8_1, dsq_vec_dot_q5_1_q8_1, dsq_vec_dot_q5_1_q8_1_ref},
    {"q8_0*q8_0", DSQ_TYPE_Q8_0, DSQ_TYPE_Q8_0, dsq_vec_dot_q8_0_q8_0, dsq_vec_dot_q8_0_q8_0_ref},
    {"iq4_nl*q8_0", DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q8_0, dsq_vec_dot_iq4_nl_q8_0, dsq_vec_dot_iq4_nl_q8_0_ref},
    {"iq4_xs*q8_K", DSQ_TYPE_IQ4_XS, DSQ_TYPE_Q8_K, dsq_vec_dot_iq4_xs_q8_K, dsq_vec_dot_iq4_xs_q8_K_ref},
};

/* q4_1/q5_1 dots use q8_1's s = fp16(d * sum q) where the dequantized product has
 * d * sum q exactly: allow that rounding, |m| * |s| * 2^-11 per block. */
static double q8_1_s_slack(const dcase *dc, const uint8_t *qx, const uint8_t *qy, int64_t n)
{
    if (dc->atype != DSQ_TYPE_Q8_1) return 0;
    const int bx = dc->wtype == DSQ_TYPE_Q4_1 ? 20 : 24;
    double slack = 0;
    for (int64_t b = 0; b < n / 32; b++)
        slack += fabs(dsq_f16_to_f32(rd16(qx + b * bx + 2))) * fabs(dsq_f16_to_f32(rd16(qy + b * 36 + 2))) / 2048;
    return slack;
}

static void check_dot(const dcase *dc, int64_t n, uint64_t *seed, int kind)
{
    /* direct references: they also make the static link pull in quantizers/kquants.c,
     * which the table in qtypes.c only names weakly */
    static const dsq_qtype q8k = {DSQ_TYPE_Q8_K, dsq_quantize_row_q8_K, dsq_dequantize_row_q8_K, NULL, DSQ_TYPE_Q8_K,
                                  false,         NULL};
    const dsq_qtype *wt = dsq_qtype_get(dc->wtype);
    const dsq_qtype *at = dc->atype == DSQ_TYPE_Q8_K ? &q8k : dsq_qtype_get(dc->atype);
    assert_non_null(wt);
    assert_non_null(at);
    assert_ptr_equal(wt->vec_dot, dc->dot);
    assert_int_equal(wt->vec_dot_type, dc->atype);
    const dsq_type_info *wi = dsq_type_get(dc->wtype), *ai = dsq_type_get(dc->atype);
    float *x = malloc((size_t)n * sizeof(float)), *a = malloc((size_t)n * sizeof(float));
    float *w = malloc((size_t)n * sizeof(float)), *xd = malloc((size_t)n * sizeof(float));
    float *ad = malloc((size_t)n * sizeof(float));
    uint8_t *qx = malloc((size_t)n / wi->block_elems * wi->block_bytes);
    uint8_t *qa = malloc((size_t)n / ai->block_elems * ai->block_bytes);
    fill_random_row(x, w, n, seed, kind);
    fill_random_row(a, w, n, seed, kind + 1);
    wt->quantize_row(x, qx, n, NULL);
    at->quantize_row(a, qa, n, NULL);
    wt->dequantize_row(qx, xd, n);
    at->dequantize_row(qa, ad, n);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += (double)xd[i] * ad[i];
        mag += fabs((double)xd[i] * ad[i]);
    }
    const double tol = 1e-5 * mag + q8_1_s_slack(dc, qx, qa, n) + 1e-30;
    float s = NAN, s_ref = NAN;
    dc->dot(n, &s, qx, qa);
    dc->dot_ref(n, &s_ref, qx, qa);
    if (fabs(s - exact) > tol || fabs(s_ref - exact) > tol)
        fail_msg("%s n=%lld: dot %.9g, scalar %.9g, exact %.9g (tol %.3g)", dc->name, (long long)n, s, s_ref, exact, tol);
    free(x);
    free(a);
    free(w);
    free(xd);
    free(ad);
    free(qx);
    free(qa);
}

static void test_vec_dot(void **state)
{
    (void)state;
    uint64_t seed = 7;
    for (size_t k = 0; k < sizeof g_dots / sizeof g_dots[0]; k++) {
        const dcase *dc = &g_dots[k];
        for (int kind = 0; kind < 8; kind++) {
            check_dot(dc, 256 * 3, &seed, kind);
            check_dot(dc, 4096, &seed, kind);
        }
    }
}

/* The type table points at these functions (a wrong table row would route
 * another type's bytes here). */
static void test_qtype_table(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_CASES; k++) {
        const qcase *c = &g_cases[k];
        const dsq_qtype *q = dsq_qtype_get(c->type);
        assert_non_null(q);
        assert_ptr_equal(q->quantize_row, c->quant);
        assert_ptr_equal(q->dequantize_row, c->deq);
        const dsq_type_info *ti = dsq_type_get((int)c->type);
        assert_int_equal(ti->block_elems, (unsigned)c->block_elems);
        assert_int_equal(ti->block_bytes, (unsigned)c->block_bytes);
    }
}

int main(void)
{
#ifdef DSQ_SHARED_DIR
    /* tests/helpers is built without this program's DSQ_SHARED_DIR definition */
    setenv("DSQ_SHARED_DIR", DSQ_SHARED_DIR, 0);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qtype_table),       cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_zero_blocks),       cmocka_unit_test(test_roundtrip_bounds),
        cmocka_unit_test(test_simd_matches_scalar), cmocka_unit_test(test_vec_dot),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
