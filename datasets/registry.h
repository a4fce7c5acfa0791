/* Evaluation texts by name. Nothing third-party is committed: a named
 * dataset is looked for, in order, in
 *   $DSQ_DATA, $DSQ_SHARED_DIR/datasets, ../shared/datasets (from the current
 *   folder), $DSQ_CACHE/datasets (default ~/.cache/dsquant/datasets),
 * each file also under its name with or without a ".zst" suffix. */
#ifndef DSQ_DATASETS_REGISTRY_H
#define DSQ_DATASETS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

typedef enum dsq_text_layout {
    DSQ_TEXT_RAW = 0,  /* the canonical file as published (what llama-perplexity reads) */
    DSQ_TEXT_HF_JOIN,  /* "\n\n".join(rows of the Hugging Face dataset), what AWQ/GPTQ evaluate */
} dsq_text_layout;

/* True when name is a registered dataset ("wikitext2"). */
bool dsq_dataset_known(const char *name);

/* Path of the file of dataset `name` in `layout`, or DSQ_ERR_NOT_FOUND with
 * a message listing where it was looked for and where to put it. */
dsq_status dsq_dataset_path(const char *name, dsq_text_layout layout, char *out, size_t cap);

/* Reads a whole text file (zstd-decompressed when it ends in ".zst") into a
 * malloc'd NUL-terminated buffer. */
dsq_status dsq_text_read(const char *path, char **out, size_t *len);

#endif
