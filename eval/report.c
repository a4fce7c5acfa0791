/* The sweep page (report.h): checked input, then text, tables and SVG. */
#include "eval/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define W 680.0
#define H 400.0
#define ML 72.0
#define MR 140.0
#define MT 34.0
#define MB 52.0

typedef struct sb {
    char *p;
    size_t n, cap;
    bool oom;
} sb;

static void put(sb *b, const char *s)
{
    size_t k = strlen(s);
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->cap + k + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

static void putf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sb *b, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    put(b, buf);
}

/* Text and attribute values: the five XML specials, control bytes dropped. */
static void esc(sb *b, const char *s)
{
    char c[2] = {0, 0};
    for (; s && *s; s++) {
        switch (*s) {
        case '&': put(b, "&amp;"); break;
        case '<': put(b, "&lt;"); break;
        case '>': put(b, "&gt;"); break;
        case '"': put(b, "&quot;"); break;
        case '\'': put(b, "&#39;"); break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') continue;
            c[0] = *s;
            put(b, c);
        }
    }
}

/* ---------------------------------------------------------------- input */

typedef struct layer_err {
    int layer;
    double rel;
} layer_err;

typedef struct point {
    const char *type, *method, *file, *command, *eval_command;
    double bpw, kld, kld_err, kld_p99, ppl, ppl_err, same_top, bytes, quant_s, tok_s;
    bool pareto;
    layer_err *layers;
    int n_layers;
} point;

typedef struct input {
    const char *model, *data, *calib, *cpu, *date;
    double base_ppl, chunks, ctx;
    point *pts;
    int n, cap;
    const char *methods[16];
    int n_methods;
    cJSON *setup;
} input;

static dsq_status need_num(const cJSON *o, const char *key, int i, double lo, double hi, double *out, bool optional)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && optional) {
        *out = NAN;
        return DSQ_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        if (i >= 0)
            return dsq_fail(DSQ_ERR_FORMAT, "report: results[%d].%s: missing or not a number in [%g, %g]", i, key, lo,
                            hi);
        return dsq_fail(DSQ_ERR_FORMAT, "report: %s: missing or not a number in [%g, %g]", key, lo, hi);
    }
    *out = v->valuedouble;
    return DSQ_OK;
}

static dsq_status need_str(const cJSON *o, const char *key, int i, const char **out, bool optional)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v) && v->valuestring) {
        *out = v->valuestring;
        return DSQ_OK;
    }
    if (optional && !v) {
        *out = "";
        return DSQ_OK;
    }
    if (i >= 0) return dsq_fail(DSQ_ERR_FORMAT, "report: results[%d].%s: missing or not a string", i, key);
    return dsq_fail(DSQ_ERR_FORMAT, "report: %s: missing or not a string", key);
}

static dsq_status read_layers(const cJSON *r, int i, point *p)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r, "layers");
    if (!arr) return DSQ_OK;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > 100000)
        return dsq_fail(DSQ_ERR_FORMAT, "report: results[%d].layers: not an array of layers", i);
    p->layers = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->layers);
    if (!p->layers) return dsq_fail(DSQ_ERR_NOMEM, "report: out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        double layer = 0, rel = 0;
        DSQ_TRY(need_num(e, "layer", i, -1, 1e6, &layer, false));
        DSQ_TRY(need_num(e, "rel_err", i, 0, 1e6, &rel, false));
        p->layers[p->n_layers++] = (layer_err){(int)layer, rel};
    }
    return DSQ_OK;
}

static dsq_status read_point(const cJSON *r, int i, point *p)
{
    if (!cJSON_IsObject(r)) return dsq_fail(DSQ_ERR_FORMAT, "report: results[%d]: not an object", i);
    DSQ_TRY(need_str(r, "type", i, &p->type, false));
    DSQ_TRY(need_str(r, "method", i, &p->method, false));
    DSQ_TRY(need_str(r, "file", i, &p->file, false));
    DSQ_TRY(need_str(r, "command", i, &p->command, true));
    DSQ_TRY(need_str(r, "eval_command", i, &p->eval_command, true));
    DSQ_TRY(need_num(r, "bpw", i, 0.01, 64, &p->bpw, false));
    DSQ_TRY(need_num(r, "kld", i, -1e-3, 1e3, &p->kld, false));
    DSQ_TRY(need_num(r, "kld_err", i, 0, 1e3, &p->kld_err, true));
    DSQ_TRY(need_num(r, "kld_p99", i, -1e-3, 1e3, &p->kld_p99, true));
    DSQ_TRY(need_num(r, "ppl", i, 1e-3, 1e12, &p->ppl, false));
    DSQ_TRY(need_num(r, "ppl_err", i, 0, 1e12, &p->ppl_err, true));
    DSQ_TRY(need_num(r, "same_top", i, 0, 1, &p->same_top, true));
    DSQ_TRY(need_num(r, "file_bytes", i, 1, 1e16, &p->bytes, false));
    DSQ_TRY(need_num(r, "quant_seconds", i, 0, 1e9, &p->quant_s, true));
    DSQ_TRY(need_num(r, "eval_tokens_per_s", i, 0, 1e12, &p->tok_s, true));
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(r, "pareto");
    p->pareto = cJSON_IsTrue(pf);
    return read_layers(r, i, p);
}

static void note_method(input *in, const char *m)
{
    for (int i = 0; i < in->n_methods; i++)
        if (!strcmp(in->methods[i], m)) return;
    if (in->n_methods < 16) in->methods[in->n_methods++] = m;
}

static dsq_status read_input(const cJSON *root, input *in)
{
    if (!cJSON_IsObject(root)) return dsq_fail(DSQ_ERR_FORMAT, "report: sweep.json is not a JSON object");
    DSQ_TRY(need_str(root, "model", -1, &in->model, false));
    DSQ_TRY(need_str(root, "data", -1, &in->data, true));
    DSQ_TRY(need_str(root, "calib", -1, &in->calib, true));
    DSQ_TRY(need_str(root, "cpu", -1, &in->cpu, true));
    DSQ_TRY(need_str(root, "date", -1, &in->date, true));
    DSQ_TRY(need_num(root, "base_ppl", -1, 1e-3, 1e12, &in->base_ppl, true));
    DSQ_TRY(need_num(root, "chunks", -1, 0, 1e9, &in->chunks, true));
    DSQ_TRY(need_num(root, "ctx", -1, 0, 1e9, &in->ctx, true));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) < 1 || cJSON_GetArraySize(res) > 10000)
        return dsq_fail(DSQ_ERR_FORMAT, "report: results: missing, empty or not an array");
    in->setup = cJSON_GetObjectItemCaseSensitive(root, "setup_commands");
    in->cap = cJSON_GetArraySize(res);
    in->pts = calloc((size_t)in->cap, sizeof *in->pts);
    if (!in->pts) return dsq_fail(DSQ_ERR_NOMEM, "report: out of memory");
    const cJSON *r;
    cJSON_ArrayForEach(r, res)
    {
        DSQ_TRY(read_point(r, in->n, &in->pts[in->n]));
        note_method(in, in->pts[in->n].method);
        in->n++;
    }
    return DSQ_OK;
}

/* ---------------------------------------------------------------- plots */

static const char *color_of(const input *in, const char *method)
{
    static const char *const named[][2] = {
        {"plain", "#7f7f7f"}, {"imatrix", "#1f77b4"}, {"gptq", "#d62728"}, {"budget", "#2ca02c"}, {"awq", "#ff7f0e"}};
    static const char *const spare[] = {"#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(method, named[i][0])) return named[i][1];
    for (int i = 0; i < in->n_methods; i++)
        if (!strcmp(in->methods[i], method)) return spare[i % 5];
    return "#000000";
}

typedef struct axis {
    double lo, hi;
    bool log;
} axis;

static double ax_pos(const axis *a, double v, double p0, double p1)
{
    double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : (v - a->lo) / (a->hi - a->lo);
    return p0 + t * (p1 - p0);
}

static axis make_axis(double lo, double hi, bool allow_log)
{
    axis a = {lo, hi, false};
    if (allow_log && lo > 0 && hi / lo > 30) {
        a.log = true;
        a.lo = pow(10, floor(log10(lo)));
        a.hi = pow(10, ceil(log10(hi)));
        return a;
    }
    if (hi <= lo) hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1);
    double pad = (hi - lo) * 0.08;
    a.lo = lo - pad, a.hi = hi + pad;
    if (lo >= 0 && a.lo < 0) a.lo = 0;
    return a;
}

static void ticks(sb *b, const axis *a, bool vertical, double p0, double p1, double other)
{
    double step;
    int n = 0;
    double t0;
    if (a->log) {
        for (double v = a->lo; v <= a->hi * 1.0001 && n < 20; v *= 10, n++) {
            double p = ax_pos(a, v, p0, p1);
            if (vertical)
                putf(b,
                     "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" "
                     "y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%g</text>\n",
                     ML, p, W - MR, p, ML - 6, p + 4, v);
            else
                putf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%g</text>\n", p, other, v);
        }
        return;
    }
    double span = a->hi - a->lo, raw = span / 5, mag = pow(10, floor(log10(raw)));
    step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
    t0 = ceil(a->lo / step) * step;
    for (double v = t0; v <= a->hi + step * 1e-9 && n < 40; v += step, n++) {
        double p = ax_pos(a, v, p0, p1);
        if (vertical)
            putf(b,
                 "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                 "class=\"tick\" text-anchor=\"end\">%.4g</text>\n",
                 ML, p, W - MR, p, ML - 6, p + 4, fabs(v) < step * 1e-9 ? 0.0 : v);
        else
            putf(b,
                 "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                 "class=\"tick\" text-anchor=\"middle\">%.4g</text>\n",
                 p, MT, p, H - MB, p, other, v);
    }
}

static void legend(sb *b, const input *in, double x, double y)
{
    for (int i = 0; i < in->n_methods; i++) {
        putf(b,
             "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" class=\"key\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" "
             "class=\"tick\">",
             x, y + 18.0 * i, color_of(in, in->methods[i]), x + 10, y + 18.0 * i + 4);
        esc(b, in->methods[i]);
        put(b, "</text>\n");
    }
}

static int by_bpw(const void *a, const void *b)
{
    const point *p = *(const point *const *)a, *q = *(const point *const *)b;
    return p->bpw < q->bpw ? -1 : p->bpw > q->bpw;
}

static void pareto_line(sb *b, const input *in, const axis *ax, const axis *ay)
{
    const point **f = malloc((size_t)in->n * sizeof *f);
    if (!f) {
        b->oom = true;
        return;
    }
    int n = 0;
    for (int i = 0; i < in->n; i++)
        if (in->pts[i].pareto) f[n++] = &in->pts[i];
    qsort(f, (size_t)n, sizeof *f, by_bpw);
    if (n > 0) {
        put(b, "<polyline class=\"pareto\" points=\"");
        for (int i = 0; i < n; i++)
            putf(b, "%s%.1f,%.1f", i ? " " : "", ax_pos(ax, f[i]->bpw, ML, W - MR),
                 ax_pos(ay, f[i]->kld > ay->lo ? f[i]->kld : ay->lo, H - MB, MT));
        put(b, "\"><title>Pareto front: no other file has fewer bits and less KLD</title></polyline>\n");
    }
    free(f);
}

/* One scatter plot: y = KLD (with the front) or PPL (with the base's line). */
static void scatter(sb *b, const input *in, bool kld)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < in->n; i++) {
        const point *p = &in->pts[i];
        double y = kld ? p->kld : p->ppl, e = kld ? p->kld_err : p->ppl_err;
        xlo = fmin(xlo, p->bpw), xhi = fmax(xhi, p->bpw);
        ylo = fmin(ylo, kld ? fmax(y, 1e-6) : y), yhi = fmax(yhi, y + (isnan(e) ? 0 : e));
    }
    if (!kld && !isnan(in->base_ppl)) ylo = fmin(ylo, in->base_ppl);
    axis ax = make_axis(xlo, xhi, false), ay = make_axis(ylo, yhi, kld);
    putf(b,
         "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" id=\"%s\" width=\"%.0f\" height=\"%.0f\" "
         "viewBox=\"0 0 %.0f %.0f\">\n",
         kld ? "kld-plot" : "ppl-plot", W, H, W, H);
    putf(b, "<text x=\"%.1f\" y=\"20\" class=\"title\">%s against bits per weight%s</text>\n", ML,
         kld ? "Mean KLD" : "Perplexity", kld && ay.log ? " (log scale)" : "");
    ticks(b, &ay, true, H - MB, MT, 0);
    ticks(b, &ax, false, ML, W - MR, H - MB + 18);
    putf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", ML, MT, W - MR - ML,
         H - MB - MT);
    putf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"middle\">bits per weight</text>\n",
         (ML + W - MR) / 2, H - 12);
    if (!kld && !isnan(in->base_ppl)) {
        double y = ax_pos(&ay, in->base_ppl, H - MB, MT);
        putf(b,
             "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"base\"/><text x=\"%.1f\" y=\"%.1f\" "
             "class=\"tick\">base %.4g</text>\n",
             ML, y, W - MR, y, W - MR + 4, y + 4, in->base_ppl);
    }
    if (kld) pareto_line(b, in, &ax, &ay);
    for (int i = 0; i < in->n; i++) {
        const point *p = &in->pts[i];
        double y = kld ? fmax(p->kld, ay.lo) : p->ppl, e = kld ? p->kld_err : p->ppl_err;
        double px = ax_pos(&ax, p->bpw, ML, W - MR), py = ax_pos(&ay, y, H - MB, MT);
        if (!isnan(e) && e > 0) {
            double y0 = ax_pos(&ay, fmax(y - e, ay.lo), H - MB, MT), y1 = ax_pos(&ay, fmin(y + e, ay.hi), H - MB, MT);
            putf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"err\" stroke=\"%s\"/>\n", px, y0, px,
                 y1, color_of(in, p->method));
        }
        putf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" class=\"pt%s\" fill=\"%s\"><title>", px, py,
             kld && p->pareto ? " front" : "", color_of(in, p->method));
        esc(b, p->type), put(b, " "), esc(b, p->method);
        putf(b, ": %.3f bpw, %s %.5g</title></circle>\n", p->bpw, kld ? "KLD" : "PPL", kld ? p->kld : p->ppl);
        putf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"ptlabel\">", px + 7, py - 6);
        esc(b, p->type);
        put(b, "</text>\n");
    }
    legend(b, in, W - MR + 14, MT + 30);
    put(b, "</svg>\n");
}

/* Per type: grouped bars, one group per layer, one bar per method. */
static void layer_bars(sb *b, const input *in, const char *type)
{
    int lo = 1 << 30, hi = -2, nm = 0;
    double ymax = 0;
    for (int i = 0; i < in->n; i++) {
        const point *p = &in->pts[i];
        if (strcmp(p->type, type) || !p->n_layers) continue;
        nm++;
        for (int k = 0; k < p->n_layers; k++) {
            lo = p->layers[k].layer < lo ? p->layers[k].layer : lo;
            hi = p->layers[k].layer > hi ? p->layers[k].layer : hi;
            ymax = fmax(ymax, p->layers[k].rel);
        }
    }
    if (nm == 0 || hi < lo || hi - lo > 4096) return;
    int groups = hi - lo + 1;
    double bw = 5, gw = bw * nm + 4, w = ML + MR + gw * groups;
    axis ay = make_axis(0, ymax > 0 ? ymax : 1, false);
    ay.lo = 0;
    putf(b,
         "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot bars\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 "
         "%.0f %.0f\">\n",
         w, H * 0.7, w, H * 0.7);
    double h = H * 0.7, bottom = h - MB;
    put(b, "<text x=\"72\" y=\"20\" class=\"title\">");
    esc(b, type);
    put(b, ": relative weight error per layer (importance-weighted)</text>\n");
    for (int i = 0, m = 0; i < in->n; i++) {
        const point *p = &in->pts[i];
        if (strcmp(p->type, type) || !p->n_layers) continue;
        for (int k = 0; k < p->n_layers; k++) {
            double x = ML + gw * (p->layers[k].layer - lo) + bw * m, y = ax_pos(&ay, p->layers[k].rel, bottom, MT);
            putf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"bar\" fill=\"%s\"><title>", x,
                 y, bw, bottom - y, color_of(in, p->method));
            esc(b, p->method);
            putf(b, ", layer %d: %.4g</title></rect>\n", p->layers[k].layer, p->layers[k].rel);
        }
        m++;
    }
    for (int g = 0; g < groups; g++)
        if (groups <= 16 || g % 4 == 0 || lo + g == -1) {
            char label[16];
            snprintf(label, sizeof label, lo + g < 0 ? "emb/out" : "%d", lo + g);
            putf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%s</text>\n",
                 ML + gw * g + gw / 2, bottom + 16, label);
        }
    putf(b,
         "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.3g</text><text x=\"%.1f\" y=\"%.1f\" "
         "class=\"tick\" text-anchor=\"end\">0</text>\n",
         ML - 6, MT + 4, ay.hi, ML - 6, bottom + 4);
    putf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>\n", ML, bottom, w - MR, bottom);
    put(b, "</svg>\n");
}

/* ---------------------------------------------------------------- page */

static void table(sb *b, const input *in)
{
    put(b, "<table id=\"results\">\n<thead><tr><th>type</th><th>method</th><th>file</th><th>MiB</th><th>bpw</th>"
           "<th>PPL</th><th>mean KLD</th><th>KLD 99%</th><th>same top</th><th>make s</th><th>eval tok/s</th>"
           "<th>Pareto</th></tr></thead>\n<tbody>\n");
    for (int i = 0; i < in->n; i++) {
        const point *p = &in->pts[i];
        put(b, "<tr><td>");
        esc(b, p->type);
        put(b, "</td><td>");
        esc(b, p->method);
        put(b, "</td><td>");
        esc(b, p->file);
        putf(b, "</td><td>%.2f</td><td>%.3f</td><td>%.4f", p->bytes / 1048576.0, p->bpw, p->ppl);
        if (!isnan(p->ppl_err)) putf(b, " &#177; %.4f", p->ppl_err);
        putf(b, "</td><td>%.5f", p->kld);
        if (!isnan(p->kld_err)) putf(b, " &#177; %.5f", p->kld_err);
        put(b, "</td><td>");
        if (!isnan(p->kld_p99)) putf(b, "%.4f", p->kld_p99);
        put(b, "</td><td>");
        if (!isnan(p->same_top)) putf(b, "%.2f%%", 100 * p->same_top);
        put(b, "</td><td>");
        if (!isnan(p->quant_s)) putf(b, "%.1f", p->quant_s);
        put(b, "</td><td>");
        if (!isnan(p->tok_s)) putf(b, "%.0f", p->tok_s);
        putf(b, "</td><td>%s</td></tr>\n", p->pareto ? "&#10003;" : "");
    }
    put(b, "</tbody>\n</table>\n");
}

static void commands(sb *b, const input *in)
{
    put(b, "<h2>Commands</h2>\n<pre id=\"commands\">");
    const cJSON *c;
    cJSON_ArrayForEach(c, in->setup)
    {
        if (!cJSON_IsString(c)) continue;
        esc(b, c->valuestring);
        put(b, "\n");
    }
    for (int i = 0; i < in->n; i++) {
        if (in->pts[i].command[0]) esc(b, in->pts[i].command), put(b, "\n");
        if (in->pts[i].eval_command[0]) esc(b, in->pts[i].eval_command), put(b, "\n");
    }
    put(b, "</pre>\n");
}

static const char k_style[] =
    "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:nth-child(-n+3),th{text-align:left}"
    ".grid{stroke:#eee}.frame{fill:none;stroke:#444}.axis{stroke:#444}.tick{font-size:11px;fill:#444}"
    ".label{font-size:12px}.title{font-size:14px;font-weight:bold}.ptlabel{font-size:10px;fill:#555}"
    ".pt{stroke:#fff;stroke-width:1}.pt.front{stroke:#000;stroke-width:2}.key{stroke:none}"
    ".pareto{fill:none;stroke:#000;stroke-dasharray:5,3;stroke-width:1.5}.err{stroke-width:1.5}"
    ".base{stroke:#999;stroke-dasharray:2,2}pre{background:#f6f6f6;padding:8px;font-size:12px;white-space:pre-wrap}";

static void page(sb *b, const input *in)
{
    put(b, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta "
           "charset=\"utf-8\"/>\n<title>dsquant sweep: ");
    esc(b, in->model);
    putf(b, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>dsquant sweep</h1>\n<p>model <code>", k_style);
    esc(b, in->model);
    put(b, "</code>; evaluation on ");
    esc(b, in->data);
    if (!isnan(in->chunks)) putf(b, " (%.0f x %.0f tokens)", in->chunks, in->ctx);
    if (!isnan(in->base_ppl)) putf(b, ", base perplexity %.4f", in->base_ppl);
    put(b, "; calibration ");
    esc(b, in->calib);
    put(b, "; ");
    esc(b, in->cpu);
    put(b, ", ");
    esc(b, in->date);
    put(b, ". KLD and perplexity follow llama-perplexity's statistics; bars are +/- one standard error. The dashed "
           "line is the Pareto front (fewest bits for the least KLD).</p>\n");
    scatter(b, in, true);
    scatter(b, in, false);
    put(b, "<h2>Per-layer weight error</h2>\n");
    for (int i = 0; i < in->n; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= !strcmp(in->pts[j].type, in->pts[i].type);
        if (!seen) layer_bars(b, in, in->pts[i].type);
    }
    put(b, "<h2>Files</h2>\n");
    table(b, in);
    commands(b, in);
    put(b, "</body>\n</html>\n");
}

static void free_input(input *in)
{
    for (int i = 0; in->pts && i < in->cap; i++) free(in->pts[i].layers);
    free(in->pts);
}

dsq_status dsq_report_html(const char *json, size_t len, char **html, size_t *html_len)
{
    *html = NULL;
    *html_len = 0;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return dsq_fail(DSQ_ERR_FORMAT, "report: sweep.json is not valid JSON");
    input in = {0};
    dsq_status st = read_input(root, &in);
    sb b = {0};
    if (st == DSQ_OK) page(&b, &in);
    if (st == DSQ_OK && b.oom) st = dsq_fail(DSQ_ERR_NOMEM, "report: out of memory");
    free_input(&in);
    cJSON_Delete(root);
    if (st != DSQ_OK) {
        free(b.p);
        return st;
    }
    *html = b.p;
    *html_len = b.n;
    return DSQ_OK;
}
