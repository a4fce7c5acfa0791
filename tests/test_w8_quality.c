/* The 8-bit methods on the real default model, end to end through the CLI:
 * SmoothQuant W8A8 (family alpha 0.85, RTN weights, per-token INT8
 * activations), plain W8A8 (no smoothing) and FP8 dynamic, each written to
 * its compressed-tensors folder, read back by the runtime and scored on
 * WikiText-2 (llama-perplexity's protocol, 4 chunks of 512) against the F32
 * base the three were made from.
 *
 * Bounds, from the runs recorded in docs/algorithms.md (40 chunks: base
 * 23.51, SmoothQuant 23.81, plain 24.27, FP8 dynamic 24.32; at 4 chunks
 * +1.7%, +3.0%, +3.9%): SmoothQuant within +3%, plain W8A8 within +5%,
 * FP8 dynamic within +6%. They are loose by about 1.5 points because a
 * 135M model with 576-wide activations is far more sensitive to 8-bit
 * rounding than the 7B models the published "<0.5%" / "near lossless" figures
 * are for, and 4 chunks are a small sample. Held tightly instead: every
 * folder moved the perplexity (the quantization happened and its real
 * numerics ran), and smoothing beats plain W8A8 on this model, whose
 * activations have outlier channels (its RMSNorm inputs reach 10-30x the
 * median channel). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/fileio.h"
#include "tests/helpers/testutil.h"

#ifndef DSQ_BINARY
#error "DSQ_BINARY must name the dsquant program"
#endif

/* Runs `dsquant -q ARGS`; fails the case with its stderr otherwise. */
static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...)
{
    char args[4096], cmd[8192], err[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s -q %s", DSQ_BINARY, args);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("dsquant %s: %s", args, err);
}

/* The "ppl" of `dsquant ppl FOLDER` over the first 4 chunks of wiki. */
static double ppl_of(const char *dir, const char *name, const char *wiki)
{
    char json[4096];
    snprintf(json, sizeof json, "%s/%s.json", dir, name);
    run("ppl %s/%s --data %s --ctx 512 --chunks 4 --threads 2 --json > %s 2>/dev/null", dir, name, wiki, json);
    char *text;
    size_t len;
    assert_int_equal(dsq_read_file(json, 1 << 20, &text, &len), DSQ_OK);
    const char *p = strstr(text, "\"ppl\":");
    if (!p) fail_msg("%s: no \"ppl\" in %s", name, text);
    double v = strtod(p + 6, NULL);
    free(text);
    print_message("%-6s ppl %.4f\n", name, v);
    return v;
}

static void test_w8_perplexity_near_base(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    /* a figure, not a memory check: the sanitizer build runs the same CLI paths
     * in test_smoothquant's CLI cases, and these 8 minutes there would buy nothing */
    DSQ_TEST_SKIP_ENV("test_w8_quality: perplexity bounds are held by the release build, not under ASan");
#endif
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *wiki = dsq_test_shared("datasets/wiki.test.raw");
    char *calib = wiki ? dsq_test_shared("datasets/tinyshakespeare.txt.zst") : NULL;
    if (!calib) {
        free(wiki);
        free(model);
        DSQ_TEST_SKIP();
    }
    char *dir = dsq_test_mkdtemp();
    run("convert %s -o %s/base --dtype f32", model, dir);
    run("smoothquant %s/base -o %s/sq --calib %s --n-samples 8 --seqlen 256 --threads 2", dir, dir, calib);
    run("smoothquant %s/base -o %s/plain --no-smooth --threads 2", dir, dir);
    run("fp8 %s/base -o %s/fp8 --scheme dynamic --threads 2", dir, dir);

    double base = ppl_of(dir, "base", wiki);
    double sq = ppl_of(dir, "sq", wiki), plain = ppl_of(dir, "plain", wiki), fp8 = ppl_of(dir, "fp8", wiki);
    assert_true(base > 5 && base < 100); /* the base itself is sane */
    /* each folder's own numerics ran: the perplexity moved */
    assert_true(sq > base * 1.001 && plain > base * 1.001 && fp8 > base * 1.001);
    if (!(sq < base * 1.03)) fail_msg("SmoothQuant W8A8 ppl %.4f is more than +3%% over the base %.4f", sq, base);
    if (!(plain < base * 1.05)) fail_msg("plain W8A8 ppl %.4f is more than +5%% over the base %.4f", plain, base);
    if (!(fp8 < base * 1.06)) fail_msg("FP8 dynamic ppl %.4f is more than +6%% over the base %.4f", fp8, base);
    if (!(sq < plain)) fail_msg("smoothing did not help: SmoothQuant %.4f, plain W8A8 %.4f", sq, plain);

    dsq_test_rmtmp(dir);
    free(calib);
    free(wiki);
    free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_w8_perplexity_near_base),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
