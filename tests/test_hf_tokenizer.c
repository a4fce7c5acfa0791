/* Tokenizers between HF files and GGUF: synthetic byte-level and
 * byte-fallback tokenizers checked key by key against what llama.cpp's
 * converter writes (types, gaps, merges, scores, special ids, add_* flags,
 * chat templates), the pre-tokenizer table both ways, refused inputs, and
 * GGUF -> HF -> GGUF round trips of the real SmolLM2 GGUF and llama.cpp's
 * vocab test files (when present). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_tokenizer.h"
#include "tests/helpers/testutil.h"

/* ---------------------------------------------------------------- helpers */

static void put(const char *dir, const char *name, const char *text)
{
    char *p = dsq_test_write(dir, name, text, strlen(text));
    assert_non_null(p);
    free(p);
}

static char g_log[8192];
static void capture(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level <= DSQ_LOG_WARN) {
        size_t n = strlen(g_log);
        snprintf(g_log + n, sizeof g_log - n, "%s\n", msg);
    }
}

/* Converts the HF folder to a tokenizer-only GGUF at dir/out.gguf and opens
 * it; returns the status of dsq_tokenizer_hf_to_gguf (NULL *out on error). */
static int g_out_seq;

static dsq_status hf_to_gguf(const char *hf_dir, const char *out_dir, dsq_gguf **out)
{
    *out = NULL;
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.architecture", "llama"), DSQ_OK);
    g_log[0] = '\0';
    dsq_log_set_sink(capture, NULL);
    dsq_status s = dsq_tokenizer_hf_to_gguf(hf_dir, w);
    dsq_log_set_sink(NULL, NULL);
    if (s == DSQ_OK) {
        char path[4096];
        /* A fresh name each time: an open GGUF may not be overwritten. */
        snprintf(path, sizeof path, "%s/out%d.gguf", out_dir, ++g_out_seq);
        assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
        if (dsq_gguf_writer_finish(w) != DSQ_OK) fail_msg("write: %s", dsq_errmsg());
        if (dsq_gguf_open(path, out) != DSQ_OK) fail_msg("open: %s", dsq_errmsg());
    }
    dsq_gguf_writer_free(w);
    return s;
}

static dsq_gguf *hf_to_gguf_ok(const char *hf_dir, const char *out_dir)
{
    dsq_gguf *g = NULL;
    if (hf_to_gguf(hf_dir, out_dir, &g) != DSQ_OK) fail_msg("hf_to_gguf: %s", dsq_errmsg());
    return g;
}

static const char *str_of(const dsq_gguf *g, const char *key)
{
    const char *s = NULL;
    if (dsq_gguf_get_str(g, key, &s) != DSQ_OK) fail_msg("%s: %s", key, dsq_errmsg());
    return s;
}

static uint32_t u32_of(const dsq_gguf *g, const char *key)
{
    uint32_t v = 0;
    if (dsq_gguf_get_u32(g, key, &v) != DSQ_OK) fail_msg("%s: %s", key, dsq_errmsg());
    return v;
}

static bool bool_of(const dsq_gguf *g, const char *key)
{
    bool v = false;
    if (dsq_gguf_get_bool(g, key, &v) != DSQ_OK) fail_msg("%s: %s", key, dsq_errmsg());
    return v;
}

static const dsq_gguf_array *arr_of(const dsq_gguf *g, const char *key, dsq_gguf_vtype t)
{
    const dsq_gguf_array *a = NULL;
    if (dsq_gguf_get_arr(g, key, t, &a) != DSQ_OK) fail_msg("%s: %s", key, dsq_errmsg());
    return a;
}

static void expect_strs(const dsq_gguf *g, const char *key, const char *const *want, size_t n)
{
    const dsq_gguf_array *a = arr_of(g, key, DSQ_GGUF_STRING);
    assert_int_equal(a->n, n);
    const dsq_gguf_str *s = a->data;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].ptr, want[i]) != 0) fail_msg("%s[%zu] = \"%s\", want \"%s\"", key, i, s[i].ptr, want[i]);
}

static bool value_equal(const dsq_gguf_value *x, const dsq_gguf_value *y);

static bool array_equal(const dsq_gguf_array *x, const dsq_gguf_array *y)
{
    if (x->elem_type != y->elem_type || x->n != y->n) return false;
    if (x->elem_type == DSQ_GGUF_STRING) {
        const dsq_gguf_str *a = x->data, *b = y->data;
        for (uint64_t i = 0; i < x->n; i++)
            if (a[i].len != b[i].len || memcmp(a[i].ptr, b[i].ptr, (size_t)a[i].len)) return false;
        return true;
    }
    if (x->elem_type == DSQ_GGUF_ARRAY) {
        const dsq_gguf_value *a = x->data, *b = y->data;
        for (uint64_t i = 0; i < x->n; i++)
            if (!value_equal(&a[i], &b[i])) return false;
        return true;
    }
    return !memcmp(x->data, y->data, (size_t)x->n * dsq_gguf_vtype_size(x->elem_type));
}

static bool value_equal(const dsq_gguf_value *x, const dsq_gguf_value *y)
{
    if (x->type != y->type) return false;
    switch (x->type) {
    case DSQ_GGUF_STRING:
        return x->v.str.len == y->v.str.len && !memcmp(x->v.str.ptr, y->v.str.ptr, (size_t)x->v.str.len);
    case DSQ_GGUF_ARRAY: return array_equal(&x->v.arr, &y->v.arr);
    case DSQ_GGUF_BOOL: return x->v.b == y->v.b;
    case DSQ_GGUF_F32:
    case DSQ_GGUF_F64: return x->v.f64 == y->v.f64;
    default: return x->v.u64 == y->v.u64;
    }
}

static bool is_skipped(const char *key, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (!strcmp(key, *skip)) return true;
    return false;
}

/* Every tokenizer.* key of a is in b with the same type and value, and b has
 * no others; keys in skip are left out. */
static void expect_same_tokenizer(const dsq_gguf *a, const dsq_gguf *b, const char *const *skip)
{
    int na = 0, nb = 0;
    for (uint64_t i = 0; i < a->n_kv; i++) {
        const char *k = a->kv[i].key;
        if (strncmp(k, "tokenizer.", 10) || is_skipped(k, skip)) continue;
        na++;
        const dsq_gguf_value *v = dsq_gguf_get(b, k);
        if (!v) fail_msg("%s is lost", k);
        if (!value_equal(&a->kv[i].value, v)) fail_msg("%s differs", k);
    }
    for (uint64_t i = 0; i < b->n_kv; i++)
        if (!strncmp(b->kv[i].key, "tokenizer.", 10) && !is_skipped(b->kv[i].key, skip)) nb++;
    if (na != nb) fail_msg("%d tokenizer keys became %d", na, nb);
}

/* GGUF -> HF files in a fresh folder -> GGUF. */
static dsq_gguf *round_trip_cfg(const dsq_gguf *g, const char *work, char **hf_dir_out, const char *config_json)
{
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/hf", work);
    if (!dsq_is_dir(hf)) assert_int_equal(mkdir(hf, 0755), 0);
    if (dsq_tokenizer_gguf_to_hf(g, hf) != DSQ_OK) fail_msg("gguf_to_hf: %s", dsq_errmsg());
    /* The converter writes config.json beside; its vocab_size keeps trailing
     * "[PAD<id>]" fillers. */
    if (config_json) put(hf, "config.json", config_json);
    if (hf_dir_out) *hf_dir_out = strdup(hf);
    return hf_to_gguf_ok(hf, work);
}

static dsq_gguf *round_trip(const dsq_gguf *g, const char *work, char **hf_dir_out)
{
    return round_trip_cfg(g, work, hf_dir_out, NULL);
}

static cJSON *read_json(const char *dir, const char *name)
{
    char path[4096], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (dsq_read_file(path, 1 << 28, &text, NULL) != DSQ_OK) fail_msg("%s", dsq_errmsg());
    cJSON *o = cJSON_Parse(text);
    free(text);
    assert_non_null(o);
    return o;
}

/* ------------------------------------------------------ synthetic inputs */

#define ADDED(id, content, special)                                                                                    \
    "{\"id\": " #id ", \"content\": \"" content "\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "   \
    "\"normalized\": false, \"special\": " #special "}"

static const char *const GPT2_TOKENIZER =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [" ADDED(
        0, "<|endoftext|>",
        true) ", " ADDED(1, "<|im_start|>",
                         true) ", " ADDED(2, "<|im_end|>",
                                          true) ", " ADDED(9, "<|tool|>",
                                                           false) ", " ADDED(10, "\xe2\x96\x81hi",
                                                                             false) "],"
                                                                                    " \"normalizer\": null,"
                                                                                    " \"pre_tokenizer\": {\"type\": "
                                                                                    "\"Sequence\", \"pretokenizers\": "
                                                                                    "[{\"type\": \"Digits\", "
                                                                                    "\"individual_digits\": true},"
                                                                                    " {\"type\": \"ByteLevel\", "
                                                                                    "\"add_prefix_space\": false, "
                                                                                    "\"trim_offsets\": true, "
                                                                                    "\"use_regex\": true}]},"
                                                                                    " \"post_processor\": {\"type\": "
                                                                                    "\"ByteLevel\", "
                                                                                    "\"add_prefix_space\": true, "
                                                                                    "\"trim_offsets\": false, "
                                                                                    "\"use_regex\": true},"
                                                                                    " \"decoder\": {\"type\": "
                                                                                    "\"ByteLevel\", "
                                                                                    "\"add_prefix_space\": true, "
                                                                                    "\"trim_offsets\": true, "
                                                                                    "\"use_regex\": true},"
                                                                                    " \"model\": {\"type\": \"BPE\", "
                                                                                    "\"dropout\": null, \"unk_token\": "
                                                                                    "null, "
                                                                                    "\"continuing_subword_prefix\": "
                                                                                    "null,"
                                                                                    " \"end_of_word_suffix\": null, "
                                                                                    "\"fuse_unk\": false, "
                                                                                    "\"byte_fallback\": false,"
                                                                                    " \"vocab\": {\"<|endoftext|>\": "
                                                                                    "0, \"<|im_start|>\": 1, "
                                                                                    "\"<|im_end|>\": 2, \"a\": 3, "
                                                                                    "\"b\": 4, \"ab\": 5,"
                                                                                    " \"\xc4\xa0\": 6, \"\xc4\xa0"
                                                                                    "ab\": 7},"
                                                                                    " \"merges\": MERGES}}";

static const char *const GPT2_CONFIG =
    "{\"add_prefix_space\": false, \"add_bos_token\": true, \"bos_token\": \"<|im_start|>\","
    " \"eos_token\": {\"content\": \"<|im_end|>\", \"special\": true}, \"pad_token\": \"<|im_end|>\","
    " \"unk_token\": \"<|endoftext|>\", \"chat_template\": \"{{ messages }}\", \"tokenizer_class\": \"GPT2Tokenizer\"}";

/* tokenizer.json with MERGES replaced. */
static void put_gpt2(const char *dir, const char *merges, const char *config_json)
{
    const char *p = strstr(GPT2_TOKENIZER, "MERGES");
    char buf[8192];
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - GPT2_TOKENIZER), GPT2_TOKENIZER, merges, p + 6);
    put(dir, "tokenizer.json", buf);
    put(dir, "tokenizer_config.json", GPT2_CONFIG);
    if (config_json) put(dir, "config.json", config_json);
}

static void test_gpt2_synthetic(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    put_gpt2(dir, "[\"a b\", \"\xc4\xa0 ab\"]",
             "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 12, \"eos_token_id\": 0, \"pad_token_id\": 1,"
             " \"sep_token_id\": 9}");
    dsq_gguf *g = hf_to_gguf_ok(dir, dir);
    assert_string_equal(str_of(g, "tokenizer.ggml.model"), "gpt2");
    assert_string_equal(str_of(g, "tokenizer.ggml.pre"), "smollm"); /* digits + byte level, and <|im_start|> */
    static const char *const toks[] = {"<|endoftext|>",
                                       "<|im_start|>",
                                       "<|im_end|>",
                                       "a",
                                       "b",
                                       "ab",
                                       "\xc4\xa0",
                                       ("\xc4\xa0"
                                        "ab"),
                                       "[PAD8]",
                                       "<|tool|>",
                                       " hi",
                                       "[PAD11]"};
    expect_strs(g, "tokenizer.ggml.tokens", toks, 12);
    /* <|tool|> looks special; "▁hi" is user-defined with its space restored. */
    static const int32_t types[] = {3, 3, 3, 1, 1, 1, 1, 1, 5, 3, 4, 5};
    const dsq_gguf_array *t = arr_of(g, "tokenizer.ggml.token_type", DSQ_GGUF_I32);
    assert_int_equal(t->n, 12);
    assert_memory_equal(t->data, types, sizeof types);
    static const char *const merges[] = {"a b", "\xc4\xa0 ab"};
    expect_strs(g, "tokenizer.ggml.merges", merges, 2);
    assert_int_equal(u32_of(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(u32_of(g, "tokenizer.ggml.eos_token_id"), 2); /* tokenizer_config wins over config.json */
    assert_int_equal(u32_of(g, "tokenizer.ggml.unknown_token_id"), 0);
    assert_int_equal(u32_of(g, "tokenizer.ggml.padding_token_id"), 2);
    assert_int_equal(u32_of(g, "tokenizer.ggml.seperator_token_id"), 9); /* only config.json names it */
    assert_true(bool_of(g, "tokenizer.ggml.add_bos_token"));
    assert_false(bool_of(g, "tokenizer.ggml.add_space_prefix"));
    assert_null(dsq_gguf_get(g, "tokenizer.ggml.add_eos_token"));
    assert_null(dsq_gguf_get(g, "tokenizer.ggml.scores"));
    assert_string_equal(str_of(g, "tokenizer.chat_template"), "{{ messages }}");

    /* GGUF -> HF -> GGUF gives every key back. */
    char *hf = NULL;
    dsq_gguf *back = round_trip_cfg(g, dir, &hf, "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 12}");
    expect_same_tokenizer(g, back, NULL);
    /* The HF side: gaps stay out of model.vocab, specials are added tokens. */
    cJSON *tj = read_json(hf, "tokenizer.json");
    cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "vocab");
    assert_int_equal(cJSON_GetArraySize(vocab), 10);
    assert_null(cJSON_GetObjectItem(vocab, "[PAD8]"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(tj, "added_tokens")), 5);
    cJSON_Delete(tj);
    cJSON *tc = read_json(hf, "tokenizer_config.json");
    assert_string_equal(cJSON_GetObjectItem(tc, "bos_token")->valuestring, "<|im_start|>");
    assert_string_equal(cJSON_GetObjectItem(tc, "pad_token")->valuestring, "<|im_end|>");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(tc, "add_bos_token")));
    assert_null(cJSON_GetObjectItem(tc, "add_eos_token"));
    cJSON_Delete(tc);
    cJSON *sm = read_json(hf, "special_tokens_map.json");
    assert_string_equal(cJSON_GetObjectItem(sm, "eos_token")->valuestring, "<|im_end|>");
    cJSON_Delete(sm);
    free(hf);
    dsq_gguf_close(back);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* transformers >= 4.45 writes merges as pairs; spaces inside become U+0120
 * as gguf-py's SpecialVocab encodes them. */
static void test_merge_pairs(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    put_gpt2(dir, "[[\"a\", \"b\"], [\"\xc4\xa0\", \"ab\"], [\"x y\", \"z\"]]", NULL);
    dsq_gguf *g = hf_to_gguf_ok(dir, dir);
    static const char *const merges[] = {"a b", "\xc4\xa0 ab", "x\xc4\xa0y z"};
    expect_strs(g, "tokenizer.ggml.merges", merges, 3);
    /* Without config.json the list ends at the largest id. */
    assert_int_equal(arr_of(g, "tokenizer.ggml.tokens", DSQ_GGUF_STRING)->n, 11);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

static const char *const LLAMA_TOKENIZER =
    "{\"version\": \"1.0\", \"added_tokens\": [" ADDED(0, "<unk>", true) ", " ADDED(1, "<s>", true) ", " ADDED(
        2, "</s>",
        true) "],"
              " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
              "\"\xe2\x96\x81\"},"
              " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]},"
              " \"pre_tokenizer\": null,"
              " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
              "\"<s>\", \"type_id\": 0}},"
              " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"SpecialToken\": {\"id\": \"<s>\", "
              "\"type_id\": 0}},"
              " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 1}},"
              " {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", "
              "\"ids\": [1],"
              " \"tokens\": [\"<s>\"]}}},"
              " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
              "\"\xe2\x96\x81\"},"
              " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
              "\"content\": \" \","
              " \"start\": 1, \"stop\": 0}]},"
              " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", \"fuse_unk\": true, "
              "\"byte_fallback\": true,"
              " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"<0x00>\": 3, \"<0x0A>\": 4, \"\xe2\x96\x81\": 5, "
              "\"a\": 6,"
              " \"b\": 7, \"\xe2\x96\x81"
              "a\": 8, \"ab\": 9, \"\xe2\x96\x81"
              "ab\": 10},"
              " \"merges\": [\"\xe2\x96\x81 a\", \"a b\", \"\xe2\x96\x81"
              "a b\", \"\xe2\x96\x81 ab\"]}}";

/* Byte fallback -> "llama": BYTE pieces, the UNKNOWN piece, scores that
 * order the merges, TemplateProcessing read as add_bos. */
static void test_llama_synthetic(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    put(dir, "tokenizer.json", LLAMA_TOKENIZER);
    put(dir, "tokenizer_config.json",
        "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"unk_token\": \"<unk>\", \"add_eos_token\": false,"
        " \"legacy\": true}");
    dsq_gguf *g = hf_to_gguf_ok(dir, dir);
    assert_string_equal(str_of(g, "tokenizer.ggml.model"), "llama");
    assert_string_equal(str_of(g, "tokenizer.ggml.pre"), "default");
    assert_null(dsq_gguf_get(g, "tokenizer.ggml.merges"));
    static const int32_t types[] = {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1};
    const dsq_gguf_array *t = arr_of(g, "tokenizer.ggml.token_type", DSQ_GGUF_I32);
    assert_int_equal(t->n, 11);
    assert_memory_equal(t->data, types, sizeof types);
    /* ▁a is merge 0, ab merge 1, ▁ab first made by merge 2. */
    static const float scores[] = {0, 0, 0, 0, 0, 0, 0, 0, -0.0f, -1, -2};
    const dsq_gguf_array *sc = arr_of(g, "tokenizer.ggml.scores", DSQ_GGUF_F32);
    for (int i = 0; i < 11; i++)
        if (((const float *)sc->data)[i] != scores[i]) fail_msg("score[%d] = %g", i, ((const float *)sc->data)[i]);
    assert_int_equal(u32_of(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(u32_of(g, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(u32_of(g, "tokenizer.ggml.unknown_token_id"), 0);
    assert_true(bool_of(g, "tokenizer.ggml.add_bos_token"));
    assert_false(bool_of(g, "tokenizer.ggml.add_eos_token"));
    /* SpecialVocab reads <s> between A and B as no separator: add_sep false. */
    assert_false(bool_of(g, "tokenizer.ggml.add_sep_token"));

    /* Back to HF: merges derived from the scores, the same token order. */
    char *hf = NULL;
    dsq_gguf *back = round_trip(g, dir, &hf);
    static const char *const skip[] = {"tokenizer.ggml.add_sep_token", NULL};
    expect_same_tokenizer(g, back, skip);
    cJSON *tj = read_json(hf, "tokenizer.json");
    cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "merges");
    assert_int_equal(cJSON_GetArraySize(m), 4);
    assert_string_equal(cJSON_GetArrayItem(m, 0)->valuestring, "\xe2\x96\x81 a");
    assert_string_equal(cJSON_GetArrayItem(m, 1)->valuestring, "a b");
    assert_string_equal(cJSON_GetArrayItem(m, 2)->valuestring, "\xe2\x96\x81 ab"); /* sorted by piece ids */
    assert_string_equal(cJSON_GetArrayItem(m, 3)->valuestring, "\xe2\x96\x81"
                                                               "a b");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "byte_fallback")));
    cJSON_Delete(tj);
    free(hf);
    dsq_gguf_close(back);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* --------------------------------------------------------- pre-tokenizers */

/* A small gpt2 GGUF with the given pre; extra is one more (probe) token. */
static dsq_gguf *small_gguf(const char *dir, const char *pre, const char *extra)
{
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    const char *toks[5] = {"<|endoftext|>", "a", "b", "ab", extra ? extra : "c"};
    int32_t types[5] = {3, 1, 1, 1, extra ? 3 : 1};
    const char *merges[1] = {"a b"};
    assert_int_equal(dsq_gguf_set_str(w, "general.architecture", "llama"), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.model", "gpt2"), DSQ_OK);
    if (pre) assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.pre", pre), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, 5), DSQ_OK);
    assert_int_equal(dsq_gguf_set_arr(w, "tokenizer.ggml.token_type", DSQ_GGUF_I32, types, 5), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 0), DSQ_OK);
    char path[4096];
    snprintf(path, sizeof path, "%s/small.gguf", dir);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    return g;
}

static void test_pre_table_round_trip(void **state)
{
    (void)state;
    static const struct {
        const char *pre, *probe, *back;
    } rows[] = {
        {"llama-bpe", NULL, "llama-bpe"},
        {"deepseek-r1-qwen",
         "<\xef\xbd\x9c"
         "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
         "deepseek-r1-qwen"},
        {"qwen2", NULL, "qwen2"},
        {"smollm", "<|im_start|>", "smollm"},
        {"starcoder", NULL, "starcoder"},
        {"gpt-2", NULL, "gpt-2"},
        {"deepseek-coder", NULL, "deepseek-coder"},
        {"deepseek-llm", NULL, "deepseek-llm"},
        {"deepseek-v3", NULL, "deepseek-v3"},
        {"falcon", NULL, "falcon"},
        {"default", NULL, "default"},
        {"mpt", NULL, "gpt-2"}, /* aliases: same regexes in llama.cpp */
        {"llama3", NULL, "llama-bpe"},
    };
    char *dir = dsq_test_mkdtemp();
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        dsq_gguf *g = small_gguf(dir, rows[i].pre, rows[i].probe);
        dsq_gguf *back = round_trip(g, dir, NULL);
        const char *got = str_of(back, "tokenizer.ggml.pre");
        if (strcmp(got, rows[i].back) != 0) fail_msg("pre %s came back as %s", rows[i].pre, got);
        /* llama-bpe adds BOS by default, and the export makes that explicit. */
        static const char *const skip_bos[] = {"tokenizer.ggml.add_bos_token", NULL};
        bool bpe = !strcmp(rows[i].back, "llama-bpe");
        if (!strcmp(rows[i].pre, rows[i].back)) expect_same_tokenizer(g, back, bpe ? skip_bos : NULL);
        dsq_gguf_close(back);
        dsq_gguf_close(g);
    }
    /* llama-bpe adds BOS by default in llama.cpp; the export says so. */
    dsq_gguf *g = small_gguf(dir, "llama-bpe", NULL);
    char *hf = NULL;
    dsq_gguf *back = round_trip(g, dir, &hf);
    assert_true(bool_of(back, "tokenizer.ggml.add_bos_token"));
    cJSON *tj = read_json(hf, "tokenizer.json");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "post_processor"), "type")->valuestring,
                        "TemplateProcessing");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "ignore_merges")));
    cJSON_Delete(tj);
    free(hf);
    dsq_gguf_close(back);
    dsq_gguf_close(g);
    /* A GGUF without pre exports llama.cpp's default regexes. */
    g = small_gguf(dir, NULL, NULL);
    back = round_trip(g, dir, NULL);
    assert_string_equal(str_of(back, "tokenizer.ggml.pre"), "default");
    dsq_gguf_close(back);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* tokenizer.json with the given pre_tokenizer JSON (gpt2 vocab). */
static void put_with_pre(const char *dir, const char *pre_json)
{
    const char *p = strstr(GPT2_TOKENIZER, "\"pre_tokenizer\": ");
    const char *q = strstr(GPT2_TOKENIZER, " \"post_processor\"");
    const char *m = strstr(GPT2_TOKENIZER, "MERGES");
    char buf[8192];
    snprintf(buf, sizeof buf, "%.*s\"pre_tokenizer\": %s,%.*s[\"a b\"]%s", (int)(p - GPT2_TOKENIZER), GPT2_TOKENIZER,
             pre_json, (int)(m - q), q, m + 6);
    put(dir, "tokenizer.json", buf);
}

static void test_pre_recognition(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    /* Old GPT-2 files leave use_regex out (default true); a one-step
     * Sequence is the step itself; trim_offsets does not change ids. */
    static const char *const gpt2_forms[] = {
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true}",
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": false}]}",
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": true}",
    };
    for (size_t i = 0; i < 3; i++) {
        put_with_pre(dir, gpt2_forms[i]);
        dsq_gguf *g = hf_to_gguf_ok(dir, dir);
        assert_string_equal(str_of(g, "tokenizer.ggml.pre"), "gpt-2");
        dsq_gguf_close(g);
    }
    /* add_prefix_space true splits differently: not gpt-2. Nothing known
     * matches, so no pre is written and a warning says why. */
    put_with_pre(dir, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}");
    dsq_gguf *g = hf_to_gguf_ok(dir, dir);
    assert_null(dsq_gguf_get(g, "tokenizer.ggml.pre"));
    assert_non_null(strstr(g_log, "pre-tokenizer"));
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------- chat templates */

static void test_chat_templates(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    put_gpt2(dir, "[\"a b\"]", NULL);
    put(dir, "tokenizer_config.json",
        "{\"chat_template\": [{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool use\", \"template\": "
        "\"T\"},"
        " {\"name\": \"rag\", \"template\": \"R\"}]}");
    dsq_gguf *g = hf_to_gguf_ok(dir, dir);
    assert_string_equal(str_of(g, "tokenizer.chat_template"), "D");
    assert_string_equal(str_of(g, "tokenizer.chat_template.tool_use"), "T");
    assert_string_equal(str_of(g, "tokenizer.chat_template.rag"), "R");
    static const char *const names[] = {"tool_use", "rag"};
    expect_strs(g, "tokenizer.chat_templates", names, 2);
    dsq_gguf *back = round_trip(g, dir, NULL);
    expect_same_tokenizer(g, back, NULL);
    dsq_gguf_close(back);
    dsq_gguf_close(g);

    /* No template in tokenizer_config.json: chat_template.jinja is used. */
    put(dir, "tokenizer_config.json", "{\"bos_token\": \"<|im_start|>\"}");
    put(dir, "chat_template.jinja", "{{ jinja }}");
    g = hf_to_gguf_ok(dir, dir);
    assert_string_equal(str_of(g, "tokenizer.chat_template"), "{{ jinja }}");
    assert_int_equal(u32_of(g, "tokenizer.ggml.bos_token_id"), 1);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* ------------------------------------------------------------------ errors */

static void expect_hf_fail(const char *dir, dsq_status want, const char *phrase)
{
    dsq_gguf *g = NULL;
    dsq_status s = hf_to_gguf(dir, dir, &g);
    if (s != want) fail_msg("got %s (%s), want %s", dsq_status_name(s), dsq_errmsg(), dsq_status_name(want));
    if (!strstr(dsq_errmsg(), phrase)) fail_msg("message \"%s\" lacks \"%s\"", dsq_errmsg(), phrase);
    assert_null(g);
}

static void test_hf_refusals(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    expect_hf_fail(dir, DSQ_ERR_NOT_FOUND, "tokenizer.json");
    put(dir, "tokenizer.json", "[1, 2]");
    expect_hf_fail(dir, DSQ_ERR_FORMAT, "tokenizer.json");
    put(dir, "tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}");
    expect_hf_fail(dir, DSQ_ERR_UNSUPPORTED, "\"Unigram\"");
    put(dir, "tokenizer.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": "
        "\"WordPiece\"}}");
    expect_hf_fail(dir, DSQ_ERR_UNSUPPORTED, "ByteLevel");
    static const char *const bad_vocab[] = {
        "{\"a\": -1}", "{\"a\": 1.5}", "{\"a\": \"1\"}", "{\"a\": 99999999999}", "{\"a\": 0, \"b\": 0}", "{}",
    };
    for (size_t i = 0; i < sizeof bad_vocab / sizeof bad_vocab[0]; i++) {
        char buf[512];
        snprintf(
            buf, sizeof buf,
            "{\"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": []}, \"decoder\": {\"type\": \"ByteLevel\"}}",
            bad_vocab[i]);
        put(dir, "tokenizer.json", buf);
        expect_hf_fail(dir, DSQ_ERR_FORMAT, "tokenizer.json");
    }
    put(dir, "tokenizer.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": "
        "\"ByteLevel\"},"
        " \"added_tokens\": [{\"id\": 5}]}");
    expect_hf_fail(dir, DSQ_ERR_FORMAT, "added_tokens");
    put(dir, "tokenizer.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 7}, \"merges\": [\"ab\"]}, \"decoder\": "
        "{\"type\": \"ByteLevel\"}}");
    expect_hf_fail(dir, DSQ_ERR_FORMAT, "merge 0");
    put(dir, "config.json", "{\"vocab_size\": 4}");
    expect_hf_fail(dir, DSQ_ERR_FORMAT, "vocab_size 4");
    dsq_test_rmtmp(dir);
}

static void expect_gguf_fail(const char *dir, dsq_gguf_writer *w, dsq_status want, const char *phrase)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    char out[4096];
    snprintf(out, sizeof out, "%s/hf", dir);
    if (!dsq_is_dir(out)) assert_int_equal(mkdir(out, 0755), 0);
    dsq_status s = dsq_tokenizer_gguf_to_hf(g, out);
    dsq_gguf_close(g);
    if (s != want) fail_msg("got %s (%s), want %s", dsq_status_name(s), dsq_errmsg(), dsq_status_name(want));
    if (!strstr(dsq_errmsg(), phrase)) fail_msg("message \"%s\" lacks \"%s\"", dsq_errmsg(), phrase);
    /* Nothing half-written is left behind. */
    assert_int_equal(dsq_test_count_entries(out), 0);
}

static dsq_gguf_writer *base_writer(const char *model, const char *pre, uint64_t n_types)
{
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    const char *toks[3] = {"a", "b", "ab"};
    int32_t types[3] = {1, 1, 1};
    assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.model", model), DSQ_OK);
    if (pre) assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.pre", pre), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, 3), DSQ_OK);
    assert_int_equal(dsq_gguf_set_arr(w, "tokenizer.ggml.token_type", DSQ_GGUF_I32, types, n_types), DSQ_OK);
    return w;
}

static void test_gguf_refusals(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    const char *merges[1] = {"a b"};
    expect_gguf_fail(dir, base_writer("bert", NULL, 3), DSQ_ERR_UNSUPPORTED, "\"bert\"");
    dsq_gguf_writer *w = base_writer("gpt2", "no-such-pre", 3);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    expect_gguf_fail(dir, w, DSQ_ERR_UNSUPPORTED, "\"no-such-pre\"");
    expect_gguf_fail(dir, base_writer("gpt2", "gpt-2", 3), DSQ_ERR_NOT_FOUND, "merges");
    w = base_writer("gpt2", "gpt-2", 2);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    expect_gguf_fail(dir, w, DSQ_ERR_FORMAT, "token_type");
    w = base_writer("gpt2", "gpt-2", 3);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    const char *bad[3] = {"a", "\xff\xfe", "ab"};
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", bad, NULL, 3), DSQ_OK);
    expect_gguf_fail(dir, w, DSQ_ERR_FORMAT, "tokenizer.ggml.tokens[1]");
    /* Ill-formed UTF-8 that a lead-byte check lets through would make a
     * tokenizer.json that Python's json and tokenizers refuse to read. */
    static const char *const hostile[] = {
        "\xC0\xAF",         /* overlong '/' */
        "\xE0\x80\xAF",     /* overlong, 3 bytes */
        "\xED\xA0\x80",     /* surrogate U+D800 */
        "\xF4\x90\x80\x80", /* above U+10FFFF */
        "\xE2\x82",         /* cut off */
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        w = base_writer("gpt2", "gpt-2", 3);
        assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
        const char *toks[3] = {"a", hostile[i], "ab"};
        assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, 3), DSQ_OK);
        expect_gguf_fail(dir, w, DSQ_ERR_FORMAT, "tokenizer.ggml.tokens[1] is not valid UTF-8");
        w = base_writer("gpt2", "gpt-2", 3);
        assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
        assert_int_equal(dsq_gguf_set_str(w, "tokenizer.chat_template", hostile[i]), DSQ_OK);
        expect_gguf_fail(dir, w, DSQ_ERR_FORMAT, "tokenizer.chat_template is not valid UTF-8");
    }
    /* A NUL inside a template would cut the JSON string short. */
    w = base_writer("gpt2", "gpt-2", 3);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    const char *names[1] = {"rag"};
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.chat_templates", names, NULL, 1), DSQ_OK);
    dsq_gguf_value nul = {.type = DSQ_GGUF_STRING, .v.str = {"R\0x", 3}};
    assert_int_equal(dsq_gguf_set(w, "tokenizer.chat_template.rag", &nul), DSQ_OK);
    expect_gguf_fail(dir, w, DSQ_ERR_FORMAT, "tokenizer.chat_template.rag is not valid UTF-8");
    dsq_test_rmtmp(dir);
}

/* A tokenizer-only gpt2 GGUF with a default template "D", the named-template
 * list {tool_use, rag} and, of those, only rag's template; rag_as_u32 stores
 * that one with the wrong type. */
static dsq_gguf *named_templates_gguf(const char *dir, bool rag_as_u32)
{
    dsq_gguf_writer *w = base_writer("gpt2", "gpt-2", 3);
    const char *merges[1] = {"a b"}, *names[2] = {"tool_use", "rag"};
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", merges, NULL, 1), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "tokenizer.chat_template", "D"), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.chat_templates", names, NULL, 2), DSQ_OK);
    if (rag_as_u32)
        assert_int_equal(dsq_gguf_set_u32(w, "tokenizer.chat_template.rag", 7), DSQ_OK);
    else
        assert_int_equal(dsq_gguf_set_str(w, "tokenizer.chat_template.rag", "R"), DSQ_OK);
    char path[4096];
    snprintf(path, sizeof path, "%s/named%d.gguf", dir, (int)rag_as_u32);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    return g;
}

/* llama.cpp looks named templates up by key and never reads the list, so a
 * list naming a template the file lacks loads there: the conversion warns,
 * naming the key, and writes the templates that are there. A template of the
 * wrong type is a one-line error naming its key. */
static void test_gguf_named_template_missing(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    assert_int_equal(mkdir(hf, 0755), 0);
    dsq_gguf *g = named_templates_gguf(dir, false);
    g_log[0] = '\0';
    dsq_log_set_sink(capture, NULL);
    dsq_status s = dsq_tokenizer_gguf_to_hf(g, hf);
    dsq_log_set_sink(NULL, NULL);
    dsq_gguf_close(g);
    if (s != DSQ_OK) fail_msg("got %s (\"%s\"), want ok", dsq_status_name(s), dsq_errmsg());
    if (!strstr(g_log, "\"tool_use\"") || !strstr(g_log, "tokenizer.chat_template.tool_use"))
        fail_msg("warning \"%s\" does not name the missing template and its key", g_log);
    cJSON *cfg = read_json(hf, "tokenizer_config.json");
    char *chat = cJSON_PrintUnformatted(cJSON_GetObjectItem(cfg, "chat_template"));
    assert_string_equal(chat, "[{\"name\":\"default\",\"template\":\"D\"},{\"name\":\"rag\",\"template\":\"R\"}]");
    free(chat);
    cJSON_Delete(cfg);

    g = named_templates_gguf(dir, true);
    s = dsq_tokenizer_gguf_to_hf(g, hf);
    char want[4200];
    snprintf(want, sizeof want, "%s: key 'tokenizer.chat_template.rag' is u32, expected str", g->path);
    dsq_gguf_close(g);
    assert_int_equal(s, DSQ_ERR_FORMAT);
    assert_string_equal(dsq_errmsg(), want);
    dsq_test_rmtmp(dir);
}

/* ------------------------------------------------------------ real models */

static void test_smollm2_round_trip(void **state)
{
    (void)state;
    char *path = dsq_test_default_model();
    if (!path) DSQ_TEST_SKIP();
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    free(path);
    char *dir = dsq_test_mkdtemp();
    char *hf = NULL;
    dsq_gguf *back = round_trip(g, dir, &hf);
    /* Every token, type, merge, id, flag and the template. */
    expect_same_tokenizer(g, back, NULL);
    assert_string_equal(str_of(back, "tokenizer.ggml.pre"), "smollm");
    assert_int_equal(arr_of(back, "tokenizer.ggml.tokens", DSQ_GGUF_STRING)->n, 49152);
    assert_int_equal(arr_of(back, "tokenizer.ggml.merges", DSQ_GGUF_STRING)->n, 48900);
    cJSON *tc = read_json(hf, "tokenizer_config.json");
    assert_false(cJSON_IsTrue(cJSON_GetObjectItem(tc, "add_bos_token")));
    assert_int_equal(cJSON_GetObjectItem(tc, "model_max_length")->valueint, 8192);
    assert_string_equal(cJSON_GetObjectItem(tc, "tokenizer_class")->valuestring, "PreTrainedTokenizerFast");
    cJSON_Delete(tc);
    free(hf);
    dsq_gguf_close(back);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

/* llama.cpp's vocab test files: byte-level ones come back whole. Known,
 * documented differences: deepseek-coder's old GGUF has USER_DEFINED
 * tokens that today's converter marks CONTROL (they look special), and
 * SentencePiece scores are rebuilt from merge ranks (same order). */
static void test_shared_vocabs(void **state)
{
    (void)state;
    static const char *const names[] = {"gpt-2", "starcoder", "falcon", "deepseek-coder", "llama-spm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", names[i]);
        char *path = dsq_test_shared(rel);
        if (!path) DSQ_TEST_SKIP();
        dsq_gguf *g = NULL;
        assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
        free(path);
        char *dir = dsq_test_mkdtemp();
        dsq_gguf *back = round_trip(g, dir, NULL);
        static const char *const skip_types[] = {"tokenizer.ggml.token_type", NULL};
        static const char *const skip_scores[] = {"tokenizer.ggml.scores", NULL};
        bool dsc = !strcmp(names[i], "deepseek-coder"), spm = !strcmp(names[i], "llama-spm");
        expect_same_tokenizer(g, back, dsc ? skip_types : spm ? skip_scores : NULL);
        if (dsc) {
            const dsq_gguf_array *a = arr_of(g, "tokenizer.ggml.token_type", DSQ_GGUF_I32);
            const dsq_gguf_array *b = arr_of(back, "tokenizer.ggml.token_type", DSQ_GGUF_I32);
            const dsq_gguf_str *toks = arr_of(g, "tokenizer.ggml.tokens", DSQ_GGUF_STRING)->data;
            int changed = 0;
            for (uint64_t k = 0; k < a->n; k++) {
                int32_t x = ((const int32_t *)a->data)[k], y = ((const int32_t *)b->data)[k];
                if (x == y) continue;
                const char *tk = toks[k].ptr;
                bool special_look = !strncmp(tk, "<\xef\xbd\x9c", 4) || !strncmp(tk, "<|", 2) || !strcmp(tk, "<pad>");
                if (!(x == 4 && y == 3 && special_look))
                    fail_msg("token %llu type %d -> %d", (unsigned long long)k, x, y);
                changed++;
            }
            assert_true(changed > 0);
        }
        if (spm) {
            const float *s = arr_of(back, "tokenizer.ggml.scores", DSQ_GGUF_F32)->data;
            const int32_t *t = arr_of(back, "tokenizer.ggml.token_type", DSQ_GGUF_I32)->data;
            for (int k = 0; k < 259; k++) assert_true(t[k] != 1 && s[k] == 0.0f); /* unk, control, bytes */
            assert_true(s[260] > s[261] && s[261] > s[262]);                      /* ▁t, er, in: merge order kept */
        }
        dsq_gguf_close(back);
        dsq_gguf_close(g);
        dsq_test_rmtmp(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_synthetic),     cmocka_unit_test(test_merge_pairs),
        cmocka_unit_test(test_llama_synthetic),    cmocka_unit_test(test_pre_table_round_trip),
        cmocka_unit_test(test_pre_recognition),    cmocka_unit_test(test_chat_templates),
        cmocka_unit_test(test_hf_refusals),        cmocka_unit_test(test_gguf_refusals),
        cmocka_unit_test(test_gguf_named_template_missing),
        cmocka_unit_test(test_smollm2_round_trip), cmocka_unit_test(test_shared_vocabs),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
