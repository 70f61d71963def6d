/* "xent": the loss module. Logits [B, C] -> one float, the mean
 * cross-entropy of the micro-batch, optionally class-weighted exactly as
 * torch.nn.CrossEntropyLoss(weight=w): sum_b w[y_b] nll_b / sum_b w[y_b].
 * Backward ignores dy and starts the chain with ctx->loss_scale.
 *
 * saved:   probs [B, C] and the weight sum (1 float)
 * scratch: nothing */
#include "models/modules.h"

typedef struct xent_impl {
    int C;
} xent_impl;

static size_t xe_out_elems(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 1;
}

typedef struct xe_saved {
    float *probs, *wsum;
} xe_saved;

static size_t xe_layout(const ds_module *m, int B, void *base, xe_saved *s) {
    ds_carve c = ds_carve_begin(base);
    s->probs = ds_carve_f32(&c, (size_t)B * ((const xent_impl *)m->impl)->C);
    s->wsum = ds_carve_f32(&c, 1);
    return c.off;
}

static size_t xe_saved_bytes(const ds_module *m, int B, int T) {
    (void)T;
    xe_saved s;
    return xe_layout(m, B, NULL, &s);
}

static size_t xe_scratch_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

static ds_status xe_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const xent_impl *X = m->impl;
    const ds_batch *bt = ctx->batch;
    if (!bt->labels)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "module %s: the batch has no labels (the loss needs them; stop before the "
                      "loss module to predict)",
                      m->name);
    xe_saved s;
    xe_layout(m, bt->B, ctx->saved, &s);
    ds_status st = ctx->be->nn->xent_fwd(ctx->be, ctx->y, s.wsum, s.probs, ctx->x, bt->labels,
                                         bt->class_weights, bt->B, X->C);
    if (st != DS_OK) {
        ds_error_prefix("module %s", m->name);
        ds_error_trace(__FILE__, __LINE__);
    }
    return st;
}

static ds_status xe_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const xent_impl *X = m->impl;
    const ds_batch *bt = ctx->batch;
    if (!ctx->dx) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input gradient slot", m->name);
    if (!bt->labels) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: the batch has no labels", m->name);
    xe_saved s;
    xe_layout(m, bt->B, ctx->saved, &s);
    DS_TRY(ctx->be->nn->xent_bwd(ctx->be, ctx->dx, s.probs, s.wsum, bt->labels, bt->class_weights,
                                 bt->B, X->C, ctx->loss_scale));
    return DS_OK;
}

static const ds_module_ops k_xent_ops = {
    .type = "xent",
    .out_elems = xe_out_elems,
    .saved_bytes = xe_saved_bytes,
    .scratch_bytes = xe_scratch_bytes,
    .forward = xe_forward,
    .backward = xe_backward,
    .destroy = ds_module_free_basic,
};

ds_status ds_mod_xent_create(const char *name, int n_classes, ds_module **out_m) {
    *out_m = NULL;
    if (n_classes < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "xent %s: n_classes must be >= 2, got %d", name,
                      n_classes);
    ds_module *m;
    DS_TRY(ds_module_alloc(&k_xent_ops, name, 0, sizeof(xent_impl), &m));
    ((xent_impl *)m->impl)->C = n_classes;
    *out_m = m;
    return DS_OK;
}
