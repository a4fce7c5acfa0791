/* INT group storage of a linear (runtime/linear.h): the codes of AutoAWQ,
 * GPTQ and compressed-tensors artifacts kept packed in memory.
 *
 * Columns are stored in "group order": a stable sort of the columns by their
 * group (the identity without act-order), so each group is one contiguous run
 * [goff[g], goff[g+1]) of every row and the per-group arithmetic never looks
 * up g_idx. The activation is permuted into the same order once per token
 * (act_prepare), together with its per-group sums, which lets the decode dot
 * apply the zero point once per group instead of once per weight:
 *   row . x = sum_g s_g * (sum_{k in g} q_k x_k - z_g * X_g),  X_g = sum_{k in g} x_k.
 * The batched path dequantizes rows back into the original column order with
 * exactly dsq_intq_dequantize's expression, so tiles are bit-identical to the
 * dense dequantized weights. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "kernels/cpu.h"
#include "runtime/linear.h"

typedef struct intq_store {
    int bits;
    int64_t n_groups;
    float *scales;  /* [out x n_groups] */
    uint8_t *zeros; /* [out x n_groups] */
    int32_t *perm;  /* [in]: original column of stored position i; NULL = identity */
    int64_t *goff;  /* [n_groups + 1]: group g is stored at [goff[g], goff[g+1]) */
} intq_store;

static const intq_store *store_of(const dsq_linear *W) { return W->priv; }

static const uint8_t *code_row(const dsq_linear *W, int64_t r)
{
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

/* Code at stored position i of a row. 4 bits: each block of 32 positions
 * takes 16 bytes, byte j holding position j in its low nibble and j + 16 in
 * its high one, so the AVX2 kernel gets 16 ordered codes from one AND and 16
 * from one shift (no byte interleaving). */
static inline int code_at(const uint8_t *row, int bits, int64_t i)
{
    if (bits != 4) return row[i];
    return (row[(i >> 5) * 16 + (i & 15)] >> (((i >> 4) & 1) * 4)) & 0xF;
}

static size_t code_row_bytes(int bits, int64_t cols)
{
    return bits == 4 ? (size_t)((cols + 31) / 32) * 16 : (size_t)cols;
}

/* ---- batched path: F32 rows in the original column order ---- */

static void intq_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst)
{
    const intq_store *s = store_of(W);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = code_row(W, r0 + r);
        const float *sc = s->scales + (size_t)(r0 + r) * (size_t)s->n_groups;
        const uint8_t *z = s->zeros + (size_t)(r0 + r) * (size_t)s->n_groups;
        float *d = dst + r * W->in;
        for (int64_t g = 0; g < s->n_groups; g++)
            for (int64_t i = s->goff[g]; i < s->goff[g + 1]; i++) {
                int64_t c = s->perm ? s->perm[i] : i;
                d[c] = (float)(code_at(row, s->bits, i) - (int)z[g]) * sc[g]; /* as dsq_intq_dequantize */
            }
    }
}

/* ---- decode path ---- */

/* Prepared activation: x in stored order (in floats), then X_g (n_groups floats). */
static size_t intq_act_bytes(const dsq_linear *W)
{
    return ((size_t)W->in + (size_t)store_of(W)->n_groups) * sizeof(float);
}

static void intq_act_prepare(const dsq_linear *W, const float *x, void *act)
{
    const intq_store *s = store_of(W);
    float *xp = act, *xs = xp + W->in;
    if (s->perm)
        for (int64_t i = 0; i < W->in; i++) xp[i] = x[s->perm[i]];
    else
        memcpy(xp, x, (size_t)W->in * sizeof *xp);
    for (int64_t g = 0; g < s->n_groups; g++) {
        double sum = 0; /* the correction term should not add rounding of its own */
        for (int64_t i = s->goff[g]; i < s->goff[g + 1]; i++) sum += xp[i];
        xs[g] = (float)sum;
    }
}

/* The scalar reference: inner sums in double, the yardstick for the SIMD one. */
static float row_dot_scalar(const dsq_linear *W, int64_t r, const float *xp, const float *xs)
{
    const intq_store *s = store_of(W);
    const uint8_t *row = code_row(W, r);
    const float *sc = s->scales + (size_t)r * (size_t)s->n_groups;
    const uint8_t *z = s->zeros + (size_t)r * (size_t)s->n_groups;
    double y = 0;
    for (int64_t g = 0; g < s->n_groups; g++) {
        double d = 0;
        for (int64_t i = s->goff[g]; i < s->goff[g + 1]; i++) d += (double)code_at(row, s->bits, i) * xp[i];
        y += (double)sc[g] * (d - (double)z[g] * xs[g]);
    }
    return (float)y;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DSQ_INTQ_AVX2 __attribute__((target("avx2,fma")))

DSQ_INTQ_AVX2 static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 8 codes held in the low 8 bytes of b, times x[0..8). */
DSQ_INTQ_AVX2 static inline __m256 fma8(__m128i b, const float *x, __m256 acc)
{
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    return _mm256_fmadd_ps(q, _mm256_loadu_ps(x), acc);
}

/* sum q_k x_k over stored positions [p, e) of a nibble row; p a multiple
 * of 32: one 16-byte block of 32 codes per step (layout at code_at). */
DSQ_INTQ_AVX2 static float seg_nib_avx2(const uint8_t *row, const float *x, int64_t p, int64_t e, __m256 *acc)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; /* four chains hide the FMA latency */
    for (; p + 32 <= e; p += 32) {
        __m128i v = _mm_loadu_si128((const __m128i *)(row + p / 2));
        __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        a0 = fma8(lo, x + p, a0);
        a1 = fma8(_mm_srli_si128(lo, 8), x + p + 8, a1);
        a2 = fma8(hi, x + p + 16, a2);
        a3 = fma8(_mm_srli_si128(hi, 8), x + p + 24, a3);
    }
    *acc = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float t = 0;
    for (; p < e; p++) t += (float)code_at(row, 4, p) * x[p];
    return t;
}

DSQ_INTQ_AVX2 static float seg_byte_avx2(const uint8_t *row, const float *x, int64_t p, int64_t e, __m256 *acc)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; p + 16 <= e; p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(row + p));
        a0 = fma8(v, x + p, a0);
        a1 = fma8(_mm_srli_si128(v, 8), x + p + 8, a1);
    }
    for (; p + 8 <= e; p += 8) a0 = fma8(_mm_loadl_epi64((const __m128i *)(row + p)), x + p, a0);
    *acc = _mm256_add_ps(a0, a1);
    float t = 0;
    for (; p < e; p++) t += (float)row[p] * x[p];
    return t;
}

/* Vector partial sums are scaled per group with one FMA and reduced once per
 * row; only the scalar head/tail of a group (odd starts, lengths not a
 * multiple of the step) are summed separately. */
DSQ_INTQ_AVX2 static float row_dot_avx2(const dsq_linear *W, int64_t r, const float *xp, const float *xs)
{
    const intq_store *s = store_of(W);
    const uint8_t *row = code_row(W, r);
    const float *sc = s->scales + (size_t)r * (size_t)s->n_groups;
    const uint8_t *z = s->zeros + (size_t)r * (size_t)s->n_groups;
    __m256 tot = _mm256_setzero_ps();
    float ts = 0;
    for (int64_t g = 0; g < s->n_groups; g++) {
        int64_t p = s->goff[g], e = s->goff[g + 1];
        float t = 0;
        __m256 acc;
        if (s->bits == 4) {
            for (; (p & 31) && p < e; p++) t += (float)code_at(row, 4, p) * xp[p]; /* to a block start */
            t += seg_nib_avx2(row, xp, p, e, &acc);
        } else {
            t += seg_byte_avx2(row, xp, p, e, &acc);
        }
        tot = _mm256_fmadd_ps(_mm256_set1_ps(sc[g]), acc, tot);
        ts += sc[g] * (t - (float)z[g] * xs[g]);
    }
    return hsum8(tot) + ts;
}
#define HAVE_INTQ_AVX2 1
#else
#define HAVE_INTQ_AVX2 0
#endif

static void intq_dot_rows(const dsq_linear *W, const float *x, const void *act, int64_t r0, int64_t r1, float *y)
{
    (void)x; /* act holds x in stored order */
    const float *xp = act, *xs = xp + W->in;
#if HAVE_INTQ_AVX2
    if (dsq_cpu_use_avx2()) {
        for (int64_t r = r0; r < r1; r++) y[r - r0] = row_dot_avx2(W, r, xp, xs);
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) y[r - r0] = row_dot_scalar(W, r, xp, xs);
}

static void intq_release(dsq_linear *W)
{
    intq_store *s = W->priv;
    if (!s) return;
    free(s->scales);
    free(s->zeros);
    free(s->perm);
    free(s->goff);
    free(s);
    W->priv = NULL;
}

static const dsq_linear_vtable g_intq = {
    "intq", intq_rows_f32, intq_act_bytes, intq_act_prepare, intq_dot_rows, intq_release, NULL, NULL, NULL};

/* ---- construction ---- */

/* Group boundaries and the stable sort of columns by group (counting sort);
 * perm stays NULL when the sort is the identity. */
static dsq_status build_order(const dsq_intq *q, intq_store *s)
{
    s->goff = calloc((size_t)q->n_groups + 1, sizeof *s->goff);
    if (!s->goff) return dsq_fail(DSQ_ERR_NOMEM, "intq linear: out of memory");
    for (int64_t c = 0; c < q->cols; c++) s->goff[dsq_intq_group_of(q, c) + 1]++;
    for (int64_t g = 0; g < q->n_groups; g++) s->goff[g + 1] += s->goff[g];
    bool sorted = true;
    for (int64_t c = 1; c < q->cols && sorted; c++) sorted = dsq_intq_group_of(q, c - 1) <= dsq_intq_group_of(q, c);
    if (sorted) return DSQ_OK;
    s->perm = malloc((size_t)q->cols * sizeof *s->perm);
    int64_t *next = malloc((size_t)q->n_groups * sizeof *next);
    if (!s->perm || !next) {
        free(next);
        return dsq_fail(DSQ_ERR_NOMEM, "intq linear: out of memory");
    }
    memcpy(next, s->goff, (size_t)q->n_groups * sizeof *next);
    for (int64_t c = 0; c < q->cols; c++) s->perm[next[dsq_intq_group_of(q, c)]++] = (int32_t)c;
    free(next);
    return DSQ_OK;
}

/* Codes of every row in stored order: nibbles for 4 bits (layout at code_at), bytes otherwise. */
static dsq_status pack_codes(const dsq_intq *q, const intq_store *s, size_t row_bytes, uint8_t **out)
{
    uint64_t n;
    if (!dsq_mul_u64((uint64_t)row_bytes, (uint64_t)q->rows, &n) || n > SIZE_MAX)
        return dsq_fail(DSQ_ERR_ARG, "intq linear: %lld x %lld is too large", (long long)q->rows, (long long)q->cols);
    uint8_t *codes = calloc((size_t)n ? (size_t)n : 1, 1);
    if (!codes) return dsq_fail(DSQ_ERR_NOMEM, "intq linear: out of memory for %llu code bytes", (unsigned long long)n);
    for (int64_t r = 0; r < q->rows; r++) {
        const uint8_t *src = q->codes + (size_t)r * (size_t)q->cols;
        uint8_t *dst = codes + (size_t)r * row_bytes;
        for (int64_t i = 0; i < q->cols; i++) {
            uint8_t v = src[s->perm ? s->perm[i] : i];
            if (q->bits == 4)
                dst[(i >> 5) * 16 + (i & 15)] |= (uint8_t)(v << (((i >> 4) & 1) * 4));
            else
                dst[i] = v;
        }
    }
    *out = codes;
    return DSQ_OK;
}

static dsq_status fill_store(dsq_linear *W, const dsq_intq *q, intq_store *s)
{
    size_t ng = (size_t)q->rows * (size_t)q->n_groups; /* validated: both > 0, arrays of this size exist */
    s->bits = q->bits;
    s->n_groups = q->n_groups;
    s->scales = malloc(ng * sizeof *s->scales);
    s->zeros = malloc(ng);
    if (!s->scales || !s->zeros) return dsq_fail(DSQ_ERR_NOMEM, "intq linear: out of memory for scales");
    memcpy(s->scales, q->scales, ng * sizeof *s->scales);
    memcpy(s->zeros, q->zeros, ng);
    DSQ_TRY(build_order(q, s));
    W->row_bytes = code_row_bytes(q->bits, q->cols);
    uint8_t *codes = NULL;
    DSQ_TRY(pack_codes(q, s, W->row_bytes, &codes));
    W->owned = codes;
    W->data = codes;
    return DSQ_OK;
}

dsq_status dsq_linear_init_intq(dsq_linear *W, const dsq_intq *q)
{
    memset(W, 0, sizeof *W);
    DSQ_TRY(dsq_intq_validate(q));
    intq_store *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "intq linear: out of memory");
    W->kind = DSQ_LINEAR_INTQ;
    W->vt = &g_intq;
    W->priv = s;
    W->type = DSQ_TYPE_U8;
    W->in = q->cols;
    W->out = q->rows;
    dsq_status st = fill_store(W, q, s);
    if (st != DSQ_OK) dsq_linear_release(W);
    return st;
}

bool dsq_linear_is_intq(const dsq_linear *W) { return W && W->vt == &g_intq; }

int dsq_linear_intq_bits(const dsq_linear *W) { return dsq_linear_is_intq(W) ? store_of(W)->bits : 0; }
