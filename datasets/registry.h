/* Evaluation and calibration texts by name.
 *
 * The registry is the C table in datasets/registry.c (the one source of
 * truth); datasets/registry.json is generated from it for people and tools
 * (dsq_dataset_registry_json; tests/test_datasets.c fails when the committed
 * JSON differs, and rewrites it with DSQ_UPDATE_REGISTRY=1). Each dataset
 * has a file per layout with the sha256 and size of its content (decompressed
 * when stored as .zst), its licence and where a user with internet gets it.
 *
 * Nothing third-party is committed. A named dataset is looked for, in order, in
 *   $DSQ_DATA, $DSQ_SHARED_DIR/datasets, ../shared/datasets (from the current
 *   folder), $DSQ_CACHE/datasets (default ~/.cache/dsquant/datasets),
 * each file also under its name with or without a ".zst" suffix. A file whose
 * content hash differs from the registry's is used anyway, with a warning
 * (results will not be comparable with published numbers).
 *
 * When it is in none of them and the layout can be fetched (its `how` is NULL
 * or it has a `member`), it is downloaded into that last, cache folder
 * (datasets/download.h), the member taken out of a .zip, and checked: a
 * download whose sha256 or size differs from the registry's is deleted and
 * is an error (the source changed or the transfer broke). Environment:
 *   DSQ_OFFLINE       set to anything but "" or "0": never download.
 *   DSQ_DATA_MIRROR   download from MIRROR/<last path component of the URL>
 *                     instead of the URL (e.g. file:///srv/mirror, so tests
 *                     and machines without internet use a local copy). */
#ifndef DSQ_DATASETS_REGISTRY_H
#define DSQ_DATASETS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum dsq_text_layout {
    DSQ_TEXT_RAW = 0,  /* the canonical file as published (what llama-perplexity reads) */
    DSQ_TEXT_HF_JOIN,  /* "\n\n".join(rows of the Hugging Face dataset), what AWQ/GPTQ evaluate */
    DSQ_TEXT_LAYOUT_COUNT
} dsq_text_layout;

typedef struct dsq_dataset_file {
    const char *file;   /* name inside a data folder; NULL: the dataset has no such layout */
    const char *sha256; /* of the content, 64 lowercase hex digits */
    uint64_t bytes;     /* content size */
    const char *url;    /* where to download it */
    const char *member; /* the path inside the .zip at url, or NULL when url is the file itself */
    const char *how;    /* what to do by hand with the download to get `file`, or NULL when it is the file
                           (or `member` of it); a layout with `how` and no `member` is not fetched */
} dsq_dataset_file;

typedef struct dsq_dataset_info {
    const char *name;
    const char *description;
    const char *licence;
    dsq_dataset_file layout[DSQ_TEXT_LAYOUT_COUNT];
} dsq_dataset_info;

/* "raw" / "hf-join". */
const char *dsq_text_layout_name(dsq_text_layout l);

size_t dsq_dataset_count(void);
const dsq_dataset_info *dsq_dataset_at(size_t i);
/* NULL when name is not registered. */
const dsq_dataset_info *dsq_dataset_find(const char *name);
/* True when name is a registered dataset ("wikitext2"). */
bool dsq_dataset_known(const char *name);

/* Path of the file of dataset `name` in `layout`, downloading it into the
 * cache folder when it is nowhere and can be fetched; or DSQ_ERR_NOT_FOUND
 * with a message listing the folders searched, the URL to get it from, and
 * why the download failed. The file found is hashed and a mismatch logged as
 * a warning. */
dsq_status dsq_dataset_path(const char *name, dsq_text_layout layout, char *out, size_t cap);

/* Finds, reads (zstd-decompressing a .zst) and checks the file of a dataset:
 * *text is malloc'd and NUL-terminated, path receives where it was found. */
dsq_status dsq_dataset_load(const char *name, dsq_text_layout layout, char *path, size_t cap, char **text,
                            size_t *len);

/* What the commands' --data takes: a registered name (loaded as above) or a
 * file path. A file whose name (less any .zst) is a registry file name is
 * checked against that entry's hash too. */
dsq_status dsq_dataset_resolve(const char *name_or_path, dsq_text_layout layout, char *path, size_t cap,
                               char **text, size_t *len);

/* Compares content with f's sha256 and size; false (after logging a warning
 * naming the file and both hashes) on a mismatch. */
bool dsq_dataset_check(const dsq_dataset_file *f, const char *path, const char *text, size_t len);

/* Reads a whole text file (zstd-decompressed when it ends in ".zst") into a
 * malloc'd NUL-terminated buffer. */
dsq_status dsq_text_read(const char *path, char **out, size_t *len);

/* The registry as JSON text (malloc'd): what datasets/registry.json holds. */
dsq_status dsq_dataset_registry_json(char **out);

#endif
