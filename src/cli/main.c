/* The `redline` command: one binary, subcommands (DESIGN.md §6).  Every
 * subcommand is declared in cli/cli.h, so a missing or mistyped one is a
 * compile or link error, never a run-time surprise. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "dist/dist.h"
#include "engine/engine.h"

typedef int (*cmd_fn)(int argc, char **argv);

static const struct {
    const char *name;
    cmd_fn fn;
    const char *help;
} cmds[] = {
    {"run", rl_cmd_run, "generate text from a prompt, or chat interactively"},
    {"serve", rl_cmd_serve, "OpenAI-compatible HTTP server"},
    {"bench", rl_cmd_bench, "prompt-processing and generation speed"},
    {"bench-serve", rl_cmd_bench_serve, "offline serving benchmark"},
    {"perplexity", rl_cmd_perplexity, "perplexity and KL divergence over a text"},
    {"tokenize", rl_cmd_tokenize, "text to token ids and back"},
    {"inspect", rl_cmd_inspect, "print a GGUF file's metadata and tensors"},
    {"quantize", rl_cmd_quantize, "requantize a GGUF model"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: redline <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].help);
    fprintf(f, "\n`redline <command> --help` lists a command's options.\n"
               "`redline --version` prints version, commit and compiler.\n"
               "The technique table (ablation) is its own program: build/bench/ablation --help.\n");
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        rl_cli_print_version(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "redline: unknown command '%s' (see redline --help)\n", argv[1]);
    return 2;
}

/* Under mpirun with several ranks (dist.h) the workers never reach the
 * command: rl_dist_main runs them to the end of the job. */
int main(int argc, char **argv) {
    int rc = 0;
    if (rl_dist_main(&argc, argv, &rc)) return rc;
#ifdef RL_HAVE_MPI
    if (rl_dist_size() > 1) { /* rank 0 of a pipeline: its engine runs through src/dist/ */
        rl_engine_hooks h = {.stage = 0,
                             .n_stages = rl_dist_size(),
                             .forward = rl_dist_forward,
                             .ud = rl_dist_ctx(),
                             .on_model = rl_dist_on_model,
                             .on_pool = rl_dist_on_pool,
                             .on_free = rl_dist_on_free};
        rl_engine_set_hooks(&h);
    }
#endif
    return rl_dist_finalize(dispatch(argc, argv));
}
