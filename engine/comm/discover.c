/* Rank discovery from the launcher's environment (no MPI call).
 *
 * Each launcher family is a group of variables; the first group that has any
 * of its "trigger" variables set decides, and a group that is only half set
 * is an error rather than a silent fall-through to the next one, because
 * running 4 processes that each believe they are alone trains 4 models. */
#include "engine/comm/comm.h"
#include "engine/comm/join.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

/* Parse a decimal integer in [lo, INT_MAX]; fail naming the variable. */
static ds_status parse_int(const char *name, const char *text, int lo, int *out) {
    if (text[0] == '\0')
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s is set but empty", name);
    errno = 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > INT_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "rank discovery: %s=\"%s\" is not an integer >= %d", name, text, lo);
    *out = (int)v;
    return DS_OK;
}

/* An optional variable: *out stays -1 when it is not set. */
static ds_status parse_opt(const char *name, int lo, int *out) {
    const char *v = getenv(name);
    *out = -1;
    if (!v) return DS_OK;
    DS_TRY(parse_int(name, v, lo, out));
    return DS_OK;
}

/* A required variable of a group some other member of which is set. */
static ds_status parse_req(const char *name, const char *because, int lo, int *out) {
    const char *v = getenv(name);
    if (!v)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "rank discovery: %s is set but %s is not (a launcher sets both)", because,
                      name);
    DS_TRY(parse_int(name, v, lo, out));
    return DS_OK;
}

typedef struct group {
    ds_rank_source source;
    const char *rank, *size, *local_rank, *local_size; /* local_* may be NULL */
    const char *requires; /* the group counts only when this is set too (NULL: always) */
    const char *size_first; /* read instead of `size` when set (NULL: none) */
} group;

/* Launcher families in precedence order. Open MPI's own variables come first:
 * inside an allocation, srun may have left SLURM_* behind for the outer job
 * step while mpirun started these processes. */
static const group k_groups[] = {
    {DS_RANKS_MPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, NULL},
    /* MPICH / Intel MPI (Hydra) */
    {DS_RANKS_MPI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL, NULL},
    /* Only inside a job step: an sbatch script itself runs with SLURM_PROCID=0
     * and SLURM_NTASKS=N but is one process, not rank 0 of N (it would wait
     * for N-1 peers that never start). srun steps set SLURM_STEP_ID.
     * SLURM_STEP_NUM_TASKS is the step's own task count; SLURM_NTASKS may be
     * the job's when the step was started with fewer tasks. */
    {DS_RANKS_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_STEP_ID",
     "SLURM_STEP_NUM_TASKS"},
    /* torchrun-style */
    {DS_RANKS_ENV, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL, NULL},
};

static ds_status read_group(const group *g, ds_rank_info *out) {
    const char *size = g->size_first && getenv(g->size_first) ? g->size_first : g->size;
    const char *trigger = getenv(g->rank) ? g->rank : size;
    int rank, world, lrank = -1, lworld = -1;
    DS_TRY(parse_req(g->rank, trigger, 0, &rank));
    DS_TRY(parse_req(size, trigger, 1, &world));
    if (rank >= world)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d is not below %s=%d", g->rank,
                      rank, size, world);
    if (g->local_rank) DS_TRY(parse_opt(g->local_rank, 0, &lrank));
    if (g->local_size) DS_TRY(parse_opt(g->local_size, 1, &lworld));
    if (lworld > world)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d exceeds %s=%d", g->local_size,
                      lworld, size, world);
    if (lrank >= 0 && lworld >= 0 && lrank >= lworld)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d is not below %s=%d",
                      g->local_rank, lrank, g->local_size, lworld);
    if (lrank >= world)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d is not below %s=%d",
                      g->local_rank, lrank, size, world);
    out->rank = rank;
    out->world = world;
    out->local_rank = lrank;
    out->local_world = lworld;
    out->source = g->source;
    out->world_var = size;
    /* One rank alone on its node: its local rank is 0 whatever was left unset. */
    if (world == 1) {
        out->local_rank = 0;
        out->local_world = 1;
    }
    return DS_OK;
}

/* A node's ranks under engine-run --nnodes: mpirun's numbering is the
 * node's own, and DS_JOIN_NODE_RANK / DS_JOIN_NNODES place the node in the
 * job (engine/comm/join.h): rank = node * K + local rank, K ranks a node. */
static ds_status read_join(ds_rank_info *info) {
    const char *nodes_var = DS_JOIN_NNODES_VAR, *node_var = DS_JOIN_NODE_RANK_VAR;
    if (info->source != DS_RANKS_MPI || !getenv("OMPI_COMM_WORLD_SIZE"))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "rank discovery: %s is set but this process is not a rank that mpirun "
                      "started (engine-run --nnodes sets it for the ranks of its node)",
                      nodes_var);
    int nodes = 0, node = 0; /* set by the parses; zero quiets -O3's maybe-uninitialized */
    DS_TRY(parse_int(nodes_var, getenv(nodes_var), 1, &nodes));
    DS_TRY(parse_req(node_var, nodes_var, 0, &node));
    if (node >= nodes)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d is not below %s=%d", node_var,
                      node, nodes_var, nodes);
    if ((long long)nodes * info->world > INT_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "rank discovery: %s=%d nodes of %d ranks is too many",
                      nodes_var, nodes, info->world);
    info->rank += node * info->world;
    info->world *= nodes;
    info->source = DS_RANKS_JOIN;
    info->world_var = nodes_var;
    return DS_OK;
}

ds_status ds_rank_discover(ds_rank_info *out) {
    if (!out) return DS_ERR(DS_ERR_INVALID_ARG, "ds_rank_discover: out is NULL");
    *out = (ds_rank_info){.rank = 0, .world = 1, .local_rank = 0, .local_world = 1,
                          .source = DS_RANKS_SINGLE};
    for (size_t i = 0; i < sizeof k_groups / sizeof k_groups[0]; i++) {
        const group *g = &k_groups[i];
        if (!getenv(g->rank) && !getenv(g->size)) continue;
        if (g->requires && !getenv(g->requires)) continue;
        ds_rank_info info;
        DS_TRY(read_group(g, &info));
        if (getenv(DS_JOIN_NNODES_VAR)) DS_TRY(read_join(&info));
        *out = info;
        return DS_OK;
    }
    return DS_OK;
}

const char *ds_rank_source_name(ds_rank_source s) {
    switch (s) {
    case DS_RANKS_SINGLE: return "single process";
    case DS_RANKS_MPI:
        if (getenv("OMPI_COMM_WORLD_SIZE")) return "MPI (OMPI_COMM_WORLD_SIZE)";
        if (getenv("PMI_SIZE")) return "MPI (PMI_SIZE)";
        return "MPI (MPI_COMM_WORLD)";
    case DS_RANKS_SLURM:
        return getenv("SLURM_STEP_NUM_TASKS") ? "Slurm (SLURM_STEP_NUM_TASKS)"
                                              : "Slurm (SLURM_NTASKS)";
    case DS_RANKS_ENV: return "environment (WORLD_SIZE)";
    case DS_RANKS_JOIN: return "engine-run --nnodes (DS_JOIN_NNODES x OMPI_COMM_WORLD_SIZE)";
    default: return "unknown";
    }
}
