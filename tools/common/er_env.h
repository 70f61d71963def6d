/* engine-run: the environment its ranks start with (tools/common/er_env.c).
 *
 * What engine-run sets for the ranks (OMP_NUM_THREADS, the DS_* variables
 * of a job over several nodes or of the preemption relay) goes through
 * er_env_set, which also notes it for --dry-run to print in
 * front of the command, so that the printed line runs the same way in a
 * shell. Local ranks inherit the whole environment; er_env_each_forwarded
 * names the variables mpirun must pass on (-x) to ranks on other hosts. */
#ifndef DS_TOOLS_ER_ENV_H
#define DS_TOOLS_ER_ENV_H

#include <stdbool.h>
#include <stdio.h>

/* An environment variable that is set and not empty, else NULL. */
const char *er_env_get(const char *name);

/* setenv(name, value) and a note for er_env_print_notes; false (errno set)
 * when setenv fails. */
bool er_env_set(const char *name, const char *value);

/* OMP_NUM_THREADS=value (at least 1) unless the user already chose a value;
 * false when setenv fails. */
bool er_env_default_omp_threads(int value);

/* "NAME=value " for each er_env_set so far, in order. */
void er_env_print_notes(FILE *out);

/* Calls fn(ctx, NAME) for each variable mpirun forwards with -x: the ones
 * that change what a rank computes or which library it loads
 * (OMP_NUM_THREADS always; LD_LIBRARY_PATH and OPENBLAS_NUM_THREADS when
 * set; every DS_* variable). */
void er_env_each_forwarded(void (*fn)(void *ctx, const char *name), void *ctx);

#endif /* DS_TOOLS_ER_ENV_H */
