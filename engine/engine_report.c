/* What rank 0 prints: a short account of the resolved config, the memory
 * per rank next to the ZeRO paper's formula, and a line every
 * steps_per_print steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "zero/estimate.h"

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* Model-state purposes, the ones the ZeRO formula covers. */
static const ds_mem_purpose k_state[] = {DS_MEM_PARAMS, DS_MEM_GRADS, DS_MEM_MASTER,
                                         DS_MEM_OPTIM};
/* per purpose (device + host), model state, formula, the host share of
 * the row (offload_optimizer puts master and moments there), and the bytes
 * in NVMe swap files (offload_optimizer / offload_param device "nvme") */
#define N_COLS (DS_MEM_PURPOSE_COUNT + 4)

/* Each column's largest value over the ranks, by a sum over ranks of a
 * world x N_COLS table each rank fills its row of (no gather primitive).
 * Collective. NULL when out of memory or the reduction failed. */
static double *memory_rows(engine_t *e) {
    int rank = e->comm->rank, world = e->comm->world;
    double *rows = calloc((size_t)world * N_COLS, sizeof *rows);
    if (!rows) return NULL;
    ds_mem_report r;
    ds_mem_snapshot(e->mem, &r);
    double *row = rows + (size_t)rank * N_COLS;
    uint64_t state = 0;
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        row[p] = (double)(r.bytes[p][DS_PLACE_DEVICE] + r.bytes[p][DS_PLACE_HOST]);
    for (size_t k = 0; k < sizeof k_state / sizeof *k_state; k++)
        state += r.bytes[k_state[k]][DS_PLACE_DEVICE] + r.bytes[k_state[k]][DS_PLACE_HOST] +
                 r.bytes[k_state[k]][DS_PLACE_NVME]; /* the formula counts the swapped state */
    row[DS_MEM_PURPOSE_COUNT] = (double)state;
    row[DS_MEM_PURPOSE_COUNT + 1] = (double)ds_expected_model_state_bytes(e);
    row[DS_MEM_PURPOSE_COUNT + 2] = (double)r.total[DS_PLACE_HOST];
    row[DS_MEM_PURPOSE_COUNT + 3] = (double)r.total[DS_PLACE_NVME];
    if (ds_comm_host_all_reduce(e->comm, rows, (size_t)world * N_COLS, DS_F64, DS_REDUCE_SUM) !=
        DS_OK) {
        free(rows);
        return NULL;
    }
    return rows;
}

/* Purpose p's bytes in this machine's RAM (device memory is RAM on cpu). */
static uint64_t ram_of(const ds_mem_report *r, ds_mem_purpose p, ds_backend_kind be) {
    return r->bytes[p][DS_PLACE_HOST] + (be == DS_BACKEND_CPU ? r->bytes[p][DS_PLACE_DEVICE] : 0);
}

/* Before the strategy allocates: the estimate (zero/estimate.h) against
 * the RAM this host has, so a configuration that cannot fit stops here
 * with the fix instead of being killed by the kernel mid-step. */
/* The estimate's device bytes of one rank against its GPU's free memory
 * (a backend with device memory of its own: cuda). */
static ds_status check_device(engine_t *e, const ds_mem_report *r) {
    size_t free_b = 0, total_b = 0;
    if (!e->be->ops->mem_info || e->be->ops->mem_info(e->be, &free_b, &total_b) != DS_OK) {
        ds_clear_error(); /* no figure to judge by: the allocations will say */
        return DS_OK;
    }
    uint64_t need = r->total[DS_PLACE_DEVICE];
    if (need <= free_b) return DS_OK;
    char sz[10][24];
    return DS_ERR(DS_ERR_OOM,
                  "this configuration does not fit in GPU memory: ZeRO stage %d, %s, %lld "
                  "parameters need %s a rank on its GPU by the estimate (params %s, grads %s, "
                  "master %s, optim %s, buffers %s, activations %s, GEMM workspace %s) where "
                  "GPU %d has %s free of %s; offload the optimizer state or the parameters "
                  "(zero_optimization.offload_optimizer / offload_param), a higher "
                  "zero_optimization.stage, or a smaller micro batch "
                  "(zero_estimate --config prints the table). DS_MEM_LIMIT=off skips this check",
                  e->cfg.zero_stage, ds_dtype_name(e->param_t),
                  (long long)ds_model_num_params(e->model), ds_estimate_size(need, sz[0]),
                  ds_estimate_size(r->bytes[DS_MEM_PARAMS][DS_PLACE_DEVICE], sz[1]),
                  ds_estimate_size(r->bytes[DS_MEM_GRADS][DS_PLACE_DEVICE], sz[2]),
                  ds_estimate_size(r->bytes[DS_MEM_MASTER][DS_PLACE_DEVICE], sz[3]),
                  ds_estimate_size(r->bytes[DS_MEM_OPTIM][DS_PLACE_DEVICE], sz[4]),
                  ds_estimate_size(r->bytes[DS_MEM_BUFFERS][DS_PLACE_DEVICE], sz[5]),
                  ds_estimate_size(r->bytes[DS_MEM_ACTIVATIONS][DS_PLACE_DEVICE], sz[6]),
                  ds_estimate_size(r->bytes[DS_MEM_WORKSPACE][DS_PLACE_DEVICE], sz[7]),
                  e->be->device, ds_estimate_size(free_b, sz[8]),
                  ds_estimate_size(total_b, sz[9]));
}

ds_status ds_engine_check_fit(engine_t *e) {
    uint64_t limit;
    const char *source;
    DS_TRY(ds_estimate_ram_limit(&limit, &source));
    if (limit == 0) return DS_OK; /* DS_MEM_LIMIT=off */
    ds_backend_kind be = e->be->kind;
    ds_mem_report r;
    DS_TRY(ds_estimate_model(e->model, e->comm->world, &e->cfg, be, &r));
    if (be != DS_BACKEND_CPU) DS_TRY(check_device(e, &r));
    /* the ranks of this host share its RAM (MemAvailable is the host's) */
    int per_host = ds_comm_ranks_on_host(e->comm);
    uint64_t need = ds_estimate_ram_ranks(&r, be, per_host);
    if (need <= limit) return DS_OK;
    char fix[512];
    ds_estimate_fix(e->model, 0, 0, e->comm->world, per_host, &e->cfg, be, limit, fix,
                    sizeof fix);
    int64_t psi = ds_model_num_params(e->model);
    char sz[9][24];
    return DS_ERR(DS_ERR_OOM,
                  "this configuration does not fit in memory: ZeRO stage %d, %s, %lld "
                  "parameters, %d rank%s on this host need %s of RAM by the estimate (per rank: "
                  "params %s, grads %s, master %s, optim %s, buffers %s, activations %s, GEMM "
                  "workspace %s) against %s (%s); %s. DS_MEM_LIMIT=off skips this check",
                  e->cfg.zero_stage, ds_dtype_name(e->param_t), (long long)psi, per_host,
                  per_host == 1 ? "" : "s", ds_estimate_size(need, sz[0]),
                  ds_estimate_size(ram_of(&r, DS_MEM_PARAMS, be), sz[1]),
                  ds_estimate_size(ram_of(&r, DS_MEM_GRADS, be), sz[2]),
                  ds_estimate_size(ram_of(&r, DS_MEM_MASTER, be), sz[3]),
                  ds_estimate_size(ram_of(&r, DS_MEM_OPTIM, be), sz[4]),
                  ds_estimate_size(ram_of(&r, DS_MEM_BUFFERS, be), sz[5]),
                  ds_estimate_size(ram_of(&r, DS_MEM_ACTIVATIONS, be), sz[6]),
                  ds_estimate_size(ram_of(&r, DS_MEM_WORKSPACE, be), sz[8]),
                  ds_estimate_size(limit, sz[7]), source, fix);
}

/* One line: each purpose's largest per-rank share (the ranks' rows differ
 * only by partition padding; --metrics has every rank's). */
static void print_memory(const double *rows, int world) {
    double most[N_COLS] = {0};
    for (int r = 0; r < world; r++)
        for (int c = 0; c < N_COLS; c++)
            if (rows[(size_t)r * N_COLS + c] > most[c]) most[c] = rows[(size_t)r * N_COLS + c];
    printf("[zero-engine] memory per rank, MiB (largest of %d rank%s):", world,
           world == 1 ? "" : "s");
    int n = 0;
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        if (most[p] >= 0.005 * 1048576.0) /* what prints as 0.00 is left out */
            printf("%s %s %.2f", n++ ? "," : "", ds_mem_purpose_name((ds_mem_purpose)p),
                   most[p] / 1048576.0);
    printf("; model state %.2f (ZeRO formula %.2f); host %.2f",
           most[DS_MEM_PURPOSE_COUNT] / 1048576.0, most[DS_MEM_PURPOSE_COUNT + 1] / 1048576.0,
           most[DS_MEM_PURPOSE_COUNT + 2] / 1048576.0);
    if (most[DS_MEM_PURPOSE_COUNT + 3] > 0) /* only runs that swap to files have the place */
        printf("; nvme %.2f", most[DS_MEM_PURPOSE_COUNT + 3] / 1048576.0);
    printf("\n");
}

/* hpZ's secondary groups are consecutive ranks (DeepSpeed's too); they keep
 * the backward's gathers inside a host only where the ranks are placed host
 * by host. The secondary groups that span hosts, counted over all ranks
 * (each checks its own: peer_same_host), so that rank 0 can say so.
 * Collective when hpZ is on. */
static int hpz_groups_across(engine_t *e) {
    int h = (int)e->cfg.zero_hpz_partition_size;
    const ds_comm *c = e->comm;
    if (e->cfg.zero_stage != 3 || h <= 1 || c->world <= 1 || c->nhosts <= 1) return 0;
    int base = c->rank / h * h, spans = 0;
    for (int q = base; q < base + h && c->peer_same_host; q++) spans |= !c->peer_same_host[q];
    int32_t n = c->rank == base ? spans : 0; /* one count per group: its first rank's */
    if (ds_comm_host_all_reduce(e->comm, &n, 1, DS_I32, DS_REDUCE_SUM) != DS_OK) {
        ds_clear_error(); /* a report: the next collective says what broke */
        return 0;
    }
    return n;
}

/* Rank 0's start-up print, a dozen lines: what runs (ds_config_summary:
 * batch, optimizer, schedule, where "auto" values came from, what differs
 * from DeepSpeed's defaults) and the memory each rank holds. The whole
 * resolved config is ds_config_to_json(ds_get_config(e)) (the bundled
 * trainers write it to a file and print it with --print-config). */
void ds_engine_print_startup(engine_t *e) {
    /* collective: every rank takes part, whatever its own `quiet` (a program
     * that quiets all ranks but 0 gives each its own value) */
    double *rows = memory_rows(e);
    int across = hpz_groups_across(e);
    if (e->comm->rank != 0 || e->quiet) {
        free(rows);
        return;
    }
    if (across > 0)
        fprintf(stderr, "[zero-engine] warning: zero_optimization.zero_hpz_partition_size %lld: "
                "%d of the %lld secondary groups (consecutive ranks) span hosts, so the "
                "backward's gathers cross the link hpZ is meant to keep them off; place the "
                "ranks host by host (mpirun's default --map-by slot, equal slots)\n",
                (long long)e->cfg.zero_hpz_partition_size, across,
                (long long)(e->comm->world / e->cfg.zero_hpz_partition_size));
    /* the check costs a message per collective: say it is on (comm.h) */
    printf("[zero-engine] backend %s, comm %s%s, ZeRO stage %d, precision %s (grads %s, GEMM "
           "inputs %s), model %s: Psi = %lld parameters (%lld padded, %lld per partition)\n",
           e->be->ops->name,
           ds_comm_staged(e->comm) && e->comm->world > 1 ? "mpi (device buffers through host memory)"
                                   : e->comm->ops->name,
           e->comm->check_recs ? " (every collective checked: zero_engine.check_collectives)" : "",
           e->cfg.zero_stage, ds_dtype_name(e->param_t),
           ds_dtype_name(e->grad_t), ds_dtype_name(e->be->gemm_inputs), e->model->type,
           (long long)e->flat->numel,
           (long long)e->flat->padded, (long long)e->flat->part);
    char *summary = ds_config_summary(&e->cfg);
    if (summary) {
        /* every line of the summary ends in '\n' */
        for (char *line = summary, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1)
            printf("[zero-engine] %.*s\n", (int)(nl - line), line);
    } else {
        printf("[zero-engine] (out of memory for the config summary)\n");
    }
    free(summary);
    if (e->no_decay) /* HF's parameter groups: say which side each falls on */
        printf("[zero-engine] weight decay on %d of %d parameters (%lld of %lld elements): "
               "biases and normalization weights left out, as HF's Trainer\n",
               e->flat->n_params - e->no_decay->n_params, e->flat->n_params,
               (long long)(e->flat->numel - e->no_decay->elems), (long long)e->flat->numel);
    if (rows) print_memory(rows, e->comm->world);
    free(rows);
    fflush(stdout);
}

void ds_engine_print_step(const engine_t *e) {
    if (e->comm->rank != 0 || e->cfg.steps_per_print <= 0) return;
    if (e->global_step % e->cfg.steps_per_print != 0) return;
    const ds_step_info *s = &e->last;
    printf("[zero-engine] step %lld epoch %lld loss %.5f lr %.3e grad_norm %.4f%s", (long long)s->step,
           (long long)s->epoch, s->loss, s->lr, s->grad_norm, s->skipped ? " (skipped)" : "");
    if (e->scaler.enabled) printf(" loss_scale %g", s->loss_scale);
    ds_mem_report r;
    ds_mem_snapshot(e->mem, &r);
    printf(" mem %.1f MiB\n", mib(r.total[DS_PLACE_DEVICE] + r.total[DS_PLACE_HOST]));
    fflush(stdout);
}
