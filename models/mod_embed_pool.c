/* "embed_pool": the MLP's input layer. Token embeddings averaged over the
 * real tokens of each row (input_ids over attention_mask; no mask: every
 * position), [B, E].
 *
 * saved:   nothing (backward reads the tokens and mask from the batch again)
 * scratch: the gathered embeddings [B*T, E] in forward, their gradient in
 *          backward */
#include <stdio.h>

#include "models/modules.h"

typedef struct embed_pool_impl {
    int vocab, E;
} embed_pool_impl;

static size_t ep_out_elems(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * ((const embed_pool_impl *)m->impl)->E;
}

static size_t ep_saved_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

static size_t ep_scratch_bytes(const ds_module *m, int B, int T) {
    ds_carve c = ds_carve_begin(NULL);
    ds_carve_f32(&c, (size_t)B * T * ((const embed_pool_impl *)m->impl)->E);
    return c.off;
}

static ds_status ep_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, false));
    const embed_pool_impl *P = m->impl;
    const ds_batch *bt = ctx->batch;
    ds_backend *be = ctx->be;
    const int32_t *ids;
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    ds_carve c = ds_carve_begin(ctx->scratch);
    float *emb = ds_carve_f32(&c, (size_t)bt->B * bt->T * P->E);
    ds_status st = be->nn->embedding_fwd(be, emb, ctx->params[0], ids, bt->B * bt->T, P->E,
                                         P->vocab, false);
    if (st != DS_OK) {
        ds_error_prefix("module %s (batch of %d x %d tokens)", m->name, bt->B, bt->T);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    DS_TRY(be->nn->mean_pool_fwd(be, ctx->y, emb, ds_batch_f32(bt, "attention_mask"), bt->B,
                                 bt->T, P->E));
    return DS_OK;
}

static ds_status ep_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, true));
    const embed_pool_impl *P = m->impl;
    const ds_batch *bt = ctx->batch;
    ds_backend *be = ctx->be;
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    const int32_t *ids;
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    ds_carve c = ds_carve_begin(ctx->scratch);
    float *demb = ds_carve_f32(&c, (size_t)bt->B * bt->T * P->E);
    DS_TRY(be->nn->mean_pool_bwd(be, demb, ctx->dy, ds_batch_f32(bt, "attention_mask"), bt->B,
                                 bt->T, P->E));
    /* Padded positions have weight 0 in the pool, so their rows add zeros:
     * no padding_idx is needed. */
    DS_TRY(be->nn->embedding_bwd(be, ctx->grads[0], demb, ids, bt->B * bt->T, P->E, -1));
    return DS_OK;
}

static const ds_module_ops k_embed_pool_ops = {
    .type = "embed_pool",
    .out_elems = ep_out_elems,
    .saved_bytes = ep_saved_bytes,
    .scratch_bytes = ep_scratch_bytes,
    .forward = ep_forward,
    .backward = ep_backward,
    .destroy = ds_module_free,
};

ds_status ds_mod_embed_pool_create(const char *name, const char *param_prefix, int vocab, int E,
                                   ds_module **out_m) {
    *out_m = NULL;
    if (vocab <= 0 || E <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "embed_pool %s: vocab=%d and width=%d must be > 0", name,
                      vocab, E);
    ds_module *m;
    DS_TRY(ds_module_create(&k_embed_pool_ops, name, 1, sizeof(embed_pool_impl), &m));
    embed_pool_impl *P = m->impl;
    P->vocab = vocab;
    P->E = E;
    ds_status st = ds_module_param(m, 0, param_prefix, "weight", vocab, E, DS_INIT_NORMAL, 0.0f,
                                   1.0f);
    if (st == DS_OK) { /* a lookup table: sparse_gradients, and rows gathered at stages 1-2 */
        m->params[0].row_sparse_grad = true;
        snprintf(m->params[0].rows_read_by, sizeof m->params[0].rows_read_by, "input_ids");
    }
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
