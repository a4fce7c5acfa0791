/* A GGUF file: the reader (header, key/values, nested arrays, tensor
 * infos, alignment), every tensor view, every typed getter on every key (the
 * getters the commands use), the architecture and the tokenizer read from
 * the metadata, and the checkpoint layer, which must agree with the reader. */
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "runtime/tokenizer.h"
#include "tests/fuzz/fuzz.h"

static void every_getter(const dsq_gguf *g, const char *key)
{
    uint64_t u64;
    uint32_t u32;
    float f;
    bool b;
    const char *s;
    const dsq_gguf_array *a;
    /* A getter may refuse a value of another type; it must say so properly. */
    dsq_fz_ok(dsq_gguf_get_u64(g, key, &u64), "get_u64");
    dsq_fz_ok(dsq_gguf_get_u32(g, key, &u32), "get_u32");
    dsq_fz_ok(dsq_gguf_get_f32(g, key, &f), "get_f32");
    dsq_fz_ok(dsq_gguf_get_bool(g, key, &b), "get_bool");
    if (dsq_fz_ok(dsq_gguf_get_str(g, key, &s), "get_str") && !s) dsq_fz_die("key %s: a NULL string", key);
    for (int t = 0; t < DSQ_GGUF_VTYPE_COUNT; t++)
        if (dsq_fz_ok(dsq_gguf_get_arr(g, key, (dsq_gguf_vtype)t, &a), "get_arr") && a->elem_type != (dsq_gguf_vtype)t)
            dsq_fz_die("key %s: an array of type %d for a request of %d", key, (int)a->elem_type, t);
    dsq_gguf_find_u64(g, key, &u64);
    dsq_gguf_find_u32(g, key, &u32);
    dsq_gguf_find_f32(g, key, &f);
    dsq_gguf_find_bool(g, key, &b);
    dsq_gguf_find_str(g, key, &s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = dsq_fz_put(0, "model.gguf", data, size);
    dsq_gguf *g = NULL;
    bool ok = dsq_fz_ok(dsq_gguf_open(path, &g), "dsq_gguf_open");
    if (ok) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            if (dsq_gguf_get(g, g->kv[i].key) == NULL) dsq_fz_die("key %llu not found again", (unsigned long long)i);
            every_getter(g, g->kv[i].key);
        }
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            dsq_tensor t;
            if (!dsq_fz_ok(dsq_gguf_tensor(g, i, &t), "dsq_gguf_tensor")) dsq_fz_die("tensor refused");
            dsq_fz_check_view(&t, g->map.data, g->map.size, t.name);
            if (dsq_gguf_find_tensor(g, t.name) < 0) dsq_fz_die("tensor %s not found by name", t.name);
        }
        dsq_arch a;
        if (dsq_fz_ok(dsq_arch_from_gguf(g, &a), "dsq_arch_from_gguf"))
            dsq_fz_ok(dsq_arch_validate(&a, "fuzz"), "dsq_arch_validate");
        dsq_tokenizer *tok = NULL;
        if (dsq_fz_ok(dsq_tokenizer_from_gguf(g, &tok), "dsq_tokenizer_from_gguf")) {
            static const char text[] = "Hello world 123 <|im_start|>the";
            dsq_tokens ids = {0};
            dsq_fz_ok(dsq_tokenizer_encode(tok, text, sizeof text - 1, true, true, &ids), "encode");
            char *out = NULL;
            size_t n = 0;
            if (dsq_fz_ok(dsq_tokenizer_decode(tok, ids.ids, ids.n, 0, &out, &n), "decode")) free(out);
            dsq_tokens_free(&ids);
            dsq_tokenizer_free(tok);
        }
        dsq_gguf_close(g);
    }
    dsq_checkpoint *c = NULL;
    bool ck = dsq_fz_ok(dsq_checkpoint_open(path, &c), "dsq_checkpoint_open");
    /* The checkpoint layer refuses every file the reader refuses, and may
     * refuse more (a malformed architecture, tensors that contradict it).
     * A file without the magic is read as safetensors by the checkpoint layer. */
    if (size >= 4 && !memcmp(data, "GGUF", 4) && ck && !ok)
        dsq_fz_die("dsq_gguf_open refused a file dsq_checkpoint_open took");
    dsq_checkpoint_close(c);
    return 0;
}
