/* Subcommands of the dsquant program. Each lives in its own cli/cmd_*.c,
 * parses its own arguments (argv[0] is the subcommand name) and returns the
 * process exit status: 0 success, 1 failure (after printing one line), 2 usage. */
#ifndef DSQ_CLI_COMMANDS_H
#define DSQ_CLI_COMMANDS_H

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
/* rtn, awq, gptq (cli/cmd_quant.c; argv[0] picks the method). */
int dsq_cmd_quant(int argc, char **argv);

/* Shared helpers for subcommands (cli/common.c). */

/* Prints "dsquant: error: <library message>" and returns 1. */
int dsq_cli_fail(void);
/* Handles the options every subcommand takes (-v, -q, -h/--help with usage text);
 * returns 1 when argv[*i] was one of them. Sets *exit_now when --help printed usage. */
int dsq_cli_common_opt(int argc, char **argv, int *i, const char *usage, int *exit_now);
/* Parses a positive integer option value; prints an error and returns -1 on bad input. */
long long dsq_cli_parse_int(const char *opt, const char *val, long long min, long long max);

#endif
