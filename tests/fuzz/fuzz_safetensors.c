/* A .safetensors file: the reader (header JSON, dtypes, shapes, offsets,
 * __metadata__), every tensor view, and the same file opened as a one-file
 * checkpoint, which must agree with the reader. */
#include <string.h>

#include "core/tensor.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = dsq_fz_put(0, "model.safetensors", data, size);
    dsq_st_file *f = NULL;
    bool ok = dsq_fz_ok(dsq_st_open(path, &f), "dsq_st_open");
    if (ok) {
        for (size_t i = 0; i < f->n_tensors; i++) {
            dsq_tensor t;
            if (!dsq_fz_ok(dsq_st_view(f, i, &t), "dsq_st_view")) dsq_fz_die("an opened file refused tensor %zu", i);
            dsq_fz_check_view(&t, f->map.data, f->map.size, t.name);
        }
        for (size_t i = 0; i < f->n_meta; i++)
            if (dsq_st_meta(f, f->meta_keys[i]) == NULL) dsq_fz_die("metadata key %zu not found again", i);
        dsq_st_close(f);
    }
    /* The checkpoint layer must take exactly the files the reader takes
     * (a file with the GGUF magic goes to the GGUF reader instead). */
    dsq_checkpoint *c = NULL;
    bool ck = dsq_fz_ok(dsq_checkpoint_open(path, &c), "dsq_checkpoint_open");
    bool gguf = size >= 4 && !memcmp(data, "GGUF", 4);
    if (!gguf && ck != ok) dsq_fz_die("dsq_st_open says %d but dsq_checkpoint_open says %d", ok, ck);
    if (ck) {
        for (uint64_t i = 0; i < c->n_tensors; i++) {
            dsq_tensor t;
            if (!dsq_fz_ok(dsq_checkpoint_tensor(c, i, &t), "dsq_checkpoint_tensor")) dsq_fz_die("tensor refused");
            if (c->st && dsq_st_model_find(c->st, t.name) != (int64_t)i) dsq_fz_die("tensor %s not found by name", t.name);
        }
        dsq_checkpoint_close(c);
    }
    return 0;
}
