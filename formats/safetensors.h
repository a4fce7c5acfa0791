/* safetensors files and sharded checkpoints: validated reader over an mmap,
 * and a streaming, sharding writer. Format: docs/formats.md, after the
 * huggingface/safetensors specification. */
#ifndef DSQ_FORMATS_SAFETENSORS_H
#define DSQ_FORMATS_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/status.h"
#include "core/tensor.h"

/* The reference implementation refuses headers above 100 MB. */
#define DSQ_ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct dsq_st_entry {
    char *name;
    dsq_type type;
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS];
    uint64_t begin, end; /* byte range within the data section */
} dsq_st_entry;

typedef struct dsq_st_file {
    dsq_mmap map;
    uint64_t header_len;
    const uint8_t *data; /* start of the data section */
    uint64_t data_size;
    size_t n_tensors;
    dsq_st_entry *tensors; /* in header order */
    size_t n_meta;         /* __metadata__ string pairs */
    char **meta_keys;
    char **meta_vals;
} dsq_st_file;

dsq_status dsq_st_open(const char *path, dsq_st_file **out);
void dsq_st_close(dsq_st_file *f);
dsq_status dsq_st_view(const dsq_st_file *f, size_t i, dsq_tensor *out);
const char *dsq_st_meta(const dsq_st_file *f, const char *key); /* NULL when absent */

/* A checkpoint: a folder with model.safetensors.index.json (sharded), or one
 * model.safetensors, or a single .safetensors file path. Tensor names are
 * unique across shards; an index naming a tensor its shard lacks is an error. */
typedef struct dsq_st_model {
    size_t n_files;
    dsq_st_file **files;
    size_t n_tensors;
    struct dsq_st_ref {
        uint32_t file;
        uint32_t idx;
    } *tensors; /* in shard order, then header order */
} dsq_st_model;

dsq_status dsq_st_model_open(const char *path, dsq_st_model **out);
void dsq_st_model_close(dsq_st_model *m);
dsq_status dsq_st_model_view(const dsq_st_model *m, size_t i, dsq_tensor *out);
/* -1 when absent. */
int64_t dsq_st_model_find(const dsq_st_model *m, const char *name);
/* A __metadata__ value from the first shard that has the key; NULL when none does. */
const char *dsq_st_model_meta(const dsq_st_model *m, const char *key);

/* ---- writer ----
 * new(dir, "model", max_shard_bytes) -> set_meta -> add every tensor (name,
 * type, shape) -> begin -> write each tensor's bytes in the order added (any
 * chunking) -> finish. One shard: dir/model.safetensors. More: dir/model-
 * 00001-of-0000N.safetensors plus dir/model.safetensors.index.json
 * ({"metadata": {"total_size": N}, "weight_map": {...}}). Each file is written
 * atomically; free() without finish() removes what was started. A tensor
 * bigger than max_shard_bytes gets a shard of its own. Headers are padded with
 * spaces to a multiple of 8 bytes as the reference writer does. */
typedef struct dsq_st_writer dsq_st_writer;

dsq_status dsq_st_writer_new(const char *dir, const char *basename, uint64_t max_shard_bytes,
                             dsq_st_writer **out);
void dsq_st_writer_free(dsq_st_writer *w);
dsq_status dsq_st_writer_set_meta(dsq_st_writer *w, const char *key, const char *value);
dsq_status dsq_st_writer_add(dsq_st_writer *w, const char *name, dsq_type type, int n_dims, const int64_t *shape);
/* Before begin: shards written with direct I/O (dsq_outfile_set_direct),
 * their headers padded with spaces so the data starts on a 4 KiB boundary. */
void dsq_st_writer_set_direct(dsq_st_writer *w, bool on);
dsq_status dsq_st_writer_begin(dsq_st_writer *w);
dsq_status dsq_st_writer_write(dsq_st_writer *w, const void *data, uint64_t n);
/* The same without a copy (dsq_outfile_reserve): room for *got bytes of the
 * current tensor, min <= *got <= max (*p NULL when min does not fit: write
 * instead), then produced(n) for the n bytes filled. */
dsq_status dsq_st_writer_reserve(dsq_st_writer *w, size_t min, size_t max, uint8_t **p, size_t *got);
dsq_status dsq_st_writer_produced(dsq_st_writer *w, size_t n);
dsq_status dsq_st_writer_finish(dsq_st_writer *w);

#endif
