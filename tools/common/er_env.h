/* engine-run: the environment its ranks start with (tools/common/er_env.c).
 *
 * What engine-run sets for the ranks (OMP_NUM_THREADS, OPENBLAS_CORETYPE,
 * the DS_* variables of a job over several nodes or of the preemption relay)
 * goes through er_env_set, which also notes it for --dry-run to print in
 * front of the command, so that the printed line runs the same way in a
 * shell. Local ranks inherit the whole environment; er_env_each_forwarded
 * names the variables mpirun must pass on (-x) to ranks on other hosts. */
#ifndef DS_TOOLS_ER_ENV_H
#define DS_TOOLS_ER_ENV_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/backend/blas_core.h"

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
 * (OMP_NUM_THREADS always; LD_LIBRARY_PATH, OPENBLAS_NUM_THREADS and
 * OPENBLAS_CORETYPE when set; every DS_*, NCCL_* and UCX_* variable; the
 * names er_env_load_file set). */
void er_env_each_forwarded(void (*fn)(void *ctx, const char *name), void *ctx);

/* A job over several hosts: DeepSpeed's environment file, NAME=VALUE lines
 * (blank lines and # comments skipped), into this environment and so to
 * every rank: $DS_ENV_FILE if set, else ~/.deepspeed_env then
 * ./.deepspeed_env (the later wins). A line to msg per file read. NULL, or
 * the message of a line that is not NAME=VALUE. */
const char *er_env_load_file(FILE *msg);

/* ds_blas_core_probe_read, except under the test-only variable
 * ENGINE_RUN_TEST_OPENBLAS="CORE[:FLAG,FLAG...]": OpenBLAS (DYNAMIC_ARCH)
 * is taken to have chosen CORE and, with the list, the CPU to have exactly
 * those of avx, avx2, fma, avx512f, avx512bw, avx512vl, avx512dq. A
 * process's OpenBLAS cannot be made to choose another core after it loaded,
 * so this is how the tests reach the decision on any CPU. NULL, or the
 * message for a FLAG it does not know. */
const char *er_blas_core_probe(ds_blas_core_probe *p);

/* When OPENBLAS_CORETYPE is unset and OpenBLAS runs a fallback core older
 * than this CPU (ds_blas_core_check's FALLBACK), sets OPENBLAS_CORETYPE for
 * the ranks and says so on `msg` in one line (msg NULL: silently). NULL, or
 * a message on failure. */
const char *er_env_blas_core(FILE *msg);

#endif /* DS_TOOLS_ER_ENV_H */
