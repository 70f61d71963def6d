/* One job out of separately started MPI jobs (torchrun-style launch).
 *
 * Two forms start the ranks of one job in parts:
 *
 *  - nodes: `engine-run --nnodes N --node-rank R ... --nproc-per-node K`
 *    on every node. The launchers meet (engine/comm/rdzv.h), node 0's starts
 *    Open MPI's ompi-server, and each runs `mpirun -np K --ompi-server URI`
 *    with DS_JOIN_NODE_RANK=R and DS_JOIN_NNODES=N for its ranks.
 *  - env: an outside agent (a Kubernetes training operator, a
 *    torchrun-compatible scheduler) starts every rank itself with RANK,
 *    WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK optional). Each
 *    process is an MPI singleton; before MPI_Init they meet at
 *    MASTER_ADDR:MASTER_PORT, RANK 0 starts the ompi-server and hands its URI
 *    to the others, and each points its MPI at it (OMPI_MCA_pmix_server_uri).
 *
 * Either way, once MPI runs, part 0's local rank 0 opens an MPI port and
 * publishes it on the ompi-server; the other parts look it up and connect
 * (MPI_Comm_connect / MPI_Comm_accept, one part at a time, each merged with
 * MPI_Intercomm_merge), and the result is split into one communicator
 * ordered by part, then by rank within the part: global rank = part * K +
 * local rank, as ds_rank_discover reports it. The library uses that
 * communicator wherever it would use MPI_COMM_WORLD (mpi_boot.c).
 *
 * Every wait has the deadline given (the config's comm_timeout_s): a part
 * that never connects fails the others with DS_ERR_TIMEOUT naming it; the
 * accept or connect left waiting in MPI is abandoned, and the process, whose
 * collective failed, ends its job with MPI_Abort at exit (comm.h). */
#ifndef DS_COMM_JOIN_H
#define DS_COMM_JOIN_H

#include <mpi.h>
#include <stdbool.h>
#include <sys/types.h>

#include "engine/comm/comm.h"

/* The variables engine-run sets for a node's ranks (the nodes form). */
#define DS_JOIN_NODE_RANK_VAR "DS_JOIN_NODE_RANK"
#define DS_JOIN_NNODES_VAR "DS_JOIN_NNODES"

/* The name part 0 publishes its MPI port under on the job's own ompi-server. */
#define DS_JOIN_SERVICE "zero-engine-join"

typedef enum ds_join_kind { DS_JOIN_NONE = 0, DS_JOIN_NODES, DS_JOIN_ENV } ds_join_kind;

typedef struct ds_join_plan {
    ds_join_kind kind;
    int part, parts;   /* node rank and nodes; env form: RANK and WORLD_SIZE */
    int part_size;     /* ranks per part (env form: 1) */
    int world;         /* parts * part_size */
    const char *what;  /* "node" or "rank", for messages */
    char master_addr[256]; /* env form: where RANK 0 listens */
    int master_port;
} ds_join_plan;

/* Whether this process is a part of a joined job, from what ds_rank_discover
 * found (info) and the environment: the nodes form, or RANK/WORLD_SIZE > 1
 * with MASTER_ADDR and MASTER_PORT set. kind NONE for every other launch.
 * Bad values (a port that is not a number) fail with DS_ERR_INVALID_ARG
 * naming the variable. */
ds_status ds_join_plan_read(const ds_rank_info *info, ds_join_plan *plan);

/* Env form, before MPI_Init: the rendezvous (RANK 0 also starts the
 * ompi-server), then OMPI_MCA_pmix_server_uri is set so the singleton MPI
 * this process starts can connect to the others. Other forms: nothing. */
ds_status ds_join_prepare(const ds_join_plan *plan, double timeout_s);

/* After MPI_Init: join the parts; *world gets the communicator ordered by
 * part then local rank (owned by the library until ds_join_release). */
ds_status ds_join_merge(const ds_join_plan *plan, double timeout_s, MPI_Comm *world);

/* Before MPI_Finalize: free every communicator the join made (Open MPI
 * 4.1's finalize of connected jobs otherwise dies of SIGPIPE), then stop the
 * ompi-server this process started. */
void ds_join_release(void);
/* Only stop the ompi-server (a job ended with MPI_Abort frees nothing). */
void ds_join_stop_server(void);

/* Open MPI's ompi-server as a child of this process, for the jobs to find
 * each other through (engine-run's node 0 and the env form's RANK 0). */
typedef struct ds_ompi_server {
    pid_t pid;     /* 0: not running */
    char dir[64];  /* a private folder holding the URI file */
    char uri[1024];
} ds_ompi_server;

/* Start it (found on PATH) and wait, until timeout_s, for its URI. The
 * server dies with this process (PR_SET_PDEATHSIG). */
ds_status ds_ompi_server_start(double timeout_s, ds_ompi_server *s);
/* Stop it (SIGTERM, then reap) and remove its folder. */
void ds_ompi_server_stop(ds_ompi_server *s);

#endif /* DS_COMM_JOIN_H */
