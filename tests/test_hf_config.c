/* config.json <-> dsq_arch <-> GGUF: every field of real-shaped configs
 * (SmolLM2, Llama 3.1, Mistral-Nemo, Qwen2.5 with yarn), transformers'
 * defaults, refused architectures and fields, sanity checks, the llama3
 * rope_freqs table, the exact GGUF keys and value types, and the round trips
 * HF -> HF and HF -> GGUF -> HF (with the real SmolLM2 GGUF when present). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "tests/helpers/testutil.h"

static const char *const SMOLLM2 = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
                                   " \"hidden_size\": 576, \"intermediate_size\": 1536, \"num_hidden_layers\": 30,"
                                   " \"num_attention_heads\": 9, \"num_key_value_heads\": 3, \"vocab_size\": 49152,"
                                   " \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-05,"
                                   " \"rope_theta\": 100000, \"rope_scaling\": null, \"tie_word_embeddings\": true,"
                                   " \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"bfloat16\","
                                   " \"hidden_act\": \"silu\", \"pretraining_tp\": 1}";

static const char *const LLAMA31 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 4096,"
    " \"intermediate_size\": 14336, \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
    " \"num_key_value_heads\": 8, \"vocab_size\": 128256, \"max_position_embeddings\": 131072,"
    " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
    " \"rope_type\": \"llama3\"}, \"tie_word_embeddings\": false, \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"attention_bias\": false, \"mlp_bias\": false}";

/* Mistral-Nemo: head_dim 128 != 5120 / 32. */
static const char *const NEMO = "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\","
                                " \"hidden_size\": 5120, \"intermediate_size\": 14336, \"num_hidden_layers\": 40,"
                                " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128,"
                                " \"vocab_size\": 131072, \"max_position_embeddings\": 1024000,"
                                " \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"sliding_window\": null,"
                                " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}";

static const char *const QWEN25 =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": 1536,"
    " \"intermediate_size\": 8960, \"num_hidden_layers\": 28, \"num_attention_heads\": 12,"
    " \"num_key_value_heads\": 2, \"vocab_size\": 151936, \"max_position_embeddings\": 131072,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"use_sliding_window\": false, \"sliding_window\": 4096,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768,"
    " \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"attention_factor\": 1.25}, \"tie_word_embeddings\": true,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151643, \"torch_dtype\": \"bfloat16\"}";

static dsq_arch parse_ok(const char *json)
{
    dsq_arch a;
    if (dsq_arch_from_hf_json(json, "config.json", &a) != DSQ_OK) fail_msg("parse: %s", dsq_errmsg());
    return a;
}

static void expect_fail(const char *json, dsq_status want, const char *phrase)
{
    dsq_arch a;
    dsq_status s = dsq_arch_from_hf_json(json, "cfg/config.json", &a);
    if (s != want)
        fail_msg("got %s (%s), want %s for %s", dsq_status_name(s), dsq_errmsg(), dsq_status_name(want), json);
    if (!strstr(dsq_errmsg(), phrase)) fail_msg("message \"%s\" lacks \"%s\"", dsq_errmsg(), phrase);
    if (!strstr(dsq_errmsg(), "cfg/config.json")) fail_msg("message \"%s\" lacks the path", dsq_errmsg());
}

/* Replaces the first occurrence of from by to in a copy of s. */
static char *edit(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    if (!p) fail_msg("\"%s\" not in the config", from);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    return out;
}

static void assert_arch_equal(const dsq_arch *x, const dsq_arch *y)
{
    assert_int_equal(x->family, y->family);
    assert_string_equal(x->hf_architecture, y->hf_architecture);
    assert_string_equal(x->model_type, y->model_type);
    assert_int_equal(x->hidden_size, y->hidden_size);
    assert_int_equal(x->intermediate_size, y->intermediate_size);
    assert_int_equal(x->n_layers, y->n_layers);
    assert_int_equal(x->n_heads, y->n_heads);
    assert_int_equal(x->n_kv_heads, y->n_kv_heads);
    assert_int_equal(x->head_dim, y->head_dim);
    assert_int_equal(x->vocab_size, y->vocab_size);
    assert_int_equal(x->max_position_embeddings, y->max_position_embeddings);
    assert_true(x->rms_norm_eps == y->rms_norm_eps);
    assert_true(x->rope_theta == y->rope_theta);
    assert_int_equal(x->rope_scaling, y->rope_scaling);
    assert_true(x->rope_factor == y->rope_factor);
    assert_true(x->rope_low_freq_factor == y->rope_low_freq_factor);
    assert_true(x->rope_high_freq_factor == y->rope_high_freq_factor);
    assert_int_equal(x->rope_original_max_pos, y->rope_original_max_pos);
    assert_true(x->yarn_beta_fast == y->yarn_beta_fast);
    assert_true(x->yarn_beta_slow == y->yarn_beta_slow);
    assert_true(x->yarn_attn_factor == y->yarn_attn_factor);
    assert_int_equal(x->tie_word_embeddings, y->tie_word_embeddings);
    assert_int_equal(x->attention_bias, y->attention_bias);
    assert_int_equal(x->mlp_bias, y->mlp_bias);
    assert_int_equal(x->bos_token_id, y->bos_token_id);
    assert_int_equal(x->eos_token_id, y->eos_token_id);
    assert_string_equal(x->torch_dtype, y->torch_dtype);
    assert_int_equal(x->sliding_window, y->sliding_window);
    assert_int_equal(x->has_head_dim, y->has_head_dim);
}

/* ---------------------------------------------------------------- parsing */

static void test_smollm2_fields(void **state)
{
    (void)state;
    dsq_arch a = parse_ok(SMOLLM2);
    assert_int_equal(a.family, DSQ_ARCH_LLAMA);
    assert_string_equal(a.hf_architecture, "LlamaForCausalLM");
    assert_string_equal(a.model_type, "llama");
    assert_int_equal(a.hidden_size, 576);
    assert_int_equal(a.intermediate_size, 1536);
    assert_int_equal(a.n_layers, 30);
    assert_int_equal(a.n_heads, 9);
    assert_int_equal(a.n_kv_heads, 3);
    assert_int_equal(a.head_dim, 64);
    assert_false(a.has_head_dim);
    assert_int_equal(a.vocab_size, 49152);
    assert_int_equal(a.max_position_embeddings, 8192);
    assert_true(a.rms_norm_eps == 1e-5);
    assert_true(a.rope_theta == 100000.0);
    assert_int_equal(a.rope_scaling, DSQ_ROPE_SCALING_NONE);
    assert_true(a.tie_word_embeddings);
    assert_false(a.attention_bias);
    assert_false(a.mlp_bias);
    assert_int_equal(a.bos_token_id, 1);
    assert_int_equal(a.eos_token_id, 2);
    assert_string_equal(a.torch_dtype, "bfloat16");
    assert_int_equal(a.sliding_window, 0);
    assert_string_equal(dsq_arch_gguf_name(&a), "llama");
}

static void test_rope_variants(void **state)
{
    (void)state;
    dsq_arch a = parse_ok(LLAMA31);
    assert_int_equal(a.rope_scaling, DSQ_ROPE_SCALING_LLAMA3);
    assert_true(a.rope_factor == 8.0 && a.rope_low_freq_factor == 1.0 && a.rope_high_freq_factor == 4.0);
    assert_int_equal(a.rope_original_max_pos, 8192);
    assert_int_equal(a.eos_token_id, 128001); /* first of the list */
    assert_int_equal(a.n_kv_heads, 8);

    dsq_arch q = parse_ok(QWEN25);
    assert_int_equal(q.family, DSQ_ARCH_QWEN2);
    assert_int_equal(q.rope_scaling, DSQ_ROPE_SCALING_YARN); /* the old "type" key */
    assert_true(q.rope_factor == 4.0 && q.yarn_beta_fast == 32.0 && q.yarn_beta_slow == 1.0);
    assert_true(q.yarn_attn_factor == 1.25);
    assert_int_equal(q.rope_original_max_pos, 32768);
    assert_true(q.attention_bias);         /* qwen2 always has q/k/v biases */
    assert_int_equal(q.sliding_window, 0); /* use_sliding_window false */
    assert_string_equal(dsq_arch_gguf_name(&q), "qwen2");

    char *lin = edit(SMOLLM2, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}");
    dsq_arch l = parse_ok(lin);
    assert_int_equal(l.rope_scaling, DSQ_ROPE_SCALING_LINEAR);
    assert_true(l.rope_factor == 2.5);
    free(lin);

    /* transformers >= 4.57 writes rope_parameters with rope_theta inside. */
    char *v5 = edit(SMOLLM2, "\"rope_scaling\": null",
                    "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 250000.0}");
    char *v5b = edit(v5, "\"rope_theta\": 100000, ", "");
    dsq_arch p = parse_ok(v5b);
    assert_true(p.rope_theta == 250000.0);
    assert_int_equal(p.rope_scaling, DSQ_ROPE_SCALING_NONE);
    free(v5);
    free(v5b);

    /* llama3 with the converter's defaults for missing keys. */
    char *l3 =
        edit(SMOLLM2, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0}");
    dsq_arch d = parse_ok(l3);
    assert_true(d.rope_factor == 32.0 && d.rope_low_freq_factor == 1.0 && d.rope_high_freq_factor == 4.0);
    assert_int_equal(d.rope_original_max_pos, 8192);
    free(l3);
}

static void test_defaults(void **state)
{
    (void)state;
    /* LlamaConfig: kv heads = heads, theta 1e4, eps 1e-6, 2048 positions. */
    dsq_arch a =
        parse_ok("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1000}");
    assert_int_equal(a.n_kv_heads, 4);
    assert_int_equal(a.head_dim, 64);
    assert_true(a.rope_theta == 10000.0);
    assert_true(a.rms_norm_eps == 1e-6);
    assert_int_equal(a.max_position_embeddings, 2048);
    assert_string_equal(a.model_type, "llama");
    assert_int_equal(a.bos_token_id, -1);
    assert_false(a.tie_word_embeddings);
    /* MistralConfig: 4096 * 32 positions, sliding window 4096. */
    dsq_arch m =
        parse_ok("{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1000}");
    assert_int_equal(m.max_position_embeddings, 131072);
    assert_int_equal(m.sliding_window, 4096);
    assert_string_equal(m.model_type, "mistral");
    /* Qwen2Config: 32768 positions. */
    dsq_arch q =
        parse_ok("{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 256, \"intermediate_size\": 512,"
                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1000}");
    assert_int_equal(q.max_position_embeddings, 32768);
    assert_true(q.attention_bias);
    /* Mistral-Nemo: explicit head_dim, null sliding window. */
    dsq_arch n = parse_ok(NEMO);
    assert_int_equal(n.head_dim, 128);
    assert_true(n.has_head_dim);
    assert_int_equal(n.sliding_window, 0);
}

/* deepseek-ai/DeepSeek-V3 config.json (the MLA, MoE, yarn and FP8 keys as
 * released; the FP8 block is read by runtime/model_quant.c). */
static const char *const DSV3 =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"hidden_size\": 7168,"
    " \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 61,"
    " \"num_nextn_predict_layers\": 1, \"num_attention_heads\": 128, \"num_key_value_heads\": 128,"
    " \"n_shared_experts\": 1, \"n_routed_experts\": 256, \"ep_size\": 1, \"routed_scaling_factor\": 2.5,"
    " \"kv_lora_rank\": 512, \"q_lora_rank\": 1536, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128,"
    " \"qk_nope_head_dim\": 128, \"topk_method\": \"noaux_tc\", \"n_group\": 8, \"topk_group\": 4,"
    " \"num_experts_per_tok\": 8, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 3, \"norm_topk_prob\": true,"
    " \"scoring_func\": \"sigmoid\", \"aux_loss_alpha\": 0.001, \"seq_aux\": true, \"hidden_act\": \"silu\","
    " \"max_position_embeddings\": 163840, \"initializer_range\": 0.02, \"rms_norm_eps\": 1e-06,"
    " \"use_cache\": true, \"pad_token_id\": null, \"bos_token_id\": 0, \"eos_token_id\": 1,"
    " \"pretraining_tp\": 1, \"tie_word_embeddings\": false, \"rope_theta\": 10000,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"attention_bias\": false, \"attention_dropout\": 0.0, \"quantization_config\": {\"activation_scheme\":"
    " \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]},"
    " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 129280}";

/* deepseek-ai/DeepSeek-V2-Lite config.json: q_lora_rank null, softmax greedy routing. */
static const char *const DSV2_LITE =
    "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"model_type\": \"deepseek_v2\", \"hidden_size\": 2048,"
    " \"intermediate_size\": 10944, \"moe_intermediate_size\": 1408, \"num_hidden_layers\": 27,"
    " \"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"n_shared_experts\": 2, \"n_routed_experts\": 64,"
    " \"ep_size\": 1, \"routed_scaling_factor\": 1.0, \"kv_lora_rank\": 512, \"q_lora_rank\": null,"
    " \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"qk_nope_head_dim\": 128, \"topk_method\": \"greedy\","
    " \"n_group\": 1, \"topk_group\": 1, \"num_experts_per_tok\": 6, \"moe_layer_freq\": 1,"
    " \"first_k_dense_replace\": 1, \"norm_topk_prob\": false, \"scoring_func\": \"softmax\","
    " \"aux_loss_alpha\": 0.001, \"seq_aux\": true, \"hidden_act\": \"silu\", \"max_position_embeddings\": 163840,"
    " \"rms_norm_eps\": 1e-06, \"bos_token_id\": 100000, \"eos_token_id\": 100001, \"tie_word_embeddings\": false,"
    " \"rope_theta\": 10000, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40,"
    " \"mscale\": 0.707, \"mscale_all_dim\": 0.707, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"attention_bias\": false, \"torch_dtype\": \"bfloat16\", \"vocab_size\": 102400}";

static void test_deepseek(void **state)
{
    (void)state;
    dsq_arch a = parse_ok(DSV3);
    assert_int_equal(a.family, DSQ_ARCH_DEEPSEEK2);
    assert_int_equal(a.mla.q_lora_rank, 1536);
    assert_int_equal(a.mla.kv_lora_rank, 512);
    assert_int_equal(a.head_dim, 192); /* qk_nope + qk_rope */
    assert_int_equal(a.n_kv_heads, 128);
    assert_int_equal(a.moe.n_routed, 256);
    assert_int_equal(a.moe.top_k, 8);
    assert_int_equal(a.moe.n_group, 8);
    assert_int_equal(a.moe.topk_group, 4);
    assert_int_equal(a.moe.first_dense, 3);
    assert_int_equal(a.moe.topk_method, DSQ_TOPK_NOAUX_TC);
    assert_int_equal(a.moe.scoring, DSQ_SCORING_SIGMOID);
    assert_true(a.moe.norm_topk_prob);
    assert_true(a.moe.routed_scaling == 2.5);
    assert_int_equal(a.n_mtp_layers, 1);
    assert_int_equal(a.rope_scaling, DSQ_ROPE_SCALING_YARN);
    assert_true(a.mla.yarn_mscale == 1.0 && a.mla.yarn_mscale_all_dim == 1.0);
    assert_false(dsq_arch_layer_is_moe(&a, 2));
    assert_true(dsq_arch_layer_is_moe(&a, 3));
    dsq_arch b = parse_ok(DSV2_LITE);
    assert_int_equal(b.mla.q_lora_rank, 0); /* null: a plain q_proj */
    assert_int_equal(b.moe.topk_method, DSQ_TOPK_GREEDY);
    assert_int_equal(b.moe.scoring, DSQ_SCORING_SOFTMAX);
    assert_false(b.moe.norm_topk_prob);
    assert_int_equal(b.moe.n_shared, 2);
    assert_true(b.mla.yarn_mscale == 0.707);
    assert_false(dsq_arch_layer_is_moe(&b, 0));
    assert_true(dsq_arch_layer_is_moe(&b, 1));
    /* a model whose moe_layer_freq is 2: every other layer after the dense ones */
    char *f2 = edit(DSV3, "\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2");
    dsq_arch c = parse_ok(f2);
    free(f2);
    assert_true(dsq_arch_layer_is_moe(&c, 4) && !dsq_arch_layer_is_moe(&c, 5));
    static const struct {
        const char *from, *to, *phrase;
        dsq_status want;
    } bad[] = {
        {"\"topk_method\": \"noaux_tc\"", "\"topk_method\": \"top1\"", "\"topk_method\" is \"top1\"",
         DSQ_ERR_UNSUPPORTED},
        {"\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"tanh\"", "\"scoring_func\" is \"tanh\"",
         DSQ_ERR_UNSUPPORTED},
        {"\"n_group\": 8", "\"n_group\": 7", "n_group 7 must divide n_routed_experts 256", DSQ_ERR_FORMAT},
        {"\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 300", "num_experts_per_tok 300", DSQ_ERR_FORMAT},
        {"\"topk_group\": 4", "\"topk_group\": 9", "topk_group 9 of 8 groups", DSQ_ERR_FORMAT},
        {"\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63", "qk_rope_head_dim 63 must be even", DSQ_ERR_FORMAT},
        {"\"kv_lora_rank\": 512", "\"kv_lora_rank\": 0", "kv_lora_rank = 0", DSQ_ERR_FORMAT},
        {"\"topk_method\": \"noaux_tc\"", "\"topk_method\": 3", "\"topk_method\" must be a string", DSQ_ERR_FORMAT},
        {"\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": -1", "routed_scaling_factor -1",
         DSQ_ERR_FORMAT},
    };
    /* config.json written back parses to the same architecture */
    const char *srcs[] = {DSV3, DSV2_LITE};
    for (int k = 0; k < 2; k++) {
        dsq_arch x = parse_ok(srcs[k]), y;
        char *text = NULL;
        assert_int_equal(dsq_arch_to_hf_json(&x, &text), DSQ_OK);
        y = parse_ok(text);
        free(text);
        assert_memory_equal(&x.mla, &y.mla, sizeof x.mla);
        assert_memory_equal(&x.moe, &y.moe, sizeof x.moe);
        assert_true(x.head_dim == y.head_dim && x.n_mtp_layers == y.n_mtp_layers && x.rope_factor == y.rope_factor &&
                    x.rope_original_max_pos == y.rope_original_max_pos && x.vocab_size == y.vocab_size);
        assert_string_equal(x.hf_architecture, y.hf_architecture);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = edit(DSV3, bad[i].from, bad[i].to);
        expect_fail(j, bad[i].want, bad[i].phrase);
        free(j);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    char *gpt2 = edit(SMOLLM2, "LlamaForCausalLM", "GPT2LMHeadModel");
    expect_fail(gpt2, DSQ_ERR_UNSUPPORTED,
                "architecture \"GPT2LMHeadModel\" is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                "Qwen2ForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)");
    free(gpt2);
    static const char *const required[] = {"\"hidden_size\": 576, ", "\"intermediate_size\": 1536, ",
                                           "\"num_hidden_layers\": 30, ", "\"num_attention_heads\": 9, ",
                                           "\"vocab_size\": 49152, "};
    static const char *const names[] = {"\"hidden_size\"", "\"intermediate_size\"", "\"num_hidden_layers\"",
                                        "\"num_attention_heads\"", "\"vocab_size\""};
    for (size_t i = 0; i < 5; i++) {
        char *s = edit(SMOLLM2, required[i], "");
        expect_fail(s, DSQ_ERR_NOT_FOUND, names[i]);
        free(s);
    }
    char *noarch = edit(SMOLLM2, "\"architectures\": [\"LlamaForCausalLM\"], ", "");
    expect_fail(noarch, DSQ_ERR_NOT_FOUND, "\"architectures\"");
    free(noarch);
    expect_fail("[1, 2]", DSQ_ERR_FORMAT, "not a JSON object");
    expect_fail("{\"architectures\": ", DSQ_ERR_FORMAT, "not valid JSON");
}

static void test_sanity(void **state)
{
    (void)state;
    static const struct {
        const char *from, *to, *phrase;
        dsq_status st;
    } cases[] = {
        {"\"num_key_value_heads\": 3", "\"num_key_value_heads\": 4", "multiple of num_key_value_heads", DSQ_ERR_FORMAT},
        {"\"num_attention_heads\": 9", "\"num_attention_heads\": 7", "not divisible", DSQ_ERR_FORMAT},
        {"\"hidden_size\": 576", "\"hidden_size\": -576", "hidden_size", DSQ_ERR_FORMAT},
        {"\"hidden_size\": 576", "\"hidden_size\": \"576\"", "must be an integer", DSQ_ERR_FORMAT},
        {"\"hidden_size\": 576", "\"hidden_size\": 576.5", "must be an integer", DSQ_ERR_FORMAT},
        {"\"num_hidden_layers\": 30", "\"num_hidden_layers\": 0", "num_hidden_layers", DSQ_ERR_FORMAT},
        {"\"num_hidden_layers\": 30", "\"num_hidden_layers\": 1e300", "must be an integer", DSQ_ERR_FORMAT},
        {"\"vocab_size\": 49152", "\"vocab_size\": 4294967296", "vocab_size", DSQ_ERR_FORMAT},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0", "rms_norm_eps", DSQ_ERR_FORMAT},
        {"\"rope_theta\": 100000", "\"rope_theta\": -1", "rope_theta", DSQ_ERR_FORMAT},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", "\"dynamic\"",
         DSQ_ERR_UNSUPPORTED},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"linear\"}", "\"factor\"", DSQ_ERR_NOT_FOUND},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}",
         "\"original_max_position_embeddings\"", DSQ_ERR_NOT_FOUND},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}", "factor",
         DSQ_ERR_FORMAT},
        {"\"rope_scaling\": null",
         "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": "
         "1}",
         "low_freq_factor", DSQ_ERR_FORMAT},
        {"\"rope_scaling\": null", "\"rope_scaling\": 3", "rope_scaling", DSQ_ERR_FORMAT},
        {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": 1", "tie_word_embeddings", DSQ_ERR_FORMAT},
        {"\"bos_token_id\": 1", "\"bos_token_id\": -1", "bos_token_id", DSQ_ERR_FORMAT},
        {"\"max_position_embeddings\": 8192", "\"max_position_embeddings\": 0", "max_position_embeddings",
         DSQ_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = edit(SMOLLM2, cases[i].from, cases[i].to);
        expect_fail(s, cases[i].st, cases[i].phrase);
        free(s);
    }
    /* An odd head_dim cannot hold rotary pairs. */
    char *odd = edit(NEMO, "\"head_dim\": 128", "\"head_dim\": 127");
    expect_fail(odd, DSQ_ERR_FORMAT, "head_dim");
    free(odd);
}

/* ------------------------------------------------------------ HF writing */

static void test_hf_json_round_trip(void **state)
{
    (void)state;
    const char *const configs[] = {SMOLLM2, LLAMA31, NEMO, QWEN25};
    for (size_t i = 0; i < 4; i++) {
        dsq_arch a = parse_ok(configs[i]);
        char *json = NULL;
        assert_int_equal(dsq_arch_to_hf_json(&a, &json), DSQ_OK);
        dsq_arch b = parse_ok(json);
        assert_arch_equal(&a, &b);
        /* What transformers reads must be there under its names. */
        cJSON *o = cJSON_Parse(json);
        assert_non_null(o);
        assert_true(cJSON_IsArray(cJSON_GetObjectItem(o, "architectures")));
        assert_non_null(cJSON_GetObjectItem(o, "rope_scaling"));
        assert_string_equal(cJSON_GetObjectItem(o, "hidden_act")->valuestring, "silu");
        cJSON_Delete(o);
        free(json);
    }
    dsq_arch bad = parse_ok(SMOLLM2);
    bad.n_kv_heads = 2;
    char *json = (char *)0x1;
    assert_int_equal(dsq_arch_to_hf_json(&bad, &json), DSQ_ERR_FORMAT);
    assert_null(json);
}

/* ------------------------------------------------------------------- GGUF */

/* Writes a with dsq_arch_to_gguf (plus the tensors from_gguf looks at) to a
 * temporary GGUF and opens it. */
static dsq_gguf *write_gguf(const char *dir, const dsq_arch *a, int64_t n_tokens)
{
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    if (dsq_arch_to_gguf(a, w) != DSQ_OK) fail_msg("to_gguf: %s", dsq_errmsg());
    if (a->bos_token_id >= 0)
        assert_int_equal(dsq_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)a->bos_token_id), DSQ_OK);
    if (a->eos_token_id >= 0)
        assert_int_equal(dsq_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)a->eos_token_id), DSQ_OK);
    if (n_tokens > 0) {
        /* Qwen2 GGUFs carry no vocab_size: the token list gives it. */
        const char **toks = malloc((size_t)n_tokens * sizeof *toks);
        for (int64_t i = 0; i < n_tokens; i++) toks[i] = "t";
        assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)n_tokens), DSQ_OK);
        free(toks);
    }
    dsq_type emb = !strcmp(a->torch_dtype, "float16") ? DSQ_TYPE_F16 : DSQ_TYPE_BF16;
    int64_t shape[2] = {4, 64};
    assert_int_equal(dsq_gguf_add_tensor(w, "token_embd.weight", emb, 2, shape), DSQ_OK);
    if (!a->tie_word_embeddings) assert_int_equal(dsq_gguf_add_tensor(w, "output.weight", emb, 2, shape), DSQ_OK);
    float *freqs = NULL;
    int64_t n = a->head_dim / 2;
    if (a->rope_scaling == DSQ_ROPE_SCALING_LLAMA3) {
        freqs = malloc((size_t)n * sizeof *freqs);
        assert_int_equal(dsq_arch_llama3_rope_freqs(a, freqs, n), DSQ_OK);
        assert_int_equal(dsq_gguf_add_tensor(w, "rope_freqs.weight", DSQ_TYPE_F32, 1, &n), DSQ_OK);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/arch.gguf", dir);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    static const uint8_t zeros[4 * 64 * 2] = {0};
    assert_int_equal(dsq_gguf_writer_write(w, zeros, sizeof zeros), DSQ_OK);
    if (!a->tie_word_embeddings) assert_int_equal(dsq_gguf_writer_write(w, zeros, sizeof zeros), DSQ_OK);
    if (freqs) assert_int_equal(dsq_gguf_writer_write(w, freqs, (uint64_t)n * sizeof *freqs), DSQ_OK);
    if (dsq_gguf_writer_finish(w) != DSQ_OK) fail_msg("finish: %s", dsq_errmsg());
    dsq_gguf_writer_free(w);
    free(freqs);
    dsq_gguf *g = NULL;
    if (dsq_gguf_open(path, &g) != DSQ_OK) fail_msg("open: %s", dsq_errmsg());
    return g;
}

static void expect_key(const dsq_gguf *g, const char *key, dsq_gguf_vtype type)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v) fail_msg("key %s missing", key);
    if (v->type != type)
        fail_msg("key %s is %s, want %s", key, dsq_gguf_vtype_name(v->type), dsq_gguf_vtype_name(type));
}

static void expect_no_key(const dsq_gguf *g, const char *key)
{
    if (dsq_gguf_get(g, key)) fail_msg("key %s should not be written", key);
}

/* The keys and value types convert_hf_to_gguf.py writes. */
static void test_gguf_keys(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    dsq_arch a = parse_ok(SMOLLM2);
    dsq_gguf *g = write_gguf(dir, &a, a.family == DSQ_ARCH_QWEN2 ? a.vocab_size : 0);
    const char *const u32_keys[] = {"llama.block_count",          "llama.context_length",
                                    "llama.embedding_length",     "llama.feed_forward_length",
                                    "llama.attention.head_count", "llama.attention.head_count_kv",
                                    "llama.vocab_size",           "llama.rope.dimension_count"};
    for (size_t i = 0; i < 8; i++) expect_key(g, u32_keys[i], DSQ_GGUF_U32);
    expect_key(g, "llama.rope.freq_base", DSQ_GGUF_F32);
    expect_key(g, "llama.attention.layer_norm_rms_epsilon", DSQ_GGUF_F32);
    expect_key(g, "general.architecture", DSQ_GGUF_STRING);
    expect_no_key(g, "llama.attention.key_length"); /* config.json names no head_dim */
    expect_no_key(g, "llama.rope.scaling.type");
    uint32_t v;
    assert_int_equal(dsq_gguf_get_u32(g, "llama.rope.dimension_count", &v), DSQ_OK);
    assert_int_equal(v, 64);
    float eps;
    assert_int_equal(dsq_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps), DSQ_OK);
    assert_true(eps == 1e-5f);
    dsq_gguf_close(g);

    dsq_arch q = parse_ok(QWEN25);
    g = write_gguf(dir, &q, 0);
    expect_key(g, "qwen2.rope.scaling.type", DSQ_GGUF_STRING);
    expect_key(g, "qwen2.rope.scaling.factor", DSQ_GGUF_F32);
    expect_key(g, "qwen2.rope.scaling.original_context_length", DSQ_GGUF_U32);
    expect_key(g, "qwen2.rope.scaling.yarn_beta_fast", DSQ_GGUF_F32);
    expect_key(g, "qwen2.rope.scaling.yarn_attn_factor", DSQ_GGUF_F32);
    expect_no_key(g, "qwen2.vocab_size"); /* Qwen2Model writes neither */
    expect_no_key(g, "qwen2.rope.dimension_count");
    dsq_gguf_close(g);

    dsq_arch n = parse_ok(NEMO);
    g = write_gguf(dir, &n, 0);
    expect_key(g, "llama.attention.key_length", DSQ_GGUF_U32);
    expect_key(g, "llama.attention.value_length", DSQ_GGUF_U32);
    dsq_gguf_close(g);

    dsq_arch l = parse_ok(LLAMA31);
    g = write_gguf(dir, &l, 0);
    expect_no_key(g, "llama.rope.scaling.type"); /* llama3 travels as rope_freqs.weight */
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* HF -> GGUF -> HF keeps every field GGUF can carry. */
static void test_gguf_round_trip(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    const char *const configs[] = {SMOLLM2, LLAMA31, NEMO, QWEN25};
    for (size_t i = 0; i < 4; i++) {
        dsq_arch a = parse_ok(configs[i]);
        dsq_gguf *g = write_gguf(dir, &a, a.family == DSQ_ARCH_QWEN2 ? a.vocab_size : 0);
        dsq_arch b;
        if (dsq_arch_from_gguf(g, &b) != DSQ_OK) fail_msg("from_gguf %zu: %s", i, dsq_errmsg());
        dsq_gguf_close(g);
        /* What GGUF cannot carry: Mistral is "llama" there, and llama.cpp
         * has no sliding window for it. */
        if (!strcmp(a.model_type, "mistral")) {
            snprintf(a.hf_architecture, sizeof a.hf_architecture, "LlamaForCausalLM");
            snprintf(a.model_type, sizeof a.model_type, "llama");
            a.sliding_window = 0;
            snprintf(a.torch_dtype, sizeof a.torch_dtype, "bfloat16"); /* from token_embd's type */
        }
        if (!a.torch_dtype[0]) snprintf(a.torch_dtype, sizeof a.torch_dtype, "bfloat16");
        a.sliding_window = 0;
        assert_arch_equal(&a, &b);
    }
    dsq_test_rmtmp(dir);
}

/* vocab_size falls back to the token list; a missing required key is named. */
static void test_gguf_missing_keys(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    dsq_arch q = parse_ok(QWEN25);
    q.vocab_size = 3;
    dsq_gguf *g = write_gguf(dir, &q, 3);
    dsq_arch b;
    assert_int_equal(dsq_arch_from_gguf(g, &b), DSQ_OK);
    assert_int_equal(b.vocab_size, 3);
    dsq_gguf_close(g);

    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.architecture", "llama"), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "llama.context_length", 128), DSQ_OK);
    char path[4096];
    snprintf(path, sizeof path, "%s/partial.gguf", dir);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    assert_int_equal(dsq_arch_from_gguf(g, &b), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "llama.block_count"));
    dsq_gguf_close(g);

    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.architecture", "gpt2"), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    assert_int_equal(dsq_arch_from_gguf(g, &b), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "\"gpt2\""));
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- llama3 */

/* The converter's formula evaluated in double: the float32 table must agree
 * to float rounding, start at 1 (high frequencies untouched) and end at
 * factor (low frequencies scaled fully). */
static void test_llama3_rope_freqs(void **state)
{
    (void)state;
    dsq_arch a = parse_ok(LLAMA31);
    float f[64];
    assert_int_equal(dsq_arch_llama3_rope_freqs(&a, f, 64), DSQ_OK);
    int ones = 0, full = 0, blend = 0;
    for (int i = 0; i < 64; i++) {
        double freq = 1.0 / pow(500000.0, (double)(2 * i) / 128.0);
        double wavelen = 2 * M_PI / freq, want;
        if (wavelen < 8192.0 / 4.0)
            want = 1.0;
        else if (wavelen > 8192.0 / 1.0)
            want = 8.0;
        else {
            double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = 1.0 / ((1 - smooth) / 8.0 + smooth);
        }
        if (fabs(f[i] - want) > 1e-5 * want) fail_msg("rope_freqs[%d] = %.9g, want %.9g", i, f[i], want);
        ones += f[i] == 1.0f;
        full += f[i] == 8.0f;
        blend += f[i] > 1.0f && f[i] < 8.0f;
    }
    /* Llama 3.1 8B's table (numpy float32 with the converter's formula):
     * 29 ones, 6 blended, 29 eights. */
    assert_int_equal(ones, 29);
    assert_int_equal(blend, 6);
    assert_int_equal(full, 29);
    assert_int_equal(dsq_arch_llama3_rope_freqs(&a, f, 63), DSQ_ERR_ARG);
}

/* A rope_freqs table that is not llama3's is refused rather than guessed. */
static void test_llama3_bad_table(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    dsq_arch a = parse_ok(LLAMA31);
    a.rope_low_freq_factor = 2.0; /* recoverable: fitted from the table */
    dsq_gguf *g = write_gguf(dir, &a, a.family == DSQ_ARCH_QWEN2 ? a.vocab_size : 0);
    dsq_arch b;
    assert_int_equal(dsq_arch_from_gguf(g, &b), DSQ_OK);
    assert_true(b.rope_low_freq_factor == 2.0 && b.rope_high_freq_factor == 4.0 && b.rope_factor == 8.0);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

static void test_real_smollm2(void **state)
{
    (void)state;
    char *path = dsq_test_default_model();
    if (!path) DSQ_TEST_SKIP();
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    dsq_arch a;
    if (dsq_arch_from_gguf(g, &a) != DSQ_OK) fail_msg("%s", dsq_errmsg());
    dsq_gguf_close(g);
    free(path);
    dsq_arch want = parse_ok(SMOLLM2);
    want.torch_dtype[0] = '\0'; /* token_embd is Q4_1 there */
    assert_arch_equal(&a, &want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_fields),
        cmocka_unit_test(test_rope_variants),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_sanity),
        cmocka_unit_test(test_hf_json_round_trip),
        cmocka_unit_test(test_gguf_keys),
        cmocka_unit_test(test_gguf_round_trip),
        cmocka_unit_test(test_gguf_missing_keys),
        cmocka_unit_test(test_llama3_rope_freqs),
        cmocka_unit_test(test_llama3_bad_table),
        cmocka_unit_test(test_real_smollm2),
        cmocka_unit_test(test_deepseek),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
