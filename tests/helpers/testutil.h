/* Helpers shared by the cmocka tests. */
#ifndef DSQ_TESTS_TESTUTIL_H
#define DSQ_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

/* A fresh empty folder under $TMPDIR (or /tmp); removed by dsq_test_rmtmp. */
char *dsq_test_mkdtemp(void);
void dsq_test_rmtmp(char *dir);

/* Writes bytes to dir/name; returns the malloc'd full path. */
char *dsq_test_write(const char *dir, const char *name, const void *data, size_t n);

/* Number of entries in a folder (hidden ones included, "." and ".." not). */
int dsq_test_count_entries(const char *dir);

/* Skipping. A case that cannot run for want of a fixture the project's own
 * scripts provide (a ../shared file, the default model from
 * scripts/fetch-default-model.sh, a dataset) fails instead of skipping when
 * DSQ_TEST_REQUIRE_FIXTURES=1 (.ci/run sets it): a green CI run then means
 * every such case ran. A reason no script can fix (no GPU, a CPU without a
 * feature, an opt-in) always skips. Every skip is counted, so that
 * dsq_test_status can tell a program whose every case skipped (exit 77,
 * CTest's SKIP_RETURN_CODE) from one that passed.
 *
 * The macros need <cmocka.h> included before them (skip() is cmocka's). */

/* DSQ_TEST_REQUIRE_FIXTURES=1 in the environment. */
bool dsq_test_require_fixtures(void);

/* Prints "SKIP: <why>" for a missing fixture, or under
 * DSQ_TEST_REQUIRE_FIXTURES=1 fails the running case with that reason. */
void dsq_test_fixture_missing(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Counts a skip; the skip macros call it just before cmocka's skip(). */
void dsq_test_count_skip(void);

/* Skips the running case, a helper (dsq_test_shared, dsq_test_default_model,
 * dsq_test_fixture_missing) having already said why. */
#define DSQ_TEST_SKIP()                                                                                              \
    do {                                                                                                             \
        dsq_test_count_skip();                                                                                       \
        skip();                                                                                                      \
    } while (0)

/* A missing fixture: fails under DSQ_TEST_REQUIRE_FIXTURES=1, else skips. */
#define DSQ_TEST_SKIP_FIXTURE(...)                                                                                   \
    do {                                                                                                             \
        dsq_test_fixture_missing(__VA_ARGS__);                                                                       \
        DSQ_TEST_SKIP();                                                                                             \
    } while (0)

/* Hardware or environment, never a failure: prints "SKIP: <why>" and skips. */
#define DSQ_TEST_SKIP_ENV(...)                                                                                       \
    do {                                                                                                             \
        fprintf(stderr, "SKIP: " __VA_ARGS__);                                                                       \
        fputc('\n', stderr);                                                                                         \
        DSQ_TEST_SKIP();                                                                                             \
    } while (0)

/* main()'s exit status from the number of failed cases cmocka returned and
 * the number of cases run: 77 when none failed and every one skipped. */
int dsq_test_status(int failed, size_t n_cases);

/* cmocka_run_group_tests with that exit status. */
#define DSQ_TEST_RUN_GROUP(tests, setup, teardown)                                                                   \
    dsq_test_status(cmocka_run_group_tests(tests, setup, teardown), sizeof(tests) / sizeof((tests)[0]))

/* Full path of a file under ../shared, or NULL when absent (printing a skip
 * note, or failing the case under DSQ_TEST_REQUIRE_FIXTURES=1). */
char *dsq_test_shared(const char *rel);

/* The cached default model GGUF (SmolLM2-135M-Instruct Q4_1), or NULL when
 * scripts/fetch-default-model.sh has not been run (printing a skip note, or
 * failing the case under DSQ_TEST_REQUIRE_FIXTURES=1). */
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

/* A llama GGUF (the default model) cut to its first n_layers layers (with
 * its embedding, output, norms, KVs and tokenizer), every tensor F32: a
 * real model small enough for tests that run many commands. */
dsq_status dsq_test_cut_model(const char *src, const char *dst, int n_layers);

#endif
