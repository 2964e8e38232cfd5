/* The registry of environment variables (env.h): one row per variable,
 * indexed by rl_env_id, and the read-once cache.  docs/ENV.md shows the
 * same table for readers (tests/unit/test_env.c checks it lists every
 * name). */
#include "base/env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static const rl_env_var g_vars[RL_ENV_COUNT] = {
    [RL_ENV_KERNELS] =
        {"RL_KERNELS", "ref|avx2|avx512vnni|amx",
         "caps the kernel table rl_kernels_init(AUTO) picks (unknown values: no cap)",
         "src/kernels/dispatch.c"},
    [RL_ENV_KVQ_ROT] = {"RL_KVQ_ROT", "none|hadamard",
                        "overrides the AUTO rotation of quantized KV pages",
                        "src/kernels/kvpage.c"},
    [RL_ENV_KVQ_QUERY] = {"RL_KVQ_QUERY", "f32",
                          "scores quantized K pages with the f32 query instead of a q8_0 one",
                          "src/kernels/attention.c"},
    [RL_ENV_KV_KCAL] = {"RL_KV_KCAL", "none",
                        "skips the K calibration of quantized K pages (the K bias, or nothing, "
                        "stays the shift)",
                        "src/model/kcal.c"},
    [RL_ENV_KV_KSCALE] = {"RL_KV_KSCALE", "none", "calibrates the K shift but no K channel scale",
                          "src/model/kcal.c"},
    [RL_ENV_MODEL] = {"REDLINE_MODEL", "a GGUF path", "the model the CLI uses when -m is not given",
                      "src/cli/version.c"},
    [RL_ENV_API_KEY] = {"REDLINE_API_KEY", "a key",
                        "the API key `redline serve` requires (--api-key overrides it)",
                        "src/cli/cmd_serve.c"},
    [RL_ENV_TEST_LOAD_DELAY_MS] = {"REDLINE_TEST_LOAD_DELAY_MS", "milliseconds > 0",
                                   "test hook: the server holds its loading state that long",
                                   "src/server/server.c"},
    [RL_ENV_OMPI_SIZE] = {"OMPI_COMM_WORLD_SIZE", "ranks > 1 (set by mpirun)",
                          "runs `redline run`/`serve` as a pipeline over MPI (docs/PIPELINE.md)",
                          "src/dist/dist.c"},
};

static const char *g_val[RL_ENV_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void rl__env_read(void) {
    for (int i = 0; i < RL_ENV_COUNT; i++) g_val[i] = getenv(g_vars[i].name);
}

const rl_env_var *rl_env_info(rl_env_id id) {
    RL_ASSERT((unsigned)id < RL_ENV_COUNT);
    return &g_vars[id];
}

const char *rl_env(rl_env_id id) {
    RL_ASSERT((unsigned)id < RL_ENV_COUNT);
    pthread_once(&g_once, rl__env_read);
    return g_val[id];
}

bool rl_env_is(rl_env_id id, const char *value) {
    const char *v = rl_env(id);
    return v && strcmp(v, value) == 0;
}
