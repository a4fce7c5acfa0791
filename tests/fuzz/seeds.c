/* fuzz_seeds_make OUTDIR: the seed corpora, one folder per harness
 * (OUTDIR/fuzz_<name>/), made from valid files our own writers produce:
 * safetensors files and a sharded checkpoint, GGUF models and vocab-only
 * GGUFs of each tokenizer kind, tokenizer.json folders exported from them,
 * config.json of each architecture, importance matrices in both formats,
 * ZIP archives (stored and deflated), quantization configs of each format,
 * chat conversations and HTTP requests. scripts/fuzz.sh adds the artifact
 * folders the CLI writes (quant, w8) when a dsquant binary is at hand. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/hf_tokenizer.h"
#include "formats/imatrix.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/pack_w8_config.h"
#include "formats/safetensors.h"
#include "tests/fuzz/fuzz.h"

static const char *g_out;

static void need(dsq_status s, const char *what)
{
    if (s == DSQ_OK) return;
    fprintf(stderr, "fuzz_seeds_make: %s: %s\n", what, dsq_errmsg());
    exit(1);
}

/* Appends bytes to a growing buffer. */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(1);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void sep(buf *b) { puts_(b, DSQ_FZ_SEP); }

static void put_file(buf *b, const char *path)
{
    char *d = NULL;
    size_t n = 0;
    need(dsq_read_file(path, 64u << 20, &d, &n), path);
    put(b, d, n);
    free(d);
}

static void seed(const char *harness, const char *name, const void *d, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_out, harness);
    if (mkdir(p, 0755) && errno != EEXIST) {
        perror(p);
        exit(1);
    }
    snprintf(p, sizeof p, "%s/%s/%s", g_out, harness, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f)) {
        perror(p);
        exit(1);
    }
}
static void seed_buf(const char *harness, const char *name, buf *b)
{
    seed(harness, name, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
}
static void seed_str(const char *harness, const char *name, const char *s) { seed(harness, name, s, strlen(s)); }

static char *scratch(const char *name)
{
    static char p[8][1024];
    static int k;
    char *s = p[k++ & 7];
    snprintf(s, sizeof p[0], "%s/%s", dsq_fz_dir(), name);
    return s;
}

/* ------------------------------------------------------------ safetensors */

static void st_files(void)
{
    char *dir = scratch("st1");
    mkdir(dir, 0755);
    dsq_st_writer *w = NULL;
    need(dsq_st_writer_new(dir, "model", 1u << 30, &w), "st writer");
    need(dsq_st_writer_set_meta(w, "format", "pt"), "meta");
    int64_t s1[2] = {2, 3}, s2[1] = {4}, s3[3] = {1, 2, 2}, s0[1] = {0};
    need(dsq_st_writer_add(w, "model.embed_tokens.weight", DSQ_TYPE_F32, 2, s1), "add");
    need(dsq_st_writer_add(w, "model.norm.weight", DSQ_TYPE_BF16, 1, s2), "add");
    need(dsq_st_writer_add(w, "model.layers.0.mlp.experts", DSQ_TYPE_F16, 3, s3), "add");
    need(dsq_st_writer_add(w, "empty", DSQ_TYPE_I32, 1, s0), "add");
    need(dsq_st_writer_begin(w), "begin");
    float f[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    uint16_t h[8] = {0x3f80, 0x4000, 0xbf80, 0, 0x3c00, 0x4000, 0xc000, 0x3800};
    need(dsq_st_writer_write(w, f, sizeof f), "write");
    need(dsq_st_writer_write(w, h, 8), "write");
    need(dsq_st_writer_write(w, h + 4, 8), "write");
    need(dsq_st_writer_finish(w), "finish");
    dsq_st_writer_free(w);
    buf b = {0};
    put_file(&b, scratch("st1/model.safetensors"));
    seed_buf("fuzz_safetensors", "small", &b);
    seed_str("fuzz_safetensors", "header-only", "\x0f\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{}}");

    /* Two shards of one tensor each, and their index. */
    dir = scratch("st2");
    mkdir(dir, 0755);
    need(dsq_st_writer_new(dir, "model", 16, &w), "st writer");
    need(dsq_st_writer_add(w, "a.weight", DSQ_TYPE_F32, 2, s1), "add");
    need(dsq_st_writer_add(w, "b.weight", DSQ_TYPE_F32, 2, s1), "add");
    need(dsq_st_writer_begin(w), "begin");
    need(dsq_st_writer_write(w, f, sizeof f), "write");
    need(dsq_st_writer_write(w, f, sizeof f), "write");
    need(dsq_st_writer_finish(w), "finish");
    dsq_st_writer_free(w);
    put_file(&b, scratch("st2/model.safetensors.index.json"));
    sep(&b);
    put_file(&b, scratch("st2/model-00001-of-00002.safetensors"));
    sep(&b);
    put_file(&b, scratch("st2/model-00002-of-00002.safetensors"));
    seed_buf("fuzz_st_index", "two-shards", &b);
}

/* ------------------------------------------------------------ GGUF */

static void gguf_kitchen_sink(void)
{
    dsq_gguf_writer *w = NULL;
    need(dsq_gguf_writer_new(&w), "gguf writer");
    need(dsq_gguf_set_u32(w, "general.alignment", 32), "kv");
    need(dsq_gguf_set_str(w, "general.architecture", "llama"), "kv");
    need(dsq_gguf_set_i32(w, "i32", -5), "kv");
    need(dsq_gguf_set_u64(w, "u64", 1ull << 40), "kv");
    need(dsq_gguf_set_f32(w, "f32", 0.5f), "kv");
    need(dsq_gguf_set_bool(w, "bool", true), "kv");
    uint8_t u8[3] = {1, 2, 3};
    need(dsq_gguf_set_arr(w, "arr.u8", DSQ_GGUF_U8, u8, 3), "kv");
    double f64[2] = {1.5, -2};
    need(dsq_gguf_set_arr(w, "arr.f64", DSQ_GGUF_F64, f64, 2), "kv");
    const char *strs[2] = {"a", "bc"};
    need(dsq_gguf_set_str_arr(w, "arr.str", strs, NULL, 2), "kv");
    int64_t sq[2] = {2, 32}, sk[2] = {1, 256}, sv[1] = {8};
    need(dsq_gguf_add_tensor(w, "q8", DSQ_TYPE_Q8_0, 2, sq), "tensor");
    need(dsq_gguf_add_tensor(w, "q4k", DSQ_TYPE_Q4_K, 2, sk), "tensor");
    need(dsq_gguf_add_tensor(w, "f16", DSQ_TYPE_F16, 1, sv), "tensor");
    char *path = scratch("sink.gguf");
    need(dsq_gguf_writer_begin(w, path, true), "begin");
    uint8_t zero[256] = {0};
    need(dsq_gguf_writer_write(w, zero, 68), "write");  /* 2 Q8_0 blocks */
    need(dsq_gguf_writer_write(w, zero, 144), "write"); /* 1 Q4_K block */
    need(dsq_gguf_writer_write(w, zero, 16), "write");
    need(dsq_gguf_writer_finish(w), "finish");
    dsq_gguf_writer_free(w);
    buf b = {0};
    put_file(&b, path);
    seed_buf("fuzz_gguf", "kitchen-sink", &b);
}

static const char *const g_pres[] = {"smollm", "llama-bpe", "qwen2", "deepseek-v3", "gpt-2", NULL};

static void gguf_models(void)
{
    buf b = {0};
    char *path = scratch("tiny.gguf");
    need(dsq_fz_tiny_gguf(path, "gpt2", "smollm", true), "tiny model");
    put_file(&b, path);
    seed_buf("fuzz_gguf", "tiny-llama", &b);
    /* the tiny model itself, for scripts/fuzz.sh's artifact seeds */
    char out[1024];
    snprintf(out, sizeof out, "%s/tiny.gguf", g_out);
    put_file(&b, path);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f)) exit(1);
    free(b.p);
    memset(&b, 0, sizeof b);
    for (int i = 0; i <= 5; i++) {
        const char *model = i < 5 ? "gpt2" : "llama";
        const char *pre = i < 5 ? g_pres[i] : NULL;
        need(dsq_fz_tiny_gguf(path, model, pre, false), "vocab-only");
        char name[64];
        snprintf(name, sizeof name, "vocab-%s", pre ? pre : "spm");
        put_file(&b, path);
        seed("fuzz_gguf_tokenizer", name, b.p, b.n);
        seed_buf("fuzz_gguf", name, &b);
        /* the same tokenizer as a Hugging Face folder */
        char *dir = scratch(name);
        mkdir(dir, 0755);
        dsq_gguf *g = NULL;
        need(dsq_gguf_open(path, &g), "open");
        need(dsq_tokenizer_gguf_to_hf(g, dir), "export");
        dsq_gguf_close(g);
        char p[1200];
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        put_file(&b, p);
        sep(&b);
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        put_file(&b, p);
        sep(&b);
        puts_(&b, "{\"vocab_size\": 320, \"bos_token_id\": 0, \"eos_token_id\": 2}");
        seed_buf("fuzz_hf_tokenizer", name, &b);
    }
}

/* ------------------------------------------------------------ config.json */

static void configs(void)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, "llama");
    a.hidden_size = 64, a.intermediate_size = 128, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2;
    a.head_dim = 16, a.vocab_size = 256, a.max_position_embeddings = 2048, a.rms_norm_eps = 1e-5;
    a.rope_theta = 500000, a.bos_token_id = 1, a.eos_token_id = 2;
    char *j = NULL;
    need(dsq_arch_to_hf_json(&a, &j), "llama json");
    seed_str("fuzz_config", "llama", j);
    free(j);
    a.rope_scaling = DSQ_ROPE_SCALING_LLAMA3, a.rope_factor = 8, a.rope_low_freq_factor = 1;
    a.rope_high_freq_factor = 4, a.rope_original_max_pos = 8192;
    need(dsq_arch_to_hf_json(&a, &j), "llama3 json");
    seed_str("fuzz_config", "llama3-rope", j);
    free(j);
    seed_str("fuzz_config", "qwen2",
             "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": 64,"
             " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
             " \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 4096,"
             " \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true,"
             " \"sliding_window\": 4096, \"use_sliding_window\": false, \"torch_dtype\": \"bfloat16\"}");
    seed_str("fuzz_config", "mistral",
             "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"hidden_size\": 64,"
             " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
             " \"num_key_value_heads\": 1, \"head_dim\": 32, \"vocab_size\": 256, \"rms_norm_eps\": 1e-5,"
             " \"rope_theta\": 10000, \"sliding_window\": 4096, \"eos_token_id\": [2, 3]}");
    seed_str("fuzz_config", "deepseek-v3",
             "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"hidden_size\": 64,"
             " \"intermediate_size\": 128, \"moe_intermediate_size\": 32, \"num_hidden_layers\": 3,"
             " \"num_nextn_predict_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
             " \"n_shared_experts\": 1, \"n_routed_experts\": 8, \"routed_scaling_factor\": 2.5,"
             " \"kv_lora_rank\": 32, \"q_lora_rank\": 48, \"qk_rope_head_dim\": 8, \"v_head_dim\": 16,"
             " \"qk_nope_head_dim\": 16, \"topk_method\": \"noaux_tc\", \"n_group\": 2, \"topk_group\": 1,"
             " \"num_experts_per_tok\": 2, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 1,"
             " \"norm_topk_prob\": true, \"scoring_func\": \"sigmoid\", \"max_position_embeddings\": 4096,"
             " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"rope_scaling\": {\"beta_fast\": 32,"
             " \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,"
             " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"vocab_size\": 256,"
             " \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\","
             " \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}");
    seed_str("fuzz_config", "deepseek-v2-lite",
             "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"model_type\": \"deepseek_v2\", \"hidden_size\": 64,"
             " \"intermediate_size\": 128, \"moe_intermediate_size\": 32, \"num_hidden_layers\": 2,"
             " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"n_shared_experts\": 2,"
             " \"n_routed_experts\": 8, \"routed_scaling_factor\": 1.0, \"kv_lora_rank\": 32, \"q_lora_rank\": null,"
             " \"qk_rope_head_dim\": 8, \"v_head_dim\": 16, \"qk_nope_head_dim\": 16, \"topk_method\": \"greedy\","
             " \"n_group\": 1, \"topk_group\": 1, \"num_experts_per_tok\": 2, \"moe_layer_freq\": 1,"
             " \"first_k_dense_replace\": 1, \"norm_topk_prob\": false, \"scoring_func\": \"softmax\","
             " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"vocab_size\": 256}");
}

/* ------------------------------------------------------------ imatrix */

static void imatrices(void)
{
    dsq_imatrix *im = NULL;
    need(dsq_imatrix_new(&im), "imatrix");
    float v[8] = {0.5f, 1, 2, 0, 3, 0.25f, 1, 1};
    need(dsq_imatrix_add(im, "blk.0.attn_q.weight", 10, v, 8), "add");
    need(dsq_imatrix_add(im, "blk.0.ffn_down.weight", 10, v, 4), "add");
    need(dsq_imatrix_set_trailer(im, 10, "wiki.train.raw"), "trailer");
    uint8_t *d = NULL;
    size_t n = 0;
    need(dsq_imatrix_serialize(im, &d, &n), "serialize");
    seed("fuzz_imatrix", "dat", d, n);
    free(d);
    dsq_imatrix_free(im);

    dsq_gguf_writer *w = NULL;
    need(dsq_gguf_writer_new(&w), "gguf writer");
    need(dsq_gguf_set_str(w, "general.type", "imatrix"), "kv");
    need(dsq_gguf_set_u32(w, "imatrix.chunk_count", 10), "kv");
    const char *ds[1] = {"wiki.train.raw"};
    need(dsq_gguf_set_str_arr(w, "imatrix.datasets", ds, NULL, 1), "kv");
    need(dsq_gguf_set_u32(w, "imatrix.chunk_size", 512), "kv");
    int64_t s8[2] = {1, 8}, s1[2] = {1, 1};
    need(dsq_gguf_add_tensor(w, "blk.0.attn_q.weight.in_sum2", DSQ_TYPE_F32, 2, s8), "t");
    need(dsq_gguf_add_tensor(w, "blk.0.attn_q.weight.counts", DSQ_TYPE_F32, 2, s1), "t");
    char *path = scratch("imatrix.gguf");
    need(dsq_gguf_writer_begin(w, path, true), "begin");
    float cnt = 10;
    need(dsq_gguf_writer_write(w, v, sizeof v), "w");
    need(dsq_gguf_writer_write(w, &cnt, 4), "w");
    need(dsq_gguf_writer_finish(w), "finish");
    dsq_gguf_writer_free(w);
    buf b = {0};
    put_file(&b, path);
    seed_buf("fuzz_imatrix", "gguf", &b);
}

/* ------------------------------------------------------------ ZIP */

static void le16(buf *b, unsigned v) { put(b, (uint8_t[]){(uint8_t)v, (uint8_t)(v >> 8)}, 2); }
static void le32(buf *b, uint32_t v) { le16(b, v & 0xffff), le16(b, v >> 16); }

/* One-member archive: local header, data, central directory, end record. */
static void zip_seed(const char *seedname, uint8_t selector, const char *member, const char *text, bool deflated)
{
    size_t tn = strlen(text);
    uint8_t comp[4096];
    size_t cn = tn;
    if (deflated) {
        z_stream z = {0};
        deflateInit2(&z, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
        z.next_in = (Bytef *)text, z.avail_in = (uInt)tn, z.next_out = comp, z.avail_out = sizeof comp;
        deflate(&z, Z_FINISH);
        cn = z.total_out;
        deflateEnd(&z);
    } else {
        memcpy(comp, text, tn);
    }
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)text, (uInt)tn);
    unsigned method = deflated ? 8 : 0, mn = (unsigned)strlen(member);
    buf b = {0};
    put(&b, &selector, 1);
    le32(&b, 0x04034b50), le16(&b, 20), le16(&b, 0), le16(&b, method), le16(&b, 0), le16(&b, 0);
    le32(&b, crc), le32(&b, (uint32_t)cn), le32(&b, (uint32_t)tn), le16(&b, mn), le16(&b, 0);
    put(&b, member, mn);
    put(&b, comp, cn);
    uint32_t cd = (uint32_t)(b.n - 1);
    le32(&b, 0x02014b50), le16(&b, 20), le16(&b, 20), le16(&b, 0), le16(&b, method), le16(&b, 0), le16(&b, 0);
    le32(&b, crc), le32(&b, (uint32_t)cn), le32(&b, (uint32_t)tn), le16(&b, mn), le16(&b, 0), le16(&b, 0);
    le16(&b, 0), le16(&b, 0), le32(&b, 0), le32(&b, 0);
    put(&b, member, mn);
    uint32_t cdn = (uint32_t)(b.n - 1) - cd;
    le32(&b, 0x06054b50), le16(&b, 0), le16(&b, 0), le16(&b, 1), le16(&b, 1), le32(&b, cdn), le32(&b, cd), le16(&b, 0);
    seed_buf("fuzz_zip", seedname, &b);
}

/* ------------------------------------------------------------ quantization configs */

static void quant_seed(const char *name, cJSON *qc, const char *hf_quant)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "quantization_config", qc);
    char *j = cJSON_Print(root);
    buf b = {0};
    puts_(&b, j);
    if (hf_quant) {
        sep(&b);
        puts_(&b, hf_quant);
    }
    seed_buf("fuzz_quant_config", name, &b);
    free(j);
    cJSON_Delete(root);
}

static void quant_configs(void)
{
    static const char *const ignore[1] = {"lm_head"};
    cJSON *j = NULL;
    need(dsq_awq_config_json(32, ignore, 1, &j), "awq");
    quant_seed("awq", j, NULL);
    dsq_gptq_config g = {4, 32, 0.01, false, false, true, true, 0, NULL};
    need(dsq_gptq_config_json(&g, &j), "gptq");
    quant_seed("gptq", j, NULL);
    dsq_ct_config c = {4, 32, true, NULL, ignore, 1, NULL};
    need(dsq_ct_config_json(&c, &j), "ct");
    quant_seed("ct-w4", j, NULL);
    static const char *const names[] = {"w8a8", "w8a8-static", "fp8", "fp8-dynamic", "fp8-block", "fp8-w"};
    dsq_w8_scheme schemes[6] = {dsq_w8_scheme_w8a8(false),       dsq_w8_scheme_w8a8(true),
                                dsq_w8_scheme_fp8_static(),      dsq_w8_scheme_fp8_dynamic(),
                                dsq_w8_scheme_fp8_block(),       dsq_w8_scheme_fp8_weight_only()};
    static const dsq_int_format fmts[] = {DSQ_INT_FORMAT_CT, DSQ_INT_FORMAT_FP8, DSQ_INT_FORMAT_MODELOPT};
    for (size_t s = 0; s < 6; s++) {
        dsq_w8_scheme sch = schemes[s];
        for (size_t f = 0; f < 3; f++) {
            dsq_w8_config wc = {fmts[f], sch, false, ignore, 1};
            if (dsq_w8_config_json(&wc, &j) != DSQ_OK) continue; /* a scheme the format cannot hold */
            cJSON *hq = NULL;
            char *hqs = NULL;
            if (fmts[f] == DSQ_INT_FORMAT_MODELOPT && dsq_w8_hf_quant_config_json(&wc, &hq) == DSQ_OK) {
                hqs = cJSON_Print(hq);
                cJSON_Delete(hq);
            }
            char name[64];
            snprintf(name, sizeof name, "%s-%s", dsq_int_format_name(fmts[f]), names[s]);
            quant_seed(name, j, hqs);
            free(hqs);
        }
    }
}

/* ------------------------------------------------------------ text seeds */

static void chats(void)
{
    static const char *const tmpl[] = {
        "{% for m in messages %}<|im_start|>{{m.role}}\n{{m.content}}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}You are a helpful AI assistant named SmolLM",
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim "
        "}}<|eot_id|>{% endfor %}Cutting Knowledge Date",
        "{{ bos_token }}[INST] <<SYS>>\n{{ system }}\n<</SYS>>\n\n{{ user }} [/INST]",
        "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}",
        "{% if not add_generation_prompt is defined %}{% endif %}<\xef\xbd\x9cUser\xef\xbd\x9c>{{c}}"
        "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n",
    };
    for (size_t i = 0; i < sizeof tmpl / sizeof tmpl[0]; i++) {
        buf b = {0};
        puts_(&b, tmpl[i]);
        sep(&b);
        puts_(&b, "system\x1fYou are terse.");
        sep(&b);
        puts_(&b, "user\x1fHello <|im_end|> there");
        sep(&b);
        puts_(&b, "assistant\x1f<think>hmm</think>Hi!");
        sep(&b);
        puts_(&b, "user\x1f\xe4\xbd\xa0\xe5\xa5\xbd");
        char name[32];
        snprintf(name, sizeof name, "family-%zu", i);
        seed_buf("fuzz_chat", name, &b);
    }
}

static void texts(void)
{
    static const char *const t[] = {
        "Hello world! The theory of everything, 12345 and 3.14159.",
        "  leading spaces\n\n\ttabs\r\nand CRLF   ",
        "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
        "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xe2\x96\x81\xe2\x96\x81 don't I'll we've",
        "\xff\xfe invalid \xc3 utf8 \xed\xa0\x80",
    };
    for (int k = 0; k < 25; k++) {
        buf b = {0};
        uint8_t hdr[2] = {(uint8_t)k, (uint8_t)(k % 4)};
        put(&b, hdr, 2);
        puts_(&b, t[k % 5]);
        char name[32];
        snprintf(name, sizeof name, "kind-%02d", k);
        seed_buf("fuzz_tokenize", name, &b);
    }
}

static void http_seeds(void)
{
    static const char *const raw[] = {
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n"
         "{\"prompt\": \"Hello\", \"max_tokens\": 4, \"seed\": 1}"),
        "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"prompt\": \"the\"}\r\n0\r\n\r\n",
        "GET /metrics HTTP/1.0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "raw-%zu", i);
        seed_str("fuzz_http", name, raw[i]);
    }
    /* fuzz_api: byte 0 picks the endpoint (tests/fuzz/fuzz_api.c), the rest is the body. */
    static const struct {
        char ep;
        const char *body;
    } api[] = {
        {0, "{\"model\": \"tiny\", \"prompt\": \"Hello\", \"max_tokens\": 5, \"temperature\": 0.7, \"top_p\": 0.9,"
            " \"logprobs\": 2, \"echo\": true, \"stop\": [\"the\"], \"seed\": 3}"},
        {0, "{\"prompt\": [[1, 2, 3], \"text\"], \"max_tokens\": 3, \"stream\": true, \"stream_options\":"
            " {\"include_usage\": true}, \"n\": 1, \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5}"},
        {1, "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\":"
            " [{\"type\": \"text\", \"text\": \"hi\"}]}], \"max_completion_tokens\": 4, \"logprobs\": true,"
            " \"top_logprobs\": 3}"},
        {1, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true, \"max_tokens\": 3,"
            " \"stop\": \"x\", \"ignore_eos\": true, \"top_k\": 4}"},
        {2, "{\"prompt\": \"the theory\", \"add_special_tokens\": true}"},
        {2, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}"},
        {3, "{\"tokens\": [1, 2, 300]}"},
        {4, ""},
        {5, ""},
    };
    for (size_t i = 0; i < sizeof api / sizeof api[0]; i++) {
        buf b = {0};
        put(&b, &api[i].ep, 1);
        puts_(&b, api[i].body);
        char name[32];
        snprintf(name, sizeof name, "api-%zu", i);
        seed_buf("fuzz_api", name, &b);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds_make OUTDIR\n");
        return 2;
    }
    g_out = argv[1];
    if (mkdir(g_out, 0755) && errno != EEXIST) {
        perror(g_out);
        return 1;
    }
    dsq_fz_quiet();
    st_files();
    gguf_kitchen_sink();
    gguf_models();
    configs();
    imatrices();
    zip_seed("stored", 0x00, "wikitext-2-raw/wiki.test.raw", " = Valkyria = \n text text\n", false);
    zip_seed("deflated", 0x00, "wikitext-2-raw/wiki.test.raw", " = Robert = \n more more more more more\n", true);
    zip_seed("small-bound", 0x05, "a.txt", "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123", true);
    quant_configs();
    chats();
    texts();
    http_seeds();
    return 0;
}
