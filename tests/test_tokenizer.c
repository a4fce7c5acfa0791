/* Tokenizers: llama.cpp's own vocab test vectors (ids must match exactly),
 * decode(encode(x)) == x on WikiText for every vocabulary, SmolLM2 against ids
 * from Hugging Face tokenizers, tokenizer.json loading (hand-made and written
 * from GGUF metadata), special tokens, hostile/invalid input and refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "formats/gguf.h"
#include "formats/hf_tokenizer.h"
#include "runtime/tok_internal.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/testutil.h"

static const char *const g_vocabs[] = {"gpt-2", "deepseek-coder", "falcon", "starcoder", "llama-spm"};
#define N_VOCABS (sizeof g_vocabs / sizeof g_vocabs[0])

/* ---------------------------------------------------------------- helpers */

static char *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    assert_int_equal(dsq_read_file(path, (size_t)1 << 30, &buf, len), DSQ_OK);
    return buf;
}

static dsq_tokenizer *load_gguf_tok(const char *path)
{
    dsq_gguf *g = NULL;
    dsq_tokenizer *t = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    dsq_status st = dsq_tokenizer_from_gguf(g, &t);
    if (st != DSQ_OK) fprintf(stderr, "%s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    dsq_gguf_close(g);
    return t;
}

static dsq_tokenizer *load_vocab(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", name);
    char *path = dsq_test_shared(rel);
    if (!path) return NULL;
    dsq_tokenizer *t = load_gguf_tok(path);
    free(path);
    return t;
}

static void encode(const dsq_tokenizer *t, const char *s, size_t n, bool add_special, bool parse_special,
                   dsq_tokens *out)
{
    out->n = 0;
    dsq_status st = dsq_tokenizer_encode(t, s, n, add_special, parse_special, out);
    if (st != DSQ_OK) fprintf(stderr, "%s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
}

static void expect_ids(const dsq_tokenizer *t, const char *s, bool add_special, bool parse_special, const int32_t *want,
                       size_t n_want)
{
    dsq_tokens v = {0};
    encode(t, s, strlen(s), add_special, parse_special, &v);
    bool same = v.n == n_want && (n_want == 0 || !memcmp(v.ids, want, n_want * sizeof *want));
    if (!same) {
        fprintf(stderr, "text \"%s\": got", s);
        for (size_t i = 0; i < v.n; i++) fprintf(stderr, " %d", v.ids[i]);
        fprintf(stderr, "\n  want");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    assert_true(same);
    dsq_tokens_free(&v);
}

static char *decode(const dsq_tokenizer *t, const dsq_tokens *v, unsigned flags, size_t *len)
{
    char *s = NULL;
    assert_int_equal(dsq_tokenizer_decode(t, v->ids, v->n, flags, &s, len), DSQ_OK);
    return s;
}

/* The .inp texts, split as llama.cpp's test-tokenizer-0 does. */
static size_t split_inputs(char *buf, size_t len, char **parts, size_t *lens, size_t cap)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t n = 0, pos = 0;
    while (pos <= len && n < cap) {
        char *hit = memmem(buf + pos, len - pos, sep, sizeof sep - 1);
        if (!hit) break; /* the file ends with a separator */
        parts[n] = buf + pos;
        lens[n] = (size_t)(hit - (buf + pos));
        n++;
        pos = (size_t)(hit - buf) + sizeof sep - 1;
    }
    return n;
}

/* Runs one vocab's .inp/.out pair; returns the number of matching lines. */
static size_t run_vectors(const dsq_tokenizer *t, const char *name, size_t *total)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf.inp", name);
    char *inp_path = dsq_test_shared(rel);
    snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf.out", name);
    char *out_path = dsq_test_shared(rel);
    assert_non_null(inp_path);
    assert_non_null(out_path);
    size_t ilen = 0, olen = 0;
    char *inp = slurp(inp_path, &ilen), *outs = slurp(out_path, &olen);
    char *parts[256];
    size_t lens[256];
    size_t n = split_inputs(inp, ilen, parts, lens, 256);
    assert_true(n > 10);
    size_t pass = 0;
    char *line = outs;
    dsq_tokens v = {0};
    for (size_t i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        int32_t want[4096];
        size_t nw = 0;
        for (char *p = line; *p;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p) break;
            want[nw++] = (int32_t)id;
            p = end;
        }
        encode(t, parts[i], lens[i], false, false, &v);
        if (v.n == nw && !memcmp(v.ids, want, nw * sizeof *want)) {
            pass++;
        } else {
            fprintf(stderr, "%s: case %zu \"%.*s\" differs\n  got ", name, i, (int)lens[i], parts[i]);
            for (size_t k = 0; k < v.n; k++) fprintf(stderr, " %d", v.ids[k]);
            fprintf(stderr, "\n  want%s\n", line);
        }
        line = nl + 1;
    }
    dsq_tokens_free(&v);
    free(inp);
    free(outs);
    free(inp_path);
    free(out_path);
    *total = n;
    return pass;
}

/* decode(encode(text)) must give text back byte for byte. */
static void check_round_trip(const dsq_tokenizer *t, const char *name, const char *text, size_t len)
{
    dsq_tokens v = {0};
    double t0 = dsq_now_s();
    encode(t, text, len, false, false, &v);
    double t1 = dsq_now_s();
    size_t dlen = 0;
    char *back = decode(t, &v, 0, &dlen);
    fprintf(stderr, "%s: %zu bytes -> %zu tokens in %.3f s, round trip %s\n", name, len, v.n, t1 - t0,
            dlen == len && !memcmp(back, text, len) ? "exact" : "DIFFERS");
    assert_int_equal(dlen, len);
    assert_memory_equal(back, text, len);
    free(back);
    dsq_tokens_free(&v);
}

/* ---------------------------------------------------------------- llama.cpp vectors */

static void test_vocab_vectors(void **state)
{
    (void)state;
    size_t all_pass = 0, all_total = 0;
    for (size_t k = 0; k < N_VOCABS; k++) {
        dsq_tokenizer *t = load_vocab(g_vocabs[k]);
        if (!t) DSQ_TEST_SKIP();
        size_t total = 0, pass = run_vectors(t, g_vocabs[k], &total);
        fprintf(stderr, "ggml-vocab-%s: %zu/%zu cases match llama.cpp\n", g_vocabs[k], pass, total);
        all_pass += pass;
        all_total += total;
        dsq_tokenizer_free(t);
    }
    fprintf(stderr, "vocab vectors: %zu/%zu\n", all_pass, all_total);
    assert_int_equal(all_pass, all_total);
}

static void test_wiki_round_trip(void **state)
{
    (void)state;
    char *wiki = dsq_test_shared("datasets/wiki.test.raw");
    if (!wiki) DSQ_TEST_SKIP();
    size_t len = 0;
    char *text = slurp(wiki, &len);
    assert_true(len > 1000000);
    for (size_t k = 0; k < N_VOCABS; k++) {
        dsq_tokenizer *t = load_vocab(g_vocabs[k]);
        assert_non_null(t);
        check_round_trip(t, g_vocabs[k], text, len);
        dsq_tokenizer_free(t);
    }
    free(text);
    free(wiki);
}

/* ---------------------------------------------------------------- SmolLM2 */

/* Ids from Hugging Face tokenizers (transformers 5.x reading this GGUF's
 * vocabulary), add_special_tokens=False. */
static void test_smollm2_reference(void **state)
{
    (void)state;
    char *path = dsq_test_default_model();
    if (!path) DSQ_TEST_SKIP();
    dsq_tokenizer *t = load_gguf_tok(path);
    assert_string_equal(dsq_tokenizer_pre(t), "smollm");
    assert_int_equal(dsq_tokenizer_type(t), DSQ_TOK_BPE);
    assert_int_equal(dsq_tokenizer_n_vocab(t), 49152);
    assert_int_equal(dsq_tokenizer_bos(t), 1);
    assert_int_equal(dsq_tokenizer_eos(t), 2);
    assert_false(dsq_tokenizer_add_bos(t));

    static const int32_t a[] = {19556, 905};
    expect_ids(t, "Hello world", false, false, a, 2);
    static const int32_t b[] = {38699, 28, 905, 17, 216, 33, 34, 35, 36, 37, 38};
    expect_ids(t, " Hello, world! 123456", false, false, b, 11);
    static const int32_t c[] = {504, 2365, 6354, 16438, 27003, 690, 260,  23790, 2767,
                                30,  8866, 1218, 6574,  1761,  197, 3659, 10147};
    expect_ids(t, "The quick brown fox jumps over the lazy dog.\n\n  Indented line\twith tab", false, false, c, 17);
    static const int32_t d[] = {39006, 42,    216,   35,  30,   33,    36,  33,    37,    41,    28,    216,
                                34,    32,    34,    36,  29,   33,    33,  29,    35,    32,    43,    649,
                                21658, 271,   15107, 116, 243,  10813, 244, 218,   284,   5549,  137,   94,
                                25972, 83,    7466,  84,  2756, 5664,  239, 17162, 17162, 25723, 11517, 12001,
                                21118, 26112, 17097, 241, 115,  40993, 179, 120,   248};
    expect_ids(t,
               "Numbers: 3.14159, 2024-11-30; emojis \xf0\x9f\xa6\x99\xf0\x9f\x9a\x80 and \xc3\xbcn\xc3\xaf"
               "c\xc3\xb6"
               "d\xc3\xa9 \xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac "
               "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
               false, false, d, sizeof d / sizeof d[0]);
    static const int32_t e[] = {57,   3543, 719,  637, 100,   793, 384, 506, 665, 28,  637,  3256, 346,
                                2090, 47,   1046, 23,  25917, 253, 23,  92,  60,  256, 5600, 333};
    expect_ids(t, "I've been 'told he's there, 'RE you sure? We'Ve a'lL   spaces   ", false, false, e, 25);
    static const int32_t f[] = {446, 6356, 389,  9226, 352,  446,  3717, 6356,  389,   9226, 352,
                                314, 354,  2321, 4771, 3297, 8552, 284,  16984, 17523, 1673};
    expect_ids(t, " = Robert Boulter = \n Robert Boulter is an English film , television and theatre actor .", false,
               false, f, 21);

    /* Control tokens: text only unless parse_special. */
    static const int32_t g_special[] = {1, 4093, 198, 19556, 2};
    expect_ids(t, "<|im_start|>user\nHello<|im_end|>", false, true, g_special, 5);
    dsq_tokens v = {0};
    encode(t, "<|im_start|>user", 16, false, false, &v);
    assert_true(v.n > 2);
    for (size_t i = 0; i < v.n; i++) assert_int_not_equal(v.ids[i], 1);
    /* Decoding: control tokens vanish unless asked for. */
    encode(t, "<|im_start|>user\nHello<|im_end|>", 32, false, true, &v);
    size_t n = 0;
    char *s = decode(t, &v, 0, &n);
    assert_string_equal(s, "user\nHello");
    free(s);
    s = decode(t, &v, DSQ_DECODE_SPECIAL, &n);
    assert_string_equal(s, "<|im_start|>user\nHello<|im_end|>");
    free(s);
    size_t plen = 0;
    assert_string_equal(dsq_tokenizer_piece(t, 19556, false, &plen), "Hello");
    assert_string_equal(dsq_tokenizer_piece(t, 1, false, &plen), "");
    assert_null(dsq_tokenizer_piece(t, 49152, false, &plen));
    assert_int_equal(dsq_tokenizer_find(t, "Hello", 5), 19556);
    size_t tl = 0;
    assert_string_equal(dsq_tokenizer_token_text(t, 38699, &tl), "\xc4\xa0Hello"); /* "ĠHello" */
    /* Out-of-range ids are refused. */
    int32_t bad = 49152;
    char *out = NULL;
    assert_int_equal(dsq_tokenizer_decode(t, &bad, 1, 0, &out, &n), DSQ_ERR_ARG);
    assert_null(out);
    dsq_tokens_free(&v);
    dsq_tokenizer_free(t);
    free(path);
}

/* ---------------------------------------------------------------- pre-tokenizer splits */

static const char g_split_text[] =
    "Hello  WORLD's\n\n  x 12345 'RE you?!\r\n\tTab \xc3\x89"
    "COLE \xc3\xa9"
    "cole "
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a 3.14 "
    "\xe2\x80\xa6"
    "done  \n";

/* Pieces of g_split_text. The first three come from Python's `regex` module
 * running the patterns of the models' tokenizer.json files (what Hugging Face
 * does); gpt-4o is llama.cpp's adapted pattern, which cuts " \xc3\x89COLE"
 * after its first letter where the original pattern does not. */
static const struct {
    const char *pre;
    const char *pieces[40];
} g_split_cases[] = {
    {"llama-bpe",
     {"Hello",
      " ",
      " WORLD",
      "'s",
      "\n\n",
      " ",
      " x",
      " ",
      "123",
      "45",
      " '",
      "RE",
      " you",
      "?!\r\n",
      "\tTab",
      " \xc3\x89"
      "COLE",
      " \xc3\xa9"
      "cole",
      " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
      " ",
      "3",
      ".",
      "14",
      " \xe2\x80\xa6",
      "done",
      "  \n",
      NULL}},
    {"qwen2",
     {"Hello",
      " ",
      " WORLD",
      "'s",
      "\n\n",
      " ",
      " x",
      " ",
      "1",
      "2",
      "3",
      "4",
      "5",
      " '",
      "RE",
      " you",
      "?!\r\n",
      "\tTab",
      " \xc3\x89"
      "COLE",
      " \xc3\xa9"
      "cole",
      " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
      " ",
      "3",
      ".",
      "1",
      "4",
      " \xe2\x80\xa6",
      "done",
      "  \n",
      NULL}},
    {"deepseek-v3",
     {"Hello",
      " ",
      " WORLD",
      "'s",
      "\n\n",
      " ",
      " x",
      " ",
      "123",
      "45",
      " '",
      "RE",
      " you",
      "?!\r\n",
      "\tTab",
      " \xc3\x89"
      "COLE",
      " \xc3\xa9"
      "cole",
      " ",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
      " ",
      "3",
      ".",
      "14",
      " \xe2\x80\xa6",
      "done",
      "  \n",
      NULL}},
    {"gpt-4o",
     {"Hello",
      " ",
      " WORLD's",
      "\n\n",
      " ",
      " x",
      " ",
      "123",
      "45",
      " '",
      "RE",
      " you",
      "?!\r\n",
      "\tTab",
      " \xc3\x89",
      "COLE",
      " \xc3\xa9"
      "cole",
      " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
      " ",
      "3",
      ".",
      "14",
      " \xe2\x80\xa6",
      "done",
      "  \n",
      NULL}},
};

static void split_with(const char *pre, dsq_tok_spans *sp)
{
    const dsq_tok_pre_def *d = dsq_tok_pre_find(pre);
    assert_non_null(d);
    dsq_tok_step steps[8];
    size_t n = 0;
    for (; d->regexes[n]; n++) {
        assert_true(n < 8);
        assert_int_equal(dsq_tok_step_compile(&steps[n], d->regexes[n], strlen(d->regexes[n]), DSQ_RE_LLAMA, pre),
                         DSQ_OK);
    }
    sp->n = 0;
    assert_int_equal(dsq_tok_spans_push(sp, 0, sizeof g_split_text - 1), DSQ_OK);
    assert_int_equal(dsq_tok_pretokenize(steps, n, g_split_text, sp), DSQ_OK);
    for (size_t i = 0; i < n; i++) dsq_tok_step_free(&steps[i]);
}

static void test_pretok_splits(void **state)
{
    (void)state;
    dsq_tok_spans sp = {0};
    for (size_t k = 0; k < sizeof g_split_cases / sizeof g_split_cases[0]; k++) {
        split_with(g_split_cases[k].pre, &sp);
        size_t n = 0;
        while (g_split_cases[k].pieces[n]) n++;
        bool same = sp.n == n;
        for (size_t i = 0; same && i < n; i++) {
            const char *want = g_split_cases[k].pieces[i];
            same = sp.v[i].end - sp.v[i].start == strlen(want) &&
                   !memcmp(g_split_text + sp.v[i].start, want, strlen(want));
        }
        if (!same) {
            fprintf(stderr, "%s:", g_split_cases[k].pre);
            for (size_t i = 0; i < sp.n; i++)
                fprintf(stderr, " [%.*s]", (int)(sp.v[i].end - sp.v[i].start), g_split_text + sp.v[i].start);
            fprintf(stderr, "\n");
        }
        assert_true(same);
    }
    /* Every name in the table compiles and cuts the text into pieces that
     * cover it in order (pieces never overlap). */
    static const char *const names[] = {
        "default", "llama3", "dbrx",      "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",    "starcoder",
        "smollm",  "gpt-2",  "trillion",  "qwen2",        "stablelm2",      "poro-chat",   "bloom",     "glm4",
        "viking",  "tekken", "chameleon", "llama4",       "superbpe",       "bailingmoe",  "seed-coder"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        split_with(names[k], &sp);
        assert_true(sp.n > 5);
        for (size_t i = 1; i < sp.n; i++) assert_true(sp.v[i].start >= sp.v[i - 1].end);
    }
    assert_null(dsq_tok_pre_find("no-such-pre"));
    dsq_tok_spans_free(&sp);
}

/* ---------------------------------------------------------------- tokenizer.json */

/* Writes tokenizer.json (and friends) from a GGUF with formats/hf_tokenizer.c,
 * loads it with dsq_tokenizer_from_hf_dir and checks it against the GGUF
 * tokenizer on the given texts. */
static void compare_hf_export(const char *gguf_path, const char *name, char **texts, size_t *lens, size_t n)
{
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(gguf_path, &g), DSQ_OK);
    dsq_tokenizer *tg = NULL;
    assert_int_equal(dsq_tokenizer_from_gguf(g, &tg), DSQ_OK);
    char *dir = dsq_test_mkdtemp();
    dsq_status st = dsq_tokenizer_gguf_to_hf(g, dir);
    if (st != DSQ_OK) fprintf(stderr, "%s: export: %s\n", name, dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    dsq_tokenizer *th = NULL;
    st = dsq_tokenizer_from_hf_dir(dir, &th);
    if (st != DSQ_OK) fprintf(stderr, "%s: load: %s\n", name, dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    assert_string_equal(dsq_tokenizer_pre(th), "hf");
    assert_int_equal(dsq_tokenizer_n_vocab(th), dsq_tokenizer_n_vocab(tg));
    size_t pass = 0;
    dsq_tokens a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        encode(tg, texts[i], lens[i], false, false, &a);
        encode(th, texts[i], lens[i], false, false, &b);
        if (a.n == b.n && !memcmp(a.ids, b.ids, a.n * sizeof *a.ids))
            pass++;
        else
            fprintf(stderr, "%s via tokenizer.json: case %zu \"%.*s\" differs\n", name, i,
                    (int)(lens[i] > 80 ? 80 : lens[i]), texts[i]);
    }
    fprintf(stderr, "%s: tokenizer.json path %zu/%zu match the GGUF path\n", name, pass, n);
    assert_int_equal(pass, n);
    dsq_tokens_free(&a);
    dsq_tokens_free(&b);
    dsq_tokenizer_free(th);
    dsq_tokenizer_free(tg);
    dsq_gguf_close(g);
    dsq_test_rmtmp(dir);
}

static void test_hf_json_from_gguf(void **state)
{
    (void)state;
    char *inp_path = dsq_test_shared("tokenizer/ggml-vocab-gpt-2.gguf.inp");
    char *wiki = dsq_test_shared("datasets/wiki.test.raw");
    if (!inp_path || !wiki) DSQ_TEST_SKIP();
    size_t ilen = 0, wlen = 0;
    char *inp = slurp(inp_path, &ilen), *wtext = slurp(wiki, &wlen);
    char *texts[260];
    size_t lens[260];
    size_t n = split_inputs(inp, ilen, texts, lens, 256);
    texts[n] = wtext; /* the first 300 kB of WikiText as one more case */
    lens[n++] = wlen < 300000 ? wlen : 300000;
    /* Byte-level vocabularies (the SPM one merges by score, which
     * tokenizer.json's BPE model cannot express exactly). */
    for (size_t k = 0; k < N_VOCABS - 1; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", g_vocabs[k]);
        char *p = dsq_test_shared(rel);
        assert_non_null(p);
        compare_hf_export(p, g_vocabs[k], texts, lens, n);
        free(p);
    }
    char *model = dsq_test_default_model();
    if (model) compare_hf_export(model, "SmolLM2", texts, lens, n);
    free(model);
    free(inp);
    free(wtext);
    free(inp_path);
    free(wiki);
}

/* A SentencePiece-style tokenizer.json (Llama-2 layout) written by hand. */
static const char g_spm_json[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true},"
    "{\"id\":11,\"content\":\"<tag>\",\"special\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
    "{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0x21>\":4,\"\xe2\x96\x81\":5,\"h\":6,\"i\":7,"
    "\"\xe2\x96\x81h\":8,\"\xe2\x96\x81hi\":9,\"hi\":10},"
    "\"merges\":[\"\xe2\x96\x81 h\",[\"\xe2\x96\x81h\",\"i\"],\"h i\"]}}";

static void test_hf_json_handmade(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    free(dsq_test_write(dir, "tokenizer.json", g_spm_json, sizeof g_spm_json - 1));
    dsq_tokenizer *t = NULL;
    dsq_status st = dsq_tokenizer_from_hf_dir(dir, &t);
    if (st != DSQ_OK) fprintf(stderr, "%s\n", dsq_errmsg());
    assert_int_equal(st, DSQ_OK);
    assert_int_equal(dsq_tokenizer_n_vocab(t), 12);
    assert_int_equal(dsq_tokenizer_bos(t), 1);
    assert_true(dsq_tokenizer_add_bos(t)); /* from the TemplateProcessing */
    assert_false(dsq_tokenizer_add_eos(t));
    assert_int_equal(dsq_tokenizer_token_attr(t, 4), DSQ_TOKATTR_BYTE);
    assert_int_equal(dsq_tokenizer_token_attr(t, 11), DSQ_TOKATTR_USER_DEFINED);

    /* "▁h" (rank 0) twice, leftmost first, then "▁hi"; "\n" and "!" by byte fallback. */
    static const int32_t a[] = {1, 9, 9, 3, 4};
    expect_ids(t, "hi hi\n!", true, false, a, 5);
    dsq_tokens v = {0};
    encode(t, "hi hi\n!", 7, false, false, &v);
    size_t n = 0;
    char *s = decode(t, &v, 0, &n);
    assert_string_equal(s, "hi hi\n!"); /* the prepended space is stripped again */
    free(s);
    /* No byte token for 'x': the unknown token. */
    static const int32_t b[] = {5, 0};
    expect_ids(t, "x", false, false, b, 2);
    /* User-defined tokens always split; each side is normalised on its own. */
    static const int32_t c[] = {9, 11, 9};
    expect_ids(t, "hi<tag>hi", false, false, c, 3);
    /* Control tokens only with parse_special. */
    static const int32_t d[] = {9, 2};
    expect_ids(t, "hi</s>", false, true, d, 2);
    encode(t, "hi</s>", 6, false, false, &v);
    assert_int_not_equal(v.ids[v.n - 1], 2);
    dsq_tokens_free(&v);
    dsq_tokenizer_free(t);

    /* tokenizer_config.json overrides the template. */
    static const char cfg[] = "{\"add_bos_token\":false,\"add_eos_token\":true,\"bos_token\":\"<s>\","
                              "\"eos_token\":{\"content\":\"</s>\"}}";
    free(dsq_test_write(dir, "tokenizer_config.json", cfg, sizeof cfg - 1));
    assert_int_equal(dsq_tokenizer_from_hf_dir(dir, &t), DSQ_OK);
    assert_false(dsq_tokenizer_add_bos(t));
    assert_true(dsq_tokenizer_add_eos(t));
    static const int32_t e[] = {9, 2};
    expect_ids(t, "hi", true, false, e, 2);
    dsq_tokenizer_free(t);
    dsq_test_rmtmp(dir);
}

/* Split behaviours and the ByteLevel / Digits / Metaspace steps, through a
 * tiny byte-level vocabulary where every piece is a known token. */
static void test_hf_split_behaviors(void **state)
{
    (void)state;
    static const char head[] =
        "{\"added_tokens\":[],\"normalizer\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"-\":2,\"1\":3,\"2\":4,\"a-\":5,\"-b\":6,\"12\":7,"
        "\"\xc4\xa0\":8,\"\xc4\xa0"
        "a\":9,\"--\":10},"
        "\"merges\":[\"a -\",\"- b\",\"1 2\",\"\xc4\xa0 a\",\"- -\"]},\"pre_tokenizer\":";
    static const struct {
        const char *pre, *text;
        int32_t ids[8];
        size_t n;
    } cases[] = {
        /* Isolated on "-": no merge can cross it. */
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
         "\"use_regex\":false}]}",
         "a-b",
         {0, 2, 1},
         3},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
         "\"behavior\":\"MergedWithPrevious\"},{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]"
         "}",
         "a-b",
         {5, 1},
         2},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
         "\"behavior\":\"MergedWithNext\"},{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]}",
         "a-b",
         {0, 6},
         2},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"-\"},"
         "\"behavior\":\"Removed\"},{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]}",
         "a-b",
         {0, 1},
         2},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
         "\"behavior\":\"Contiguous\"},{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]}",
         "a--b",
         {0, 10, 1},
         3},
        /* invert: the matches are the pieces kept apart from their gaps. */
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[ab]\"},"
         "\"behavior\":\"Removed\",\"invert\":true},{\"type\":\"ByteLevel\",\"use_regex\":false,"
         "\"add_prefix_space\":false}]}",
         "a-b",
         {0, 1},
         2},
        /* Digits split digit runs off (individually or not). */
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
         "{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]}",
         "12",
         {3, 4},
         2},
        {"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":false},"
         "{\"type\":\"ByteLevel\",\"use_regex\":false,\"add_prefix_space\":false}]}",
         "12",
         {7},
         1},
        /* ByteLevel's prefix space, then GPT-2's regex (" a" stays one word). */
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", "a", {9}, 1},
        {"{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", " a-", {9, 2}, 2},
    };
    char *dir = dsq_test_mkdtemp();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[2048];
        int len = snprintf(json, sizeof json, "%s%s}", head, cases[i].pre);
        assert_true(len > 0 && (size_t)len < sizeof json);
        free(dsq_test_write(dir, "tokenizer.json", json, (size_t)len));
        dsq_tokenizer *t = NULL;
        dsq_status st = dsq_tokenizer_from_hf_dir(dir, &t);
        if (st != DSQ_OK) fprintf(stderr, "case %zu: %s\n", i, dsq_errmsg());
        assert_int_equal(st, DSQ_OK);
        expect_ids(t, cases[i].text, false, false, cases[i].ids, cases[i].n);
        dsq_tokenizer_free(t);
    }
    dsq_test_rmtmp(dir);
}

static void expect_hf_refusal(const char *dir, const char *json, dsq_status want, const char *field)
{
    free(dsq_test_write(dir, "tokenizer.json", json, strlen(json)));
    dsq_tokenizer *t = NULL;
    assert_int_equal(dsq_tokenizer_from_hf_dir(dir, &t), want);
    assert_null(t);
    if (!strstr(dsq_errmsg(), field)) fprintf(stderr, "message \"%s\" lacks \"%s\"\n", dsq_errmsg(), field);
    assert_non_null(strstr(dsq_errmsg(), field));
}

static void test_hf_refusals(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    dsq_tokenizer *t = NULL;
    assert_int_equal(dsq_tokenizer_from_hf_dir(dir, &t), DSQ_ERR_NOT_FOUND);
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", DSQ_ERR_UNSUPPORTED,
                      "model.type");
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}", DSQ_ERR_UNSUPPORTED,
                      "model.type");
    static const char base[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},";
    char buf[512];
    snprintf(buf, sizeof buf, "%s\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}}", base);
    expect_hf_refusal(dir, buf, DSQ_ERR_UNSUPPORTED, "pre_tokenizer.type");
    snprintf(buf, sizeof buf, "%s\"normalizer\":{\"type\":\"Lowercase\"}}", base);
    expect_hf_refusal(dir, buf, DSQ_ERR_UNSUPPORTED, "normalizer.type");
    snprintf(buf, sizeof buf, "%s\"decoder\":{\"type\":\"WordPiece\"}}", base);
    expect_hf_refusal(dir, buf, DSQ_ERR_UNSUPPORTED, "decoder.type");
    snprintf(buf, sizeof buf,
             "%s\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
             "\"behavior\":\"Isolated\"}}",
             base);
    expect_hf_refusal(dir, buf, DSQ_ERR_FORMAT, "does not compile");
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", DSQ_ERR_FORMAT,
                      "model.vocab");
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", DSQ_ERR_FORMAT,
                      "model.vocab");
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", DSQ_ERR_FORMAT,
                      "model.merges");
    expect_hf_refusal(dir, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":400000000},\"merges\":[]}}", DSQ_ERR_FORMAT,
                      "ids up to");
    expect_hf_refusal(dir, "[1,2", DSQ_ERR_FORMAT, "JSON");
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- GGUF refusals and edge cases */

static char *write_tok_gguf(const char *dir, const char *name, const char *model, const char *pre, bool merges)
{
    static const char *const toks[] = {"a", "b", "ab", "\xc4\xa0"};
    static const char *const mrg[] = {"a b"};
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    if (model) assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.model", model), DSQ_OK);
    if (pre) assert_int_equal(dsq_gguf_set_str(w, "tokenizer.ggml.pre", pre), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, 4), DSQ_OK);
    if (merges) assert_int_equal(dsq_gguf_set_str_arr(w, "tokenizer.ggml.merges", mrg, NULL, 1), DSQ_OK);
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    return path;
}

static void expect_gguf(const char *path, dsq_status want, const char *field)
{
    dsq_tokenizer *t = NULL;
    dsq_status st = dsq_tokenizer_load(path, &t);
    assert_int_equal(st, want);
    if (want != DSQ_OK) {
        assert_null(t);
        if (!strstr(dsq_errmsg(), field)) fprintf(stderr, "message \"%s\" lacks \"%s\"\n", dsq_errmsg(), field);
        assert_non_null(strstr(dsq_errmsg(), field));
    }
    dsq_tokenizer_free(t);
}

static void test_gguf_refusals(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *p = write_tok_gguf(dir, "bert.gguf", "bert", NULL, true);
    expect_gguf(p, DSQ_ERR_UNSUPPORTED, "tokenizer.ggml.model");
    free(p);
    p = write_tok_gguf(dir, "pre.gguf", "gpt2", "no-such-pre", true);
    expect_gguf(p, DSQ_ERR_UNSUPPORTED, "tokenizer.ggml.pre");
    free(p);
    p = write_tok_gguf(dir, "nomerges.gguf", "gpt2", "gpt-2", false);
    expect_gguf(p, DSQ_ERR_NOT_FOUND, "tokenizer.ggml.merges");
    free(p);
    p = write_tok_gguf(dir, "nomodel.gguf", NULL, NULL, true);
    expect_gguf(p, DSQ_ERR_NOT_FOUND, "tokenizer.ggml.model");
    free(p);
    /* A working minimal one: "ab" merges; "ba" does not. */
    p = write_tok_gguf(dir, "ok.gguf", "gpt2", "gpt-2", true);
    dsq_tokenizer *t = NULL;
    assert_int_equal(dsq_tokenizer_load(p, &t), DSQ_OK);
    static const int32_t a[] = {2, 1, 0};
    expect_ids(t, "abba", false, false, a, 3);
    /* Bytes with no token are dropped, as llama.cpp does. */
    static const int32_t b[] = {2, 3, 3};
    expect_ids(t, "ab zz ", false, false, b, 3);
    dsq_tokenizer_free(t);
    free(p);
    dsq_test_rmtmp(dir);
}

/* Invalid UTF-8: byte-level BPE reads it as U+FFFD (llama.cpp's
 * unicode_cpts_from_utf8); SPM keeps the bytes through byte fallback. */
static void test_invalid_utf8(void **state)
{
    (void)state;
    dsq_tokenizer *gpt2 = load_vocab("gpt-2");
    if (!gpt2) DSQ_TEST_SKIP();
    static const char bad[] = "ab\xff\xc3(\xed\xa0\x80z\xf4\x90\x80\x80 \xe2\x82";
    static const char fixed[] = "ab\xef\xbf\xbd\xef\xbf\xbd(\xed\xa0\x80z\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd";
    dsq_tokens a = {0}, b = {0};
    encode(gpt2, bad, sizeof bad - 1, false, false, &a);
    encode(gpt2, fixed, sizeof fixed - 1, false, false, &b);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
    size_t n = 0;
    char *s = decode(gpt2, &a, 0, &n);
    assert_int_equal(n, sizeof fixed - 1);
    assert_memory_equal(s, fixed, n);
    free(s);
    dsq_tokenizer_free(gpt2);

    dsq_tokenizer *spm = load_vocab("llama-spm");
    assert_non_null(spm);
    check_round_trip(spm, "llama-spm invalid UTF-8", bad, sizeof bad - 1);
    /* add_special puts BOS first for this vocab. */
    encode(spm, "Hello", 5, true, false, &a);
    assert_true(a.n >= 2);
    assert_int_equal(a.ids[0], 1);
    s = decode(spm, &a, DSQ_DECODE_REMOVE_SPECIAL, &n);
    assert_string_equal(s, " Hello"); /* llama.cpp keeps the space once BOS is removed */
    free(s);
    dsq_tokens_free(&a);
    dsq_tokens_free(&b);
    dsq_tokenizer_free(spm);
}

/* Random bytes through every vocabulary: never a failure. SPM gives every
 * byte back when no lead byte can swallow an escaped space (llama.cpp cuts
 * characters by their lead byte after the space became U+2581). */
static void test_random_bytes(void **state)
{
    (void)state;
    uint64_t seed = 12345;
    for (size_t k = 0; k < N_VOCABS; k++) {
        dsq_tokenizer *t = load_vocab(g_vocabs[k]);
        if (!t) DSQ_TEST_SKIP();
        for (int round = 0; round < 40; round++) {
            bool lone = round % 2 == 0; /* high bytes only 0x80..0xBF */
            char buf[600];
            size_t n = dsq_test_rand(&seed) % sizeof buf;
            for (size_t i = 0; i < n; i++) {
                uint64_t r = dsq_test_rand(&seed);
                unsigned hi = (unsigned)(r >> 8) & 0xFF;
                if (lone) hi = 0x80 | (hi & 0x3F);
                buf[i] = (char)(r % 4 == 0 ? hi : r % 4 == 1 ? ' ' : 'a' + (r >> 8) % 26);
            }
            dsq_tokens v = {0};
            bool add = round % 4 < 2;
            encode(t, buf, n, add, round % 3 == 0, &v);
            size_t dn = 0;
            char *back = decode(t, &v, DSQ_DECODE_REMOVE_SPECIAL, &dn);
            if (dsq_tokenizer_type(t) == DSQ_TOK_SPM && lone) {
                /* The leading space stays when BOS was removed (llama.cpp). */
                size_t off = add && n > 0 ? 1 : 0;
                assert_int_equal(dn, n + off);
                assert_memory_equal(back + off, buf, n);
            }
            free(back);
            dsq_tokens_free(&v);
        }
        dsq_tokenizer_free(t);
    }
}

/* The empty text, text of only special tokens, and many threads sharing one tokenizer. */
static void test_edges_and_threads(void **state)
{
    (void)state;
    dsq_tokenizer *t = load_vocab("gpt-2");
    if (!t) DSQ_TEST_SKIP();
    dsq_tokens v = {0};
    encode(t, "", 0, false, false, &v);
    assert_int_equal(v.n, 0);
    encode(t, "<|endoftext|><|endoftext|>", 26, false, true, &v);
    assert_int_equal(v.n, 2);
    assert_int_equal(v.ids[0], 50256);
    assert_int_equal(v.ids[1], 50256);
    /* Appending: encode adds after what is there. */
    v.n = 0;
    assert_int_equal(dsq_tokenizer_encode(t, "Hello", 5, false, false, &v), DSQ_OK);
    assert_int_equal(dsq_tokenizer_encode(t, " world", 6, false, false, &v), DSQ_OK);
    static const int32_t want[] = {15496, 995};
    assert_int_equal(v.n, 2);
    assert_memory_equal(v.ids, want, sizeof want);
    /* A long run of one character (one pre-tokenizer word). */
    size_t big = 200000;
    char *run = malloc(big);
    memset(run, 'a', big);
    encode(t, run, big, false, false, &v);
    assert_true(v.n > 0 && v.n < big);
    size_t n = 0;
    char *s = decode(t, &v, 0, &n);
    assert_int_equal(n, big);
    assert_memory_equal(s, run, big);
    free(s);
    free(run);
    int fails = 0;
#pragma omp parallel for reduction(+ : fails)
    for (int i = 0; i < 8; i++) {
        dsq_tokens w = {0};
        if (dsq_tokenizer_encode(t, "Hello world", 11, false, false, &w) != DSQ_OK || w.n != 2 || w.ids[0] != 15496 ||
            w.ids[1] != 995)
            fails++;
        dsq_tokens_free(&w);
    }
    assert_int_equal(fails, 0);
    dsq_tokens_free(&v);
    dsq_tokenizer_free(t);
}

/* ---------------------------------------------------------------- CLI */

static void test_cli(void **state)
{
    (void)state;
    char *vocab = dsq_test_shared("tokenizer/ggml-vocab-gpt-2.gguf");
    if (!vocab) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp();
    char cmd[8192], err[1024];
    snprintf(cmd, sizeof cmd, "%s tokenize %s --text 'Hello world|| Hello, world!' --sep '||' > %s/out.txt", DSQ_BINARY,
             vocab, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    size_t len = 0;
    char *out = slurp(path, &len);
    assert_string_equal(out, "15496 995\n18435 11 995 0\n");
    free(out);
    /* --json */
    snprintf(cmd, sizeof cmd, "%s tokenize %s --text 'Hello world' --json > %s/out.txt", DSQ_BINARY, vocab, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    out = slurp(path, &len);
    assert_string_equal(out, "[15496,995]\n");
    free(out);
    /* --decode, from a file of ids */
    free(dsq_test_write(dir, "ids.txt", "15496 995\n18435 11 995 0\n", 25));
    snprintf(cmd, sizeof cmd, "%s tokenize %s --decode --file %s/ids.txt > %s/out.txt", DSQ_BINARY, vocab, dir, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    out = slurp(path, &len);
    assert_string_equal(out, "Hello world\n Hello, world!\n");
    free(out);
    /* --parse-special */
    snprintf(cmd, sizeof cmd, "%s tokenize %s --text '<|endoftext|>' --parse-special > %s/out.txt", DSQ_BINARY, vocab,
             dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    out = slurp(path, &len);
    assert_string_equal(out, "50256\n");
    free(out);
    /* Bad id and usage errors. */
    snprintf(cmd, sizeof cmd, "echo 99999999 | %s tokenize %s --decode > /dev/null", DSQ_BINARY, vocab);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "outside the vocabulary"));
    snprintf(cmd, sizeof cmd, "%s tokenize %s --text a --file b > /dev/null", DSQ_BINARY, vocab);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    dsq_test_rmtmp(dir);
    free(vocab);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_vectors),
        cmocka_unit_test(test_wiki_round_trip),
        cmocka_unit_test(test_smollm2_reference),
        cmocka_unit_test(test_pretok_splits),
        cmocka_unit_test(test_hf_json_from_gguf),
        cmocka_unit_test(test_hf_json_handmade),
        cmocka_unit_test(test_hf_split_behaviors),
        cmocka_unit_test(test_hf_refusals),
        cmocka_unit_test(test_gguf_refusals),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_edges_and_threads),
        cmocka_unit_test(test_cli),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
