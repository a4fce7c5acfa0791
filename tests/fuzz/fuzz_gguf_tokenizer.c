/* GGUF tokenizer metadata -> tokenizer, and on to a Hugging Face folder:
 * the tokenizer built from tokenizer.* keys encodes and decodes a fixed
 * text; the exporter writes tokenizer.json and its configs from the same
 * keys, and a folder it writes must load again. Seeds are vocab-only GGUFs
 * of each tokenizer kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "formats/hf_tokenizer.h"
#include "runtime/tokenizer.h"
#include "tests/fuzz/fuzz.h"

static void exercise(const dsq_tokenizer *tok)
{
    static const char text[] = "The theory of 123 things <|im_end|> \xe4\xb8\xad\xe6\x96\x87 don't\n\n  x";
    dsq_tokens ids = {0};
    if (dsq_fz_ok(dsq_tokenizer_encode(tok, text, sizeof text - 1, true, true, &ids), "encode")) {
        char *out = NULL;
        size_t n = 0;
        if (!dsq_fz_ok(dsq_tokenizer_decode(tok, ids.ids, ids.n, DSQ_DECODE_SPECIAL, &out, &n), "decode"))
            dsq_fz_die("decode refused its own ids");
        free(out);
    }
    dsq_tokens_free(&ids);
    for (int32_t id = -1; id < 4; id++) {
        size_t len;
        dsq_tokenizer_piece(tok, id, true, &len);
        dsq_tokenizer_token_text(tok, id, &len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_fz_clear();
    const char *path = dsq_fz_put(0, "tok.gguf", data, size);
    dsq_gguf *g = NULL;
    if (!dsq_fz_ok(dsq_gguf_open(path, &g), "dsq_gguf_open")) return 0;
    dsq_tokenizer *tok = NULL;
    if (dsq_fz_ok(dsq_tokenizer_from_gguf(g, &tok), "dsq_tokenizer_from_gguf")) {
        exercise(tok);
        dsq_tokenizer_free(tok);
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/hf", dsq_fz_dir());
    mkdir(dir, 0700);
    if (dsq_fz_ok(dsq_tokenizer_gguf_to_hf(g, dir), "dsq_tokenizer_gguf_to_hf")) {
        if (dsq_fz_ok(dsq_tokenizer_from_hf_dir(dir, &tok), "dsq_tokenizer_from_hf_dir")) {
            exercise(tok);
            dsq_tokenizer_free(tok);
        }
    }
    dsq_gguf_close(g);
    return 0;
}
