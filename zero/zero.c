/* Strategy factory, shared initialisation and the model-state formula. */
#include "zero/zero.h"

#include <stdlib.h>
#include <string.h>

#include "offload/nvme_dir.h"
#include "offload/nvme_swap.h"
#include "offload/param_store.h"
#include "zero/optim.h"

ds_status ds_zero_preflight(const ds_zero_desc *d) {
    const ds_config *c = d->cfg;
    /* every rank on this host swaps as much as this one (the partitions
     * differ by padding only), onto the same disk where the paths are one */
    int here = ds_comm_ranks_on_host(d->comm);
    bool opt = c->offload_optimizer.device == DS_OFFLOAD_NVME && c->zero_stage >= 1;
    bool par = c->offload_param.device == DS_OFFLOAD_NVME && c->zero_stage == 3;
    uint64_t opt_need = opt ? ds_nvme_swap_bytes(d->flat->part, 1 + ds_optim_state_count(c)) : 0;
    uint64_t par_need = par ? ds_param_store_file_bytes(d->flat->part, d->param_t,
                                                        c->offload_param.max_in_cpu)
                            : 0;
    bool one_path = opt && par_need > 0 &&
                    strcmp(c->offload_optimizer.nvme_path, c->offload_param.nvme_path) == 0;
    uint64_t both = (opt_need + (one_path ? par_need : 0)) * (uint64_t)here;
    if (opt)
        DS_TRY(ds_nvme_preflight("zero_optimization.offload_optimizer",
                                 c->offload_optimizer.nvme_path, d->comm->rank, opt_need, both));
    if (par_need > 0)
        DS_TRY(ds_nvme_preflight("zero_optimization.offload_param", c->offload_param.nvme_path,
                                 d->comm->rank, par_need,
                                 one_path ? both : par_need * (uint64_t)here));
    return DS_OK;
}

ds_status ds_zero_create(const ds_zero_desc *d, ds_zero **out) {
    *out = NULL;
    switch (d->cfg->zero_stage) {
    case 0: DS_TRY(ds_zero_stage0_create(d, out)); break;
    case 1: DS_TRY(ds_zero_stage1_create(d, out)); break;
    case 2: DS_TRY(ds_zero_stage2_create(d, out)); break;
    case 3: DS_TRY(ds_zero_stage3_create(d, out)); break;
    default:
        return DS_ERR(DS_ERR_UNSUPPORTED,
                      "zero_optimization.stage: stage %d is not implemented in this build",
                      d->cfg->zero_stage);
    }
    return DS_OK;
}

ds_status ds_zero_alloc(const ds_zero_desc *d, const ds_zero_ops *ops, int stage, size_t impl_size,
                        ds_zero **out) {
    *out = NULL;
    ds_zero *z = calloc(1, sizeof *z);
    void *impl = calloc(1, impl_size);
    if (!z || !impl) {
        free(z);
        free(impl);
        return DS_ERR(DS_ERR_OOM, "ZeRO stage %d: out of host memory", stage);
    }
    *z = (ds_zero){.ops = ops, .d = *d, .stage = stage, .impl = impl,
                   .state_parts = d->comm->world, .state_part = d->comm->rank};
    *out = z;
    return DS_OK;
}

void ds_zero_destroy(ds_zero *z) {
    if (z && z->ops && z->ops->destroy) z->ops->destroy(z);
}

/* splitmix64 finaliser: decorrelates the per-parameter RNG streams. */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

ds_status ds_zero_init_range(ds_backend *be, const ds_flat_param *p, int param_index,
                             uint64_t seed, int64_t first, int64_t n, float *dst) {
    if (n <= 0) return DS_OK;
    const ds_param_desc *d = p->desc;
    uint64_t stream = mix64(seed ^ mix64((uint64_t)param_index + 1));
    switch (d->init) {
    case DS_INIT_ZEROS: DS_TRY(be->ops->fill(be, dst, (size_t)n, 0.0f)); break;
    case DS_INIT_ONES: DS_TRY(be->ops->fill(be, dst, (size_t)n, 1.0f)); break;
    case DS_INIT_NORMAL:
        DS_TRY(be->ops->rng_normal(be, dst, (size_t)n, d->init_a, d->init_b, stream,
                                   (uint64_t)first));
        break;
    case DS_INIT_UNIFORM:
        DS_TRY(be->ops->rng_uniform(be, dst, (size_t)n, d->init_a, d->init_b, stream,
                                    (uint64_t)first));
        break;
    default:
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s: unknown init kind %d", d->name,
                      (int)d->init);
    }
    if (d->has_zero_row && d->ndim >= 1) { /* the part of the zero row inside [first, first+n) */
        int64_t width = p->numel / d->shape[0];
        int64_t b = d->zero_row * width, e = b + width;
        if (b < first) b = first;
        if (e > first + n) e = first + n;
        if (b < e) DS_TRY(be->ops->fill(be, dst + (b - first), (size_t)(e - b), 0.0f));
    }
    return DS_OK;
}

uint64_t ds_zero_expected_bytes(const ds_flat *f, int stage, ds_dtype param_t, ds_dtype grad_t,
                                ds_optim_type opt, bool has_momentum, bool offload_optimizer) {
    /* ZeRO paper, section 3: with Psi parameters and N ranks, model state is
     * params (P bytes/elem) + grads (G) + optimizer state (K), where K holds the
     * fp32 master copy under mixed precision plus the moments. Stage 1 shards K,
     * stage 2 also G, stage 3 also P. Sizes here use the padded flat space, which
     * is what the strategies really allocate. */
    uint64_t psi = (uint64_t)f->padded, part = (uint64_t)f->part;
    uint64_t P = ds_dtype_size(param_t), G = ds_dtype_size(grad_t);
    uint64_t K = (opt == DS_OPTIM_SGD) ? (has_momentum ? 4 : 0) : 8;
    if (param_t != DS_F32 || offload_optimizer) K += 4; /* fp32 master weights */
    switch (stage) {
    case 0: return psi * (P + G + K);
    case 1: return psi * (P + G) + part * K;
    case 2: return psi * P + part * (G + K);
    default: return part * (P + G + K);
    }
}
