/* The dataset registry: SHA-256 known answers, the committed JSON view equal
 * to the C table, the real files in ../shared matching their hashes, and the
 * lookup's behaviour on a modified file (warning, used anyway), a missing
 * one (error naming the folders and the URL), unknown names and layouts. */
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

#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "datasets/sha256.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* Warnings the library logs, captured. */
static char g_warn[8192];
static int g_n_warn;

static void sink(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level != DSQ_LOG_WARN) return;
    g_n_warn++;
    snprintf(g_warn, sizeof g_warn, "%s", msg);
}

static void capture(void)
{
    g_warn[0] = 0;
    g_n_warn = 0;
    dsq_log_set_sink(sink, NULL);
}

/* FIPS 180-2 appendix B examples, and the one-million-'a' message, also fed
 * in uneven pieces (the buffering across 64-byte blocks). */
static void test_sha256_known_answers(void **state)
{
    (void)state;
    char hex[65];
    dsq_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    dsq_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    dsq_sha256_hex(m2, strlen(m2), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    size_t n = 1000000;
    char *a = malloc(n);
    memset(a, 'a', n);
    static const size_t steps[] = {1, 63, 64, 65, 1000, 4096 + 7};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        dsq_sha256 h;
        uint8_t d[32];
        dsq_sha256_init(&h);
        for (size_t i = 0; i < n; i += steps[s]) dsq_sha256_update(&h, a + i, i + steps[s] <= n ? steps[s] : n - i);
        dsq_sha256_final(&h, d);
        assert_int_equal(d[0], 0xcd);
        assert_int_equal(d[1], 0xc7);
        assert_int_equal(d[31], 0xd0);
    }
    dsq_sha256_hex(a, n, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* 55 and 56 bytes: the padding that fits in one block and the one that does not. */
    dsq_sha256_hex(a, 55, hex);
    assert_string_equal(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    dsq_sha256_hex(a, 56, hex);
    assert_string_equal(hex, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    free(a);
}

/* datasets/registry.json is the C table's JSON view; one cannot change alone. */
static void test_registry_json_matches_table(void **state)
{
    (void)state;
    char *want, *have;
    size_t len;
    expect_ok(dsq_dataset_registry_json(&want));
    const char *path = DSQ_SOURCE_DIR "/datasets/registry.json";
    const char *upd = getenv("DSQ_UPDATE_REGISTRY");
    if (upd && !strcmp(upd, "1")) {
        dsq_outfile *f;
        expect_ok(dsq_outfile_open(path, true, &f));
        expect_ok(dsq_outfile_write(f, want, strlen(want)));
        expect_ok(dsq_outfile_commit(f));
        printf("rewrote %s\n", path);
    }
    expect_ok(dsq_read_file(path, 1 << 20, &have, &len));
    if (strcmp(want, have))
        fail_msg("%s differs from the table in datasets/registry.c; run this test with DSQ_UPDATE_REGISTRY=1", path);
    free(want), free(have);
}

static void test_registry_entries(void **state)
{
    (void)state;
    assert_true(dsq_dataset_count() >= 5);
    for (size_t i = 0; i < dsq_dataset_count(); i++) {
        const dsq_dataset_info *d = dsq_dataset_at(i);
        assert_ptr_equal(dsq_dataset_find(d->name), d); /* names are unique */
        assert_non_null(d->licence);
        assert_non_null(d->layout[DSQ_TEXT_RAW].file);
        for (int l = 0; l < DSQ_TEXT_LAYOUT_COUNT; l++) {
            const dsq_dataset_file *f = &d->layout[l];
            if (!f->file) continue;
            assert_int_equal(strlen(f->sha256), 64);
            assert_int_equal(strspn(f->sha256, "0123456789abcdef"), 64);
            assert_true(f->bytes > 0);
            assert_memory_equal(f->url, "https://", 8);
        }
    }
    assert_null(dsq_dataset_at(dsq_dataset_count()));
    assert_true(dsq_dataset_known("wikitext2") && dsq_dataset_known("ptb") && dsq_dataset_known("tinyshakespeare"));
    assert_false(dsq_dataset_known("wikitext3"));
}

/* Every registered file in ../shared/datasets is found there and matches. */
static void test_shared_files_match(void **state)
{
    (void)state;
    char *dir = dsq_test_shared("datasets");
    if (!dir) DSQ_TEST_SKIP();
    char *root = strdup(dir);
    root[strlen(root) - strlen("/datasets")] = 0;
    char *old = getenv("DSQ_SHARED_DIR") ? strdup(getenv("DSQ_SHARED_DIR")) : NULL;
    setenv("DSQ_SHARED_DIR", root, 1);
    unsetenv("DSQ_DATA");
    capture();
    int checked = 0;
    for (size_t i = 0; i < dsq_dataset_count(); i++) {
        const dsq_dataset_info *d = dsq_dataset_at(i);
        for (int l = 0; l < DSQ_TEXT_LAYOUT_COUNT; l++) {
            if (!d->layout[l].file) continue;
            char path[4096], *text;
            size_t len;
            expect_ok(dsq_dataset_load(d->name, (dsq_text_layout)l, path, sizeof path, &text, &len));
            assert_int_equal(len, d->layout[l].bytes);
            assert_true(dsq_dataset_check(&d->layout[l], path, text, len));
            free(text);
            checked++;
        }
    }
    assert_int_equal(g_n_warn, 0);
    assert_true(checked >= 6);
    dsq_log_set_sink(NULL, NULL);
    if (old) setenv("DSQ_SHARED_DIR", old, 1);
    else unsetenv("DSQ_SHARED_DIR");
    free(old), free(root), free(dir);
}

/* Points every search folder at an empty tree, returning the old values. */
static dsq_test_env isolate(const char *dir)
{
    dsq_test_env e = dsq_test_env_save();
    setenv("DSQ_OFFLINE", "1", 1); /* a missing file must not be fetched from the network here */
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/a", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    mkdir(sub, 0755);
    assert_int_equal(chdir(sub), 0); /* no ../shared/datasets from here */
    setenv("DSQ_DATA", dir, 1);
    snprintf(sub, sizeof sub, "%s/shared", dir);
    setenv("DSQ_SHARED_DIR", sub, 1);
    snprintf(sub, sizeof sub, "%s/cache", dir);
    setenv("DSQ_CACHE", sub, 1);
    return e;
}

static void unisolate(dsq_test_env *e) { dsq_test_env_restore(e); }

static void test_modified_file_warns(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096], *text;
    size_t len;
    dsq_test_env e = isolate(dir);
    free(dsq_test_write(dir, "ptb.test.txt", " a b c \n", 8));
    capture();
    expect_ok(dsq_dataset_load("ptb", DSQ_TEXT_RAW, path, sizeof path, &text, &len));
    assert_int_equal(len, 8);
    assert_string_equal(text, " a b c \n");
    free(text);
    assert_int_equal(g_n_warn, 1);
    assert_non_null(strstr(g_warn, "ptb.test.txt"));
    assert_non_null(strstr(g_warn, "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"));
    char hex[65];
    dsq_sha256_hex(" a b c \n", 8, hex);
    assert_non_null(strstr(g_warn, hex));
    /* dsq_dataset_path checks too; --data FILE with a registry file name as well. */
    g_n_warn = 0;
    expect_ok(dsq_dataset_path("ptb", DSQ_TEXT_RAW, path, sizeof path));
    assert_int_equal(g_n_warn, 1);
    g_n_warn = 0;
    char *p2 = dsq_test_write(dir, "ptb.valid.txt", "x", 1);
    expect_ok(dsq_dataset_resolve(p2, DSQ_TEXT_RAW, path, sizeof path, &text, &len));
    assert_int_equal(g_n_warn, 1);
    assert_string_equal(path, p2);
    free(text), free(p2);
    /* A file the registry does not know is read as it is. */
    g_n_warn = 0;
    char *p3 = dsq_test_write(dir, "my-notes.txt", "hello", 5);
    expect_ok(dsq_dataset_resolve(p3, DSQ_TEXT_RAW, path, sizeof path, &text, &len));
    assert_int_equal(g_n_warn, 0);
    assert_string_equal(text, "hello");
    free(text), free(p3);
    /* Nor is a name that only ends like a registry file. */
    char *p4 = dsq_test_write(dir, "xptb.test.txt", "y", 1);
    expect_ok(dsq_dataset_resolve(p4, DSQ_TEXT_RAW, path, sizeof path, &text, &len));
    assert_int_equal(g_n_warn, 0);
    free(text), free(p4);
    dsq_log_set_sink(NULL, NULL);
    unisolate(&e);
    dsq_test_rmtmp(dir);
}

static void test_missing_file_error(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), path[4096], *text;
    size_t len;
    /* Looked up before isolate() points DSQ_SHARED_DIR at an empty folder. */
    char *shared_zst = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    dsq_test_env e = isolate(dir);
    assert_int_equal(dsq_dataset_load("tinyshakespeare", DSQ_TEXT_RAW, path, sizeof path, &text, &len),
                     DSQ_ERR_NOT_FOUND);
    const char *m = dsq_errmsg();
    assert_non_null(strstr(m, "tinyshakespeare.txt"));
    assert_non_null(strstr(m, dir));          /* $DSQ_DATA */
    assert_non_null(strstr(m, "/shared/datasets")); /* $DSQ_SHARED_DIR/datasets */
    assert_non_null(strstr(m, "../shared/datasets"));
    assert_non_null(strstr(m, "/cache/datasets"));
    assert_non_null(strstr(m, "https://raw.githubusercontent.com/karpathy/char-rnn/"));
    assert_int_equal(dsq_dataset_path("wikitext2", DSQ_TEXT_RAW, path, sizeof path), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "wikitext-2-raw-v1.zip"));
    /* Found under the .zst name in the cache folder. */
    char cache[4096];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    mkdir(cache, 0755);
    snprintf(cache, sizeof cache, "%s/cache/datasets", dir);
    mkdir(cache, 0755);
    if (shared_zst) {
        char *raw;
        size_t rl;
        expect_ok(dsq_read_file(shared_zst, 16 << 20, &raw, &rl));
        free(dsq_test_write(cache, "tinyshakespeare.txt.zst", raw, rl));
        capture();
        expect_ok(dsq_dataset_load("tinyshakespeare", DSQ_TEXT_RAW, path, sizeof path, &text, &len));
        assert_non_null(strstr(path, "/cache/datasets/tinyshakespeare.txt.zst"));
        assert_int_equal(len, 1115394);
        assert_int_equal(g_n_warn, 0);
        dsq_log_set_sink(NULL, NULL);
        free(text), free(raw), free(shared_zst);
    }
    unisolate(&e);
    dsq_test_rmtmp(dir);
}

static void test_unknown_name_and_layout(void **state)
{
    (void)state;
    char path[4096], *text;
    size_t len;
    assert_int_equal(dsq_dataset_load("c4", DSQ_TEXT_RAW, path, sizeof path, &text, &len), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "\"c4\""));
    assert_non_null(strstr(dsq_errmsg(), "wikitext2"));
    assert_int_equal(dsq_dataset_load("ptb", DSQ_TEXT_HF_JOIN, path, sizeof path, &text, &len), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "hf-join"));
    assert_int_equal(dsq_dataset_resolve("/nonexistent/x.txt", DSQ_TEXT_RAW, path, sizeof path, &text, &len),
                     DSQ_ERR_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known_answers),
        cmocka_unit_test(test_registry_json_matches_table),
        cmocka_unit_test(test_registry_entries),
        cmocka_unit_test(test_shared_files_match),
        cmocka_unit_test(test_modified_file_warns),
        cmocka_unit_test(test_missing_file_error),
        cmocka_unit_test(test_unknown_name_and_layout),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
