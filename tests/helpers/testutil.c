#include "tests/helpers/testutil.h"

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/fileio.h"
#include "formats/gguf.h"
#include "quantizers/qtypes.h"

char *dsq_test_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/dsq-test-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(buf)) return NULL;
    return strdup(buf);
}

void dsq_test_rmtmp(char *dir)
{
    if (!dir) return;
    (void)dsq_rmtree(dir);
    free(dir);
}

char *dsq_test_write(const char *dir, const char *name, const void *data, size_t n)
{
    size_t cap = strlen(dir) + strlen(name) + 2;
    char *p = malloc(cap);
    snprintf(p, cap, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        free(p);
        return NULL;
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    return p;
}

int dsq_test_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* Cases that skipped in this program (cmocka reports skips but does not count them for main). */
static size_t g_skipped;

bool dsq_test_require_fixtures(void)
{
    const char *v = getenv("DSQ_TEST_REQUIRE_FIXTURES");
    return v && !strcmp(v, "1");
}

void dsq_test_fixture_missing(const char *fmt, ...)
{
    char why[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (dsq_test_require_fixtures())
        fail_msg("%s (DSQ_TEST_REQUIRE_FIXTURES=1: a missing fixture fails instead of skipping)", why);
    fprintf(stderr, "SKIP: %s\n", why);
}

void dsq_test_count_skip(void)
{
    g_skipped++;
}

int dsq_test_status(int failed, size_t n_cases)
{
    if (failed) return 1; /* not the count: 77 failures must not read as a skip, 256 as a pass */
    if (n_cases && g_skipped >= n_cases) {
        fprintf(stderr, "all %zu cases skipped: exit 77\n", n_cases);
        return 77;
    }
    return 0;
}

char *dsq_test_shared(const char *rel)
{
    const char *root = getenv("DSQ_SHARED_DIR");
#ifdef DSQ_SHARED_DIR
    if (!root || !root[0]) root = DSQ_SHARED_DIR;
#endif
    char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "../shared", rel);
    if (access(buf, R_OK) != 0) {
        dsq_test_fixture_missing("%s not found (../shared is absent); skipping the cases that need it", buf);
        return NULL;
    }
    return strdup(buf);
}

char *dsq_test_default_model(void)
{
    const char *cache = getenv("DSQ_CACHE");
    char buf[4096];
    if (cache && cache[0])
        snprintf(buf, sizeof buf, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(buf, sizeof buf, "%s/.cache/dsquant/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    if (access(buf, R_OK) != 0) {
        dsq_test_fixture_missing("default model %s not found; run scripts/fetch-default-model.sh", buf);
        return NULL;
    }
    return strdup(buf);
}

int dsq_test_run(const char *cmd, char *errbuf, size_t errcap)
{
    char full[8192];
    char errpath[] = "/tmp/dsq-test-err-XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) return -1;
    close(fd);
    snprintf(full, sizeof full, "%s 2>%s", cmd, errpath);
    int st = system(full);
    if (errbuf && errcap) {
        errbuf[0] = '\0';
        FILE *f = fopen(errpath, "rb");
        if (f) {
            size_t n = fread(errbuf, 1, errcap - 1, f);
            errbuf[n] = '\0';
            fclose(f);
        }
    }
    unlink(errpath);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

uint64_t dsq_test_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float dsq_test_randn(uint64_t *s)
{
    double u1 = ((double)(dsq_test_rand(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(dsq_test_rand(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static const char *const g_env_vars[DSQ_TEST_ENV_VARS] = {"DSQ_DATA", "DSQ_SHARED_DIR", "DSQ_CACHE", "DSQ_OFFLINE",
                                                          "DSQ_DATA_MIRROR"};

dsq_test_env dsq_test_env_save(void)
{
    dsq_test_env e;
    for (int i = 0; i < DSQ_TEST_ENV_VARS; i++) {
        const char *v = getenv(g_env_vars[i]);
        e.val[i] = v ? strdup(v) : NULL;
    }
    e.cwd = getcwd(NULL, 0);
    return e;
}

void dsq_test_env_restore(dsq_test_env *e)
{
    if (e->cwd && chdir(e->cwd) != 0) fprintf(stderr, "cannot return to %s\n", e->cwd);
    free(e->cwd);
    e->cwd = NULL;
    for (int i = 0; i < DSQ_TEST_ENV_VARS; i++) {
        if (e->val[i]) setenv(g_env_vars[i], e->val[i], 1);
        else unsetenv(g_env_vars[i]);
        free(e->val[i]);
        e->val[i] = NULL;
    }
}

static bool keep_tensor(const char *name, int n_layers)
{
    int layer;
    return sscanf(name, "blk.%d.", &layer) != 1 || layer < n_layers;
}

dsq_status dsq_test_cut_model(const char *src, const char *dst, int n_layers)
{
    dsq_gguf *g = NULL;
    dsq_gguf_writer *w = NULL;
    DSQ_TRY(dsq_gguf_open(src, &g));
    dsq_status s = dsq_gguf_writer_new(&w);
    for (uint64_t i = 0; s == DSQ_OK && i < g->n_kv; i++) s = dsq_gguf_set(w, g->kv[i].key, &g->kv[i].value);
    if (s == DSQ_OK) s = dsq_gguf_set_u32(w, "llama.block_count", (uint32_t)n_layers);
    for (uint64_t i = 0; s == DSQ_OK && i < g->n_tensors; i++) {
        const dsq_gguf_tensor_info *t = &g->tensors[i];
        if (!keep_tensor(t->name, n_layers)) continue;
        int64_t shape[4];
        for (uint32_t d = 0; d < t->n_dims; d++) shape[d] = t->ne[t->n_dims - 1 - d];
        s = dsq_gguf_add_tensor(w, t->name, DSQ_TYPE_F32, (int)t->n_dims, shape);
    }
    if (s == DSQ_OK) s = dsq_gguf_writer_begin(w, dst, true);
    for (uint64_t i = 0; s == DSQ_OK && i < g->n_tensors; i++) {
        if (!keep_tensor(g->tensors[i].name, n_layers)) continue;
        dsq_tensor v;
        s = dsq_gguf_tensor(g, i, &v);
        uint64_t n = v.nbytes / dsq_type_get((int)v.type)->block_bytes * dsq_type_get((int)v.type)->block_elems;
        float *x = s == DSQ_OK ? malloc(n * sizeof *x) : NULL;
        if (s == DSQ_OK) s = x ? dsq_dequantize(v.type, v.data, x, 1, (int64_t)n) : DSQ_ERR_NOMEM;
        if (s == DSQ_OK) s = dsq_gguf_writer_write(w, x, n * sizeof *x);
        free(x);
    }
    if (s == DSQ_OK) s = dsq_gguf_writer_finish(w);
    dsq_gguf_writer_free(w);
    dsq_gguf_close(g);
    return s;
}

