/* dsquant sweep: every (type, method) pair made and measured the way a user
 * would, by this same program's own commands, so the page `dsquant report`
 * draws from DIR/sweep.json lists commands anyone can rerun.
 *
 * Steps (each a child `dsquant -q ...`, stdout and stderr kept in DIR):
 *   base log-probs   kld MODEL --data D --save-logits DIR/base.logp
 *   importance       imatrix MODEL --data CALIB -o DIR/imatrix.dat (unless --imatrix;
 *                    only when a method needs it)
 *   per type, per method (plain, imatrix, gptq, awq, budget):
 *                    gguf MODEL -o DIR/TYPE-METHOD.gguf --type TYPE ...; budget
 *                    takes the size of the same type's imatrix (else plain) file
 *   per file         kld --logits DIR/base.logp FILE, and the per-layer weight
 *                    error against MODEL (eval/layer_error.h; GGUF models)
 * A failed step stops the sweep naming its command and the last line it
 * printed; sweep.json is written (atomically) only at the end. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/commands.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "eval/layer_error.h"
#include "formats/imatrix.h"
#include "kernels/cpu.h"
#include "quantizers/mixes.h"

extern char **environ;

static const char g_usage[] =
    "usage: dsquant sweep MODEL -o DIR [--types LIST] [--methods LIST] [options]\n"
    "\n"
    "Makes a GGUF for every type and method, measures each against MODEL (KL divergence\n"
    "and perplexity on --data, size, speed, per-layer weight error) and writes DIR/sweep.json\n"
    "for `dsquant report DIR`. Every step is this program's own command, recorded.\n"
    "\n"
    "options:\n"
    "  -o, --output DIR       where the files, logs and sweep.json go (created)\n"
    "  --types LIST           llama-quantize types (default Q4_K_M,Q3_K_M,Q2_K,IQ4_XS)\n"
    "  --methods LIST         plain, imatrix, gptq, awq, budget (default plain,imatrix,gptq);\n"
    "                         budget matches the size of the same type's imatrix (or\n"
    "                         plain) file and needs one of them\n"
    "  --data NAME|FILE       evaluation text (default wikitext2)\n"
    "  --chunks K             evaluation chunks (default 20)\n"
    "  --ctx N                tokens per evaluation chunk (default 512)\n"
    "  --calib NAME|FILE      calibration text for imatrix, gptq, awq, budget (default tinyshakespeare)\n"
    "  --imatrix FILE         use this importance matrix instead of making one\n"
    "  --imatrix-chunks K     chunks of 512 for the importance matrix (default 32)\n"
    "  --n-samples N          gptq and awq calibration windows (default 32)\n"
    "  --seqlen L             gptq and awq window length (default 512)\n"
    "  --candidates LIST      budget candidate types (dsquant gguf --help)\n"
    "  --budget-chunks N      budget sensitivity chunks (default 8)\n"
    "  --budget-ctx L         budget chunk length (default 256)\n"
    "  --threads N            threads for every step (default: all)\n"
    "  --force                reuse a DIR that has a sweep.json\n"
    "  --json                 print sweep.json on stdout too\n"
    "  -h, --help             this text\n";

#define MAX_LIST 16
#define MAX_ARGS 48

typedef struct sweep_args {
    const char *model, *dir, *types, *methods, *data, *calib, *imatrix, *candidates;
    char *type_v[MAX_LIST], *method_v[MAX_LIST];
    int n_types, n_methods;
    int chunks, ctx, im_chunks, n_samples, seqlen, b_chunks, b_ctx, threads;
    bool force, json;
    char types_buf[512], methods_buf[512];
} sweep_args;

static int usage_error(const char *msg, const char *what) { return dsq_cli_usage_error("sweep", msg, what); }

static int *int_opt(sweep_args *a, const char *opt, long long *lo)
{
    static const struct {
        const char *name;
        size_t off;
        long long min;
    } ints[] = {{"--chunks", offsetof(sweep_args, chunks), 1},
                {"--ctx", offsetof(sweep_args, ctx), 8},
                {"--imatrix-chunks", offsetof(sweep_args, im_chunks), 1},
                {"--n-samples", offsetof(sweep_args, n_samples), 1},
                {"--seqlen", offsetof(sweep_args, seqlen), 2},
                {"--budget-chunks", offsetof(sweep_args, b_chunks), 1},
                {"--budget-ctx", offsetof(sweep_args, b_ctx), 8},
                {"--threads", offsetof(sweep_args, threads), 1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(opt, ints[i].name)) {
            *lo = ints[i].min;
            return (int *)((char *)a + ints[i].off);
        }
    return NULL;
}

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    sweep_args *a = user;
    const char *opt = argv[*i];
    if (!strcmp(opt, "--force")) return a->force = true, 0;
    if (!strcmp(opt, "--json")) return a->json = true, 0;
    const char **str = !strcmp(opt, "-o") || !strcmp(opt, "--output") ? &a->dir
                       : !strcmp(opt, "--types")                      ? &a->types
                       : !strcmp(opt, "--methods")                    ? &a->methods
                       : !strcmp(opt, "--data")                       ? &a->data
                       : !strcmp(opt, "--calib")                      ? &a->calib
                       : !strcmp(opt, "--imatrix")                    ? &a->imatrix
                       : !strcmp(opt, "--candidates")                 ? &a->candidates
                                                                      : NULL;
    long long lo = 0;
    int *num = str ? NULL : int_opt(a, opt, &lo);
    if (!str && !num) return usage_error("unknown option ", opt);
    if (*i + 1 >= argc) return usage_error(opt, " needs a value");
    const char *val = argv[++*i];
    if (str) {
        *str = val;
        return 0;
    }
    long long n = dsq_cli_parse_int(opt, val, lo, 1 << 24);
    if (n < 0) return 2;
    *num = (int)n;
    return 0;
}

static int split(const char *list, char *buf, size_t cap, char **v, const char *what)
{
    if (strlen(list) >= cap) return usage_error(what, " list is too long");
    strcpy(buf, list);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_LIST) return usage_error(what, " has more than 16 entries");
        v[n++] = t;
    }
    if (n == 0) return usage_error(what, " is empty");
    return -n;
}

static bool has_method(const sweep_args *a, const char *m)
{
    for (int i = 0; i < a->n_methods; i++)
        if (!strcmp(a->method_v[i], m)) return true;
    return false;
}

static int parse_args(int argc, char **argv, sweep_args *a)
{
    int n_pos = 0;
    int rc = dsq_cli_walk(argc, argv, "sweep", g_usage, parse_opt, a, &a->model, 1, &n_pos);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a->model) return usage_error("missing MODEL", NULL);
    if (!a->dir) return usage_error("missing -o DIR", NULL);
    int n = split(a->types, a->types_buf, sizeof a->types_buf, a->type_v, "--types");
    if (n > 0) return n;
    a->n_types = -n;
    n = split(a->methods, a->methods_buf, sizeof a->methods_buf, a->method_v, "--methods");
    if (n > 0) return n;
    a->n_methods = -n;
    for (int i = 0; i < a->n_types; i++) {
        dsq_ftype ft;
        if (dsq_ftype_from_name(a->type_v[i], &ft) != DSQ_OK) return usage_error("--types: ", dsq_errmsg());
    }
    static const char *const known[] = {"plain", "imatrix", "gptq", "awq", "budget"};
    for (int i = 0; i < a->n_methods; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ok |= !strcmp(a->method_v[i], known[k]);
        if (!ok) return usage_error("--methods: unknown method ", a->method_v[i]);
    }
    if (has_method(a, "budget") && !has_method(a, "plain") && !has_method(a, "imatrix"))
        return usage_error("--methods: budget needs plain or imatrix (its size reference)", NULL);
    return -1;
}

/* ---------------------------------------------------------------- steps */

typedef struct step {
    const char *argv[MAX_ARGS];
    int argc;
    char name[128];
    char buf[MAX_ARGS][4200]; /* storage for argument strings built here */
} step;

static void arg(step *s, const char *v) { s->argv[s->argc++] = v; }

static void argf(step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void argf(step *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->buf[s->argc], sizeof s->buf[0], fmt, ap);
    va_end(ap);
    s->argv[s->argc] = s->buf[s->argc];
    s->argc++;
}

/* A shell-quoted copy of the command, for the record (dsquant as the program). */
static char *command_line(const step *s)
{
    size_t cap = 16;
    for (int i = 1; i < s->argc; i++) cap += strlen(s->argv[i]) * 4 + 3;
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t n = (size_t)snprintf(out, cap, "dsquant");
    for (int i = 1; i < s->argc; i++) {
        const char *v = s->argv[i];
        bool plain =
            *v && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/=:+") == strlen(v);
        out[n++] = ' ';
        if (plain) {
            n += (size_t)sprintf(out + n, "%s", v);
            continue;
        }
        out[n++] = '\'';
        for (; *v; v++) n += *v == '\'' ? (size_t)sprintf(out + n, "'\\''") : (size_t)(out[n] = *v, 1);
        out[n++] = '\'';
        out[n] = 0;
    }
    return out;
}

static void last_line(const char *path, char *line, size_t cap)
{
    line[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[1024];
    while (fgets(buf, sizeof buf, f))
        if (buf[0] && buf[0] != '\n') snprintf(line, cap, "%s", buf);
    fclose(f);
    line[strcspn(line, "\n")] = 0;
}

/* Runs the step with stdout to DIR/NAME.json and stderr to DIR/NAME.log. */
static dsq_status run_step(const sweep_args *a, step *s, double *seconds)
{
    char exe[PATH_MAX], out[4200], log[4200];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return dsq_fail_errno(DSQ_ERR_IO, "sweep: cannot find this program");
    exe[n] = 0;
    s->argv[0] = exe;
    s->argv[s->argc] = NULL;
    snprintf(out, sizeof out, "%s/%s.json", a->dir, s->name);
    snprintf(log, sizeof log, "%s/%s.log", a->dir, s->name);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *cmd = command_line(s);
    DSQ_LOGI("sweep: %s", cmd ? cmd : s->name);
    double t0 = dsq_now_s();
    pid_t pid;
    int err = posix_spawn(&pid, exe, &fa, NULL, (char *const *)s->argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (!err) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    *seconds = dsq_now_s() - t0;
    dsq_status st = DSQ_OK;
    if (err) {
        errno = err;
        st = dsq_fail_errno(DSQ_ERR_IO, "sweep: cannot run %s", cmd ? cmd : s->name);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char line[1024];
        last_line(log, line, sizeof line);
        st = dsq_fail(DSQ_ERR_ARG, "sweep: step %s failed (%s %d; %s): %s", s->name,
                      WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                      log, line);
    }
    free(cmd);
    return st;
}

static cJSON *read_json(const sweep_args *a, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", a->dir, name);
    char *text = NULL;
    size_t len = 0;
    if (dsq_read_file(path, 64u << 20, &text, &len) != DSQ_OK) return NULL;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!o) dsq_fail(DSQ_ERR_FORMAT, "sweep: %s is not the JSON summary expected", path);
    return o;
}

static void common_tail(const sweep_args *a, step *s)
{
    if (a->threads) {
        arg(s, "--threads");
        argf(s, "%d", a->threads);
    }
}

static void record(cJSON *cmds, const step *s)
{
    char *c = command_line(s);
    if (c) cJSON_AddItemToArray(cmds, cJSON_CreateString(c));
    free(c);
}

/* ---------------------------------------------------------------- the sweep */

typedef struct sweep {
    sweep_args *a;
    cJSON *root, *results, *cmds;
    char imatrix[4200];
    bool have_imatrix;
    dsq_imatrix *im;
} sweep;

static dsq_status base_logits(sweep *w)
{
    step s = {.argc = 1};
    snprintf(s.name, sizeof s.name, "base");
    arg(&s, "-q"), arg(&s, "kld"), arg(&s, w->a->model), arg(&s, "--data"), arg(&s, w->a->data);
    arg(&s, "--chunks"), argf(&s, "%d", w->a->chunks), arg(&s, "--ctx"), argf(&s, "%d", w->a->ctx);
    arg(&s, "--save-logits"), argf(&s, "%s/base.logp", w->a->dir), arg(&s, "--force"), arg(&s, "--json");
    common_tail(w->a, &s);
    double sec;
    DSQ_TRY(run_step(w->a, &s, &sec));
    record(w->cmds, &s);
    return DSQ_OK;
}

static dsq_status make_imatrix(sweep *w)
{
    if (w->a->imatrix) {
        snprintf(w->imatrix, sizeof w->imatrix, "%s", w->a->imatrix);
    } else {
        step s = {.argc = 1};
        snprintf(s.name, sizeof s.name, "imatrix");
        snprintf(w->imatrix, sizeof w->imatrix, "%s/imatrix.dat", w->a->dir);
        arg(&s, "-q"), arg(&s, "imatrix"), arg(&s, w->a->model), arg(&s, "--data"), arg(&s, w->a->calib);
        arg(&s, "--chunks"), argf(&s, "%d", w->a->im_chunks), arg(&s, "-o"), arg(&s, w->imatrix), arg(&s, "--force");
        common_tail(w->a, &s);
        double sec;
        DSQ_TRY(run_step(w->a, &s, &sec));
        record(w->cmds, &s);
    }
    w->have_imatrix = true;
    return dsq_imatrix_load(w->imatrix, &w->im);
}

/* The file a budget matches: the same type's imatrix file, else plain. */
static double reference_size(const sweep *w, const char *type)
{
    double plain = -1;
    cJSON *r;
    cJSON_ArrayForEach(r, w->results)
    {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "type")), type)) continue;
        const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(r, "method"));
        double b = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "file_bytes"));
        if (!strcmp(m, "imatrix")) return b;
        if (!strcmp(m, "plain")) plain = b;
    }
    return plain;
}

static void quantize_args(sweep *w, step *s, const char *type, const char *method, const char *out)
{
    const sweep_args *a = w->a;
    arg(s, "-q"), arg(s, "gguf"), arg(s, a->model), arg(s, "-o"), arg(s, out), arg(s, "--type"), arg(s, type);
    arg(s, "--force"), arg(s, "--json");
    if (strcmp(method, "plain")) arg(s, "--imatrix"), arg(s, w->imatrix);
    if (!strcmp(method, "gptq") || !strcmp(method, "awq")) {
        arg(s, "--method"), arg(s, method), arg(s, "--calib"), arg(s, a->calib);
        arg(s, "--n-samples"), argf(s, "%d", a->n_samples), arg(s, "--seqlen"), argf(s, "%d", a->seqlen);
    }
    if (!strcmp(method, "budget")) {
        arg(s, "--target-size"), argf(s, "%.0f", reference_size(w, type)), arg(s, "--calib"), arg(s, a->calib);
        if (a->candidates) arg(s, "--candidates"), arg(s, a->candidates);
        if (a->b_chunks) arg(s, "--budget-chunks"), argf(s, "%d", a->b_chunks);
        if (a->b_ctx) arg(s, "--budget-ctx"), argf(s, "%d", a->b_ctx);
    }
    common_tail(a, s);
}

static void add_layers(cJSON *r, const dsq_layer_error *e, size_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(r, "layers");
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "layer", e[i].layer);
        cJSON_AddNumberToObject(o, "n_tensors", e[i].n_tensors);
        cJSON_AddNumberToObject(o, "rel_err", e[i].norm > 0 ? e[i].err / e[i].norm : 0);
        cJSON_AddItemToArray(arr, o);
    }
}

static void copy_num(cJSON *dst, const char *key, cJSON *src, const char *skey, const char *sub)
{
    cJSON *v = cJSON_GetObjectItem(src, skey);
    if (sub) v = cJSON_GetObjectItem(v, sub);
    if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(dst, key, v->valuedouble);
}

static dsq_status evaluate(sweep *w, cJSON *r, const char *name, const char *file)
{
    step s = {.argc = 1};
    snprintf(s.name, sizeof s.name, "%.96s.kld", name);
    arg(&s, "-q"), arg(&s, "kld"), arg(&s, "--logits"), argf(&s, "%s/base.logp", w->a->dir), arg(&s, file);
    arg(&s, "--json");
    common_tail(w->a, &s);
    double sec;
    DSQ_TRY(run_step(w->a, &s, &sec));
    cJSON *k = read_json(w->a, s.name);
    if (!k) return DSQ_ERR_FORMAT;
    copy_num(r, "kld", k, "kld", "value");
    copy_num(r, "kld_err", k, "kld", "error");
    copy_num(r, "ppl", k, "ppl", "value");
    copy_num(r, "ppl_err", k, "ppl", "error");
    copy_num(r, "same_top", k, "same_top", "value");
    copy_num(r, "kld_p99", k, "kld_percentiles", "99");
    if (!cJSON_HasObjectItem(w->root, "base_ppl")) copy_num(w->root, "base_ppl", k, "ppl_base", "value");
    double scored = cJSON_GetNumberValue(cJSON_GetObjectItem(k, "n_scored"));
    double ks = cJSON_GetNumberValue(cJSON_GetObjectItem(k, "seconds"));
    /* the whole chunks went through the model, not just the scored halves */
    cJSON_AddNumberToObject(r, "eval_tokens_per_s", ks > 0 ? (double)w->a->chunks * w->a->ctx / ks : 0);
    cJSON_AddNumberToObject(r, "n_scored", scored);
    cJSON_Delete(k);
    char *c = command_line(&s);
    if (c) cJSON_AddStringToObject(r, "eval_command", c);
    free(c);
    dsq_layer_error *e = NULL;
    size_t n = 0;
    DSQ_TRY(dsq_layer_errors(w->a->model, file, w->im, &e, &n));
    add_layers(r, e, n);
    free(e);
    return DSQ_OK;
}

static dsq_status one(sweep *w, const char *type, const char *method, int k, int n)
{
    char name[96], file[4200];
    snprintf(name, sizeof name, "%s-%s", type, method);
    snprintf(file, sizeof file, "%s/%s.gguf", w->a->dir, name);
    DSQ_LOGI("sweep [%d/%d] %s %s", k, n, type, method);
    step s = {.argc = 1};
    snprintf(s.name, sizeof s.name, "%s", name);
    quantize_args(w, &s, type, method, file);
    double sec;
    DSQ_TRY(run_step(w->a, &s, &sec));
    cJSON *q = read_json(w->a, name);
    if (!q) return DSQ_ERR_FORMAT;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", type);
    cJSON_AddStringToObject(r, "method", method);
    char *rel = strrchr(file, '/');
    cJSON_AddStringToObject(r, "file", rel ? rel + 1 : file);
    char *c = command_line(&s);
    if (c) cJSON_AddStringToObject(r, "command", c);
    free(c);
    cJSON_AddNumberToObject(r, "quant_seconds", sec);
    copy_num(r, "file_bytes", q, "file_bytes", NULL);
    copy_num(r, "bpw", q, "bits_per_weight", NULL);
    cJSON_Delete(q);
    cJSON_AddItemToArray(w->results, r);
    return evaluate(w, r, name, file);
}

/* A point is on the front when no other has fewer or equal bits and less or equal KLD, one strictly. */
static void mark_pareto(cJSON *results)
{
    cJSON *r, *o;
    cJSON_ArrayForEach(r, results)
    {
        double b = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "bpw")),
               k = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "kld"));
        bool front = true;
        cJSON_ArrayForEach(o, results)
        {
            double ob = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "bpw")),
                   ok = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "kld"));
            if (o != r && ob <= b && ok <= k && (ob < b || ok < k)) front = false;
        }
        cJSON_AddBoolToObject(r, "pareto", front);
    }
}

static void header(sweep *w)
{
    const sweep_args *a = w->a;
    cJSON_AddStringToObject(w->root, "model", a->model);
    cJSON_AddStringToObject(w->root, "data", a->data);
    cJSON_AddNumberToObject(w->root, "chunks", a->chunks);
    cJSON_AddNumberToObject(w->root, "ctx", a->ctx);
    cJSON_AddStringToObject(w->root, "calib", a->calib);
    char cpu[256];
    dsq_cpu_model(cpu, sizeof cpu);
    cJSON_AddStringToObject(w->root, "cpu", cpu);
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    cJSON_AddStringToObject(w->root, "date", date);
    w->results = cJSON_AddArrayToObject(w->root, "results");
    w->cmds = cJSON_AddArrayToObject(w->root, "setup_commands");
}

static dsq_status run_sweep(sweep *w)
{
    sweep_args *a = w->a;
    header(w);
    DSQ_TRY(base_logits(w));
    if (has_method(a, "imatrix") || has_method(a, "gptq") || has_method(a, "awq") || has_method(a, "budget"))
        DSQ_TRY(make_imatrix(w));
    /* budget last within each type: it needs the size of the others */
    static const char *const order[] = {"plain", "imatrix", "gptq", "awq", "budget"};
    int n = a->n_types * a->n_methods, k = 0;
    for (int t = 0; t < a->n_types; t++)
        for (size_t m = 0; m < sizeof order / sizeof order[0]; m++)
            if (has_method(a, order[m])) DSQ_TRY(one(w, a->type_v[t], order[m], ++k, n));
    mark_pareto(w->results);
    return DSQ_OK;
}

static dsq_status write_json(const sweep *w, char **text)
{
    *text = cJSON_Print(w->root);
    if (!*text) return dsq_fail(DSQ_ERR_NOMEM, "sweep: out of memory for sweep.json");
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", w->a->dir);
    dsq_outfile *f = NULL;
    DSQ_TRY(dsq_outfile_open(path, true, &f));
    dsq_status st = dsq_outfile_write(f, *text, strlen(*text));
    if (st == DSQ_OK)
        st = dsq_outfile_commit(f);
    else
        dsq_outfile_abort(f);
    return st;
}

static dsq_status prepare_dir(const sweep_args *a)
{
    if (mkdir(a->dir, 0755) != 0 && errno != EEXIST) return dsq_fail_errno(DSQ_ERR_IO, "sweep: %s", a->dir);
    if (!dsq_is_dir(a->dir)) return dsq_fail(DSQ_ERR_EXISTS, "sweep: %s exists and is not a folder", a->dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/sweep.json", a->dir);
    if (!a->force && dsq_exists(path))
        return dsq_fail(DSQ_ERR_EXISTS, "sweep: %s already exists (use --force to sweep again into %s)", path, a->dir);
    return DSQ_OK;
}

int dsq_cmd_sweep(int argc, char **argv)
{
    sweep_args a = {.types = "Q4_K_M,Q3_K_M,Q2_K,IQ4_XS",
                    .methods = "plain,imatrix,gptq",
                    .data = "wikitext2",
                    .calib = "tinyshakespeare",
                    .chunks = 20,
                    .ctx = 512,
                    .im_chunks = 32,
                    .n_samples = 32,
                    .seqlen = 512};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (prepare_dir(&a) != DSQ_OK) return dsq_cli_fail();
    sweep w = {.a = &a, .root = cJSON_CreateObject()};
    if (!w.root) return dsq_cli_fail();
    char *text = NULL;
    dsq_status st = run_sweep(&w);
    if (st == DSQ_OK) st = write_json(&w, &text);
    dsq_imatrix_free(w.im);
    cJSON_Delete(w.root);
    if (st != DSQ_OK) {
        free(text);
        return dsq_cli_fail();
    }
    if (a.json)
        printf("%s\n", text);
    else
        printf("wrote %s/sweep.json (%d files); dsquant report %s -o report.html draws it\n", a.dir,
               a.n_types * a.n_methods, a.dir);
    free(text);
    return 0;
}
