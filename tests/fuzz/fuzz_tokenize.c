/* Arbitrary bytes through every tokenizer kind: byte-level BPE under each
 * llama.cpp pre-tokenizer, SentencePiece-style BPE, and a Hugging Face
 * tokenizer.json with its own pre-tokenizer. The vocabularies are small and
 * synthetic (tests/fuzz/fuzz_util.c), built once.
 *
 * Input: byte 0 picks the tokenizer, byte 1 the flags (bit 0 add_special,
 * bit 1 parse_special, bits 2-4 decode flags), the rest is the text. Every
 * id must lie in the vocabulary; byte-level BPE must give back valid UTF-8
 * text exactly (no specials parsed, no decode flags). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/utf8.h"
#include "formats/gguf.h"
#include "formats/hf_tokenizer.h"
#include "runtime/tokenizer.h"
#include "tests/fuzz/fuzz.h"

/* One name per row of runtime/tok_pretok.c's table. */
static const char *const g_pre[] = {
    "default",  "llama-bpe", "dbrx",       "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
    "starcoder", "smollm",   "gpt-2",      "trillion",     "qwen2",          "stablelm2",   "poro-chat",
    "bloom",    "chatglm-bpe", "viking",   "tekken",       "chameleon",      "gpt-4o",      "superbpe",
    "bailingmoe", "seed-coder",
};
#define N_PRE (sizeof g_pre / sizeof g_pre[0])

static dsq_tokenizer *g_tok[N_PRE + 2];
static bool g_lossless[N_PRE + 2];
static int g_n;

static dsq_tokenizer *load(const char *path)
{
    dsq_gguf *g = NULL;
    dsq_tokenizer *t = NULL;
    if (dsq_gguf_open(path, &g) != DSQ_OK || dsq_tokenizer_from_gguf(g, &t) != DSQ_OK) {
        fprintf(stderr, "dsq-fuzz: cannot build tokenizer %s: %s\n", path, dsq_errmsg());
        exit(2);
    }
    dsq_gguf_close(g);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    dsq_fz_quiet();
    char name[64];
    for (size_t i = 0; i < N_PRE; i++) {
        snprintf(name, sizeof name, "bpe-%zu.gguf", i);
        const char *p = dsq_fz_put(0, name, "", 0);
        if (dsq_fz_tiny_gguf(p, "gpt2", g_pre[i], false) != DSQ_OK) {
            fprintf(stderr, "dsq-fuzz: %s\n", dsq_errmsg());
            exit(2);
        }
        g_lossless[g_n] = true;
        g_tok[g_n++] = load(p);
    }
    const char *p = dsq_fz_put(0, "spm.gguf", "", 0);
    if (dsq_fz_tiny_gguf(p, "llama", NULL, false) != DSQ_OK) exit(2);
    g_tok[g_n++] = load(p);
    /* The same SentencePiece vocabulary through tokenizer.json (Metaspace,
     * byte fallback), written by our exporter. */
    dsq_gguf *g = NULL;
    if (dsq_gguf_open(p, &g) != DSQ_OK) exit(2);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/hf", dsq_fz_dir());
    mkdir(dir, 0700);
    if (dsq_tokenizer_gguf_to_hf(g, dir) != DSQ_OK || dsq_tokenizer_from_hf_dir(dir, &g_tok[g_n]) != DSQ_OK) {
        fprintf(stderr, "dsq-fuzz: cannot build the tokenizer.json tokenizer: %s\n", dsq_errmsg());
        exit(2);
    }
    g_n++;
    dsq_gguf_close(g);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    int k = data[0] % g_n;
    unsigned flags = data[1];
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    const dsq_tokenizer *t = g_tok[k];
    dsq_tokens ids = {0};
    if (!dsq_fz_ok(dsq_tokenizer_encode(t, text, len, flags & 1, flags & 2, &ids), "encode")) return 0;
    uint32_t nv = dsq_tokenizer_n_vocab(t);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || (uint32_t)ids.ids[i] >= nv) dsq_fz_die("id %d outside a vocabulary of %u", ids.ids[i], nv);
    unsigned dflags = (flags >> 2) & 7;
    char *out = NULL;
    size_t n = 0;
    if (!dsq_fz_ok(dsq_tokenizer_decode(t, ids.ids, ids.n, dflags, &out, &n), "decode"))
        dsq_fz_die("decode refused its own ids: %s", dsq_errmsg());
    if (out[n] != 0) dsq_fz_die("decode's text is not NUL-terminated");
    if (g_lossless[k] && !(flags & 3) && !dflags && dsq_utf8_valid(text, len) && !memchr(text, 0, len) &&
        (n != len || memcmp(out, text, len)))
        dsq_fz_die("byte-level BPE (%s) did not give back its text", g_pre[k]);
    free(out);
    dsq_tokens_free(&ids);
    return 0;
}
