/* dist.h without MPI (the default build; `make MPI=1` builds dist.c and
 * worker.c instead): outside mpirun nothing happens; started by mpirun
 * with more than one rank, every rank refuses with a one-line reason
 * rather than run K independent copies. */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/env.h"

bool rl_dist_main(int *argc, char **argv, int *exit_code) {
    (void)argc;
    (void)argv;
    const char *n = rl_env(RL_ENV_OMPI_SIZE);
    if (!n || atoi(n) <= 1) return false;
    fprintf(stderr,
            "redline: started by mpirun with %s ranks, but this build has no MPI "
            "(rebuild with `make MPI=1`; docs/PIPELINE.md)\n",
            n);
    *exit_code = 2;
    return true;
}

int rl_dist_finalize(int exit_code) {
    return exit_code;
}

int rl_dist_size(void) {
    return 1;
}
