/* config.json -> architecture: the parser, the validation every command
 * runs, and the way back out. An architecture that parses and validates
 * must serialise to config.json and to GGUF metadata, and both must read
 * back and validate again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "tests/fuzz/fuzz.h"

static void gguf_round_trip(const dsq_arch *a)
{
    dsq_gguf_writer *w = NULL;
    if (!dsq_fz_ok(dsq_gguf_writer_new(&w), "writer_new")) return;
    const char *path = dsq_fz_put(1, "meta.gguf", "", 0);
    bool wrote = dsq_fz_ok(dsq_arch_to_gguf(a, w), "dsq_arch_to_gguf");
    /* Qwen2 GGUFs carry no vocab_size: the token list's length gives it. */
    if (wrote && a->family == DSQ_ARCH_QWEN2) {
        if (a->vocab_size > (1 << 16)) {
            dsq_gguf_writer_free(w);
            return;
        }
        const char **toks = malloc((size_t)a->vocab_size * sizeof *toks);
        char(*text)[24] = malloc((size_t)a->vocab_size * sizeof *text);
        for (int64_t i = 0; i < a->vocab_size; i++) {
            snprintf(text[i], sizeof text[i], "t%lld", (long long)i);
            toks[i] = text[i];
        }
        wrote = dsq_fz_ok(dsq_gguf_set_str_arr(w, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)a->vocab_size),
                          "tokens");
        free(toks);
        free(text);
    }
    if (wrote) wrote = dsq_fz_ok(dsq_gguf_writer_begin(w, path, true), "begin") &&
                       dsq_fz_ok(dsq_gguf_writer_finish(w), "finish");
    dsq_gguf_writer_free(w);
    if (!wrote) return;
    dsq_gguf *g = NULL;
    if (!dsq_fz_ok(dsq_gguf_open(path, &g), "reopen")) dsq_fz_die("our own GGUF metadata does not open");
    dsq_arch b;
    if (!dsq_fz_ok(dsq_arch_from_gguf(g, &b), "dsq_arch_from_gguf"))
        dsq_fz_die("a validated architecture does not read back from GGUF: %s", dsq_errmsg());
    if (!dsq_fz_ok(dsq_arch_validate(&b, "gguf"), "validate"))
        dsq_fz_die("the architecture read back from GGUF does not validate: %s", dsq_errmsg());
    if (b.hidden_size != a->hidden_size || b.n_layers != a->n_layers || b.n_heads != a->n_heads ||
        b.n_kv_heads != a->n_kv_heads || b.family != a->family)
        dsq_fz_die("GGUF changed the architecture's sizes");
    dsq_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    dsq_arch a;
    if (dsq_fz_ok(dsq_arch_from_hf_json(text, "config.json", &a), "dsq_arch_from_hf_json") &&
        dsq_fz_ok(dsq_arch_validate(&a, "config.json"), "dsq_arch_validate")) {
        char *out = NULL;
        if (!dsq_fz_ok(dsq_arch_to_hf_json(&a, &out), "dsq_arch_to_hf_json")) dsq_fz_die("no config.json back");
        dsq_arch b;
        if (!dsq_fz_ok(dsq_arch_from_hf_json(out, "written", &b), "reparse"))
            dsq_fz_die("our own config.json does not parse: %s", dsq_errmsg());
        if (b.hidden_size != a.hidden_size || b.n_layers != a.n_layers || b.vocab_size != a.vocab_size)
            dsq_fz_die("config.json changed the architecture's sizes");
        free(out);
        gguf_round_trip(&a);
    }
    free(text);
    return 0;
}
