/* Helpers shared by the subcommands: --version, the default-model rule,
 * reading a whole input file. */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/env.h"
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
    const char *env = rl_env(RL_ENV_MODEL);
    return env && *env ? env : RL_DEFAULT_MODEL;
}

char *rl_cli_read_file(const char *path, size_t *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    rl_buf b = {0};
    bool ok = true;
    char chunk[1 << 16];
    size_t r;
    while (ok && (r = fread(chunk, 1, sizeof chunk, f)) > 0)
        ok = rl_buf_append(&b, chunk, r) == RL_OK;
    if (f != stdin) fclose(f);
    if (!ok) {
        rl_buf_free(&b);
        return NULL;
    }
    return rl_buf_take(&b, n);
}
