/* The `redline` command (L9): the subcommands and the helpers they share.
 * Each subcommand lives in its own cmd_<name>.c; main.c dispatches on
 * argv[1] and hands over (argc - 1, argv + 1), so argv[0] is the
 * subcommand's name.  Every one returns the process exit status: 0 on
 * success, 1 when the work failed, 2 for a usage error (args.h). */
#ifndef RL_CLI_H
#define RL_CLI_H

#include <stddef.h>
#include <stdio.h>

#define RL_VERSION "0.1.0"
/* Path of the model fetched by set-up, used when -m is not given. */
#define RL_DEFAULT_MODEL "models/smollm2-135m.gguf"

int rl_cmd_run(int argc, char **argv);         /* cmd_run.c */
int rl_cmd_serve(int argc, char **argv);       /* cmd_serve.c */
int rl_cmd_bench(int argc, char **argv);       /* cmd_bench.c */
int rl_cmd_bench_serve(int argc, char **argv); /* cmd_bench_serve.c */
int rl_cmd_perplexity(int argc, char **argv);  /* cmd_perplexity.c */
int rl_cmd_tokenize(int argc, char **argv);    /* cmd_tokenize.c */
int rl_cmd_inspect(int argc, char **argv);     /* cmd_inspect.c */
int rl_cmd_quantize(int argc, char **argv);    /* cmd_quantize.c */

void rl_cli_print_version(FILE *f);
/* Resolves the model path: `arg` if non-NULL, else $REDLINE_MODEL, else
 * RL_DEFAULT_MODEL. */
const char *rl_cli_model_path(const char *arg);

/* Reads a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer
 * (caller frees with free()); *n gets its length.  NULL on error (errno). */
char *rl_cli_read_file(const char *path, size_t *n);

#endif
