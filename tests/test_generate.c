/* Generation: the sampler (greedy, top-k, top-p, temperature, seeds) on
 * synthetic logits, UTF-8 streaming, the hand-written chat templates, and on
 * SmolLM2 against transformers (tests/data/ref_generate_smollm2.json, made by
 * tests/integration/make_reference_generate.py): the ChatML renderings, the
 * prompt token ids, greedy continuations equal token for token with F32
 * activations, the default (llama.cpp-style) decode path deterministic and
 * leaving the reference only where its top-2 gap is small, seeded sampling
 * reproducible, top-k 1 equal to greedy, and dsquant generate end to end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/fileio.h"
#include "core/status.h"
#include "runtime/chat.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1 /* ~10x slower: shorter continuations */
#else
#define UNDER_SANITIZER 0
#endif

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* ================================================================ sampler */

static void test_utf8_complete(void **state)
{
    (void)state;
    assert_int_equal(dsq_utf8_complete("abc", 3), 3);
    assert_int_equal(dsq_utf8_complete("", 0), 0);
    assert_int_equal(dsq_utf8_complete("a\xc3", 2), 1);             /* é cut after its lead byte */
    assert_int_equal(dsq_utf8_complete("a\xc3\xa9", 3), 3);         /* é whole */
    assert_int_equal(dsq_utf8_complete("\xe2\x82", 2), 0);          /* € missing its last byte */
    assert_int_equal(dsq_utf8_complete("x\xe2\x82\xac", 4), 4);     /* € whole */
    assert_int_equal(dsq_utf8_complete("\xf0\x9f\x98", 3), 0);      /* 😀 missing one */
    assert_int_equal(dsq_utf8_complete("\xf0\x9f\x98\x80y", 5), 5);
    assert_int_equal(dsq_utf8_complete("ab\x80", 3), 3);            /* a stray continuation byte: print it */
    assert_int_equal(dsq_utf8_complete("a\xff", 2), 2);             /* never valid: print it */
    assert_int_equal(dsq_utf8_complete("\x80\x80\x80\x80", 4), 4);
}

static dsq_sampler *sampler(float temp, int top_k, float top_p, uint64_t seed, int64_t vocab)
{
    dsq_sampler_params p;
    dsq_sampler_params_default(&p);
    p.temp = temp, p.top_k = top_k, p.top_p = top_p, p.seed = seed;
    dsq_sampler *s;
    expect_ok(dsq_sampler_new(&p, vocab, &s));
    return s;
}

static void test_sampler(void **state)
{
    (void)state;
    enum { NV = 1000 };
    float lg[NV];
    uint64_t g = 99;
    for (int i = 0; i < NV; i++) lg[i] = 2 * dsq_test_randn(&g);
    lg[417] = lg[733] = 9; /* a tie for the top: the lower id wins */
    dsq_sampler *s = sampler(0, 0, 1, 1, NV);
    assert_int_equal(dsq_sampler_sample(s, lg), 417);
    assert_int_equal(dsq_argmax(lg, NV), 417);
    dsq_sampler_free(s);
    /* top-k 1 is greedy whatever the temperature and seed. */
    for (uint64_t seed = 0; seed < 20; seed++) {
        s = sampler(1.5f, 1, 1, seed, NV);
        assert_int_equal(dsq_sampler_sample(s, lg), 417);
        dsq_sampler_free(s);
    }
    /* Same seed, same draws; another seed, other draws. */
    dsq_sampler *a = sampler(1, 50, 0.95f, 7, NV), *b = sampler(1, 50, 0.95f, 7, NV), *c = sampler(1, 50, 0.95f, 8, NV);
    for (int i = 0; i < NV; i++) lg[i] = 0.3f * dsq_test_randn(&g);
    int differ = 0;
    for (int k = 0; k < 200; k++) {
        int32_t x = dsq_sampler_sample(a, lg), y = dsq_sampler_sample(b, lg), z = dsq_sampler_sample(c, lg);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 100);
    dsq_sampler_free(a), dsq_sampler_free(b), dsq_sampler_free(c);
    /* Frequencies follow the softmax; top-p and top-k cut the tail. */
    float p3[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    struct {
        float temp, top_p;
        int top_k;
        double want[4];
    } cases[] = {
        {1, 1, 0, {0.5, 0.3, 0.15, 0.05}},
        {1, 0.6f, 0, {0.625, 0.375, 0, 0}},           /* 0.5 + 0.3 reaches 0.6 */
        {1, 0.5f, 0, {1, 0, 0, 0}},                   /* 0.5 alone reaches 0.5 */
        {1, 1, 3, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {0.5f, 1, 0, {0.25 / 0.3675, 0.09 / 0.3675, 0.0225 / 0.3675, 0.0025 / 0.3675}}, /* p^2, renormalised */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        s = sampler(cases[ci].temp, cases[ci].top_k, cases[ci].top_p, 1234 + ci, 4);
        int cnt[4] = {0};
        enum { DRAWS = 40000 };
        for (int k = 0; k < DRAWS; k++) cnt[dsq_sampler_sample(s, p3)]++;
        for (int i = 0; i < 4; i++) {
            double f = (double)cnt[i] / DRAWS, w = cases[ci].want[i];
            if (fabs(f - w) > 0.012 || (w == 0 && cnt[i]))
                fail_msg("case %zu token %d: frequency %.4f, want %.4f", ci, i, f, w);
        }
        dsq_sampler_free(s);
    }
    dsq_sampler_params p;
    dsq_sampler_params_default(&p);
    p.temp = NAN;
    assert_int_equal(dsq_sampler_new(&p, 10, &s), DSQ_ERR_ARG);
}

/* ================================================================ chat templates */

static char *render(const char *tmpl, const dsq_chat_msg *m, size_t n, bool gen)
{
    dsq_chat_template t;
    expect_ok(dsq_chat_detect(tmpl, &t));
    char *out;
    expect_ok(dsq_chat_render(&t, m, n, gen, &out));
    dsq_chat_template_free(&t);
    return out;
}

/* Each family from a template excerpt, rendered for the same conversation;
 * expected strings written from the families' published templates. */
static void test_chat_families(void **state)
{
    (void)state;
    const dsq_chat_msg conv[3] = {{"system", "Be brief."}, {"user", " Hi there \n"}, {"assistant", "Hello."}};
    struct {
        const char *tmpl;
        dsq_chat_format fmt;
        const char *want;     /* system + user + assistant, no generation prompt */
        const char *want_gen; /* user only, with the generation prompt */
        const char *end;
    } fam[] = {
        {"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}", DSQ_CHAT_CHATML,
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n",
         "<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>"},
        /* Qwen2.5: a default system prompt in a Jinja string with \n escapes, after an expression one. */
        {"{%- if tools %}{{- '<|im_start|>system\\n' + messages[0]['content'] }}{%- else %}{%- if messages[0]['role'] "
         "== 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- "
         "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}",
         DSQ_CHAT_CHATML,
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n",
         "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
         "<|im_start|>user\n Hi there \n<|im_end|>\n<|im_start|>assistant\n",
         "<|im_end|>"},
        {"{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
         "trim + '<|eot_id|>' %}",
         DSQ_CHAT_LLAMA3,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
         "Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>",
         "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
         "<|eot_id|>"},
        {"{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}",
         DSQ_CHAT_LLAMA3,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
         "2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>"
         "assistant<|end_header_id|>\n\nHello.<|eot_id|>",
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
         "2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
         "<|eot_id|>"},
        {"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }} '<<SYS>>\\n' + system_message", DSQ_CHAT_LLAMA2,
         "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello. </s>", "<s>[INST] Hi there [/INST]", "</s>"},
        {"{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}", DSQ_CHAT_MISTRAL,
         "<s>[INST] Be brief.\n\n Hi there \n [/INST]Hello.</s>", "<s>[INST]  Hi there \n [/INST]", "</s>"},
        {"{{bos_token}}{{ns.system_prompt}}{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}"
         "{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n'}}",
         DSQ_CHAT_DEEPSEEK_R1,
         "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c> Hi there \n"
         "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Hello.<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
         "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c> Hi there \n"
         "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n",
         "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        dsq_chat_template t;
        expect_ok(dsq_chat_detect(fam[i].tmpl, &t));
        assert_int_equal(t.format, fam[i].fmt);
        assert_string_equal(dsq_chat_end_text(&t), fam[i].end);
        dsq_chat_template_free(&t);
        char *a = render(fam[i].tmpl, conv, 3, false), *b = render(fam[i].tmpl, conv + 1, 1, true);
        if (strcmp(a, fam[i].want)) fail_msg("family %zu:\n%s\nwant\n%s", i, a, fam[i].want);
        if (strcmp(b, fam[i].want_gen)) fail_msg("family %zu, generation prompt:\n%s\nwant\n%s", i, b, fam[i].want_gen);
        free(a), free(b);
    }
    /* DeepSeek-R1 drops the reasoning of earlier assistant turns. */
    const dsq_chat_msg r1[2] = {{"user", "Q"}, {"assistant", "<think>hmm</think>A"}};
    char *o = render(fam[6].tmpl, r1, 2, false);
    assert_non_null(strstr(o, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>A<"));
    assert_null(strstr(o, "hmm"));
    free(o);
    dsq_chat_template t;
    assert_int_equal(dsq_chat_detect("{{ messages }}", &t), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "Jinja"));
    expect_ok(dsq_chat_detect(fam[0].tmpl, &t));
    const dsq_chat_msg bad = {"tool", "x"};
    assert_int_equal(dsq_chat_render(&t, &bad, 1, true, &o), DSQ_ERR_ARG);
    dsq_chat_template_free(&t);
}

/* Where a Hugging Face folder keeps its template, in transformers' order. */
static void test_chat_template_sources(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), *text;
    dsq_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.kind = DSQ_CKPT_HF_DIR;
    ck.path = dir;
    assert_int_equal(dsq_chat_template_text(&ck, &text), DSQ_ERR_NOT_FOUND);
    free(dsq_test_write(dir, "chat_template.jinja", "{{ '[INST]' }}", 14));
    expect_ok(dsq_chat_template_text(&ck, &text));
    assert_string_equal(text, "{{ '[INST]' }}");
    free(text);
    const char *list = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, "
                       "{\"name\": \"default\", \"template\": \"<|im_start|>\"}]}";
    free(dsq_test_write(dir, "tokenizer_config.json", list, strlen(list)));
    expect_ok(dsq_chat_template_text(&ck, &text));
    assert_string_equal(text, "<|im_start|>");
    free(text);
    const char *str = "{\"chat_template\": \"<|start_header_id|>\\n\"}";
    free(dsq_test_write(dir, "tokenizer_config.json", str, strlen(str)));
    expect_ok(dsq_chat_template_text(&ck, &text));
    assert_string_equal(text, "<|start_header_id|>\n");
    free(text);
    ck.kind = DSQ_CKPT_SAFETENSORS;
    assert_int_equal(dsq_chat_template_text(&ck, &text), DSQ_ERR_NOT_FOUND);
    dsq_test_rmtmp(dir);
}

/* ================================================================ SmolLM2 */

typedef struct smol {
    char *path;
    cJSON *ref;
    dsq_model *m;
    dsq_tokenizer *tok;
} smol;

static bool smol_open(smol *s)
{
    memset(s, 0, sizeof *s);
    if (!(s->path = dsq_test_default_model())) return false;
    char *text;
    size_t len;
    expect_ok(dsq_read_file(DSQ_SOURCE_DIR "/tests/data/ref_generate_smollm2.json", 1 << 20, &text, &len));
    s->ref = cJSON_Parse(text);
    free(text);
    assert_non_null(s->ref);
    struct stat st;
    assert_int_equal(stat(s->path, &st), 0);
    if ((double)st.st_size != cJSON_GetObjectItem(s->ref, "model_bytes")->valuedouble) {
        dsq_test_fixture_missing("%s is not the model the fixture was made from", s->path);
        cJSON_Delete(s->ref);
        free(s->path);
        return false;
    }
    expect_ok(dsq_model_open(s->path, &s->m));
    expect_ok(dsq_tokenizer_load(s->path, &s->tok));
    return true;
}

static void smol_close(smol *s)
{
    dsq_tokenizer_free(s->tok);
    dsq_model_close(s->m);
    cJSON_Delete(s->ref);
    free(s->path);
}

static int ints(const cJSON *a, int32_t *out, int cap)
{
    int n = cJSON_GetArraySize(a);
    assert_true(n <= cap);
    for (int i = 0; i < n; i++) out[i] = (int32_t)cJSON_GetArrayItem(a, i)->valueint;
    return n;
}

static void test_smollm2_chat_renderings(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    char *tmpl;
    expect_ok(dsq_chat_template_text(s.m->ckpt, &tmpl));
    dsq_chat_template t;
    expect_ok(dsq_chat_detect(tmpl, &t));
    assert_int_equal(t.format, DSQ_CHAT_CHATML);
    assert_string_equal(t.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(s.ref, "chat"))
    {
        dsq_chat_msg msgs[4];
        size_t nm = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItem(c, "messages"))
        {
            msgs[nm].role = cJSON_GetObjectItem(m, "role")->valuestring;
            msgs[nm++].content = cJSON_GetObjectItem(m, "content")->valuestring;
        }
        char *out;
        expect_ok(dsq_chat_render(&t, msgs, nm, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")), &out));
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        if (strcmp(out, want)) fail_msg("conversation %d:\n%s\ntransformers:\n%s", n, out, want);
        free(out);
        n++;
    }
    assert_int_equal(n, 3);
    dsq_chat_template_free(&t);
    free(tmpl);
    smol_close(&s);
}

/* The prompt of a greedy case as our tokenizer (and template) make it. */
static int prompt_ids(smol *s, const cJSON *g, int32_t *ids, int cap)
{
    const cJSON *chat = cJSON_GetObjectItem(g, "chat");
    const char *text = cJSON_GetObjectItem(g, "text")->valuestring;
    char *rendered = NULL;
    if (cJSON_IsArray(chat)) {
        char *tmpl;
        dsq_chat_template t;
        expect_ok(dsq_chat_template_text(s->m->ckpt, &tmpl));
        expect_ok(dsq_chat_detect(tmpl, &t));
        const cJSON *m = cJSON_GetArrayItem(chat, 0);
        dsq_chat_msg msg = {cJSON_GetObjectItem(m, "role")->valuestring, cJSON_GetObjectItem(m, "content")->valuestring};
        expect_ok(dsq_chat_render(&t, &msg, 1, true, &rendered));
        assert_string_equal(rendered, text);
        dsq_chat_template_free(&t);
        free(tmpl);
    }
    dsq_tokens v = {0};
    expect_ok(dsq_tokenizer_encode(s->tok, text, strlen(text), false, true, &v));
    assert_true((int)v.n <= cap);
    memcpy(ids, v.ids, v.n * sizeof *ids);
    int n = (int)v.n;
    dsq_tokens_free(&v);
    free(rendered);
    return n;
}

static dsq_tokens run_gen(smol *s, dsq_sampler *smp, const int32_t *p, int np, int n_new, bool f32, dsq_gen_stats *st)
{
    dsq_ctx *c;
    expect_ok(dsq_ctx_new(s->m, np + n_new + 1, 0, &c));
    int32_t eos = dsq_tokenizer_eos(s->tok);
    dsq_gen_opts o = {n_new, &eos, 1, NULL, NULL, f32};
    dsq_tokens out = {0};
    expect_ok(dsq_generate(c, smp, p, np, &o, &out, st));
    dsq_ctx_free(c);
    return out;
}

static void test_smollm2_greedy_f32_equals_transformers(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    int n_new = cJSON_GetObjectItem(s.ref, "n_new")->valueint;
    dsq_sampler *g = sampler(0, 0, 1, 0, s.m->vocab);
    const cJSON *gc;
    cJSON_ArrayForEach(gc, cJSON_GetObjectItem(s.ref, "greedy"))
    {
        int32_t p[256], want[256], ref_p[256];
        int np = prompt_ids(&s, gc, p, 256);
        assert_int_equal(np, ints(cJSON_GetObjectItem(gc, "prompt_ids"), ref_p, 256));
        assert_memory_equal(p, ref_p, (size_t)np * sizeof *p);
        int nw = ints(cJSON_GetObjectItem(gc, "continuation"), want, 256);
        int limit = UNDER_SANITIZER && nw > 8 ? 8 : n_new;
        dsq_gen_stats st;
        dsq_tokens out = run_gen(&s, g, p, np, limit, true, &st);
        printf("%s: %d tokens (transformers %d), %.1f tok/s\n", cJSON_GetObjectItem(gc, "name")->valuestring,
               (int)out.n, nw, st.gen_s > 0 ? st.n_gen / st.gen_s : 0);
        if (limit < nw) nw = limit; /* a prefix only */
        else assert_int_equal(st.stopped, cJSON_IsTrue(cJSON_GetObjectItem(gc, "stopped_at_eos")));
        assert_int_equal(out.n, nw);
        assert_memory_equal(out.ids, want, (size_t)nw * sizeof *want);
        assert_int_equal(st.n_prompt, np);
        dsq_tokens_free(&out);
    }
    dsq_sampler_free(g);
    smol_close(&s);
}

/* The default decode path rounds activations as llama.cpp does: it must be
 * deterministic, and may leave transformers' path only at a step where the
 * reference's top-2 gap is small (the inputs up to there being identical). */
static void test_smollm2_greedy_default_and_sampling(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    const cJSON *gc = cJSON_GetArrayItem(cJSON_GetObjectItem(s.ref, "greedy"), 1); /* code: the longest */
    int32_t p[256], want[256];
    int np = prompt_ids(&s, gc, p, 256), nw = ints(cJSON_GetObjectItem(gc, "continuation"), want, 256);
    dsq_sampler *g = sampler(0, 0, 1, 0, s.m->vocab);
    dsq_gen_stats st;
    dsq_tokens a = run_gen(&s, g, p, np, 24, false, &st), b = run_gen(&s, g, p, np, 24, false, &st);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
    size_t k = 0;
    while (k < a.n && k < (size_t)nw && a.ids[k] == want[k]) k++;
    if (k < a.n && k < (size_t)nw) {
        double gap = cJSON_GetArrayItem(cJSON_GetObjectItem(gc, "top2_gaps"), (int)k)->valuedouble;
        printf("default decode path leaves transformers' continuation at step %zu (reference gap %.3f)\n", k, gap);
        assert_true(gap < 0.5);
    } else {
        printf("default decode path: the first %zu tokens equal transformers'\n", k);
    }
    /* Seeded sampling is reproducible; top-k 1 is greedy. */
    dsq_sampler *x = sampler(0.9f, 40, 0.95f, 5, s.m->vocab), *y = sampler(0.9f, 40, 0.95f, 5, s.m->vocab);
    dsq_tokens sx = run_gen(&s, x, p, np, 16, false, &st), sy = run_gen(&s, y, p, np, 16, false, &st);
    assert_int_equal(sx.n, sy.n);
    assert_memory_equal(sx.ids, sy.ids, sx.n * sizeof *sx.ids);
    dsq_sampler *k1 = sampler(0.9f, 1, 1, 5, s.m->vocab);
    dsq_tokens t1 = run_gen(&s, k1, p, np, 24, false, &st);
    assert_int_equal(t1.n, a.n);
    assert_memory_equal(t1.ids, a.ids, a.n * sizeof *a.ids);
    /* A stop token ends generation without being emitted; n_predict bounds it. */
    int32_t stop = a.ids[3];
    dsq_ctx *c;
    expect_ok(dsq_ctx_new(s.m, np + 30, 0, &c));
    dsq_gen_opts o = {24, &stop, 1, NULL, NULL, false};
    dsq_tokens cut = {0};
    expect_ok(dsq_generate(c, g, p, np, &o, &cut, &st));
    assert_true(st.stopped);
    size_t first = 0;
    while (a.ids[first] != stop) first++;
    assert_int_equal(cut.n, first);
    o.n_stop = 0;
    o.n_predict = 2;
    dsq_tokens two = {0};
    expect_ok(dsq_generate(c, g, p, np, &o, &two, &st));
    assert_int_equal(two.n, 2);
    assert_false(st.stopped);
    assert_int_equal(dsq_generate(c, g, p, 0, &o, &two, &st), DSQ_ERR_ARG);
    dsq_ctx_free(c);
    dsq_tokens_free(&a), dsq_tokens_free(&b), dsq_tokens_free(&sx), dsq_tokens_free(&sy);
    dsq_tokens_free(&t1), dsq_tokens_free(&cut), dsq_tokens_free(&two);
    dsq_sampler_free(g), dsq_sampler_free(x), dsq_sampler_free(y), dsq_sampler_free(k1);
    smol_close(&s);
}

/* dsquant generate prints exactly the decoded continuation (plus a newline). */
static void test_cli(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp(), cmd[8192], err[4096], path[4096];
    const struct {
        int idx;
        const char *flags;
    } runs[] = {{0, "-p 'The capital of France is' -n 12"}, {2, "--chat -p 'What is the capital of France?'"}};
    for (int r = 0; r < 2; r++) {
        const cJSON *gc = cJSON_GetArrayItem(cJSON_GetObjectItem(s.ref, "greedy"), runs[r].idx);
        int32_t want[256];
        int nw = ints(cJSON_GetObjectItem(gc, "continuation"), want, 256);
        if (r == 0) nw = 12;
        char *text;
        size_t len;
        expect_ok(dsq_tokenizer_decode(s.tok, want, (size_t)nw, 0, &text, &len));
        snprintf(cmd, sizeof cmd, "%s generate %s %s --f32-act --threads 2 > %s/out.txt", DSQ_BINARY, s.path,
                 runs[r].flags, dir);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s\n%s", cmd, err);
        assert_non_null(strstr(err, "tok/s"));
        char *got;
        size_t gl;
        snprintf(path, sizeof path, "%s/out.txt", dir);
        expect_ok(dsq_read_file(path, 1 << 20, &got, &gl));
        assert_int_equal(gl, len + 1);
        assert_memory_equal(got, text, len);
        assert_int_equal(got[len], '\n');
        free(got), free(text);
    }
    snprintf(cmd, sizeof cmd, "%s generate %s -n 3 > /dev/null", DSQ_BINARY, s.path);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2); /* no prompt */
    dsq_test_rmtmp(dir);
    smol_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_complete),
        cmocka_unit_test(test_sampler),
        cmocka_unit_test(test_chat_families),
        cmocka_unit_test(test_chat_template_sources),
        cmocka_unit_test(test_smollm2_chat_renderings),
        cmocka_unit_test(test_smollm2_greedy_f32_equals_transformers),
        cmocka_unit_test(test_smollm2_greedy_default_and_sampling),
        cmocka_unit_test(test_cli),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
