/* `dsquant gguf --method gptq|awq` (calibration/gguf_calib.h) on the default
 * model (SmolLM2-135M Q4_1 taken to F32; skipped when it is not cached).
 *
 * - the file has the plain Q4_K_M file's layout exactly: the same KVs, tensor
 *   names, types, shapes and byte size; tensors GPTQ does not touch
 *   (token_embd, norms) are byte-identical to the plain file's; every
 *   decoder linear is calibrated (210 of them) and differs from plain.
 * - quality: KL divergence from the F32 model on tinyshakespeare (the
 *   calibration domain, 4 chunks) below the plain file's.
 * - a HF folder's Q/K rows reach the file in llama.cpp's order: layer 0 by
 *   GPTQ from the folder and from the GGUF hold nearly the same values.
 * - the CLI (which made the file, with --act-order): --json names the method,
 *   the windows and the calibrated tensors; too few calibration
 *   tokens for the widest input, one method's options with the other,
 *   calibration options without --method, an unknown method, a float --type
 *   (nothing for GPTQ to write), an existing output without --force: one
 *   error line, a non-zero exit, nothing written.
 * - awq (two layers by the library): the plain file's layout and size; the
 *   norms of the two layers changed (the scales folded in) and every linear
 *   of theirs rewritten, while each product W[r, c] * norm[c] stays the F32
 *   model's within quantization noise (the scales went into both sides);
 *   everything past layer 1 byte-identical to plain. The whole model by the
 *   CLI: KLD on the calibration domain below the plain file's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "calibration/gguf_calib.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/convert.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "quantizers/qtypes.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
/* ~10x slower: the sanitizer run checks memory on 2 layers, and skips the quality case */
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif
#define N_CALIBRATED (UNDER_SANITIZER ? 14 : 210) /* 7 linears per layer */

typedef struct fixture {
    char *dir, *f32, *calib;
    char plain[4096], gptq[4096];
} fixture;

static int setup(void **state)
{
    *state = NULL;
    char *model = dsq_test_default_model();
    char *calib = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    if (!model || !calib) { /* the helpers said which is missing */
        free(model);
        free(calib);
        return 0;
    }
    fixture *f = calloc(1, sizeof *f);
    f->dir = dsq_test_mkdtemp();
    f->calib = calib;
    size_t n = strlen(f->dir) + 16;
    f->f32 = malloc(n);
    snprintf(f->f32, n, "%s/f32.gguf", f->dir);
    snprintf(f->plain, sizeof f->plain, "%s/plain.gguf", f->dir);
    snprintf(f->gptq, sizeof f->gptq, "%s/gptq.gguf", f->dir);
    dsq_log_set_level(DSQ_LOG_ERROR); /* SmolLM2's 576-wide rows make the mix warn 180 times */
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_ALL_F32);
    o.allow_requantize = true;
    dsq_status s = dsq_gguf_quantize(model, f->f32, &o, NULL);
    free(model);
    if (s == DSQ_OK) {
        o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
        s = dsq_gguf_quantize(f->f32, f->plain, &o, NULL);
    }
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
    dsq_test_rmtmp(f->dir);
    free(f->f32);
    free(f->calib);
    free(f);
    return 0;
}

static dsq_tensor tensor_of(const dsq_gguf *g, const char *name)
{
    int64_t i = dsq_gguf_find_tensor(g, name);
    if (i < 0) fail_msg("%s: no tensor %s", g->path, name);
    dsq_tensor t;
    assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, &t), DSQ_OK);
    return t;
}

/* The CLI's --json summary of the GPTQ run. */
static void check_summary(const fixture *f, const char *json)
{
    char *text = NULL;
    size_t len;
    (void)f;
    assert_int_equal(dsq_read_file(json, 1 << 22, &text, &len), DSQ_OK);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "method")->valuestring, "gptq");
    assert_int_equal((int)cJSON_GetObjectItem(j, "n_calibrated")->valuedouble, N_CALIBRATED);
    assert_int_equal((int)cJSON_GetObjectItem(j, "n_samples")->valuedouble, 8);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "act_order")));
    assert_true(cJSON_GetObjectItem(j, "gptq_loss")->valuedouble > 0.0);
    cJSON *tensors = cJSON_GetObjectItem(j, "tensors");
    int calibrated = 0;
    for (int i = 0; i < cJSON_GetArraySize(tensors); i++)
        calibrated += cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(tensors, i), "calibrated"));
    assert_int_equal(calibrated, N_CALIBRATED);
    cJSON_Delete(j);
    free(text);
}

/* The GPTQ file: by the CLI (whole model), or under the sanitizer by the
 * library on two layers (the CLI has no layer limit). */
static void make_gptq(fixture *f)
{
    if (UNDER_SANITIZER) {
        dsq_gguf_calib_opts co = {
            .method = &dsq_method_gptq, .calib = {f->calib, 3, 512, 0}, .damp = 0.01, .max_layers = 2};
        dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
        dsq_gguf_calib_report rep;
        if (dsq_gguf_calib_quantize(f->f32, f->gptq, &o, &co, &rep) != DSQ_OK) fail_msg("gptq: %s", dsq_errmsg());
        assert_int_equal(rep.gguf->n_provided, N_CALIBRATED);
        assert_int_equal(rep.seq.n_quantized, N_CALIBRATED);
        dsq_gguf_calib_report_free(&rep);
        return;
    }
    char cmd[16384], err[8192], json[4200];
    snprintf(json, sizeof json, "%s/gptq.json", f->dir);
    snprintf(cmd, sizeof cmd,
             "'%s' -q gguf '%s' -o '%s' --type Q4_K_M --method gptq --calib '%s' --n-samples 8 --seqlen 512 "
             "--act-order --json > '%s'",
             DSQ_BINARY, f->f32, f->gptq, f->calib, json);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("gptq: %s", err);
    check_summary(f, json);
    unlink(json);
}

static void test_layout_and_bytes(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    make_gptq(f);

    dsq_gguf *a = NULL, *b = NULL;
    assert_int_equal(dsq_gguf_open(f->plain, &a), DSQ_OK);
    assert_int_equal(dsq_gguf_open(f->gptq, &b), DSQ_OK);
    assert_int_equal(a->map.size, b->map.size);
    assert_int_equal(a->n_kv, b->n_kv);
    assert_int_equal(a->data_offset, b->data_offset);
    assert_memory_equal(a->map.data, b->map.data, a->data_offset); /* KVs and tensor table */
    int differ = 0, linears = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const char *name = a->tensors[i].name;
        dsq_tensor ta = tensor_of(a, name), tb = tensor_of(b, name);
        assert_int_equal(ta.type, tb.type);
        assert_int_equal(ta.nbytes, tb.nbytes);
        bool same = !memcmp(ta.data, tb.data, ta.nbytes);
        bool linear = !strncmp(name, "blk.", 4) && !strstr(name, "_norm") && atoi(name + 4) * 7 < N_CALIBRATED;
        if (!linear && !same) fail_msg("%s: not a calibrated linear, yet it differs from the plain file", name);
        linears += linear;
        differ += linear && !same;
    }
    assert_int_equal(linears, N_CALIBRATED);
    if (differ < N_CALIBRATED * 19 / 20)
        fail_msg("only %d of %d calibrated linears differ from plain quantization", differ, N_CALIBRATED);
    dsq_gguf_close(a);
    dsq_gguf_close(b);
}

/* Values of tensor name of a GGUF file, dequantized (caller frees). */
static float *values_of(const char *path, const char *name, int64_t *n)
{
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    dsq_tensor t = tensor_of(g, name);
    *n = (int64_t)dsq_tensor_nelems(&t);
    const int64_t row = t.shape[t.n_dims - 1]; /* shapes are outermost first */
    float *v = malloc((size_t)*n * sizeof *v);
    assert_int_equal(dsq_dequantize(t.type, t.data, v, *n / row, row), DSQ_OK);
    dsq_gguf_close(g);
    return v;
}

/* A HF folder holds Q and K rows in HF order: the bytes must reach the file
 * in llama.cpp's permuted order. Layer 0 by GPTQ from the folder and from the
 * F32 GGUF must then hold nearly the same values (the calibration passes
 * differ only in rounding); rows in the wrong order would differ by about
 * the weights' own size. */
static void test_hf_input_rows(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    char hf[4200], a[4200], b[4200];
    snprintf(hf, sizeof hf, "%s/hf", f->dir);
    snprintf(a, sizeof a, "%s/l0-gguf.gguf", f->dir);
    snprintf(b, sizeof b, "%s/l0-hf.gguf", f->dir);
    assert_int_equal(dsq_convert_gguf_to_hf(f->f32, hf, DSQ_CONVERT_F32, false, 0), DSQ_OK);
    dsq_gguf_calib_opts co = {
        .method = &dsq_method_gptq, .calib = {f->calib, 3, 512, 0}, .damp = 0.01, .max_layers = 1};
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
    const char *in[2] = {f->f32, hf}, *out[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        dsq_gguf_calib_report rep;
        if (dsq_gguf_calib_quantize(in[i], out[i], &o, &co, &rep) != DSQ_OK) fail_msg("%s: %s", in[i], dsq_errmsg());
        assert_int_equal(rep.gguf->n_provided, 7);
        dsq_gguf_calib_report_free(&rep);
    }
    static const char *const names[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"};
    for (int k = 0; k < 3; k++) {
        int64_t n1, n2;
        float *x = values_of(a, names[k], &n1), *y = values_of(b, names[k], &n2);
        assert_int_equal(n1, n2);
        double d2 = 0, w2 = 0;
        for (int64_t i = 0; i < n1; i++) d2 += (double)(x[i] - y[i]) * (x[i] - y[i]), w2 += (double)x[i] * x[i];
        print_message("%s: HF vs GGUF input, relative difference %.4f\n", names[k], sqrt(d2 / w2));
        if (!(sqrt(d2 / w2) < 0.1))
            fail_msg("%s: from the HF folder %.3f away from the GGUF input's", names[k], sqrt(d2 / w2));
        free(x);
        free(y);
    }
}

static double kld_of(const fixture *f, const char *quant)
{
    char cmd[16384], err[8192], path[4200];
    snprintf(path, sizeof path, "%s/kld.json", f->dir);
    snprintf(cmd, sizeof cmd, "'%s' -q kld '%s' '%s' --data '%s' --chunks 4 --ctx 512 --json > '%s'", DSQ_BINARY,
             f->f32, quant, f->calib, path);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("kld: %s", err);
    char *text = NULL;
    size_t len;
    assert_int_equal(dsq_read_file(path, 1 << 20, &text, &len), DSQ_OK);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    double v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kld"), "value")->valuedouble;
    cJSON_Delete(j);
    free(text);
    return v;
}

static void test_quality_in_domain(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    if (UNDER_SANITIZER) DSQ_TEST_SKIP_ENV("quality under the sanitizer build: two layers only");
    if (!dsq_exists(f->gptq)) fail_msg("test_layout_and_bytes must run first");
    double plain = kld_of(f, f->plain), gptq = kld_of(f, f->gptq);
    print_message("KLD on tinyshakespeare (4 x 512): plain Q4_K_M %.5f, gptq %.5f (%.2fx)\n", plain, gptq,
                  gptq / plain);
    if (!(gptq < plain)) fail_msg("gptq KLD %g is not below plain %g", gptq, plain);
}

static void test_cli(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    char cmd[16384], err[8192];
    char out[4200];
    snprintf(out, sizeof out, "%s", f->gptq); /* exists: made by test_layout_and_bytes */
    int before = dsq_test_count_entries(f->dir);

    /* 2 x 64 tokens are fewer than the 1536-wide down_proj input */
    snprintf(cmd, sizeof cmd,
             "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method gptq --calib '%s' --n-samples 2 "
             "--seqlen 64",
             DSQ_BINARY, f->f32, f->dir, f->calib);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "fewer than the widest linear input (1536)"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method awq --act-order", DSQ_BINARY,
             f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "gptq's options, not awq's"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method gptq --loss-samples 2",
             DSQ_BINARY, f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "awq's option, not gptq's"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method gptq --finalists 2", DSQ_BINARY,
             f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "--finalists is awq's option, not gptq's"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method rtn", DSQ_BINARY, f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "only gptq and awq"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --n-samples 8", DSQ_BINARY, f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "need --method"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q4_K_M --method nope", DSQ_BINARY, f->f32, f->dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    /* a float type leaves GPTQ nothing to write */
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type F16 --method gptq --calib '%s'", DSQ_BINARY, f->f32,
             f->dir, f->calib);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "no decoder tensor to a block type"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s' --type Q4_K_M --method gptq", DSQ_BINARY, f->f32, out);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "--force"));
    assert_int_equal(dsq_test_count_entries(f->dir), before); /* nothing written, no scratch file left */
}

/* max over c of |a[c] / b[c] - 1| */
static double max_ratio_change(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] / b[i] - 1.0));
    return m;
}

/* ||W1 diag(n1) - W2 diag(n2)|| / ||W2 diag(n2)|| for [rows x cols] W. */
static double product_error(const float *w1, const float *n1, const float *w2, const float *n2, int64_t rows,
                            int64_t cols)
{
    double d2 = 0, r2 = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double p1 = (double)w1[r * cols + c] * n1[c], p2 = (double)w2[r * cols + c] * n2[c];
            d2 += (p1 - p2) * (p1 - p2), r2 += p2 * p2;
        }
    return sqrt(d2 / r2);
}

static void test_awq_layers(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    char awq[4200];
    snprintf(awq, sizeof awq, "%s/awq2.gguf", f->dir);
    dsq_gguf_calib_opts co = {
        .method = &dsq_method_awq, .calib = {f->calib, 3, 512, 0}, .max_layers = 2, .loss_samples = 1};
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
    dsq_gguf_calib_report rep;
    if (dsq_gguf_calib_quantize(f->f32, awq, &o, &co, &rep) != DSQ_OK) fail_msg("awq: %s", dsq_errmsg());
    assert_int_equal(rep.gguf->n_provided, 14);
    assert_int_equal(rep.seq.n_quantized, 14);
    dsq_gguf_calib_report_free(&rep);

    dsq_gguf *a = NULL, *b = NULL;
    assert_int_equal(dsq_gguf_open(f->plain, &a), DSQ_OK);
    assert_int_equal(dsq_gguf_open(awq, &b), DSQ_OK);
    assert_int_equal(a->map.size, b->map.size);
    assert_memory_equal(a->map.data, b->map.data, a->data_offset);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const char *name = a->tensors[i].name;
        dsq_tensor ta = tensor_of(a, name), tb = tensor_of(b, name);
        bool same = ta.nbytes == tb.nbytes && !memcmp(ta.data, tb.data, ta.nbytes);
        bool touched = !strncmp(name, "blk.", 4) && atoi(name + 4) < 2;
        if (!touched && !same) fail_msg("%s: past the two AWQ layers, yet it differs from the plain file", name);
        if (touched && same) fail_msg("%s: in an AWQ layer, yet identical to the plain file", name);
    }
    dsq_gguf_close(a);
    dsq_gguf_close(b);

    /* (not ffn_up: its rows also took the down_proj group's 1 / s) */
    static const char *const pairs[][2] = {{"attn_norm", "attn_q"}, {"attn_norm", "attn_v"}, {"ffn_norm", "ffn_gate"}};
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 3; k++) {
            char nn[64], wn[64];
            snprintf(nn, sizeof nn, "blk.%d.%s.weight", l, pairs[k][0]);
            snprintf(wn, sizeof wn, "blk.%d.%s.weight", l, pairs[k][1]);
            int64_t n1, n2, m1, m2;
            float *na = values_of(awq, nn, &n1), *nf = values_of(f->f32, nn, &n2);
            float *wa = values_of(awq, wn, &m1), *wf = values_of(f->f32, wn, &m2);
            assert_int_equal(n1, n2);
            assert_int_equal(m1, m2);
            double moved = max_ratio_change(na, nf, n1), err = product_error(wa, na, wf, nf, m1 / n1, n1);
            double unscaled = product_error(wf, na, wf, nf, m1 / n1, n1);
            print_message("%s: norm moved up to %.2f; W diag(norm) %.4f from F32's (%.2f without the columns' "
                          "scales)\n", wn, moved, err, unscaled);
            if (!(moved > 0.05)) fail_msg("%s: the norm did not take AWQ's scales (%.4f)", nn, moved);
            if (!(err < 0.1)) fail_msg("%s: W diag(norm) is %.4f from F32's: the scales are not in both", wn, err);
            if (!(unscaled > 2 * err)) fail_msg("%s: the scales changed nothing that matters (%.4f)", wn, unscaled);
            free(na), free(nf), free(wa), free(wf);
        }
}

/* The whole model by the CLI; its KLD in the calibration domain below plain. */
static void test_awq_quality(void **state)
{
    fixture *f = *state;
    if (!f) DSQ_TEST_SKIP();
    if (UNDER_SANITIZER) DSQ_TEST_SKIP_ENV("the whole model under the sanitizer build: test_awq_layers covers two");
    char cmd[16384], err[8192], awq[4200];
    snprintf(awq, sizeof awq, "%s/awq.gguf", f->dir);
    snprintf(cmd, sizeof cmd,
             "'%s' -q gguf '%s' -o '%s' --type Q4_K_M --method awq --calib '%s' --n-samples 4 --seqlen 512 "
             "--loss-samples 1",
             DSQ_BINARY, f->f32, awq, f->calib);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("awq: %s", err);
    double plain = kld_of(f, f->plain), q = kld_of(f, awq);
    print_message("KLD on tinyshakespeare (4 x 512): plain Q4_K_M %.5f, awq %.5f (%.2fx)\n", plain, q, q / plain);
    if (!(q < 0.9 * plain)) fail_msg("awq KLD %g is not clearly below plain %g", q, plain);
    unlink(awq);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_bytes),
        cmocka_unit_test(test_quality_in_domain),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_hf_input_rows),
        cmocka_unit_test(test_awq_layers),
        cmocka_unit_test(test_awq_quality),
    };
    return DSQ_TEST_RUN_GROUP(tests, setup, teardown);
}
