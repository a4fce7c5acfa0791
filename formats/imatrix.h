/* llama.cpp importance-matrix files (shared/design/formats-notes.md section 6).
 *
 * Legacy binary ".dat" (the only format at the reference llama.cpp commit
 * c392e509; read by llama-quantize's load_imatrix in examples/quantize/
 * quantize.cpp, written by examples/imatrix/imatrix.cpp), all little-endian:
 *   int32 n_entries (>= 1)
 *   n_entries x { int32 name_len; char name[name_len]; int32 ncall; int32 nval; float values[nval] }
 *   optional trailer: int32 last_chunk; int32 dataset_len; char dataset[dataset_len]
 * A stored value is (sum of x^2 / token count) * ncall; llama-quantize divides
 * it by ncall (when ncall > 0), so the value a quantizer uses is the mean x^2
 * of that input column.
 *
 * The later GGUF imatrix (general.type = "imatrix", tensors "<name>.in_sum2"
 * and "<name>.counts") is read too; we never write it, since the reference
 * llama-quantize cannot load it.
 *
 * Entries are kept sorted by name (byte order), as llama-imatrix writes them. */
#ifndef DSQ_FORMATS_IMATRIX_H
#define DSQ_FORMATS_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Bounds on hostile files. */
#define DSQ_IMATRIX_MAX_NAME 4096
#define DSQ_IMATRIX_MAX_DATASET (1u << 20)

typedef struct dsq_imatrix_entry {
    char *name;       /* tensor name, e.g. "blk.0.ffn_down.weight" */
    int32_t ncall;    /* chunks the entry was accumulated over (>= 0) */
    uint32_t nval;    /* ne[0] of the weight, x n_expert for 3-D expert tensors */
    float *values;    /* importance as llama-quantize uses it: stored / ncall (finite, >= 0) */
    float *stored;    /* the file's values (values x ncall); what dsq_imatrix_save writes */
} dsq_imatrix_entry;

typedef struct dsq_imatrix {
    size_t n_entries;
    dsq_imatrix_entry *entries; /* sorted by name */
    int32_t last_chunk;         /* trailer's chunk count, -1 when absent */
    char *dataset;              /* trailer's dataset name, NULL when absent */
} dsq_imatrix;

/* Loads a legacy .dat or a GGUF imatrix (told apart by the "GGUF" magic).
 * Every length and count is checked against the bytes that remain; fails with
 * DSQ_ERR_FORMAT naming the file and entry on truncation, bad counts,
 * duplicate or empty names, negative ncall, trailing bytes; DSQ_ERR_NUMERIC on
 * NaN/Inf/negative values (llama-quantize refuses non-finite ones too). */
dsq_status dsq_imatrix_load(const char *path, dsq_imatrix **out);
/* The same for a legacy .dat already in memory; what names the source in messages. */
dsq_status dsq_imatrix_parse(const void *data, size_t size, const char *what, dsq_imatrix **out);
void dsq_imatrix_free(dsq_imatrix *im);

/* Exact-name lookup (binary search); NULL when absent. */
const dsq_imatrix_entry *dsq_imatrix_find(const dsq_imatrix *im, const char *name);

/* Checks an entry against the weight it will be used for: nval must equal
 * ne0 x n_expert (n_expert = ne[2] of a 3-D expert tensor, 1 otherwise).
 * Fails with DSQ_ERR_FORMAT naming the tensor and both sizes. */
dsq_status dsq_imatrix_check_size(const dsq_imatrix_entry *e, const char *tensor, int64_t ne0, int64_t n_expert);

/* llama-quantize's per-tensor rule: *out = the values for the tensor, or NULL
 * when there is no entry (logged at info). A size mismatch is an error, except
 * for "token_embd.weight", which is then quantized without (logged). Expert e
 * of a 3-D tensor uses (*out)[e*ne0 .. (e+1)*ne0). im may be NULL. */
dsq_status dsq_imatrix_for_tensor(const dsq_imatrix *im, const char *tensor, int64_t ne0, int64_t n_expert,
                                  const float **out);

/* --include-weights / --exclude-weights: keep only (or drop) the entries whose
 * name contains any of the substrings. Giving both lists is DSQ_ERR_ARG. */
dsq_status dsq_imatrix_filter(dsq_imatrix *im, const char *const *include, size_t n_include,
                              const char *const *exclude, size_t n_exclude);

/* ---- building and writing ---- */
dsq_status dsq_imatrix_new(dsq_imatrix **out);
/* Adds (or replaces) an entry from per-column mean x^2 values, as
 * llama-imatrix does: stored = mean x ncall, and values = stored / ncall so
 * that in-memory values equal what a reload gives. ncall >= 1. Values must be
 * finite and >= 0. */
dsq_status dsq_imatrix_add(dsq_imatrix *im, const char *name, int32_t ncall, const float *mean, uint32_t nval);
/* Sets the trailer (dataset may be NULL for an empty name; last_chunk >= 0). */
dsq_status dsq_imatrix_set_trailer(dsq_imatrix *im, int32_t last_chunk, const char *dataset);
/* The legacy .dat bytes (malloc'd). The trailer is written when last_chunk >= 0. */
dsq_status dsq_imatrix_serialize(const dsq_imatrix *im, uint8_t **buf, size_t *len);
/* Writes the legacy .dat atomically (core/fileio.h). Needs >= 1 entry. */
dsq_status dsq_imatrix_save(const dsq_imatrix *im, const char *path, bool overwrite);

#endif
