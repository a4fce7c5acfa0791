/* Helpers shared by the cmocka tests. */
#ifndef DSQ_TESTS_TESTUTIL_H
#define DSQ_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A fresh empty folder under $TMPDIR (or /tmp); removed by dsq_test_rmtmp. */
char *dsq_test_mkdtemp(void);
void dsq_test_rmtmp(char *dir);

/* Writes bytes to dir/name; returns the malloc'd full path. */
char *dsq_test_write(const char *dir, const char *name, const void *data, size_t n);

/* Number of entries in a folder (hidden ones included, "." and ".." not). */
int dsq_test_count_entries(const char *dir);

/* Full path of a file under ../shared, or NULL (printing a skip note) when absent. */
char *dsq_test_shared(const char *rel);

/* The cached default model GGUF (SmolLM2-135M-Instruct Q4_1), or NULL with a
 * skip note when scripts/fetch-default-model.sh has not been run. */
char *dsq_test_default_model(void);

/* Runs a shell command; returns its exit status (-1 when it could not run).
 * stderr of the command is captured into errbuf when non-NULL. */
int dsq_test_run(const char *cmd, char *errbuf, size_t errcap);

/* The dataset-lookup environment (DSQ_DATA, DSQ_SHARED_DIR, DSQ_CACHE,
 * DSQ_OFFLINE, DSQ_DATA_MIRROR) and the working folder, saved so a test can
 * change them and put them back. */
#define DSQ_TEST_ENV_VARS 5
typedef struct dsq_test_env {
    char *val[DSQ_TEST_ENV_VARS]; /* NULL: was unset */
    char *cwd;
} dsq_test_env;
dsq_test_env dsq_test_env_save(void);
/* Restores every variable and the working folder, and frees the snapshot. */
void dsq_test_env_restore(dsq_test_env *e);

/* Deterministic PRNG for test data. */
uint64_t dsq_test_rand(uint64_t *state);
float dsq_test_randn(uint64_t *state);

#endif
