/* --version and the default-model rule shared by the subcommands. */
#include <stdlib.h>

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
