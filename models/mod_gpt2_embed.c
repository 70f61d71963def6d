/* "gpt2_embed": GPT2Model's input embeddings (Hugging Face), batch -> [B, T, E]:
 *   y = dropout(wte[input_ids] + wpe[0..T))
 * Position ids are 0..T-1 in every row, as GPT2Model uses when it is given
 * none (an absolute arange, whatever the padding). No layer norm here: GPT-2
 * normalises inside each block (pre-LN) and once more at the end (ln_f).
 * wte has no padding row (GPT-2's nn.Embedding has no padding_idx): every
 * id's row gets its gradient, and the output projection ties to it.
 *
 * saved:   nothing (the dropout mask is regenerated from (seed, 0))
 * scratch: backward: dropout_bwd(dy) [B*T, E] when dropout is on */
#include <stdio.h>

#include "models/modules.h"

enum { P_WTE = 0, P_WPE, P_COUNT };

typedef struct gpt2_embed_impl {
    ds_gpt2_embed_desc d;
} gpt2_embed_impl;

static size_t ge_out_elems(const ds_module *m, int B, int T) {
    return (size_t)B * T * ((const gpt2_embed_impl *)m->impl)->d.n_embd;
}

static size_t ge_saved_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

/* The gradient after the dropout, [B*T, E] (only used when dropout is on;
 * the size cannot depend on ctx->training, so it is always reserved). */
static size_t ge_scratch(const ds_module *m, int B, int T, void *base, float **d) {
    ds_carve c = ds_carve_begin(base);
    *d = ds_carve_f32(&c, (size_t)B * T * ((const gpt2_embed_impl *)m->impl)->d.n_embd);
    return c.off;
}

static size_t ge_scratch_bytes(const ds_module *m, int B, int T) {
    float *d;
    return ge_scratch(m, B, T, NULL, &d);
}

static float drop_p(const gpt2_embed_impl *E, const ds_module_ctx *ctx) {
    return ctx->training ? E->d.embd_pdrop : 0.0f;
}

/* The checks both directions start with: T within the position table, the
 * token ids of the batch. */
static ds_status ge_begin(ds_module *m, ds_module_ctx *ctx, bool backward,
                          const int32_t **ids) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, backward));
    const gpt2_embed_impl *E = m->impl;
    if (ctx->batch->T > E->d.n_positions)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: sequence length %d exceeds n_positions %d",
                      m->name, ctx->batch->T, E->d.n_positions);
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", ids));
    return DS_OK;
}

static ds_status ge_forward(ds_module *m, ds_module_ctx *ctx) {
    const int32_t *ids;
    DS_TRY(ge_begin(m, ctx, false, &ids));
    const gpt2_embed_impl *E = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B, T = ctx->batch->T, H = E->d.n_embd, N = B * T;
    float *const *P = ctx->params;
    ds_status st = be->nn->embedding_fwd(be, ctx->y, P[P_WTE], ids, N, H, E->d.vocab, false);
    if (st != DS_OK) {
        ds_error_prefix("module %s, input_ids (batch %d x %d)", m->name, B, T);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* positions 0..T-1: the first T rows of wpe, added to each row b
     * (inputs_embeds + position_embeds, HF's order) */
    DS_TRY(be->nn->bcast_add_fwd(be, ctx->y, P[P_WPE], B, T * H, true));
    float p = drop_p(E, ctx);
    if (p > 0.0f)
        DS_TRY(be->nn->dropout_fwd(be, ctx->y, ctx->y, NULL, NULL, N, H, p, ctx->seed, 0, NULL));
    return DS_OK;
}

static ds_status ge_backward(ds_module *m, ds_module_ctx *ctx) {
    const int32_t *ids;
    DS_TRY(ge_begin(m, ctx, true, &ids));
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    const gpt2_embed_impl *E = m->impl;
    ds_backend *be = ctx->be;
    int B = ctx->batch->B, T = ctx->batch->T, H = E->d.n_embd, N = B * T;
    float *const *G = ctx->grads;
    const float *d = ctx->dy;
    float p = drop_p(E, ctx);
    if (p > 0.0f) {
        float *dd;
        ge_scratch(m, B, T, ctx->scratch, &dd);
        DS_TRY(be->nn->dropout_bwd(be, dd, NULL, ctx->dy, N, H, p, ctx->seed, 0, NULL));
        d = dd;
    }
    DS_TRY(be->nn->embedding_bwd(be, G[P_WTE], d, ids, N, H, -1));
    DS_TRY(be->nn->bcast_add_bwd(be, G[P_WPE], d, B, T * H));
    return DS_OK;
}

static const ds_module_ops k_gpt2_embed_ops = {
    .type = "gpt2_embed",
    .out_elems = ge_out_elems,
    .saved_bytes = ge_saved_bytes,
    .scratch_bytes = ge_scratch_bytes,
    .forward = ge_forward,
    .backward = ge_backward,
    .destroy = ds_module_free,
};

ds_status ds_mod_gpt2_embed_create(const char *name, const char *param_prefix,
                                   const ds_gpt2_embed_desc *d, ds_module **out_m) {
    *out_m = NULL;
    if (d->vocab <= 0 || d->n_embd <= 0 || d->n_positions <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "gpt2 embeddings %s: vocab=%d n_embd=%d n_positions=%d must all be > 0",
                      name, d->vocab, d->n_embd, d->n_positions);
    if (!(d->embd_pdrop >= 0.0f && d->embd_pdrop < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2 embeddings %s: embd_pdrop %g must be in [0, 1)",
                      name, (double)d->embd_pdrop);
    ds_module *m;
    DS_TRY(ds_module_create(&k_gpt2_embed_ops, name, P_COUNT, sizeof(gpt2_embed_impl), &m));
    ((gpt2_embed_impl *)m->impl)->d = *d;
    float sd = d->init_std;
    ds_status st = ds_module_param(m, P_WTE, param_prefix, "wte.weight", d->vocab, d->n_embd,
                                   DS_INIT_NORMAL, 0.0f, sd);
    /* row-sparse and read by input_ids from the lookup alone; where lm_head
     * ties to it (GPT-2 does) the engine exchanges and gathers it dense
     * (module.h, row_sparse_grad and rows_read_by) */
    if (st == DS_OK) {
        m->params[P_WTE].row_sparse_grad = true;
        snprintf(m->params[P_WTE].rows_read_by, sizeof m->params[P_WTE].rows_read_by,
                 "input_ids");
    }
    if (st == DS_OK)
        st = ds_module_param(m, P_WPE, param_prefix, "wpe.weight", d->n_positions, d->n_embd,
                             DS_INIT_NORMAL, 0.0f, sd);
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
