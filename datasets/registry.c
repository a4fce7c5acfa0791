#include "datasets/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/fileio.h"

typedef struct dataset {
    const char *name;
    const char *files[2];   /* by dsq_text_layout */
    const char *sources[2]; /* where a user gets each */
} dataset;

static const dataset g_sets[] = {
    {"wikitext2",
     {"wiki.test.raw", "wikitext-2-raw-v1.test.hfjoin.txt"},
     {"wikitext-2-raw-v1.zip, file wikitext-2-raw/wiki.test.raw",
      "the test split of the Hugging Face dataset Salesforce/wikitext, config wikitext-2-raw-v1, written as "
      "\"\\n\\n\".join(rows[\"text\"])"}},
};

#define MAX_TEXT ((size_t)1 << 31) /* 2 GiB: far above any evaluation text */

static const dataset *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof g_sets / sizeof g_sets[0]; i++)
        if (!strcmp(g_sets[i].name, name)) return &g_sets[i];
    return NULL;
}

bool dsq_dataset_known(const char *name) { return lookup(name) != NULL; }

/* Tries dir/file, dir/file.zst and, for a .zst name, dir/file without it. */
static bool try_dir(const char *dir, const char *file, char *out, size_t cap)
{
    char name[512];
    size_t fl = strlen(file);
    const char *cands[3] = {file, NULL, NULL};
    if (fl > 4 && !strcmp(file + fl - 4, ".zst")) {
        snprintf(name, sizeof name, "%.*s", (int)(fl - 4), file);
    } else {
        snprintf(name, sizeof name, "%s.zst", file);
    }
    cands[1] = name;
    for (int i = 0; i < 2; i++) {
        if (dsq_path_join(out, cap, dir, cands[i]) != DSQ_OK) {
            dsq_clear_error();
            continue;
        }
        if (dsq_exists(out) && !dsq_is_dir(out)) return true;
    }
    return false;
}

dsq_status dsq_dataset_path(const char *name, dsq_text_layout layout, char *out, size_t cap)
{
    const dataset *d = lookup(name);
    if (!d) return dsq_fail(DSQ_ERR_NOT_FOUND, "unknown dataset \"%.64s\" (known: wikitext2)", name);
    int li = layout == DSQ_TEXT_HF_JOIN ? 1 : 0;
    const char *file = d->files[li];
    char dirs[4][1024];
    int nd = 0;
    const char *env = getenv("DSQ_DATA");
    if (env && *env) snprintf(dirs[nd++], sizeof dirs[0], "%.1000s", env);
    env = getenv("DSQ_SHARED_DIR");
    if (env && *env) snprintf(dirs[nd++], sizeof dirs[0], "%.1000s/datasets", env);
    snprintf(dirs[nd++], sizeof dirs[0], "../shared/datasets");
    env = getenv("DSQ_CACHE");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(dirs[nd++], sizeof dirs[0], "%.1000s/datasets", env);
    else if (home && *home)
        snprintf(dirs[nd++], sizeof dirs[0], "%.990s/.cache/dsquant/datasets", home);
    char tried[2048] = "";
    for (int i = 0; i < nd; i++) {
        if (try_dir(dirs[i], file, out, cap)) return DSQ_OK;
        size_t tl = strlen(tried);
        snprintf(tried + tl, sizeof tried - tl, "%s%.400s", i ? ", " : "", dirs[i]);
    }
    return dsq_fail(DSQ_ERR_NOT_FOUND,
                    "dataset %s: %s not found in %s; put it (from %s) in one of these folders, or name it with "
                    "$DSQ_DATA, or pass the file itself",
                    name, file, tried, d->sources[li]);
}

static dsq_status read_zstd(const char *path, const uint8_t *src, size_t n, char **out, size_t *len)
{
    ZSTD_DStream *z = ZSTD_createDStream();
    if (!z) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for zstd", path);
    size_t cap = n * 4 + 4096, used = 0;
    char *buf = malloc(cap + 1);
    ZSTD_inBuffer in = {src, n, 0};
    size_t ret = 1;
    dsq_status s = buf ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    while (s == DSQ_OK && (in.pos < in.size || ret != 0)) {
        if (used == cap) {
            char *nb = cap < MAX_TEXT ? realloc(buf, cap * 2 + 1) : NULL;
            if (!nb) {
                s = dsq_fail(DSQ_ERR_NOMEM, "%s: decompressed text too large", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ZSTD_outBuffer ob = {buf, cap, used};
        size_t before = in.pos;
        ret = ZSTD_decompressStream(z, &ob, &in);
        if (ZSTD_isError(ret)) s = dsq_fail(DSQ_ERR_FORMAT, "%s: zstd: %s", path, ZSTD_getErrorName(ret));
        else if (ret != 0 && in.pos == in.size && ob.pos == used && before == in.pos)
            s = dsq_fail(DSQ_ERR_FORMAT, "%s: truncated zstd stream", path);
        used = ob.pos;
    }
    ZSTD_freeDStream(z);
    if (s != DSQ_OK) {
        free(buf);
        return s;
    }
    buf[used] = 0;
    *out = buf;
    *len = used;
    return DSQ_OK;
}

dsq_status dsq_text_read(const char *path, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    size_t pl = strlen(path);
    if (pl < 4 || strcmp(path + pl - 4, ".zst") != 0) return dsq_read_file(path, MAX_TEXT, out, len);
    dsq_mmap m;
    DSQ_TRY(dsq_mmap_open(path, &m));
    dsq_status s = read_zstd(path, m.data, m.size, out, len);
    dsq_mmap_close(&m);
    return s;
}
