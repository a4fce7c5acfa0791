/* Subcommands of the dsquant program. Each lives in its own cli/cmd_*.c,
 * parses its own arguments (argv[0] is the subcommand name) and returns the
 * process exit status: 0 success, 1 failure (after printing one line), 2 usage. */
#ifndef DSQ_CLI_COMMANDS_H
#define DSQ_CLI_COMMANDS_H

#include <stdbool.h>

typedef int (*dsq_cmd_fn)(int argc, char **argv);

typedef struct dsq_cmd {
    const char *name;
    const char *summary;
    dsq_cmd_fn run;
} dsq_cmd;

int dsq_cmd_info(int argc, char **argv);
int dsq_cmd_convert(int argc, char **argv);
int dsq_cmd_gguf(int argc, char **argv);
int dsq_cmd_ppl(int argc, char **argv);
int dsq_cmd_kld(int argc, char **argv);
int dsq_cmd_generate(int argc, char **argv);
int dsq_cmd_imatrix(int argc, char **argv);
int dsq_cmd_tokenize(int argc, char **argv);
int dsq_cmd_logits(int argc, char **argv);
int dsq_cmd_serve(int argc, char **argv);
/* rtn, awq, gptq (cli/cmd_quant.c; argv[0] picks the method). */
int dsq_cmd_quant(int argc, char **argv);
/* smoothquant, fp8 (cli/cmd_w8.c; argv[0] picks the method). */
int dsq_cmd_w8(int argc, char **argv);
/* every type x method made and measured (cli/cmd_sweep.c), and its page (cli/cmd_report.c). */
int dsq_cmd_sweep(int argc, char **argv);
int dsq_cmd_report(int argc, char **argv);

/* SIGBUS (a mapped input truncated under us), SIGINT and SIGTERM: the
 * temporaries of unfinished outputs are removed (cli/signals.c). */
void dsq_cli_install_signals(void);

/* Shared helpers for subcommands (cli/common.c). */

struct cJSON;
/* obj["layer_peak_rss_mib"] = the calibration driver's per-layer peak RSS
 * (dsq_seq_opts.layer_rss_kb), up to the first layer not reached. */
void dsq_cli_json_layer_rss(struct cJSON *obj, const long *kb, long long n_layers);

/* Prints "dsquant: error: <library message>" and returns 1. */
int dsq_cli_fail(void);
/* Handles the options every subcommand takes (-v, -q, -h/--help with usage text);
 * returns 1 when argv[*i] was one of them. Sets *exit_now when --help printed usage. */
int dsq_cli_common_opt(int argc, char **argv, int *i, const char *usage, int *exit_now);
/* Parses a positive integer option value; prints an error and returns -1 on bad input. */
long long dsq_cli_parse_int(const char *opt, const char *val, long long min, long long max);
/* Prints "dsquant: error: CMD: MSG WHAT (see dsquant CMD --help)" (WHAT may be NULL) and returns 2. */
int dsq_cli_usage_error(const char *cmd, const char *msg, const char *what);

/* One option at argv[*i] (advancing *i past its value): 0 when taken, else the exit status. */
typedef int (*dsq_cli_opt_fn)(int argc, char **argv, int *i, void *user);
/* Walks argv[1..]: the common options, other options through opt, and up to
 * max_pos positional arguments into pos (*n_pos of them). Returns 0 to go on,
 * -1 after --help, or the exit status of a usage error. */
int dsq_cli_walk(int argc, char **argv, const char *cmd, const char *usage, dsq_cli_opt_fn opt, void *user,
                 const char **pos, int max_pos, int *n_pos);

/* Where an evaluation command (ppl, kld, imatrix) keeps --ctx, --chunks, --batch
 * and --threads; ctx_given (may be NULL) is set when --ctx is given. */
typedef struct dsq_cli_eval_ints {
    int *ctx, *chunks, *batch, *threads;
    bool *ctx_given;
} dsq_cli_eval_ints;
/* Takes argv[*i] when it is one of those options, its value an integer in [1, max]:
 * returns 1 after storing the value, 0 when argv[*i] is another option, -1 after
 * printing why the value is bad. */
int dsq_cli_eval_int_opt(int argc, char **argv, int *i, long long max, const dsq_cli_eval_ints *dst);

#endif
