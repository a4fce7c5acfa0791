/* A sharded safetensors checkpoint: model.safetensors.index.json and two
 * shards, from one input split on DSQ_FZ_SEP (index, shard 1, shard 2).
 * Opened as a model (index checks, names unique across shards, every index
 * entry present in its shard) and every tensor viewed. */
#include <string.h>

#include "core/tensor.h"
#include "formats/safetensors.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsq_fz_part part[3];
    dsq_fz_split(data, size, part, 3);
    dsq_fz_clear();
    dsq_fz_put(0, "model.safetensors.index.json", part[0].p, part[0].n);
    if (part[1].p) dsq_fz_put(1, "model-00001-of-00002.safetensors", part[1].p, part[1].n);
    if (part[2].p) dsq_fz_put(2, "model-00002-of-00002.safetensors", part[2].p, part[2].n);
    dsq_st_model *m = NULL;
    if (!dsq_fz_ok(dsq_st_model_open(dsq_fz_dir(), &m), "dsq_st_model_open")) return 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        dsq_tensor t;
        if (!dsq_fz_ok(dsq_st_model_view(m, i, &t), "dsq_st_model_view")) dsq_fz_die("tensor %zu refused", i);
        const dsq_st_file *f = m->files[m->tensors[i].file];
        dsq_fz_check_view(&t, f->map.data, f->map.size, t.name);
        if (dsq_st_model_find(m, t.name) != (int64_t)i) dsq_fz_die("tensor %s not found by name", t.name);
    }
    dsq_st_model_meta(m, "format");
    dsq_st_model_close(m);
    return 0;
}
