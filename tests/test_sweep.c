/* `dsquant sweep` and `dsquant report` (cli/cmd_sweep.c, eval/report.h).
 *
 * - a real sweep on a two-layer cut of the default model (Q4_K_M and Q8_0 x
 *   plain, imatrix, budget; tiny evaluation): six files whose sizes are the
 *   sizes sweep.json records, every KLD finite and >= 0, Q8_0 below Q4_K_M,
 *   the budget at the imatrix file's size or below, Pareto flags that agree
 *   with the points, per-layer errors for layers -1, 0, 1 and every command
 *   recorded;
 * - the page, rendered by headless Chromium (Debian's chromium) from a copy
 *   named .xhtml so that Chromium parses it as XML: no parser error, one
 *   circle per file in each plot plus the legend's, the Pareto line, one
 *   table row per file, a bar chart per type;
 * - hostile sweep.json (not JSON, no results, a string KLD, a negative bpw,
 *   markup in a type name): one-line errors naming the field, nothing
 *   written, or markup escaped.
 * Release build only for the sweep itself (many child commands); the report
 * cases run under the sanitizers too. */
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

#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "eval/layer_error.h"
#include "eval/report.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

static char *slurp(const char *path, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    if (dsq_read_file(path, 64u << 20, &text, &n) != DSQ_OK) fail_msg("%s: %s", path, dsq_errmsg());
    if (len) *len = n;
    return text;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Chromium's DOM of the page read as XML; NULL (after a skip note or a
 * failure under DSQ_TEST_REQUIRE_FIXTURES) without chromium. */
static char *chromium_dom(const char *dir, const char *html)
{
    if (system("command -v chromium >/dev/null 2>&1") != 0) {
        dsq_test_fixture_missing("chromium (Debian package; scripts/install-deps.sh installs it)");
        return NULL;
    }
    char xhtml[4200], dom[4200], cmd[16384], err[4096];
    snprintf(xhtml, sizeof xhtml, "%s/page.xhtml", dir);
    snprintf(dom, sizeof dom, "%s/dom.txt", dir);
    size_t len;
    char *text = slurp(html, &len);
    free(dsq_test_write(dir, "page.xhtml", text, len));
    free(text);
    snprintf(cmd, sizeof cmd,
             "timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir='%s/chrome' "
             "--dump-dom 'file://%s' > '%s'",
             dir, xhtml, dom);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("chromium: %s", err);
    return slurp(dom, NULL);
}

/* ---------------------------------------------------------------- report */

static const char k_sweep[] =
    "{\"model\":\"m.gguf\",\"data\":\"wikitext2\",\"chunks\":2,\"ctx\":64,\"calib\":\"c\",\"cpu\":\"x\",\"date\":\"d\","
    "\"base_ppl\":20.5,\"setup_commands\":[\"dsquant kld m.gguf --data wikitext2\"],\"results\":["
    "{\"type\":\"Q4_K_M\",\"method\":\"plain\",\"file\":\"a.gguf\",\"command\":\"dsquant gguf a\",\"file_bytes\":1000,"
    "\"bpw\":4.8,\"kld\":0.05,\"kld_err\":0.002,\"ppl\":22,\"ppl_err\":0.5,\"same_top\":0.9,\"pareto\":false,"
    "\"layers\":[{\"layer\":-1,\"rel_err\":0.01},{\"layer\":0,\"rel_err\":0.02}]},"
    "{\"type\":\"Q4_K_M\",\"method\":\"imatrix\",\"file\":\"b.gguf\",\"file_bytes\":1000,\"bpw\":4.8,\"kld\":0.03,"
    "\"ppl\":21.5,\"pareto\":true,\"layers\":[{\"layer\":-1,\"rel_err\":0.01},{\"layer\":0,\"rel_err\":0.015}]},"
    "{\"type\":\"<b>&'Q8\\\"\",\"method\":\"plain\",\"file\":\"c.gguf\",\"file_bytes\":2000,\"bpw\":8.5,\"kld\":0.001,"
    "\"ppl\":20.6,\"pareto\":true}]}";

static void test_report_page(void **state)
{
    (void)state;
    char *html = NULL;
    size_t len = 0;
    assert_int_equal(dsq_report_html(k_sweep, strlen(k_sweep), &html, &len), DSQ_OK);
    assert_int_equal(strlen(html), len);
    assert_int_equal(count(html, "<circle"), 2 * 3 + 2 * 2); /* points in both plots + the legends' 2 methods */
    assert_int_equal(count(html, "class=\"pareto\""), 1);
    assert_int_equal(count(html, "<tr>"), 4);                     /* header + 3 files */
    assert_int_equal(count(html, "class=\"plot bars\""), 1);      /* only Q4_K_M has layers */
    assert_non_null(strstr(html, "&lt;b&gt;&amp;&#39;Q8&quot;")); /* the type name, escaped */
    assert_null(strstr(html, "<b>"));
    assert_non_null(strstr(html, "dsquant kld m.gguf --data wikitext2"));
    char *dir = dsq_test_mkdtemp();
    char *path = dsq_test_write(dir, "report.html", html, len);
    free(html);
    char *dom = chromium_dom(dir, path);
    if (dom) {
        assert_null(strstr(dom, "parsererror"));
        assert_int_equal(count(dom, "<circle"), 10);
        assert_int_equal(count(dom, "<polyline"), 1);
        free(dom);
    }
    free(path);
    dsq_test_rmtmp(dir);
}

static void expect_bad(const char *json, const char *what)
{
    char *html = NULL;
    size_t len = 0;
    assert_int_equal(dsq_report_html(json, strlen(json), &html, &len), DSQ_ERR_FORMAT);
    assert_null(html);
    if (!strstr(dsq_errmsg(), what)) fail_msg("expected '%s' in: %s", what, dsq_errmsg());
}

static void test_report_hostile(void **state)
{
    (void)state;
    expect_bad("{\"model\":", "not valid JSON");
    expect_bad("[1,2]", "not a JSON object");
    expect_bad("{\"model\":\"m\",\"results\":[]}", "results: missing, empty");
    expect_bad("{\"model\":\"m\",\"results\":[{\"type\":\"T\",\"method\":\"p\",\"file\":\"f\",\"file_bytes\":1,"
               "\"bpw\":4,\"kld\":\"0.1\",\"ppl\":3}]}",
               "results[0].kld");
    expect_bad("{\"model\":\"m\",\"results\":[{\"type\":\"T\",\"method\":\"p\",\"file\":\"f\",\"file_bytes\":1,"
               "\"bpw\":-4,\"kld\":0.1,\"ppl\":3}]}",
               "results[0].bpw");
    expect_bad("{\"model\":\"m\",\"results\":[{\"type\":\"T\",\"method\":\"p\",\"file\":\"f\",\"file_bytes\":1,"
               "\"bpw\":4,\"kld\":0.1,\"ppl\":3,\"layers\":[{\"layer\":0}]}]}",
               "results[0].rel_err");
    expect_bad("{\"results\":[]}", "model: missing");

    /* the CLI: one line, exit 1, no page */
    char *dir = dsq_test_mkdtemp();
    free(dsq_test_write(dir, "sweep.json", "{\"model\":\"m\",\"results\":[]}", 27));
    char cmd[8192], err[4096];
    snprintf(cmd, sizeof cmd, "'%s' report '%s' -o '%s/r.html'", DSQ_BINARY, dir, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "sweep.json: report: results"));
    assert_int_equal(dsq_test_count_entries(dir), 1);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- sweep */

static cJSON *result(cJSON *results, const char *type, const char *method)
{
    cJSON *r;
    cJSON_ArrayForEach(r, results)
    {
        if (!strcmp(cJSON_GetObjectItem(r, "type")->valuestring, type) &&
            !strcmp(cJSON_GetObjectItem(r, "method")->valuestring, method))
            return r;
    }
    fail_msg("no result for %s %s", type, method);
    return NULL;
}

static double num(cJSON *o, const char *key)
{
    cJSON *v = cJSON_GetObjectItem(o, key);
    if (!cJSON_IsNumber(v)) fail_msg("%s: not a number", key);
    return v->valuedouble;
}

static void check_sweep(const char *out)
{
    char path[8400];
    snprintf(path, sizeof path, "%s/sweep.json", out);
    char *text = slurp(path, NULL);
    cJSON *o = cJSON_Parse(text);
    free(text);
    assert_non_null(o);
    cJSON *results = cJSON_GetObjectItem(o, "results"), *r;
    assert_int_equal(cJSON_GetArraySize(results), 6);
    assert_true(num(o, "base_ppl") > 1);
    cJSON_ArrayForEach(r, results)
    {
        snprintf(path, sizeof path, "%s/%s", out, cJSON_GetObjectItem(r, "file")->valuestring);
        assert_true((double)file_size(path) == num(r, "file_bytes"));
        assert_true(num(r, "kld") >= 0 && isfinite(num(r, "kld")) && num(r, "ppl") > 1);
        assert_non_null(strstr(cJSON_GetObjectItem(r, "command")->valuestring, "dsquant -q gguf"));
        cJSON *layers = cJSON_GetObjectItem(r, "layers");
        assert_int_equal(cJSON_GetArraySize(layers), 3); /* -1 (embedding), 0, 1 */
        assert_int_equal((int)num(cJSON_GetArrayItem(layers, 0), "layer"), -1);
        /* the front: no other point has both fewer-or-equal bits and KLD, one strictly */
        bool front = true;
        cJSON *q;
        cJSON_ArrayForEach(q, results)
        {
            if (q != r && num(q, "bpw") <= num(r, "bpw") && num(q, "kld") <= num(r, "kld") &&
                (num(q, "bpw") < num(r, "bpw") || num(q, "kld") < num(r, "kld")))
                front = false;
        }
        assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItem(r, "pareto")), front);
    }
    assert_true(num(result(results, "Q8_0", "plain"), "kld") < num(result(results, "Q4_K_M", "plain"), "kld"));
    assert_true(num(result(results, "Q4_K_M", "budget"), "file_bytes") <=
                num(result(results, "Q4_K_M", "imatrix"), "file_bytes"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "setup_commands")), 2); /* base log-probs, imatrix */
    cJSON_Delete(o);
}

/* Per-layer weight errors against a Hugging Face base equal those against the
 * same weights as an F32 GGUF: the folder's tensors are read as the GGUF
 * quantizer reads them (q/k rows permuted into llama.cpp's order; a missed
 * permutation would make attn_q / attn_k look wrong by orders of magnitude). */
static void test_layer_errors_hf_base(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp();
    char cut[4200], f32[4200], hf[4200], q[4200], cmd[40000], err[8192];
    snprintf(cut, sizeof cut, "%s/cut.gguf", dir);
    snprintf(f32, sizeof f32, "%s/f32.gguf", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(q, sizeof q, "%s/q.gguf", dir);
    dsq_log_set_level(DSQ_LOG_ERROR);
    if (dsq_test_cut_model(model, cut, 2) != DSQ_OK) fail_msg("cut: %s", dsq_errmsg());
    dsq_log_set_level(DSQ_LOG_INFO);
    snprintf(cmd, sizeof cmd,
             "'%s' -q gguf '%s' -o '%s' --type F32 --allow-requantize && '%s' -q convert '%s' -o '%s' --dtype f32 && "
             "'%s' -q gguf '%s' -o '%s' --type Q4_K_M",
             DSQ_BINARY, cut, f32, DSQ_BINARY, f32, hf, DSQ_BINARY, f32, q);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("setup: %s", err);
    dsq_layer_error *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(dsq_layer_errors(f32, q, NULL, &a, &na), DSQ_OK);
    assert_int_equal(dsq_layer_errors(hf, q, NULL, &b, &nb), DSQ_OK);
    assert_int_equal(na, 3); /* -1 (embedding), 0, 1 */
    assert_int_equal(nb, na);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(a[i].layer, b[i].layer);
        assert_int_equal(a[i].n_tensors, b[i].n_tensors);
        double ra = a[i].err / a[i].norm, rb = b[i].err / b[i].norm;
        /* layer -1's q8_0 embedding gives back this model's Q8_0-stored one: 0 */
        if (!((ra > 0 || a[i].layer < 0) && fabs(ra - rb) <= 1e-9 * ra))
            fail_msg("layer %d: relative error %.12g from the GGUF base, %.12g from the HF folder", a[i].layer, ra, rb);
    }
    assert_int_equal(a[1].n_tensors, 7); /* every linear of layer 0 */
    free(a), free(b), free(model);
    dsq_test_rmtmp(dir);
}

static void test_sweep_and_page(void **state)
{
    (void)state;
    if (UNDER_SANITIZER) DSQ_TEST_SKIP(); /* dozens of child commands: the release run covers them */
    char *model = dsq_test_default_model();
    char *calib = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    char *wiki = dsq_test_shared("datasets/wiki.test.raw");
    if (!model || !calib || !wiki) {
        free(model), free(calib), free(wiki);
        DSQ_TEST_SKIP();
    }
    char *dir = dsq_test_mkdtemp();
    char cut[4200], out[4200], cmd[16384], err[8192];
    snprintf(cut, sizeof cut, "%s/cut.gguf", dir);
    snprintf(out, sizeof out, "%s/sweep", dir);
    dsq_log_set_level(DSQ_LOG_ERROR);
    if (dsq_test_cut_model(model, cut, 2) != DSQ_OK) fail_msg("cut: %s", dsq_errmsg());
    dsq_log_set_level(DSQ_LOG_INFO);
    snprintf(cmd, sizeof cmd,
             "'%s' -q sweep '%s' -o '%s' --types Q4_K_M,Q8_0 --methods budget,plain,imatrix --data '%s' --chunks 2 "
             "--ctx 64 --calib '%s' --imatrix-chunks 2 --budget-chunks 1 --budget-ctx 64 "
             "--candidates q4_0,q5_0,q8_0,q4_K,q6_K",
             DSQ_BINARY, cut, out, wiki, calib);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("sweep: %s", err);
    check_sweep(out);

    /* a second sweep into the same folder needs --force; an unknown method is a usage error */
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "--force"));
    snprintf(cmd, sizeof cmd, "'%s' sweep '%s' -o '%s/x' --methods plain,awesome", DSQ_BINARY, cut, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "unknown method awesome"));
    snprintf(cmd, sizeof cmd, "'%s' sweep '%s' -o '%s/x' --methods budget", DSQ_BINARY, cut, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    snprintf(cmd, sizeof cmd, "'%s' sweep '%s' -o '%s/x' --types Q4_K_M,Q9", DSQ_BINARY, cut, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "unknown quantization type \"Q9\""));

    char page[4200];
    snprintf(page, sizeof page, "%s/report.html", dir);
    snprintf(cmd, sizeof cmd, "'%s' -q report '%s' -o '%s'", DSQ_BINARY, out, page);
    if (dsq_test_run(cmd, err, sizeof err)) fail_msg("report: %s", err);
    char *dom = chromium_dom(dir, page);
    if (dom) {
        assert_null(strstr(dom, "parsererror"));
        assert_int_equal(count(dom, "<circle"), 2 * 6 + 2 * 3);
        assert_int_equal(count(dom, "<polyline"), 1);
        assert_int_equal(count(dom, "<tr>"), 7);
        assert_int_equal(count(dom, "class=\"plot bars\""), 2);
        free(dom);
    }
    free(model), free(calib), free(wiki);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_page),
        cmocka_unit_test(test_report_hostile),
        cmocka_unit_test(test_layer_errors_hf_base),
        cmocka_unit_test(test_sweep_and_page),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
