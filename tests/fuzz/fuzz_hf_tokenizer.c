/* A Hugging Face tokenizer folder, from one input split on DSQ_FZ_SEP:
 * tokenizer.json, tokenizer_config.json, config.json (parts that are absent
 * are not written). Both readers run: the runtime tokenizer (then a fixed
 * text is encoded and decoded) and the converter to GGUF tokenizer metadata
 * (whose output, written, must load as a tokenizer again). */
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/hf_tokenizer.h"
#include "runtime/tokenizer.h"
#include "tests/fuzz/fuzz.h"

static void exercise(const dsq_tokenizer *tok)
{
    static const char text[] = "Hello, world! 12345 the  <|im_start|>user\n\xc3\xa9t\xc3\xa9 \xe2\x96\x81x";
    dsq_tokens ids = {0};
    if (dsq_fz_ok(dsq_tokenizer_encode(tok, text, sizeof text - 1, true, true, &ids), "encode")) {
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || (uint32_t)ids.ids[i] >= dsq_tokenizer_n_vocab(tok))
                dsq_fz_die("encode gave id %d outside a vocabulary of %u", ids.ids[i], dsq_tokenizer_n_vocab(tok));
        char *out = NULL;
        size_t n = 0;
        if (dsq_fz_ok(dsq_tokenizer_decode(tok, ids.ids, ids.n, DSQ_DECODE_SPECIAL, &out, &n), "decode")) free(out);
    }
    dsq_tokens_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const names[3] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    dsq_fz_part part[3];
    dsq_fz_split(data, size, part, 3);
    dsq_fz_clear();
    for (int i = 0; i < 3; i++)
        if (part[i].p) dsq_fz_put(i, names[i], part[i].p, part[i].n);
    dsq_tokenizer *tok = NULL;
    if (dsq_fz_ok(dsq_tokenizer_from_hf_dir(dsq_fz_dir(), &tok), "dsq_tokenizer_from_hf_dir")) {
        exercise(tok);
        dsq_tokenizer_free(tok);
    }
    dsq_gguf_writer *w = NULL;
    if (!dsq_fz_ok(dsq_gguf_writer_new(&w), "writer_new")) return 0;
    const char *out = dsq_fz_put(3, "tok.gguf", "", 0);
    bool conv = dsq_fz_ok(dsq_tokenizer_hf_to_gguf(dsq_fz_dir(), w), "dsq_tokenizer_hf_to_gguf");
    if (conv && dsq_fz_ok(dsq_gguf_writer_begin(w, out, true), "begin") &&
        dsq_fz_ok(dsq_gguf_writer_finish(w), "finish")) {
        dsq_gguf *g = NULL;
        if (!dsq_fz_ok(dsq_gguf_open(out, &g), "reopen")) dsq_fz_die("our tokenizer GGUF does not open");
        /* The converter may write a tokenizer the runtime refuses (an
         * unsupported pre-tokenizer): only a proper refusal is required. */
        if (dsq_fz_ok(dsq_tokenizer_from_gguf(g, &tok), "dsq_tokenizer_from_gguf")) {
            exercise(tok);
            dsq_tokenizer_free(tok);
        }
        dsq_gguf_close(g);
    }
    dsq_gguf_writer_free(w);
    return 0;
}
