/* Causal grouped-query attention over an F32 KV cache. Two ways to the same
 * numbers: one query row at a time with dot products (decode), and blocks of
 * query rows with the GEMM kernel (prefill: scores = Q K^T, then P V), the
 * masked softmax between the two products done row by row. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/vec.h"
#include "runtime/cpu/ops.h"

#define QBLOCK 32          /* query rows per GEMM work item */
#define QBLOCK_BF16 128    /* BF16: packing K and V costs more, so fewer, taller blocks */
#define BLOCKED_MIN_ROWS 8 /* fewer queries: the row-by-row path */

static dsq_status check_shape(const dsq_attn_shape *s, int n, int pos0)
{
    if (s->n_heads <= 0 || s->n_kv_heads <= 0 || s->head_dim <= 0 || s->head_dim_v < 0 || s->n_heads % s->n_kv_heads ||
        n < 0 || pos0 < 0 || s->window < 0)
        return dsq_fail(DSQ_ERR_ARG, "attention: bad shape (%d heads, %d kv heads, head_dim %d, %d rows at %d)",
                        s->n_heads, s->n_kv_heads, s->head_dim, n, pos0);
    return DSQ_OK;
}

/* The value head dim: MLA's differs from the query/key one; 0 means equal. */
static int vdim(const dsq_attn_shape *s) { return s->head_dim_v > 0 ? s->head_dim_v : s->head_dim; }

static float qk_scale(const dsq_attn_shape *s) { return s->scale > 0 ? s->scale : 1.0f / sqrtf((float)s->head_dim); }

static int64_t vstride(const dsq_attn_shape *s)
{
    return s->v_stride > 0 ? s->v_stride : (int64_t)s->n_kv_heads * vdim(s);
}

/* First key position query position p may see. */
static int first_key(const dsq_attn_shape *s, int p)
{
    return s->window > 0 && p - s->window + 1 > 0 ? p - s->window + 1 : 0;
}

/* exp_shift with the polynomial exp of dsq_vec_exp_sum (BF16 passes). */
static float fast_exp_shift(float *p, int lo, int hi)
{
    return dsq_vec_exp_sum(hi - lo + 1, p + lo, dsq_vec_max(hi - lo + 1, p + lo));
}

/* In place: p[j] for j in [lo, hi] becomes softmax over that range; the sum of
 * exponentials goes out so the caller can normalise once. */
static float exp_shift(float *p, int lo, int hi)
{
    float mx = -INFINITY;
    for (int j = lo; j <= hi; j++) mx = p[j] > mx ? p[j] : mx;
    float sum = 0;
    for (int j = lo; j <= hi; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    return sum;
}

dsq_status dsq_cpu_attention_rows(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, float *out,
                                  int n, int pos0)
{
    DSQ_TRY(check_shape(s, n, pos0));
    int hd = s->head_dim, hv = vdim(s), group = s->n_heads / s->n_kv_heads, L = pos0 + n;
    int64_t qs = (int64_t)s->n_heads * hd, ks = (int64_t)s->n_kv_heads * hd;
    int64_t vs = vstride(s), os = (int64_t)s->n_heads * hv;
    float scale = qk_scale(s);
    int threads = dsq_cpu_threads();
    float *scores = malloc((size_t)threads * (size_t)(L > 0 ? L : 1) * sizeof(float));
    if (!scores) return dsq_fail(DSQ_ERR_NOMEM, "attention: out of memory for %d scores", L);
    int64_t items = (int64_t)n * s->n_heads;
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        int i = (int)(it / s->n_heads), h = (int)(it % s->n_heads), g = h / group, p = pos0 + i;
        int lo = first_key(s, p);
        float *sc = scores + (size_t)omp_get_thread_num() * (size_t)L;
        const float *qi = q + i * qs + (int64_t)h * hd;
        for (int j = lo; j <= p; j++) sc[j] = dsq_vec_dot_f32(hd, qi, kc + j * ks + (int64_t)g * hd) * scale;
        float inv = 1.0f / exp_shift(sc, lo, p);
        float *o = out + i * os + (int64_t)h * hv;
        memset(o, 0, (size_t)hv * sizeof(float));
        for (int j = lo; j <= p; j++) dsq_vec_axpy(hv, sc[j] * inv, vc + j * vs + (int64_t)g * hv, o);
    }
    free(scores);
    return DSQ_OK;
}

/* Per-thread scratch of the blocked path: scores, GEMM scratch and, for
 * BF16, the rounded query rows and probabilities. */
typedef struct attn_scratch {
    float *S;
    void *gs;
    uint16_t *qb, *pb;
    /* BF16 without a window: every kv head's keys and transposed values
     * packed once for all its query blocks and heads (else NULL) */
    const uint16_t *kp, *vp;
    size_t kp_bytes, vp_bytes; /* per kv head */
    int L;                     /* keys in the cache */
} attn_scratch;

static size_t up64(size_t b) { return (b + 63) & ~(size_t)63; }

static int qblock(const dsq_attn_shape *s) { return s->bf16 ? QBLOCK_BF16 : QBLOCK; }

static size_t scratch_bytes(const dsq_attn_shape *s, int L)
{
    int hd = s->head_dim, hv = vdim(s);
    size_t QB = (size_t)qblock(s);
    size_t g32 = dsq_gemm_scratch_floats(L, hd), g2 = dsq_gemm_scratch_floats(hv, L);
    size_t gb = (g32 > g2 ? g32 : g2) * sizeof(float);
    if (s->bf16) {
        size_t b1 = dsq_gemm_bf16_scratch_bytes(L, hd), b2 = dsq_gemm_bf16_scratch_bytes(hv, L);
        gb = b1 > b2 ? b1 : b2;
        gb += up64(QB * (size_t)dsq_gemm_bf16_lda(hd) * 2) + up64(QB * (size_t)dsq_gemm_bf16_lda(L) * 2);
    }
    return up64(QB * (size_t)L * sizeof(float)) + up64(gb);
}

static attn_scratch scratch_at(const dsq_attn_shape *s, int L, char *base)
{
    attn_scratch a;
    size_t QB = (size_t)qblock(s);
    a.S = (float *)base;
    a.kp = a.vp = NULL;
    a.kp_bytes = a.vp_bytes = 0;
    a.L = L;
    char *p = base + up64(QB * (size_t)L * sizeof(float));
    a.qb = a.pb = NULL;
    if (s->bf16) {
        a.qb = (uint16_t *)p;
        p += up64(QB * (size_t)dsq_gemm_bf16_lda(s->head_dim) * 2);
        a.pb = (uint16_t *)p;
        p += up64(QB * (size_t)dsq_gemm_bf16_lda(L) * 2);
    }
    a.gs = p;
    return a;
}

/* S = Q K^T (F32 or BF16 products) for query rows [i0, i0 + nb) of head h and keys [lo, lo + Lk). */
static void scores(const dsq_attn_shape *s, const float *q, const float *kc, int h, int i0, int nb, int lo, int Lk,
                   attn_scratch *a)
{
    int hd = s->head_dim, g = h / (s->n_heads / s->n_kv_heads);
    int64_t qs = (int64_t)s->n_heads * hd, ks = (int64_t)s->n_kv_heads * hd;
    const float *qr = q + i0 * qs + (int64_t)h * hd, *kr = kc + lo * ks + (int64_t)g * hd;
    if (!s->bf16) {
        dsq_gemm_f32(DSQ_GEMM_BT, nb, Lk, hd, qr, qs, kr, ks, a->S, Lk, false, a->gs);
        return;
    }
    int64_t ld = dsq_gemm_bf16_lda(hd);
    dsq_gemm_bf16_round_rows(qr, qs, nb, hd, a->qb, ld);
    if (a->kp) /* keys [0, Lk) of all L packed; S rows L apart */
        dsq_gemm_bf16_packed(nb, a->L, 0, Lk, hd, a->qb, ld, (const uint16_t *)((const char *)a->kp + a->kp_bytes * g),
                             a->S, a->L, false, a->gs);
    else
        dsq_gemm_bf16(DSQ_GEMM_BT, nb, Lk, hd, a->qb, ld, kr, ks, a->S, Lk, false, a->gs);
}

/* out rows = P V for the same block (P in S). */
static void weigh_values(const dsq_attn_shape *s, const float *vc, float *out, int h, int i0, int nb, int lo, int Lk,
                         attn_scratch *a)
{
    int hv = vdim(s), g = h / (s->n_heads / s->n_kv_heads);
    int64_t os = (int64_t)s->n_heads * hv, vs = vstride(s);
    const float *vr = vc + lo * vs + (int64_t)g * hv;
    float *o = out + i0 * os + (int64_t)h * hv;
    if (!s->bf16) {
        dsq_gemm_f32(DSQ_GEMM_BN, nb, hv, Lk, a->S, Lk, vr, vs, o, os, false, a->gs);
        return;
    }
    if (a->vp) {
        /* the packed values span all L keys: P's zeros past Lk add nothing */
        int64_t ld = dsq_gemm_bf16_lda(a->L);
        dsq_gemm_bf16_round_rows(a->S, a->L, nb, a->L, a->pb, ld);
        dsq_gemm_bf16_packed(nb, hv, 0, hv, a->L, a->pb, ld, (const uint16_t *)((const char *)a->vp + a->vp_bytes * g),
                             o, os, false, a->gs);
        return;
    }
    int64_t ld = dsq_gemm_bf16_lda(Lk);
    dsq_gemm_bf16_round_rows(a->S, Lk, nb, Lk, a->pb, ld);
    dsq_gemm_bf16(DSQ_GEMM_BN, nb, hv, Lk, a->pb, ld, vr, vs, o, os, false, a->gs);
}

/* One block of query rows [i0, i0 + nb) of head h: S = Q K^T over the keys any
 * of them may see, masked softmax per row, O = P V. */
static void attend_block(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, float *out,
                         int pos0, int h, int i0, int nb, attn_scratch *sc)
{
    int lo = first_key(s, pos0 + i0), hi = pos0 + i0 + nb; /* keys [lo, hi) */
    int Lk = hi - lo;
    float scale = qk_scale(s);
    scores(s, q, kc, h, i0, nb, lo, Lk, sc);
    const int lds = sc->kp ? sc->L : Lk, width = lds; /* S's row stride, P's columns */
    for (int r = 0; r < nb; r++) {
        float *row = sc->S + (int64_t)r * lds;
        int p = pos0 + i0 + r, a = first_key(s, p) - lo, b = p - lo; /* visible: [a, b] */
        dsq_vec_scale(b - a + 1, scale, row + a);
        float inv = 1.0f / (s->bf16 ? fast_exp_shift(row, a, b) : exp_shift(row, a, b));
        memset(row, 0, (size_t)a * sizeof *row);
        dsq_vec_scale(b - a + 1, inv, row + a);
        memset(row + b + 1, 0, (size_t)(width - 1 - b) * sizeof *row);
    }
    weigh_values(s, vc, out, h, i0, nb, lo, Lk, sc);
}

#define PACKED_KV_MAX_BYTES ((size_t)256 << 20) /* larger caches pack per query block */

static bool g_pack_kv = true;

void dsq_cpu_attention_set_kv_packing(bool on) { g_pack_kv = on; }

/* BF16 without a window: the keys and the transposed values of every kv
 * head packed once, instead of once per query block and head (9 heads on 3
 * kv heads and 4 blocks packed each key 7.5 times). NULL when the cache is
 * too large or memory short: the per-block products then pack their own. */
static char *pack_kv(const dsq_attn_shape *s, const float *kc, const float *vc, int L, size_t *kb, size_t *vb)
{
    if (!g_pack_kv || !s->bf16 || s->window > 0) return NULL;
    const int hd = s->head_dim, hv = vdim(s), nkv = s->n_kv_heads, threads = dsq_cpu_threads();
    const int64_t ks = (int64_t)nkv * hd, vs = vstride(s);
    *kb = up64(dsq_gemm_bf16_packed_bytes(L, hd));
    *vb = up64(dsq_gemm_bf16_packed_bytes(hv, L));
    const size_t total = (*kb + *vb) * (size_t)nkv;
    if (total > PACKED_KV_MAX_BYTES) return NULL;
    char *P = aligned_alloc(64, total);
    float *vt = malloc((size_t)threads * (size_t)hv * (size_t)L * sizeof *vt);
    if (!P || !vt) {
        free(P);
        free(vt);
        return NULL;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int it = 0; it < 2 * nkv; it++) {
        const int g = it / 2;
        if (it % 2 == 0) {
            dsq_gemm_bf16_pack_all(L, hd, kc + (int64_t)g * hd, ks, 0, L, (uint16_t *)(P + *kb * (size_t)g));
            continue;
        }
        float *t = vt + (size_t)omp_get_thread_num() * (size_t)hv * (size_t)L;
        for (int j = 0; j < L; j++)
            for (int d = 0; d < hv; d++) t[(int64_t)d * L + j] = vc[j * vs + (int64_t)g * hv + d];
        dsq_gemm_bf16_pack_all(hv, L, t, L, 0, hv, (uint16_t *)(P + *kb * (size_t)nkv + *vb * (size_t)g));
    }
    free(vt);
    return P;
}

dsq_status dsq_cpu_attention_blocked(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc,
                                     float *out, int n, int pos0)
{
    DSQ_TRY(check_shape(s, n, pos0));
    if (n == 0) return DSQ_OK;
    int QB = qblock(s), L = pos0 + n, nblocks = (n + QB - 1) / QB;
    size_t per = scratch_bytes(s, L);
    int threads = dsq_cpu_threads();
    char *scratch = aligned_alloc(64, per * (size_t)threads);
    if (!scratch) return dsq_fail(DSQ_ERR_NOMEM, "attention: out of memory for %d x %d scores", QB, L);
    size_t kb = 0, vb = 0;
    char *kv = pack_kv(s, kc, vc, L, &kb, &vb);
    int64_t items = (int64_t)nblocks * s->n_heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        /* Late blocks see more keys: hand them out first. */
        int b = nblocks - 1 - (int)(it / s->n_heads), h = (int)(it % s->n_heads);
        int i0 = b * QB, nb = n - i0 < QB ? n - i0 : QB;
        attn_scratch sc = scratch_at(s, L, scratch + per * (size_t)omp_get_thread_num());
        if (kv) {
            sc.kp = (const uint16_t *)kv;
            sc.vp = (const uint16_t *)(kv + kb * (size_t)s->n_kv_heads);
            sc.kp_bytes = kb, sc.vp_bytes = vb;
        }
        attend_block(s, q, kc, vc, out, pos0, h, i0, nb, &sc);
    }
    free(kv);
    free(scratch);
    return DSQ_OK;
}

dsq_status dsq_cpu_attention(const dsq_attn_shape *s, const float *q, const float *kc, const float *vc, float *out,
                             int n, int pos0)
{
    if (n < BLOCKED_MIN_ROWS) return dsq_cpu_attention_rows(s, q, kc, vc, out, n, pos0);
    return dsq_cpu_attention_blocked(s, q, kc, vc, out, n, pos0);
}
