/* DeepSeek's pieces of the CPU backend: the MoE routers (every method and
 * scoring, the bias that only selects, groups masked at -inf), the per-head
 * products, and MLA's absorbed attention (one latent "KV head", values read
 * from the key rows through v_stride, an explicit softmax scale) against the
 * expanded form on the same numbers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/cpu/ops.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static dsq_arch_moe moe_of(int64_t E, int64_t K, int64_t G, int64_t TG, dsq_topk_method m, dsq_scoring s, bool norm,
                           double scale)
{
    dsq_arch_moe a;
    memset(&a, 0, sizeof a);
    a.n_routed = E, a.top_k = K, a.n_group = G, a.topk_group = TG, a.topk_method = m, a.scoring = s;
    a.norm_topk_prob = norm, a.routed_scaling = scale, a.ffn = 8, a.layer_freq = 1;
    return a;
}

/* The (index, weight) pairs of one token, in any order. */
static void expect_pairs(const int32_t *idx, const float *wt, int K, const int32_t *want_idx, const float *want_wt)
{
    for (int j = 0; j < K; j++) {
        int hit = -1;
        for (int t = 0; t < K; t++)
            if (idx[t] == want_idx[j]) hit = t;
        if (hit < 0) fail_msg("expert %d not selected", want_idx[j]);
        if (fabsf(wt[hit] - want_wt[j]) > 1e-6f)
            fail_msg("expert %d: weight %g, want %g", want_idx[j], wt[hit], want_wt[j]);
    }
}

static void test_greedy_softmax(void **state)
{
    (void)state;
    dsq_arch_moe m = moe_of(4, 2, 1, 1, DSQ_TOPK_GREEDY, DSQ_SCORING_SOFTMAX, false, 1.5);
    float logits[4] = {1, 3, 2, 0}, sum = 0, p[4];
    for (int i = 0; i < 4; i++) sum += p[i] = expf(logits[i] - 3);
    int32_t idx[2];
    float wt[2];
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_OK);
    expect_pairs(idx, wt, 2, (int32_t[]){1, 2}, (float[]){p[1] / sum * 1.5f, p[2] / sum * 1.5f});
    /* renormalized: the two weights then sum to the scaling factor */
    m.norm_topk_prob = true;
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_OK);
    float d = p[1] + p[2] + 1e-20f * sum;
    expect_pairs(idx, wt, 2, (int32_t[]){1, 2}, (float[]){p[1] / d * 1.5f, p[2] / d * 1.5f});
}

/* V3: groups of 2 ranked by their two best biased scores; the bias picks
 * experts 4 and 2, the weights are their unbiased sigmoid scores. */
static void test_noaux_tc_bias_only_selects(void **state)
{
    (void)state;
    dsq_arch_moe m = moe_of(8, 2, 4, 2, DSQ_TOPK_NOAUX_TC, DSQ_SCORING_SIGMOID, true, 2.5);
    float logits[8] = {0, 0, 0, 0, 1, 0, 0, 0};
    float bias[8] = {0, 0, 0.1f, 0.05f, 0.3f, -0.2f, 0, 0};
    /* biased: g0 1.0, g1 0.6 + 0.55, g2 0.731 + 0.3 + 0.3, g3 1.0 -> groups 2 and 1; experts 4 (1.031), 2 (0.6) */
    int32_t idx[2];
    float wt[2];
    assert_int_equal(dsq_cpu_moe_route(&m, logits, bias, idx, wt, 1), DSQ_OK);
    float s4 = sigmoidf(1), s2 = 0.5f, den = s4 + s2 + 1e-20f;
    expect_pairs(idx, wt, 2, (int32_t[]){4, 2}, (float[]){s4 / den * 2.5f, s2 / den * 2.5f});
    /* without the bias the tie-free best two are 4 and one of the 0.5s */
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_OK);
    assert_true(idx[0] == 4 || idx[1] == 4);
}

/* Masked groups are at -inf, not 0: with every biased score negative, a
 * masked expert must still lose to the chosen group's. */
static void test_masked_groups_are_minus_infinity(void **state)
{
    (void)state;
    dsq_arch_moe m = moe_of(8, 2, 4, 1, DSQ_TOPK_NOAUX_TC, DSQ_SCORING_SIGMOID, true, 1.0);
    float logits[8] = {0};
    float bias[8] = {-1.2f, -1.3f, -1.9f, -1.8f, -1.7f, -1.6f, -1.5f, -1.4f};
    int32_t idx[2];
    float wt[2];
    assert_int_equal(dsq_cpu_moe_route(&m, logits, bias, idx, wt, 1), DSQ_OK);
    expect_pairs(idx, wt, 2, (int32_t[]){0, 1}, (float[]){0.5f, 0.5f});
}

/* V2's group_limited_greedy ranks groups by their best softmax score. */
static void test_group_limited_greedy(void **state)
{
    (void)state;
    dsq_arch_moe m = moe_of(6, 2, 3, 1, DSQ_TOPK_GROUP_LIMITED, DSQ_SCORING_SOFTMAX, false, 1.0);
    /* group 0 holds the single best expert (3.0); group 2 the best pair (2.5 + 2.4) */
    float logits[6] = {3.0f, -5, 0, 0, 2.5f, 2.4f};
    float sum = 0, p[6];
    for (int i = 0; i < 6; i++) sum += p[i] = expf(logits[i] - 3.0f);
    int32_t idx[2];
    float wt[2];
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_OK);
    expect_pairs(idx, wt, 2, (int32_t[]){0, 1}, (float[]){p[0] / sum, p[1] / sum});
    m.topk_method = DSQ_TOPK_NOAUX_TC; /* two-best sums: group 2 wins */
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_OK);
    expect_pairs(idx, wt, 2, (int32_t[]){4, 5}, (float[]){p[4] / sum, p[5] / sum});
}

static void test_many_tokens_and_bad_shape(void **state)
{
    (void)state;
    dsq_arch_moe m = moe_of(16, 3, 4, 2, DSQ_TOPK_NOAUX_TC, DSQ_SCORING_SIGMOID, true, 1.0);
    enum { N = 200 };
    float *logits = malloc(N * 16 * sizeof *logits);
    for (int i = 0; i < N * 16; i++) logits[i] = (float)((i * 7919) % 101) / 25.0f - 2.0f;
    int32_t idx[N * 3];
    float wt[N * 3];
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, N), DSQ_OK);
    for (int t = 0; t < N; t++) {
        float s = 0;
        for (int j = 0; j < 3; j++) {
            assert_true(idx[t * 3 + j] >= 0 && idx[t * 3 + j] < 16);
            for (int k = 0; k < j; k++) assert_true(idx[t * 3 + k] != idx[t * 3 + j]);
            s += wt[t * 3 + j];
        }
        assert_true(fabsf(s - 1.0f) < 1e-5f); /* renormalized */
    }
    m.top_k = 17;
    assert_int_equal(dsq_cpu_moe_route(&m, logits, NULL, idx, wt, 1), DSQ_ERR_ARG);
    free(logits);
}

static float *randv(size_t n, unsigned seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return v;
}

static void test_head_matmul(void **state)
{
    (void)state;
    enum { H = 3, OUT = 5, IN = 7, N = 4, XS = H * IN + 2, YS = H * OUT + 1 };
    float *W = randv(H * OUT * IN, 1), *x = randv(N * XS, 2), *y = calloc(N * YS, sizeof(float));
    dsq_head_mm p = {H, OUT, IN, W, OUT * IN, XS, IN, YS, OUT};
    assert_int_equal(dsq_cpu_head_matmul(&p, x, y, N), DSQ_OK);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < H; h++)
            for (int o = 0; o < OUT; o++) {
                double s = 0;
                for (int i = 0; i < IN; i++) s += (double)W[(h * OUT + o) * IN + i] * x[t * XS + h * IN + i];
                assert_true(fabs(y[t * YS + h * OUT + o] - s) < 1e-5);
            }
    dsq_head_mm bad = p;
    bad.in = 0;
    assert_int_equal(dsq_cpu_head_matmul(&bad, x, y, N), DSQ_ERR_ARG);
    free(W), free(x), free(y);
}

/* Expanded: K = [W_k c, r], V = W_v c per head. Absorbed: q_lat = W_k^T q_nope,
 * scores over [c, r] with one KV head, out = W_v (sum p c). Same numbers. */
static void absorbed_case(int n, int pos0)
{
    enum { H = 4, L = 12, R = 4, NOPE = 6, VH = 5 };
    int T = pos0 + n, QK = NOPE + R, LR = L + R;
    float *cache = randv((size_t)T * LR, 3), *Wk = randv(H * NOPE * L, 4), *Wv = randv(H * VH * L, 5);
    float *q = randv((size_t)n * H * QK, 6);
    float scale = 0.37f;
    /* expanded */
    float *K = malloc((size_t)T * H * QK * sizeof(float)), *V = malloc((size_t)T * H * VH * sizeof(float));
    for (int j = 0; j < T; j++)
        for (int h = 0; h < H; h++) {
            for (int d = 0; d < NOPE; d++) {
                double s = 0;
                for (int c = 0; c < L; c++) s += (double)Wk[(h * NOPE + d) * L + c] * cache[j * LR + c];
                K[(j * H + h) * QK + d] = (float)s;
            }
            for (int d = 0; d < R; d++) K[(j * H + h) * QK + NOPE + d] = cache[j * LR + L + d];
            for (int d = 0; d < VH; d++) {
                double s = 0;
                for (int c = 0; c < L; c++) s += (double)Wv[(h * VH + d) * L + c] * cache[j * LR + c];
                V[(j * H + h) * VH + d] = (float)s;
            }
        }
    float *ref = malloc((size_t)n * H * VH * sizeof(float)), *got = malloc((size_t)n * H * VH * sizeof(float));
    dsq_attn_shape ex = {H, H, QK, 0, false, VH, scale, 0};
    assert_int_equal(dsq_cpu_attention(&ex, q, K, V, ref, n, pos0), DSQ_OK);
    /* absorbed: W_k^T per head as [L x NOPE] */
    float *WkT = malloc(H * L * NOPE * sizeof(float));
    for (int h = 0; h < H; h++)
        for (int d = 0; d < NOPE; d++)
            for (int c = 0; c < L; c++) WkT[(h * L + c) * NOPE + d] = Wk[(h * NOPE + d) * L + c];
    float *qabs = malloc((size_t)n * H * LR * sizeof(float)), *olat = malloc((size_t)n * H * L * sizeof(float));
    dsq_head_mm qk = {H, L, NOPE, WkT, L * NOPE, H * QK, QK, H * LR, LR};
    assert_int_equal(dsq_cpu_head_matmul(&qk, q, qabs, n), DSQ_OK);
    for (int h = 0; h < H; h++) dsq_cpu_copy_rows(qabs + h * LR + L, H * LR, q + h * QK + NOPE, H * QK, R, n);
    dsq_attn_shape ab = {H, 1, LR, 0, false, L, scale, LR};
    assert_int_equal(dsq_cpu_attention(&ab, qabs, cache, cache, olat, n, pos0), DSQ_OK);
    dsq_head_mm ov = {H, VH, L, Wv, VH * L, H * L, L, H * VH, VH};
    assert_int_equal(dsq_cpu_head_matmul(&ov, olat, got, n), DSQ_OK);
    for (int i = 0; i < n * H * VH; i++)
        if (fabsf(got[i] - ref[i]) > 1e-4f) fail_msg("n %d pos0 %d: [%d] %g vs %g", n, pos0, i, got[i], ref[i]);
    free(cache), free(Wk), free(Wv), free(q), free(K), free(V), free(ref), free(got), free(WkT), free(qabs);
    free(olat);
}

static void test_absorbed_attention(void **state)
{
    (void)state;
    absorbed_case(1, 9);  /* decode, row by row */
    absorbed_case(3, 20); /* a few rows */
    absorbed_case(40, 0); /* the blocked path */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_softmax),
        cmocka_unit_test(test_noaux_tc_bias_only_selects),
        cmocka_unit_test(test_masked_groups_are_minus_infinity),
        cmocka_unit_test(test_group_limited_greedy),
        cmocka_unit_test(test_many_tokens_and_bad_shape),
        cmocka_unit_test(test_head_matmul),
        cmocka_unit_test(test_absorbed_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
