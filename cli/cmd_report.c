/* dsquant report: DIR/sweep.json (dsquant sweep) as one HTML page (eval/report.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/fileio.h"
#include "core/status.h"
#include "eval/report.h"

static const char g_usage[] =
    "usage: dsquant report DIR|SWEEP.json -o REPORT.html [--force]\n"
    "\n"
    "Draws a sweep (dsquant sweep) as one self-contained HTML page: KLD and perplexity\n"
    "against bits per weight for every type and method with the Pareto front, per-layer\n"
    "weight error bars, the size/speed table and the exact commands. No scripts, no network.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE   the page to write (atomically)\n"
    "  --force             replace FILE if it exists\n"
    "  -h, --help          this text\n";

typedef struct report_args {
    const char *in, *out;
    bool force;
} report_args;

static int parse_opt(int argc, char **argv, int *i, void *user)
{
    report_args *a = user;
    const char *opt = argv[*i];
    if (!strcmp(opt, "--force")) return a->force = true, 0;
    if (strcmp(opt, "-o") && strcmp(opt, "--output")) return dsq_cli_usage_error("report", "unknown option ", opt);
    if (*i + 1 >= argc) return dsq_cli_usage_error("report", opt, " needs a value");
    a->out = argv[++*i];
    return 0;
}

static dsq_status render(const report_args *a)
{
    char path[4200];
    snprintf(path, sizeof path, dsq_is_dir(a->in) ? "%s/sweep.json" : "%s", a->in);
    char *json = NULL, *html = NULL;
    size_t len = 0, hlen = 0;
    DSQ_TRY(dsq_read_file(path, 256u << 20, &json, &len));
    dsq_status st = dsq_report_html(json, len, &html, &hlen);
    free(json);
    if (st != DSQ_OK) return dsq_fail_context(st, "%s", path);
    dsq_outfile *f = NULL;
    st = dsq_outfile_open(a->out, a->force, &f);
    if (st == DSQ_OK) {
        st = dsq_outfile_write(f, html, hlen);
        if (st == DSQ_OK)
            st = dsq_outfile_commit(f);
        else
            dsq_outfile_abort(f);
    }
    free(html);
    return st;
}

int dsq_cmd_report(int argc, char **argv)
{
    report_args a = {0};
    int n_pos = 0;
    int rc = dsq_cli_walk(argc, argv, "report", g_usage, parse_opt, &a, &a.in, 1, &n_pos);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a.in) return dsq_cli_usage_error("report", "missing DIR", NULL);
    if (!a.out) return dsq_cli_usage_error("report", "missing -o REPORT.html", NULL);
    if (render(&a) != DSQ_OK) return dsq_cli_fail();
    printf("wrote %s\n", a.out);
    return 0;
}
