/* Budgeted GGUF mixes (eval/budget.h, `dsquant gguf --target-size ...`) on
 * a two-layer cut of the default model (SmolLM2-135M's first two layers,
 * its embedding and tokenizer, taken to F32; skipped when the model is not
 * cached), with candidates q3_K q4_K q6_K q4_0 q5_0 q8_0 (q4_1 is left out:
 * the model's weights are Q4_1 values, which q4_1 reproduces exactly).
 *
 * - sensitivities: every tensor has the candidates that fit its rows (4 or
 *   6), q8_0 leaves less error than q4_0 everywhere (none on the
 *   embedding, which the model stores as Q8_0), every group's KLD and
 *   gain are positive;
 * - size budgets are met to the byte and cost falls as they grow; at the
 *   size of llama.cpp's Q4_K_M mix the allocation predicts no more KLD than
 *   the mix (the mix is one of the choices it considered); a KLD limit gets
 *   a file no byte smaller can have (solving for cost one byte below it
 *   exceeds the limit); bits per weight likewise;
 * - the CLI writes the file at the predicted size, its --json carries the
 *   allocation and a measured KLD, the scratch files are gone; a budget
 *   below the smallest file, two budgets at once, budget options without a
 *   budget and a non-quantized candidate fail with one line, nothing written. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/log.h"
#include "core/status.h"
#include "eval/budget.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "quantizers/qtypes.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

#define CANDIDATES "q3_K,q4_K,q6_K,q4_0,q5_0,q8_0"

typedef struct fixture {
    char *dir, *calib;
    char model[4096], scratch[4096];
    dsq_budget *b;
    dsq_gguf_quantize_report *mix;
} fixture;

static dsq_budget_opts budget_opts(fixture *f, dsq_type *cands)
{
    int n = 0;
    assert_int_equal(dsq_budget_parse_candidates(UNDER_SANITIZER ? "q4_0,q8_0" : CANDIDATES, cands, 16, &n), DSQ_OK);
    dsq_budget_opts o = {
        .candidates = cands, .n_candidates = n, .data = f->calib, .ctx = 64, .chunks = 2, .scratch = f->scratch};
    return o;
}

static int setup(void **state)
{
    *state = NULL;
    char *model = dsq_test_default_model();
    char *calib = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    if (!model || !calib) {
        free(model);
        free(calib);
        return 0;
    }
    fixture *f = calloc(1, sizeof *f);
    f->dir = dsq_test_mkdtemp();
    f->calib = calib;
    snprintf(f->model, sizeof f->model, "%s/cut.gguf", f->dir);
    snprintf(f->scratch, sizeof f->scratch, "%s/out.gguf", f->dir);
    dsq_log_set_level(DSQ_LOG_ERROR);
    dsq_status s = dsq_test_cut_model(model, f->model, 2);
    free(model);
    dsq_type cands[16];
    dsq_budget_opts bo = budget_opts(f, cands);
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
    if (s == DSQ_OK) s = dsq_budget_measure(f->model, &o, &bo, &f->b);
    if (s == DSQ_OK) s = dsq_gguf_quantize_plan(f->model, &o, &f->mix);
    if (s != DSQ_OK) {
        fprintf(stderr, "setup: %s\n", dsq_errmsg());
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    dsq_log_set_level(DSQ_LOG_INFO);
    if (!f) return 0;
    dsq_budget_free(f->b);
    dsq_gguf_quantize_report_free(f->mix);
    dsq_test_rmtmp(f->dir);
    free(f->calib);
    free(f);
    return 0;
}

static const dsq_budget_option *option(const dsq_budget_tensor *t, dsq_type type)
{
    for (int o = 0; o < t->n_options; o++)
        if (t->options[o].type == type) return &t->options[o];
    return NULL;
}

static void test_sensitivities(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    assert_int_equal(dsq_budget_n_tensors(f->b), 15); /* token_embd + 2 x 7 linears */
    assert_int_equal(dsq_budget_n_groups(f->b), 8);
    assert_true(dsq_budget_combine(f->b) >= 0.5 && dsq_budget_combine(f->b) <= 10);
    for (size_t i = 0; i < dsq_budget_n_tensors(f->b); i++) {
        const dsq_budget_tensor *t = dsq_budget_tensor_at(f->b, i);
        bool wide = strstr(t->name, "ffn_down") != NULL; /* 1536 = 6 x 256: the k-quants fit */
        assert_int_equal(t->n_options, UNDER_SANITIZER ? 2 : wide ? 6 : 3);
        const dsq_budget_option *lo = option(t, DSQ_TYPE_Q4_0), *hi = option(t, DSQ_TYPE_Q8_0);
        assert_non_null(lo);
        assert_non_null(hi);
        /* the model's embedding is stored as Q8_0: q8_0 gives it back exactly */
        if (!(hi->err >= 0 && hi->err < lo->err)) fail_msg("%s: q8_0 error %g, q4_0 %g", t->name, hi->err, lo->err);
        assert_true(lo->bytes < hi->bytes);
    }
    for (size_t g = 0; g < dsq_budget_n_groups(f->b); g++) {
        const dsq_budget_group *gr = dsq_budget_group_at(f->b, g);
        assert_true(gr->kld > 0 && gr->gain > 0 && gr->err_ref > 0);
        assert_int_equal(gr->n_tensors, strcmp(gr->name, "token_embd.weight") ? 2 : 1);
    }
}

/* The groups were measured in memory (eval/model_swap.h), each giving the
 * KLD a scratch GGUF with its tensors gives, to the bit: the embedding (tied
 * to the head), a linear group and every group at once; a measurement after
 * the file's gives the same again (nothing stayed swapped). */
static void test_in_memory_equals_file(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    assert_int_equal(dsq_budget_n_in_memory(f->b), dsq_budget_n_groups(f->b) + 1);
    size_t embd = SIZE_MAX, lin = SIZE_MAX;
    for (size_t g = 0; g < dsq_budget_n_groups(f->b); g++) {
        const char *name = dsq_budget_group_at(f->b, g)->name;
        if (!strcmp(name, "token_embd.weight")) embd = g;
        if (strstr(name, "ffn_down")) lin = g;
    }
    assert_true(embd != SIZE_MAX && lin != SIZE_MAX);
    const size_t groups[] = {embd, lin, SIZE_MAX};
    for (size_t k = 0; k < 3; k++) {
        double mem = -1, file = -2, again = -3;
        assert_int_equal(dsq_budget_group_kld(f->b, groups[k], false, &mem), DSQ_OK);
        assert_int_equal(dsq_budget_group_kld(f->b, groups[k], true, &file), DSQ_OK);
        assert_int_equal(dsq_budget_group_kld(f->b, groups[k], false, &again), DSQ_OK);
        if (!(mem == file && again == mem && mem > 0))
            fail_msg("group %zu: in memory %.17g, scratch file %.17g, in memory again %.17g", groups[k], mem, file,
                     again);
        if (groups[k] != SIZE_MAX) assert_true(dsq_budget_group_at(f->b, groups[k])->kld == mem);
    }
    assert_int_equal(dsq_budget_group_kld(f->b, 99, false, &(double){0}), DSQ_ERR_ARG);
}

static void test_size_budgets(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    dsq_budget_solution s;
    /* the smallest file: every tensor at its smallest candidate */
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_SIZE, 1e6, &s), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "below the smallest possible"));
    uint64_t least = strtoull(strstr(dsq_errmsg(), "possible, ") + 10, NULL, 10);
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_SIZE, (double)least, &s), DSQ_OK);
    assert_true(s.file_bytes == least);
    dsq_budget_solution_free(&s);
    double prev = INFINITY;
    for (int k = 0; k <= 8; k++) {
        double target = (double)least * (1.0 + 0.1 * k);
        assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_SIZE, target, &s), DSQ_OK);
        assert_true((double)s.file_bytes <= target);
        assert_true(s.alloc.exact);
        assert_true(s.predicted_kld <= prev * (1 + 1e-12));
        prev = s.predicted_kld;
        dsq_budget_solution_free(&s);
    }
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_BPW, 6.0, &s), DSQ_OK);
    assert_true(s.bpw <= 6.0);
    dsq_budget_solution_free(&s);
}

/* At the mix's own size the allocation can take the mix's types, so it
 * predicts no more; a KLD limit is met by a file that no smaller one meets. */
static void test_against_mix_and_kld_limit(void **state)
{
    fixture *f = *state;
    if (!f || UNDER_SANITIZER) DSQ_TEST_SKIP(); /* q4_K/q6_K/q5_0 of the mix are not candidates there */
    double mix_kld;
    assert_int_equal(dsq_budget_predict(f->b, f->mix, &mix_kld), DSQ_OK);
    assert_true(mix_kld > 0);
    dsq_budget_solution s;
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_SIZE, (double)f->mix->file_bytes, &s), DSQ_OK);
    assert_true(s.file_bytes <= f->mix->file_bytes);
    assert_true(s.predicted_kld <= mix_kld * (1 + 1e-9));
    print_message("at %llu bytes: llama.cpp's Q4_K_M mix predicts KLD %.5f, the allocation %.5f\n",
                  (unsigned long long)f->mix->file_bytes, mix_kld, s.predicted_kld);
    dsq_budget_solution_free(&s);

    double limit = mix_kld;
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_KLD, limit, &s), DSQ_OK);
    assert_true(s.predicted_kld <= limit * (1 + 1e-12));
    uint64_t bytes = s.file_bytes;
    dsq_budget_solution_free(&s);
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_SIZE, (double)bytes - 1, &s), DSQ_OK);
    assert_true(s.predicted_kld > limit);
    dsq_budget_solution_free(&s);
    assert_int_equal(dsq_budget_solve(f->b, DSQ_BUDGET_KLD, 1e-12, &s), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "cannot be met"));
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_cli(void **state)
{
    fixture *f = *state;
    if (!f || UNDER_SANITIZER) DSQ_TEST_SKIP(); /* the library cases above cover the sanitizer run */
    char cmd[16384], err[8192], json[4200];
    snprintf(json, sizeof json, "%s/out.json", f->dir);
    int before = dsq_test_count_entries(f->dir);
    snprintf(cmd, sizeof cmd,
             "'%s' -q gguf '%s' -o '%s' --type Q4_K_M --target-size %llu --candidates " CANDIDATES
             " --calib '%s' --budget-chunks 2 --budget-ctx 64 --json > '%s'",
             DSQ_BINARY, f->model, f->scratch, (unsigned long long)f->mix->file_bytes, f->calib, json);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("budget: %s", err);
    if (dsq_test_count_entries(f->dir) != before + 2) { /* the file and the JSON, no scratch */
        snprintf(cmd, sizeof cmd, "ls -la '%s' >&2", f->dir);
        (void)!system(cmd);
        fail_msg("%d entries, %d before", dsq_test_count_entries(f->dir), before);
    }
    FILE *fp = fopen(json, "rb");
    assert_non_null(fp);
    char *text = calloc(1, 1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, fp);
    fclose(fp);
    assert_true(n > 0);
    cJSON *o = cJSON_Parse(text);
    free(text);
    assert_non_null(o);
    cJSON *b = cJSON_GetObjectItem(o, "budget");
    assert_non_null(b);
    assert_string_equal(cJSON_GetObjectItem(b, "kind")->valuestring, "size");
    long size = file_size(f->scratch);
    assert_true(size > 0 && (uint64_t)size <= f->mix->file_bytes);
    assert_true(cJSON_GetObjectItem(b, "predicted_file_bytes")->valuedouble == (double)size);
    assert_true(cJSON_GetObjectItem(o, "file_bytes")->valuedouble == (double)size);
    double measured = cJSON_GetObjectItem(b, "measured_kld")->valuedouble;
    assert_true(measured > 0 && measured < 1);
    cJSON *tensors = cJSON_GetObjectItem(b, "tensors");
    assert_int_equal(cJSON_GetArraySize(tensors), 15);
    /* every budgeted tensor has the chosen type in the file */
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(f->scratch, &g), DSQ_OK);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors)
    {
        int64_t i = dsq_gguf_find_tensor(g, cJSON_GetObjectItem(t, "name")->valuestring);
        assert_true(i >= 0);
        assert_string_equal(dsq_type_name(g->tensors[i].type), cJSON_GetObjectItem(t, "type")->valuestring);
        assert_non_null(strstr(CANDIDATES, cJSON_GetObjectItem(t, "type")->valuestring));
    }
    dsq_gguf_close(g);
    cJSON_Delete(o);
    unlink(json);
    unlink(f->scratch);
}

static void test_cli_errors(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    char cmd[16384], err[8192];
    int before = dsq_test_count_entries(f->dir);
    snprintf(cmd, sizeof cmd,
             "'%s' gguf '%s' -o '%s' --type Q4_K_M --target-size 1M --candidates q4_0,q8_0 --calib '%s' "
             "--budget-chunks 1 --budget-ctx 16",
             DSQ_BINARY, f->model, f->scratch, f->calib);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    if (!strstr(err, "below the smallest possible")) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s' --type Q4_K_M --target-bpw 4 --max-kld 0.1", DSQ_BINARY, f->model,
             f->scratch);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "give one of"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s' --type Q4_K_M --candidates q4_0", DSQ_BINARY, f->model,
             f->scratch);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "need a budget"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s' --type Q4_K_M --target-bpw 4 --candidates q4_0,f16", DSQ_BINARY,
             f->model, f->scratch);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "f16 is not a quantized GGUF type"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s' --type Q4_K_M --target-size 12parsecs", DSQ_BINARY, f->model,
             f->scratch);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_int_equal(dsq_test_count_entries(f->dir), before); /* nothing written, no scratch left */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sensitivities),
        cmocka_unit_test(test_in_memory_equals_file),
        cmocka_unit_test(test_size_budgets),
        cmocka_unit_test(test_against_mix_and_kld_limit),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_cli_errors),
    };
    return DSQ_TEST_RUN_GROUP(tests, setup, teardown);
}
