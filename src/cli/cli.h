/* Shared helpers of the `redline` subcommands (L9). */
#ifndef RL_CLI_H
#define RL_CLI_H

#include <stdio.h>

#define RL_VERSION "0.1.0"
/* Path of the model fetched by set-up, used when -m is not given. */
#define RL_DEFAULT_MODEL "models/smollm2-135m.gguf"

void rl_cli_print_version(FILE *f);
/* Resolves the model path: `arg` if non-NULL, else $REDLINE_MODEL, else
 * RL_DEFAULT_MODEL. */
const char *rl_cli_model_path(const char *arg);

/* Reads a whole file ("-" = stdin) into a NUL-terminated malloc'd buffer
 * (caller frees with free()); *n gets its length.  NULL on error (errno). */
char *rl_cli_read_file(const char *path, size_t *n);

#endif
