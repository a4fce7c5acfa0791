#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/commands.h"
#include "core/log.h"
#include "core/status.h"

int dsq_cli_fail(void)
{
    const char *m = dsq_errmsg();
    fprintf(stderr, "dsquant: error: %s\n", m[0] ? m : "unknown failure");
    return 1;
}

int dsq_cli_common_opt(int argc, char **argv, int *i, const char *usage, int *exit_now)
{
    (void)argc;
    const char *a = argv[*i];
    *exit_now = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
        fputs(usage, stdout);
        *exit_now = 1;
        return 1;
    }
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        dsq_log_set_level(DSQ_LOG_DEBUG);
        return 1;
    }
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
        dsq_log_set_level(DSQ_LOG_WARN);
        return 1;
    }
    return 0;
}

long long dsq_cli_parse_int(const char *opt, const char *val, long long min, long long max)
{
    if (!val) {
        fprintf(stderr, "dsquant: error: %s needs a value\n", opt);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end || v < min || v > max) {
        fprintf(stderr, "dsquant: error: %s: \"%s\" is not an integer in [%lld, %lld]\n", opt, val, min, max);
        return -1;
    }
    return v;
}

int dsq_cli_usage_error(const char *cmd, const char *msg, const char *what)
{
    fprintf(stderr, "dsquant: error: %s: %s%s (see dsquant %s --help)\n", cmd, msg, what ? what : "", cmd);
    return 2;
}

int dsq_cli_eval_int_opt(int argc, char **argv, int *i, long long max, const dsq_cli_eval_ints *dst)
{
    const char *opt = argv[*i];
    int *field = !strcmp(opt, "--ctx")       ? dst->ctx
                 : !strcmp(opt, "--chunks")  ? dst->chunks
                 : !strcmp(opt, "--batch")   ? dst->batch
                 : !strcmp(opt, "--threads") ? dst->threads
                                             : NULL;
    if (!field) return 0;
    long long v = dsq_cli_parse_int(opt, *i + 1 < argc ? argv[++*i] : NULL, 1, max);
    if (v < 0) return -1;
    *field = (int)v;
    if (field == dst->ctx && dst->ctx_given) *dst->ctx_given = true;
    return 1;
}

int dsq_cli_walk(int argc, char **argv, const char *cmd, const char *usage, dsq_cli_opt_fn opt, void *user,
                 const char **pos, int max_pos, int *n_pos)
{
    *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        int exit_now, rc;
        if (dsq_cli_common_opt(argc, argv, &i, usage, &exit_now)) {
            if (exit_now) return -1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            if ((rc = opt(argc, argv, &i, user))) return rc;
        } else if (*n_pos < max_pos) {
            pos[(*n_pos)++] = argv[i];
        } else {
            return dsq_cli_usage_error(cmd, "unexpected argument ", argv[i]);
        }
    }
    return 0;
}

void dsq_cli_json_layer_rss(struct cJSON *obj, const long *kb, long long n_layers)
{
    /* the resident set layer by layer: flat when memory stays near one layer */
    cJSON *arr = cJSON_AddArrayToObject(obj, "layer_peak_rss_mib");
    for (long long l = 0; arr && kb && l < n_layers && kb[l] > 0; l++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)kb[l] / 1024.0));
}
