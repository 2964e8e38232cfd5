/* Helpers shared by the subcommands: --version, the default-model rule,
 * reading a whole input file. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#ifndef RL_GIT_COMMIT
#define RL_GIT_COMMIT "unknown"
#endif

void rl_cli_print_version(FILE *f) {
#if defined(__clang__)
    const char *cc = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *cc = "gcc " __VERSION__;
#else
    const char *cc = "unknown compiler";
#endif
    fprintf(f, "redline %s (commit %s, %s)\n", RL_VERSION, RL_GIT_COMMIT, cc);
}

const char *rl_cli_model_path(const char *arg) {
    if (arg) return arg;
    const char *env = getenv("REDLINE_MODEL");
    return env && *env ? env : RL_DEFAULT_MODEL;
}

char *rl_cli_read_file(const char *path, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    while (b) {
        if (len == cap) {
            char *nb = realloc(b, (cap *= 2) + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
        }
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    if (f != stdin) fclose(f);
    if (b) b[len] = '\0';
    *n = len;
    return b;
}
