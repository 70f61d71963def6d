/* What rank 0 prints: the resolved config, the per-rank memory table next
 * to the ZeRO paper's formula, and a line every steps_per_print steps. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_internal.h"

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* Model-state purposes, the ones the ZeRO formula covers. */
static const ds_mem_purpose k_state[] = {DS_MEM_PARAMS, DS_MEM_GRADS, DS_MEM_MASTER,
                                         DS_MEM_OPTIM};
/* per purpose (device + host), model state, formula, and the host share of
 * the row (offload_optimizer puts master and moments there) */
#define N_COLS (DS_MEM_PURPOSE_COUNT + 3)

void ds_engine_print_startup(engine_t *e) {
    int rank = e->comm->rank, world = e->comm->world;
    /* Each rank fills its row of a world x N_COLS table; a sum over ranks
     * assembles it on every rank without a gather primitive. */
    double *rows = calloc((size_t)world * N_COLS, sizeof *rows);
    if (rows) {
        ds_mem_report r;
        ds_mem_snapshot(e->mem, &r);
        double *row = rows + (size_t)rank * N_COLS;
        uint64_t state = 0;
        for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
            row[p] = (double)(r.bytes[p][DS_PLACE_DEVICE] + r.bytes[p][DS_PLACE_HOST]);
        for (size_t k = 0; k < sizeof k_state / sizeof *k_state; k++)
            state += r.bytes[k_state[k]][DS_PLACE_DEVICE] + r.bytes[k_state[k]][DS_PLACE_HOST];
        row[DS_MEM_PURPOSE_COUNT] = (double)state;
        row[DS_MEM_PURPOSE_COUNT + 1] = (double)ds_expected_model_state_bytes(e);
        row[DS_MEM_PURPOSE_COUNT + 2] = (double)r.total[DS_PLACE_HOST];
        if (ds_comm_host_all_reduce(e->comm, rows, (size_t)world * N_COLS, DS_F64,
                                    DS_REDUCE_SUM) != DS_OK) {
            free(rows);
            rows = NULL;
        }
    }
    if (rank != 0) {
        free(rows);
        return;
    }
    char *json = ds_config_to_json(&e->cfg);
    printf("[zero-engine] resolved ds_config (world size %d from %s):\n%s\n", world,
           ds_rank_source_name(e->comm->source), json ? json : "(out of memory)");
    free(json);
    printf("[zero-engine] backend %s, comm %s, stage %d, precision %s (grads %s), model %s: "
           "Psi = %lld parameters (%lld in the padded flat space, %lld per partition)\n",
           e->be->ops->name, e->comm->ops->name, e->cfg.zero_stage, ds_dtype_name(e->param_t),
           ds_dtype_name(e->grad_t), e->model->type, (long long)e->flat->numel,
           (long long)e->flat->padded, (long long)e->flat->part);
    if (rows) {
        printf("[zero-engine] memory per rank, MiB:\n  rank");
        for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
            printf(" %11s", ds_mem_purpose_name((ds_mem_purpose)p));
        printf(" | model-state  ZeRO-formula |  host total\n");
        for (int r = 0; r < world; r++) {
            const double *row = rows + (size_t)r * N_COLS;
            printf("  %4d", r);
            for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++) printf(" %11.2f", row[p] / 1048576.0);
            printf(" | %11.2f  %12.2f | %13.2f\n", row[DS_MEM_PURPOSE_COUNT] / 1048576.0,
                   row[DS_MEM_PURPOSE_COUNT + 1] / 1048576.0,
                   row[DS_MEM_PURPOSE_COUNT + 2] / 1048576.0);
        }
        free(rows);
    }
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
