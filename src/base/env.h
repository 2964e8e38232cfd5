/* The environment variables redline reads (L0): one registry, so every
 * switch that changes behaviour outside the command line and the API is
 * listed in one place (the table in env.c, documented in docs/ENV.md).
 *
 * Invariants:
 *   - every variable a file under src/ reads has an id here and a table
 *     row (ids are appended, their values fixed), and is read through
 *     rl_env; variables only tests and scripts read are in docs/ENV.md
 *     alone;
 *   - each variable is read once, at the first rl_env call of the process
 *     (all of them together, thread-safe); later changes to the
 *     environment are not seen, and the process must not unset or
 *     overwrite these variables afterwards (rl_env returns the pointer
 *     getenv gave, which stays valid only while the entry does);
 *   - unknown values are the callers' to handle: the registry only says
 *     which values are meaningful. */
#ifndef RL_BASE_ENV_H
#define RL_BASE_ENV_H

#include <stdbool.h>

typedef enum rl_env_id {
    RL_ENV_KERNELS = 0,            /* RL_KERNELS */
    RL_ENV_KVQ_ROT = 1,            /* RL_KVQ_ROT */
    RL_ENV_KVQ_QUERY = 2,          /* RL_KVQ_QUERY */
    RL_ENV_KV_KCAL = 3,            /* RL_KV_KCAL */
    RL_ENV_KV_KSCALE = 4,          /* RL_KV_KSCALE */
    RL_ENV_MODEL = 5,              /* REDLINE_MODEL */
    RL_ENV_API_KEY = 6,            /* REDLINE_API_KEY */
    RL_ENV_TEST_LOAD_DELAY_MS = 7, /* REDLINE_TEST_LOAD_DELAY_MS */
    RL_ENV_OMPI_SIZE = 8,          /* OMPI_COMM_WORLD_SIZE (set by Open MPI's mpirun) */
    RL_ENV_COUNT
} rl_env_id;

/* One row of the registry.  Static strings. */
typedef struct rl_env_var {
    const char *name;    /* the variable, e.g. "RL_KERNELS" */
    const char *values;  /* the meaningful values, e.g. "ref|avx2|avx512vnni" */
    const char *meaning; /* what it changes (one sentence) */
    const char *reader;  /* the file that acts on it */
} rl_env_var;

/* The registry row of id (id < RL_ENV_COUNT). */
const rl_env_var *rl_env_info(rl_env_id id);
/* The variable's value as the process started with it (read once, see
 * above), or NULL when unset.  Borrowed for the process's life. */
const char *rl_env(rl_env_id id);
/* True if the variable is set and equal to value. */
bool rl_env_is(rl_env_id id, const char *value);

#endif
