/* The tied test model (tied_model.h). The head is written here, as a user
 * would write a module; the other modules are the bundled ones. */
#include "tied_model.h"

#include "engine/backend/backend.h"
#include "engine/backend/nn.h"
#include "models/modules.h"

typedef struct head_impl {
    int E, V;
    bool tied;
} head_impl;

static size_t head_out(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const head_impl *)m->impl)->V;
}

static size_t head_none(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

/* W: the tied table, or the module's own weight (parameter 1). */
static const float *head_w(const ds_module *m, const ds_module_ctx *ctx) {
    return ((const head_impl *)m->impl)->tied ? ctx->tied[0] : ctx->params[1];
}

static ds_status head_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const head_impl *H = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    /* y[B, V] = x[B, E] W[V, E]^T + b */
    DS_TRY(be->ops->gemm(be, false, true, B, H->V, H->E, 1.0f, ctx->x, H->E, 0, head_w(m, ctx),
                         H->E, 0, 0.0f, ctx->y, H->V, 0, 1));
    DS_TRY(be->nn->bias_act_fwd(be, ctx->y, ctx->y, ctx->params[0], B, H->V, DS_ACT_NONE));
    return DS_OK;
}

static ds_status head_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const head_impl *H = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B;
    float *dW = H->tied ? ctx->tied_grads[0] : ctx->grads[1];
    DS_TRY(be->nn->bcast_add_bwd(be, ctx->grads[0], ctx->dy, B, H->V));
    /* dW[V, E] += dy[B, V]^T x[B, E]; dx[B, E] = dy W */
    DS_TRY(be->ops->gemm(be, true, false, H->V, H->E, B, 1.0f, ctx->dy, H->V, 0, ctx->x, H->E, 0,
                         1.0f, dW, H->E, 0, 1));
    DS_TRY(be->ops->gemm(be, false, false, B, H->E, H->V, 1.0f, ctx->dy, H->V, 0, head_w(m, ctx),
                         H->E, 0, 0.0f, ctx->dx, H->E, 0, 1));
    return DS_OK;
}

/* Its three GEMMs are a linear layer's (models/modules.h), declared for the
 * workspace of bf16 GEMM inputs (engine/core/module.h, plan_gemms). */
static void head_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    (void)T;
    const head_impl *H = m->impl;
    ds_linear_plan_gemms(plan, B, H->E, H->V);
}

static const ds_module_ops k_head_ops = {
    .type = "tied_head",
    .out_elems = head_out,
    .saved_bytes = head_none,
    .scratch_bytes = head_none,
    .forward = head_forward,
    .backward = head_backward,
    .destroy = ds_module_free,
    .plan_gemms = head_plan_gemms,
};

static ds_status head_create(int V, int E, bool tied, ds_module **out) {
    ds_module *m;
    DS_TRY(ds_module_create(&k_head_ops, "head", tied ? 1 : 2, sizeof(head_impl), &m));
    head_impl *H = m->impl;
    H->E = E;
    H->V = V;
    H->tied = tied;
    ds_status st = ds_module_param(m, 0, NULL, "bias", V, 0, DS_INIT_ZEROS, 0, 0);
    if (st == DS_OK && tied)
        st = ds_module_tie(m, "head.weight", "embeddings.word_embeddings.weight", V, E);
    if (st == DS_OK && !tied)
        st = ds_module_param(m, 1, NULL, "weight", V, E, DS_INIT_NORMAL, 0.0f, 1.0f);
    if (st != DS_OK) {
        ds_module_free(m);
        return st;
    }
    *out = m;
    return DS_OK;
}

ds_status tm_create(int V, int E, int T, bool tied, ds_model **out) {
    ds_model *model;
    DS_TRY(ds_model_create(tied ? "tied" : "untied", &model));
    ds_status st = ds_cls_model_inputs(model, T, V, 0, V); /* the head: V classes */
    ds_module *m = NULL;
    if (st == DS_OK)
        st = ds_mod_embed_pool_create("embeddings", "embeddings.word_embeddings", V, E, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st == DS_OK)
        st = ds_mod_linear_create("hidden", "hidden", E, E, DS_ACT_TANH, DS_LINEAR_INIT_TORCH,
                                  0.0f, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st == DS_OK) st = head_create(V, E, tied, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    ds_xent_desc xd = {.n_classes = V};
    if (st == DS_OK) st = ds_mod_xent_create("loss", &xd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st != DS_OK) {
        ds_model_destroy(model);
        return st;
    }
    model->hidden_size = E;
    *out = model;
    return DS_OK;
}
