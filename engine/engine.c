/* engine_t: construction, teardown and introspection. The training loop is
 * in engine_step.c, the start-up and step reports in engine_report.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/blas_core.h"
#include "engine/engine_internal.h"
#include "zero/grad_sparse.h"
#include "zero/groups.h"

void ds_init_desc_defaults(ds_init_desc *d) {
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    d->seed = 42;
    ds_config_hints_init(&d->hints);
}

static void config_warn(void *user, const char *msg) {
    const ds_rank_info *r = user;
    if (r->rank == 0) fprintf(stderr, "ds_config: warning: %s\n", msg);
}

static ds_status pick_precision(engine_t *e) {
    const ds_config *c = &e->cfg;
    e->param_t = c->fp16_enabled ? DS_F16 : c->bf16_enabled ? DS_BF16 : DS_F32;
    e->grad_t = c->comm_dtype_set ? c->communication_data_type : e->param_t;
    if (e->grad_t != DS_F32 && e->grad_t != DS_F16 && e->grad_t != DS_BF16)
        return DS_ERR(DS_ERR_CONFIG, "communication_data_type: must be fp32, fp16 or bf16, got %s",
                      ds_dtype_name(e->grad_t));
    return DS_OK;
}

static ds_status make_backend(engine_t *e) {
    /* comm "mpi" stages device buffers through host memory, so its ranks
     * may share a GPU; NCCL needs one per rank */
    ds_backend_desc bd = {.kind = DS_BACKEND_CPU, .device = e->ranks.local_rank,
                          .num_threads = e->cfg.num_threads, .mem = e->mem,
                          .share_devices = strcmp(e->cfg.comm, "mpi") == 0};
    if (strcmp(e->cfg.backend, "cuda") == 0) {
        bd.kind = DS_BACKEND_CUDA;
    } else if (strcmp(e->cfg.backend, "auto") == 0) {
        bd.kind = DS_BACKEND_CUDA;
        if (ds_backend_create(&bd, &e->be) == DS_OK) return DS_OK;
        ds_clear_error(); /* no CUDA module or no usable GPU: "auto" falls back to cpu */
        bd.kind = DS_BACKEND_CPU;
    }
    DS_TRY(ds_backend_create(&bd, &e->be));
    return DS_OK;
}

/* The backend's GEMM input precision, for every module alike
 * (zero_engine.gemm_input_dtype; checked against bf16.enabled by the
 * config's resolution). */
static ds_status set_gemm_inputs(engine_t *e) {
    return ds_backend_set_gemm_inputs(e->be, ds_config_gemm_inputs(&e->cfg));
}

/* Everything after the communicator exists; any failure here is agreed on
 * by all ranks by the caller so that no rank enters a collective alone. */
/* Keys the config accepts (they are DeepSpeed's) but this engine does not
 * act on yet: refuse them rather than train differently from what the file
 * says. */
static ds_status check_implemented(const ds_config *c) {
    /* offload_optimizer "cpu" and "nvme" are offload/host_optim.h, whole
     * partitions only */
    if (c->offload_optimizer.device != DS_OFFLOAD_NONE && c->offload_optimizer.ratio < 1.0)
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "zero_optimization.offload_optimizer.ratio: partial offload (%g) is not "
                      "implemented in this version of zero-engine (use 1.0)",
                      c->offload_optimizer.ratio);
    return DS_OK;
}

/* activation_checkpointing's two placement keys, once the backend is known.
 * partition_activations splits each checkpointed input over the model
 * parallel group; there is no model parallelism here, and DeepSpeed at model
 * parallel size 1 keeps every input whole, so it changes nothing, said once.
 * cpu_checkpointing keeps them in host memory: where the cpu backend's
 * activations are already (said once), not implemented on cuda. */
static ds_status check_activation_places(const engine_t *e) {
    const ds_config *c = &e->cfg;
    if (c->cpu_checkpointing && e->be->kind != DS_BACKEND_CPU)
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "activation_checkpointing.cpu_checkpointing: keeping the checkpointed "
                      "activations in host memory is not implemented on the cuda backend (set "
                      "it false; on the cpu backend they are in host memory anyway)");
    if (e->comm->rank != 0 || e->quiet) return DS_OK;
    if (c->partition_activations)
        fprintf(stderr, "ds_config: note: activation_checkpointing.partition_activations: no "
                "model parallelism here, so each rank keeps its checkpointed inputs whole, as "
                "DeepSpeed does at model parallel size 1\n");
    if (c->cpu_checkpointing)
        fprintf(stderr, "ds_config: note: activation_checkpointing.cpu_checkpointing: the cpu "
                "backend's activations are in host memory already\n");
    return DS_OK;
}

/* The backend first, alone: which data path the ranks need depends on it. */
static ds_status build_backend(engine_t *e) {
    DS_TRY(check_implemented(&e->cfg));
    DS_TRY(ds_mem_create(&e->mem));
    DS_TRY(pick_precision(e));
    DS_TRY(make_backend(e));
    DS_TRY(check_activation_places(e));
    DS_TRY(set_gemm_inputs(e));
    /* backend "auto" has become one: the config says which, and comm follows */
    snprintf(e->cfg.backend, sizeof e->cfg.backend, "%s",
             e->be->kind == DS_BACKEND_CUDA ? "cuda" : "cpu");
    DS_TRY(ds_config_settle_comm(&e->cfg));
    return DS_OK;
}

/* The data path between ranks (zero_engine.comm, settled by build_backend),
 * once every rank has its backend. MPI's rings read host memory: on cuda the
 * buffers are the GPU's, so NCCL carries them ("nccl"), or MPI copies them
 * through pinned host memory ("mpi"; at one rank nothing crosses anyway).
 * Collective: every rank calls it, and the ranks agree on the outcome, so a
 * rank whose NCCL or staging failed is named instead of left behind. */
static ds_status pick_comm(engine_t *e) {
    if (e->be->kind != DS_BACKEND_CUDA) return DS_OK; /* cpu: MPI on its own memory */
    const bool nccl = strcmp(e->cfg.comm, "nccl") == 0;
    ds_comm_desc nd = {.kind = DS_COMM_NCCL, .timeout_s = e->cfg.comm_timeout_s,
                       .backend = e->be,
                       .check_collectives = e->comm->check_recs != NULL}; /* agreed */
    ds_comm *nc = NULL;
    ds_status mine = nccl ? ds_comm_create(&nd, &nc) : ds_comm_stage_wrap(e->comm, e->be), worst;
    DS_TRY(ds_comm_agree(e->comm, mine, &worst)); /* over MPI, which every rank still has */
    if (worst != DS_OK) { /* the message is this rank's, or names the rank that failed */
        ds_comm_destroy(nc);
        if (mine != DS_OK) ds_error_prefix("zero_engine.comm \"%s\"", e->cfg.comm);
        return worst;
    }
    if (nccl) {
        ds_comm_destroy(e->comm);
        e->comm = nc;
    }
    return DS_OK;
}

static ds_zero_desc zero_desc(const engine_t *e, const ds_init_desc *d) {
    return (ds_zero_desc){.cfg = &e->cfg, .be = e->be, .comm = e->comm, .flat = e->flat,
                          .param_t = e->param_t, .grad_t = e->grad_t, .seed = d->seed};
}

/* What can refuse the run on one rank alone, from what its host has (the
 * CPU, the memory free, the nvme_path), checked before the strategy is built:
 * building it splits communicators (hpZ, MiCS), collectives without a
 * deadline that a rank which had already failed would never join. */
static ds_status check_local(engine_t *e, const ds_init_desc *d) {
    char why[256]; /* sparse_gradients where it cannot apply: ignored, as DeepSpeed does */
    if (!ds_grad_sparse_applies(&e->cfg, why, sizeof why) &&
        why[0] && e->comm->rank == 0)
        fprintf(stderr, "ds_config: warning: %s\n", why);
    /* the cpu backend's GEMMs are OpenBLAS's: a core older than the CPU is a
     * warning on rank 0, one the CPU cannot run an error (blas_core.h) */
    if (e->be->kind == DS_BACKEND_CPU) DS_TRY(ds_blas_core_startup_check(e->comm->rank));
    DS_TRY(ds_flat_create(e->model, e->comm->world, &e->flat)); /* a table */
    /* the trainer's AdamW decays as HF's Trainer does: not biases and
     * normalization weights (without decay there is nothing to split) */
    if (e->cfg.optim_hf && e->cfg.weight_decay != 0.0)
        DS_TRY(ds_no_decay_create(e->flat, &e->no_decay));
    ds_zero_desc zd = zero_desc(e, d);
    /* a bad nvme_path's own one-line error first, then the RAM estimate's:
     * both refuse what cannot work before anything is allocated */
    DS_TRY(ds_zero_preflight(&zd));
    DS_TRY(ds_engine_check_fit(e));
    return DS_OK;
}

/* The strategy, the ties, the activations and the data. */
static ds_status build_local(engine_t *e, const ds_init_desc *d) {
    ds_zero_desc zd = zero_desc(e, d);
    DS_TRY(ds_zero_create(&zd, &e->zero));
    DS_TRY(ds_ties_create(e->be, e->flat, &e->ties));
    ds_loss_scaler_init(&e->scaler, &e->cfg);
    DS_TRY(ds_engine_plan_activations(e));
    if (d->train_data) {
        const ds_dataset *t = d->train_data;
        if (t->n == 0) return DS_ERR(DS_ERR_DATA, "training data is empty");
        ds_status st = ds_dataset_check(t, e->model);
        if (st != DS_OK) {
            ds_error_prefix("training data");
            return st;
        }
        if (e->model->n_classes > 0 && t->n_classes > e->model->n_classes)
            return DS_ERR(DS_ERR_INVALID_ARG, "training data has %d classes, the model %d",
                          t->n_classes, e->model->n_classes);
        e->train = t;
        /* DeepSpeed's loader: a DistributedSampler padding every rank to
         * ceil(n / world); dataloader_drop_last is its DataLoader's, which
         * drops the epoch's short last micro-batch (ds_engine_epoch_rows) */
        DS_TRY(ds_sampler_init(&e->sampler, t->n, e->comm->world, e->comm->rank, e->seed, true,
                               false, true));
        DS_TRY(ds_sampler_set_epoch(&e->sampler, 0));
        if (ds_engine_epoch_rows(e) == 0)
            return DS_ERR(DS_ERR_DATA,
                          "training data has %zu rows: %zu a rank over %d ranks, fewer than the "
                          "micro batch %d, and dataloader_drop_last drops a short one: nothing "
                          "to train",
                          t->n, e->sampler.num_samples, e->comm->world, e->cap_B);
        DS_TRY(ds_host_batch_alloc(&e->hb, t, e->model, e->cap_B));
    }
    return DS_OK;
}

ds_status ds_initialize(const ds_init_desc *d, engine_t **out) {
    *out = NULL;
    if (!d || d->struct_size != sizeof *d)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_initialize: desc missing or of another version (call "
                      "ds_init_desc_defaults first)");
    if (!d->model) return DS_ERR(DS_ERR_INVALID_ARG, "ds_initialize: desc.model is NULL");
    engine_t *e = calloc(1, sizeof *e);
    if (!e) {
        ds_model_destroy(d->model);
        return DS_ERR(DS_ERR_OOM, "ds_initialize: out of host memory");
    }
    e->model = d->model;
    e->seed = d->seed;
    e->quiet = d->quiet;
    ds_status st;
    /* the model's own shape first: every rank builds the same model */
    DS_TRY_GOTO(st, ds_model_check(e->model), fail);

    /* Config syntax first: every rank reads the same file, so every rank fails
     * the same way before any collective exists. */
    ds_engine_note_join('S'); /* engine-run counts the ranks that started */
    DS_TRY_GOTO(st, ds_rank_discover(&e->ranks), fail);
    if (d->config_path)
        DS_TRY_GOTO(st, ds_config_parse_file(d->config_path, &e->cfg, config_warn, &e->ranks),
                    fail);
    else if (d->config_json)
        DS_TRY_GOTO(st, ds_config_parse_string(d->config_json, &e->cfg, config_warn, &e->ranks),
                    fail);
    else {
        st = DS_ERR(DS_ERR_INVALID_ARG, "ds_initialize: neither config_path nor config_json given");
        goto fail;
    }

    ds_comm_desc cd = {.kind = DS_COMM_MPI, .timeout_s = e->cfg.comm_timeout_s,
                       .check_collectives = e->cfg.check_collectives};
    DS_TRY_GOTO(st, ds_comm_create(&cd, &e->comm), fail);
    ds_engine_note_join('C'); /* ... and connected */
    e->ranks.rank = e->comm->rank;
    e->ranks.world = e->comm->world;

    ds_config_hints h = d->hints;
    h.world_size = e->comm->world;
    h.world_source = ds_rank_source_name(e->comm->source);
    if (h.hidden_size <= 0) h.hidden_size = e->model->hidden_size;
    if (h.train_rows <= 0 && d->train_data) h.train_rows = (int64_t)d->train_data->n;
    DS_TRY_GOTO(st, ds_config_resolve(&e->cfg, &h), fail);
    DS_TRY_GOTO(st, ds_engine_config_agree(e), fail);

    /* Local construction may fail on one rank only (memory, a device):
     * agree before anything collective so that no rank waits alone. */
    ds_status worst;
    DS_TRY_GOTO(st, ds_comm_agree(e->comm, build_backend(e), &worst), fail);
    if (worst != DS_OK) { /* the message is this rank's, or names the rank that failed */
        st = worst;
        goto fail;
    }
    DS_TRY_GOTO(st, pick_comm(e), fail);
    DS_TRY_GOTO(st, ds_comm_agree(e->comm, check_local(e, d), &worst), fail);
    if (worst == DS_OK) DS_TRY_GOTO(st, ds_comm_agree(e->comm, build_local(e, d), &worst), fail);
    if (worst != DS_OK) {
        st = worst;
        goto fail;
    }
    DS_TRY_GOTO(st, ds_engine_monitor_open(e), fail);
    ds_engine_wall_clock_init(e);
    ds_engine_print_startup(e); /* collective, quiet or not */
    *out = e;
    return DS_OK;
fail:
    ds_finalize(e);
    return st;
}

void ds_finalize(engine_t *e) {
    if (!e) return;
    ds_engine_prof_free(e);
    ds_engine_free_activations(e);
    ds_host_batch_free(&e->hb);
    if (e->train) ds_sampler_free(&e->sampler);
    ds_ties_destroy(e->ties);
    ds_zero_destroy(e->zero);
    ds_no_decay_destroy(e->no_decay);
    ds_flat_destroy(e->flat);
    ds_model_destroy(e->model);
    ds_comm_destroy(e->comm); /* a staged one holds the backend's pinned memory */
    ds_backend_destroy(e->be);
    ds_mem_destroy(e->mem);
    ds_monitor_close(e->monitor);
    free(e);
}

int ds_rank(const engine_t *e) { return e->comm->rank; }
int ds_world_size(const engine_t *e) { return e->comm->world; }
const ds_config *ds_get_config(const engine_t *e) { return &e->cfg; }
const ds_model *ds_get_model(const engine_t *e) { return e->model; }
ds_monitor *ds_get_monitor(const engine_t *e) { return e->monitor; }
int64_t ds_global_step(const engine_t *e) { return e->global_step; }
double ds_get_lr(const engine_t *e) { return e->last.lr; }
void ds_memory_report(const engine_t *e, ds_mem_report *out) { ds_mem_snapshot(e->mem, out); }
void ds_comm_report(const engine_t *e, ds_comm_stats *out) { *out = e->comm->stats; }

uint64_t ds_expected_model_state_bytes(const engine_t *e) {
    /* stage 3's schemes (zero/groups.h): MiCS partitions over its shard
     * group (N = mics_shard_size); hpZ adds the secondary piece, Psi / H in
     * the parameter dtype */
    const ds_config *c = &e->cfg;
    bool s3 = c->zero_stage == 3;
    ds_flat f = s3 && c->mics_shard_size > 0 ? ds_flat_view(e->flat, (int)c->mics_shard_size)
                                             : *e->flat;
    uint64_t b = ds_zero_expected_bytes(&f, c->zero_stage, e->param_t, e->grad_t, c->optimizer,
                                        c->momentum != 0.0,
                                        c->offload_optimizer.device != DS_OFFLOAD_NONE);
    if (s3 && c->zero_hpz_partition_size > 1)
        b += (uint64_t)(f.padded / c->zero_hpz_partition_size) * ds_dtype_size(e->param_t);
    /* stage 3's persistent modules (fewer parameters than
     * stage3_param_persistence_threshold) whole on every rank, in fp32
     * (zero/stage3_build.c): GPT-2's biases and norms, a quarter of the
     * partitioned state at 8 ranks, which the paper's formula leaves out */
    if (s3)
        for (int m = 0; m < e->flat->n_modules; m++) {
            int64_t span = e->flat->modules[m].end - e->flat->modules[m].begin;
            if (span > 0 && span < c->stage3_param_persistence_threshold) b += (uint64_t)span * 4;
        }
    return b;
}

ds_status ds_engine_usable(const engine_t *e, const char *what) {
    if (e->lost == DS_OK) return DS_OK;
    return DS_ERR(e->lost, "%s refused: %s failed (%s), so the ranks' parameters and "
                  "optimizer state may differ, part changed and part not; load the last "
                  "checkpoint (ds_load_checkpoint, optimizer state included) or restart from "
                  "it", what, e->lost_what, e->lost_err.msg);
}

void ds_engine_lose(engine_t *e, ds_status st, const char *fmt, ...) {
    e->lost = st;
    ds_error_save(&e->lost_err);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->lost_what, sizeof e->lost_what, fmt, ap);
    va_end(ap);
}

void ds_checkpoint_tag(const engine_t *e, char *buf, size_t cap) {
    snprintf(buf, cap, "global_step%lld", (long long)e->global_step);
}

ds_status ds_last_step_info(const engine_t *e, ds_step_info *out) {
    *out = e->last;
    return DS_OK;
}

ds_status ds_all_reduce_host(engine_t *e, void *buf, size_t count, ds_dtype t) {
    DS_TRY(ds_comm_host_all_reduce(e->comm, buf, count, t, DS_REDUCE_SUM));
    return DS_OK;
}

static ds_status find_param(const engine_t *e, const char *name, size_t numel, int *out) {
    int i = ds_flat_find(e->flat, name);
    if (i < 0) return DS_ERR(DS_ERR_INVALID_ARG, "no parameter named %s in the model", name);
    if ((int64_t)numel != e->flat->params[i].numel)
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s has %lld elements, caller gave %zu", name,
                      (long long)e->flat->params[i].numel, numel);
    *out = i;
    return DS_OK;
}

ds_status ds_get_param(engine_t *e, const char *name, float *out, size_t numel) {
    int i = -1; /* find_param sets it; -O3 cannot see that */
    DS_TRY(find_param(e, name, numel, &i));
    DS_TRY(e->zero->ops->get_param(e->zero, i, out));
    return DS_OK;
}

ds_status ds_set_param(engine_t *e, const char *name, const float *values, size_t numel) {
    int i = -1;
    DS_TRY(find_param(e, name, numel, &i));
    /* Weights loaded with a NaN or inf (a damaged or diverged export) would
     * make every step non-finite: refuse them here, where every loader ends. */
    for (size_t k = 0; k < numel; k++)
        if (!isfinite(values[k]))
            return DS_ERR(DS_ERR_NONFINITE, "parameter %s: element %zu of %zu is %s (refusing "
                          "non-finite weights)", name, k, numel, isnan(values[k]) ? "nan" : "inf");
    DS_TRY(e->zero->ops->set_param(e->zero, i, values));
    return DS_OK;
}

ds_status ds_set_param_cb(void *engine, const char *name, const float *values, size_t numel) {
    DS_TRY(ds_set_param((engine_t *)engine, name, values, numel));
    return DS_OK;
}

ds_status ds_set_exp_avg_mask(engine_t *e, const char *name, const float *mask, size_t numel) {
    int i = -1;
    DS_TRY(find_param(e, name, numel, &i));
    if (!e->zero->ops->set_exp_avg_mask)
        return DS_ERR(DS_ERR_INVALID_ARG, "exp_avg_mask (parameter %s): only OneBitAdam and "
                      "ZeroOneAdam take one (ZeRO stage %d)", name, e->cfg.zero_stage);
    DS_TRY(e->zero->ops->set_exp_avg_mask(e->zero, i, mask));
    return DS_OK;
}

ds_status ds_get_grad(engine_t *e, const char *name, float *out, size_t numel) {
    int i = -1;
    DS_TRY(find_param(e, name, numel, &i));
    DS_TRY(e->zero->ops->get_grad(e->zero, i, out));
    /* Stored gradients are sums over ranks of loss-scaled values; report the
     * average the optimizer will see. */
    double div = (double)e->comm->world * e->scaler.scale;
    for (size_t k = 0; k < numel; k++) out[k] = (float)(out[k] / div);
    return DS_OK;
}
