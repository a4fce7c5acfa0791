/* HF <-> GGUF tensor names (every name both ways, the permutation flag per
 * family, bias rules, strict layer indexes, refused names) and the Q/K row
 * permutation of llama.cpp's LlamaModel.permute: hand-computed cases, an
 * independent numpy-style index computation, and permute-then-inverse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "formats/hf_names.h"
#include "tests/helpers/testutil.h"

static dsq_arch make_arch(dsq_arch_family fam, int64_t layers, int64_t heads, int64_t kv_heads, bool attn_bias,
                          bool mlp_bias)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = fam;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "%s",
             fam == DSQ_ARCH_QWEN2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    a.n_layers = layers;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.attention_bias = attn_bias;
    a.mlp_bias = mlp_bias;
    return a;
}

typedef struct pair {
    const char *hf, *gguf;
    dsq_permute_kind llama_perm;
} pair;

static const pair g_pairs[] = {
    {"model.embed_tokens.weight", "token_embd.weight", DSQ_PERMUTE_NONE},
    {"model.norm.weight", "output_norm.weight", DSQ_PERMUTE_NONE},
    {"lm_head.weight", "output.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", DSQ_PERMUTE_Q},
    {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", DSQ_PERMUTE_K},
    {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", DSQ_PERMUTE_NONE},
    {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", DSQ_PERMUTE_NONE},
    {"model.layers.11.self_attn.q_proj.bias", "blk.11.attn_q.bias", DSQ_PERMUTE_Q},
    {"model.layers.11.self_attn.k_proj.bias", "blk.11.attn_k.bias", DSQ_PERMUTE_K},
    {"model.layers.11.self_attn.v_proj.bias", "blk.11.attn_v.bias", DSQ_PERMUTE_NONE},
    {"model.layers.11.self_attn.o_proj.bias", "blk.11.attn_output.bias", DSQ_PERMUTE_NONE},
    {"model.layers.11.mlp.gate_proj.bias", "blk.11.ffn_gate.bias", DSQ_PERMUTE_NONE},
    {"model.layers.11.mlp.up_proj.bias", "blk.11.ffn_up.bias", DSQ_PERMUTE_NONE},
    {"model.layers.11.mlp.down_proj.bias", "blk.11.ffn_down.bias", DSQ_PERMUTE_NONE},
    {"model.layers.11.mlp.down_proj.weight", "blk.11.ffn_down.weight", DSQ_PERMUTE_NONE},
};

static void test_every_name_both_ways(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 12, 8, 2, true, true);
    for (size_t i = 0; i < sizeof g_pairs / sizeof g_pairs[0]; i++) {
        char out[128];
        dsq_permute_kind perm = (dsq_permute_kind)99;
        if (dsq_name_hf_to_gguf(&a, g_pairs[i].hf, out, sizeof out, &perm) != DSQ_OK)
            fail_msg("%s: %s", g_pairs[i].hf, dsq_errmsg());
        assert_string_equal(out, g_pairs[i].gguf);
        assert_int_equal(perm, g_pairs[i].llama_perm);
        perm = (dsq_permute_kind)99;
        if (dsq_name_gguf_to_hf(&a, g_pairs[i].gguf, out, sizeof out, &perm) != DSQ_OK)
            fail_msg("%s: %s", g_pairs[i].gguf, dsq_errmsg());
        assert_string_equal(out, g_pairs[i].hf);
        assert_int_equal(perm, g_pairs[i].llama_perm);
        /* the lookups give the same answers */
        perm = (dsq_permute_kind)99;
        assert_true(dsq_name_find_gguf(&a, g_pairs[i].hf, out, sizeof out, &perm));
        assert_string_equal(out, g_pairs[i].gguf);
        assert_int_equal(perm, g_pairs[i].llama_perm);
        perm = (dsq_permute_kind)99;
        assert_true(dsq_name_find_hf(&a, g_pairs[i].gguf, out, sizeof out, &perm));
        assert_string_equal(out, g_pairs[i].hf);
        assert_int_equal(perm, g_pairs[i].llama_perm);
    }
}

/* Qwen2 keeps HF's rotate-half layout: never permuted; q/k/v biases are
 * always there, o_proj and MLP biases never. */
static void test_qwen2_rules(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_QWEN2, 4, 4, 2, false, false);
    char out[128];
    dsq_permute_kind perm;
    assert_int_equal(dsq_name_hf_to_gguf(&a, "model.layers.3.self_attn.q_proj.weight", out, sizeof out, &perm), DSQ_OK);
    assert_int_equal(perm, DSQ_PERMUTE_NONE);
    assert_int_equal(dsq_name_hf_to_gguf(&a, "model.layers.3.self_attn.k_proj.bias", out, sizeof out, &perm), DSQ_OK);
    assert_string_equal(out, "blk.3.attn_k.bias");
    assert_int_equal(perm, DSQ_PERMUTE_NONE);
    assert_int_equal(dsq_name_gguf_to_hf(&a, "blk.3.attn_k.weight", out, sizeof out, &perm), DSQ_OK);
    assert_int_equal(perm, DSQ_PERMUTE_NONE);
    assert_int_equal(dsq_name_hf_to_gguf(&a, "model.layers.0.self_attn.o_proj.bias", out, sizeof out, NULL),
                     DSQ_ERR_NOT_FOUND);
    assert_int_equal(dsq_name_hf_to_gguf(&a, "model.layers.0.mlp.up_proj.bias", out, sizeof out, NULL),
                     DSQ_ERR_NOT_FOUND);
    /* A Llama without attention_bias has no q_proj.bias either. */
    dsq_arch l = make_arch(DSQ_ARCH_LLAMA, 4, 4, 2, false, false);
    assert_int_equal(dsq_name_hf_to_gguf(&l, "model.layers.0.self_attn.q_proj.bias", out, sizeof out, NULL),
                     DSQ_ERR_NOT_FOUND);
    assert_int_equal(dsq_name_gguf_to_hf(&l, "blk.0.attn_q.bias", out, sizeof out, NULL), DSQ_ERR_NOT_FOUND);
}

static void test_bad_names(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 2, 4, 2, true, true);
    static const char *const bad_hf[] = {
        "model.layers.2.self_attn.q_proj.weight",  /* layer == n_layers */
        "model.layers.01.self_attn.q_proj.weight", /* leading zero */
        "model.layers.-1.self_attn.q_proj.weight",
        "model.layers.+1.self_attn.q_proj.weight",
        "model.layers.1x.self_attn.q_proj.weight",
        "model.layers..self_attn.q_proj.weight",
        "model.layers.4294967297.mlp.up_proj.weight",
        "model.layers.99999999999999999999.mlp.up_proj.weight",
        "model.layers.0.self_attn.q_proj",       /* no suffix */
        "model.layers.0.self_attn.q_proj.scale", /* unknown suffix */
        "model.layers.0.input_layernorm.bias",   /* norms have no bias */
        "model.layers.0.self_attn.rotary_emb.inv_freq",
        "model.layers.0.mlp.experts.0.up_proj.weight",
        "model.layers.0.self_attn.q_proj.weight.extra",
        "model.embed_tokens.weight.bak",
        "lm_head.bias",
        "model.layers.0",
        "blk.0.attn_q.weight",
        ".weight",
        "",
    };
    for (size_t i = 0; i < sizeof bad_hf / sizeof bad_hf[0]; i++) {
        char out[128];
        dsq_status s = dsq_name_hf_to_gguf(&a, bad_hf[i], out, sizeof out, NULL);
        if (s != DSQ_ERR_NOT_FOUND) fail_msg("\"%s\" was accepted (%s)", bad_hf[i], dsq_status_name(s));
        if (bad_hf[i][0] && !strstr(dsq_errmsg(), bad_hf[i])) fail_msg("message \"%s\" lacks the name", dsq_errmsg());
    }
    static const char *const bad_gguf[] = {
        "blk.2.attn_q.weight", "blk.00.attn_q.weight", "blk.1.attn_q", "blk.a.attn_q.weight", "blk.1.attn_qkv.weight",
        "blk..attn_q.weight",  "rope_freqs.weight",    "output.bias",  "model.norm.weight",   "blk.1.attn_norm.bias",
    };
    for (size_t i = 0; i < sizeof bad_gguf / sizeof bad_gguf[0]; i++) {
        char out[128];
        dsq_status s = dsq_name_gguf_to_hf(&a, bad_gguf[i], out, sizeof out, NULL);
        if (s != DSQ_ERR_NOT_FOUND) fail_msg("\"%s\" was accepted (%s)", bad_gguf[i], dsq_status_name(s));
    }
    char tiny[8];
    assert_int_equal(dsq_name_hf_to_gguf(&a, "model.layers.1.mlp.down_proj.weight", tiny, sizeof tiny, NULL),
                     DSQ_ERR_ARG);
    /* The lookups answer no without a message, for unmapped names and short buffers alike. */
    dsq_fail(DSQ_ERR_IO, "sentinel");
    char out[128];
    for (size_t i = 0; i < sizeof bad_hf / sizeof bad_hf[0]; i++)
        assert_false(dsq_name_find_gguf(&a, bad_hf[i], out, sizeof out, NULL));
    for (size_t i = 0; i < sizeof bad_gguf / sizeof bad_gguf[0]; i++)
        assert_false(dsq_name_find_hf(&a, bad_gguf[i], out, sizeof out, NULL));
    assert_false(dsq_name_find_gguf(&a, "model.layers.1.mlp.down_proj.weight", tiny, sizeof tiny, NULL));
    assert_false(dsq_name_find_hf(&a, "blk.1.ffn_down.weight", tiny, sizeof tiny, NULL));
    assert_string_equal(dsq_errmsg(), "sentinel");
}

static void test_ignored(void **state)
{
    (void)state;
    assert_true(dsq_name_hf_is_ignored("model.layers.3.self_attn.rotary_emb.inv_freq"));
    assert_false(dsq_name_hf_is_ignored("model.layers.3.self_attn.q_proj.weight"));
    assert_true(dsq_name_gguf_is_ignored("rope_freqs.weight"));
    assert_false(dsq_name_gguf_is_ignored("blk.0.attn_q.weight"));
}

/* One-byte rows numbered 0..rows-1, permuted to GGUF. */
static void permuted_order(const dsq_arch *a, dsq_permute_kind kind, int64_t rows, uint8_t *out)
{
    for (int64_t i = 0; i < rows; i++) out[i] = (uint8_t)i;
    if (dsq_permute_rows(a, kind, true, out, rows, 1, NULL) != DSQ_OK) fail_msg("%s", dsq_errmsg());
}

/* Hand-computed from w.reshape(n_head, 2, rows // n_head // 2).swapaxes(1, 2).reshape(rows). */
static void test_permute_by_hand(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 1, 2, 1, false, false);
    uint8_t got[8];
    /* Q: 2 heads of head_dim 4: each head [r0 r1 | r2 r3] -> r0 r2 r1 r3. */
    permuted_order(&a, DSQ_PERMUTE_Q, 8, got);
    static const uint8_t want_q[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    assert_memory_equal(got, want_q, 8);
    /* K uses n_kv_heads (1): one head of 8 rows -> 0 4 1 5 2 6 3 7. */
    permuted_order(&a, DSQ_PERMUTE_K, 8, got);
    static const uint8_t want_k[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    assert_memory_equal(got, want_k, 8);
    /* NONE leaves the data alone. */
    for (int i = 0; i < 8; i++) got[i] = (uint8_t)i;
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_NONE, true, got, 8, 1, NULL), DSQ_OK);
    static const uint8_t ident[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_memory_equal(got, ident, 8);
}

/* numpy semantics spelled out with strides: the output of shape
 * (H, hd/2, 2) at (h, i, j) reads the input of shape (H, 2, hd/2) at
 * (h, j, i); flat indexes are row-major. */
static int64_t numpy_source_row(int64_t out_row, int64_t heads, int64_t rows)
{
    int64_t half = rows / heads / 2;
    int64_t out_shape[3] = {heads, half, 2}, idx[3];
    int64_t r = out_row;
    for (int d = 2; d >= 0; d--) {
        idx[d] = r % out_shape[d];
        r /= out_shape[d];
    }
    int64_t in_strides[3] = {2 * half, half, 1}; /* of shape (H, 2, half) */
    return idx[0] * in_strides[0] + idx[2] * in_strides[1] + idx[1] * in_strides[2];
}

static void test_permute_matches_numpy(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 1, 6, 3, false, false);
    const int64_t rows = 6 * 10; /* Q: 6 heads of 10; K: 3 heads of 20 */
    const size_t rb = 5;
    uint8_t *w = malloc(rows * rb), *orig = malloc(rows * rb), *scratch = malloc(rows * rb);
    uint64_t seed = 7;
    for (int64_t i = 0; i < rows * (int64_t)rb; i++) orig[i] = (uint8_t)dsq_test_rand(&seed);
    for (int kind = DSQ_PERMUTE_Q; kind <= DSQ_PERMUTE_K; kind++) {
        int64_t heads = kind == DSQ_PERMUTE_Q ? 6 : 3;
        memcpy(w, orig, rows * rb);
        assert_int_equal(dsq_permute_rows(&a, (dsq_permute_kind)kind, true, w, rows, rb, scratch), DSQ_OK);
        for (int64_t r = 0; r < rows; r++)
            assert_memory_equal(w + r * rb, orig + numpy_source_row(r, heads, rows) * rb, rb);
        /* The inverse brings the HF layout back. */
        assert_int_equal(dsq_permute_rows(&a, (dsq_permute_kind)kind, false, w, rows, rb, NULL), DSQ_OK);
        assert_memory_equal(w, orig, rows * rb);
    }
    free(w);
    free(orig);
    free(scratch);
}

/* Bias vectors: one float per row. */
static void test_permute_bias(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 1, 4, 2, true, false);
    float b[32], orig[32];
    for (int i = 0; i < 32; i++) orig[i] = b[i] = (float)i * 0.5f - 3.0f;
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_K, true, b, 32, sizeof(float), NULL), DSQ_OK);
    /* K: 2 heads of 16: head 0 row 1 is HF row 8, row 2 HF row 1. */
    assert_true(b[1] == orig[8] && b[2] == orig[1] && b[17] == orig[24]);
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_K, false, b, 32, sizeof(float), NULL), DSQ_OK);
    assert_memory_equal(b, orig, sizeof b);
}

static void test_permute_errors(void **state)
{
    (void)state;
    dsq_arch a = make_arch(DSQ_ARCH_LLAMA, 1, 4, 2, false, false);
    uint8_t buf[64];
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_Q, true, buf, 12, 1, NULL), DSQ_ERR_FORMAT); /* 12 % 8 */
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_K, true, buf, 6, 1, NULL), DSQ_ERR_FORMAT);  /* 6 % 4 */
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_Q, true, buf, 0, 1, NULL), DSQ_ERR_FORMAT);
    assert_int_equal(dsq_permute_rows(&a, (dsq_permute_kind)7, true, buf, 8, 1, NULL), DSQ_ERR_ARG);
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_Q, true, buf, 8, 0, NULL), DSQ_ERR_ARG);
    a.n_kv_heads = 0;
    assert_int_equal(dsq_permute_rows(&a, DSQ_PERMUTE_K, true, buf, 8, 1, NULL), DSQ_ERR_FORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_name_both_ways),
        cmocka_unit_test(test_qwen2_rules),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_ignored),
        cmocka_unit_test(test_permute_by_hand),
        cmocka_unit_test(test_permute_matches_numpy),
        cmocka_unit_test(test_permute_bias),
        cmocka_unit_test(test_permute_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
