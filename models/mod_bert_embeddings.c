/* "bert_embeddings": BertEmbeddings of Hugging Face.
 *   e = word[tokens] + token_type[type_ids] + position[0..T)   (HF's order)
 *   y = dropout(LayerNorm(e))            [B, T, H]
 * Position ids are 0..T-1 in every row (absolute positions, as BERT).
 *
 * saved:   e [B*T, H], the layer norm's mean and rstd [B*T], and the
 *          dropout's keep mask in bits (nn.h) when its probability is > 0
 * scratch: backward: d(LayerNorm output), then d(e) in place [B*T, H] */
#include <stdio.h>

#include "models/modules.h"

enum { P_WORD = 0, P_POS, P_TYPE, P_LN_W, P_LN_B, P_COUNT };

typedef struct bert_embed_impl {
    ds_bert_embed_desc d;
} bert_embed_impl;

typedef struct be_saved {
    float *e, *mean, *rstd;
    uint32_t *keep;
} be_saved;

static size_t be_layout(const ds_module *m, int B, int T, void *base, be_saved *s) {
    const bert_embed_impl *E = m->impl;
    size_t N = (size_t)B * T;
    ds_carve c = ds_carve_begin(base);
    s->e = ds_carve_f32(&c, N * E->d.hidden);
    s->mean = ds_carve_f32(&c, N);
    s->rstd = ds_carve_f32(&c, N);
    s->keep = E->d.dropout > 0.0f
                  ? ds_carve_bytes(&c, ds_dropout_mask_bytes((int64_t)N, E->d.hidden))
                  : NULL;
    return c.off;
}

static size_t be_out_elems(const ds_module *m, int B, int T) {
    return (size_t)B * T * ((const bert_embed_impl *)m->impl)->d.hidden;
}

static size_t be_saved_bytes(const ds_module *m, int B, int T) {
    be_saved s;
    return be_layout(m, B, T, NULL, &s);
}

static size_t be_scratch_bytes(const ds_module *m, int B, int T) {
    ds_carve c = ds_carve_begin(NULL);
    ds_carve_f32(&c, (size_t)B * T * ((const bert_embed_impl *)m->impl)->d.hidden);
    return c.off;
}

static float drop_p(const bert_embed_impl *E, const ds_module_ctx *ctx) {
    return ctx->training ? E->d.dropout : 0.0f;
}

static ds_status be_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, false));
    const bert_embed_impl *E = m->impl;
    const ds_batch *bt = ctx->batch;
    ds_backend *be = ctx->be;
    int B = bt->B, T = bt->T, H = E->d.hidden, N = B * T;
    if (T > E->d.max_positions)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "module %s: sequence length %d exceeds max_position_embeddings %d", m->name,
                      T, E->d.max_positions);
    be_saved s;
    be_layout(m, B, T, ctx->saved, &s);
    float *const *P = ctx->params;
    const int32_t *ids, *types = ds_batch_i32(bt, "token_type_ids");
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    ds_status st = be->nn->embedding_fwd(be, s.e, P[P_WORD], ids, N, H, E->d.vocab, false);
    if (st != DS_OK) {
        ds_error_prefix("module %s, input_ids (batch %d x %d)", m->name, B, T);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    /* Hugging Face's order of the sums: (word + type) + position. */
    if (types) {
        st = be->nn->embedding_fwd(be, s.e, P[P_TYPE], types, N, H, E->d.type_vocab, true);
        if (st != DS_OK) {
            ds_error_prefix("module %s, token_type_ids (batch %d x %d)", m->name, B, T);
            ds_error_trace(__FILE__, __LINE__);
            return st;
        }
    } else {
        DS_TRY(be->nn->bcast_add_fwd(be, s.e, P[P_TYPE], N, H, true)); /* all type 0 */
    }
    /* positions 0..T-1: the first T rows of the table, added to each row b */
    DS_TRY(be->nn->bcast_add_fwd(be, s.e, P[P_POS], B, T * H, true));
    DS_TRY(be->nn->layernorm_fwd(be, ctx->y, s.mean, s.rstd, s.e, P[P_LN_W], P[P_LN_B], N, H,
                                 E->d.ln_eps));
    float p = drop_p(E, ctx);
    if (p > 0.0f)
        DS_TRY(be->nn->dropout_fwd(be, ctx->y, ctx->y, NULL, NULL, N, H, p, ctx->seed, 0,
                                   s.keep));
    return DS_OK;
}

static ds_status be_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, true));
    const bert_embed_impl *E = m->impl;
    const ds_batch *bt = ctx->batch;
    ds_backend *be = ctx->be;
    int B = bt->B, T = bt->T, H = E->d.hidden, N = B * T;
    if (!ctx->dy) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output gradient", m->name);
    be_saved s;
    be_layout(m, B, T, ctx->saved, &s);
    ds_carve c = ds_carve_begin(ctx->scratch);
    float *d = ds_carve_f32(&c, (size_t)N * H);
    float *const *P = ctx->params;
    float *const *G = ctx->grads;
    /* p = 0 is the identity copy */
    DS_TRY(be->nn->dropout_bwd(be, d, NULL, ctx->dy, N, H, drop_p(E, ctx), ctx->seed, 0,
                               s.keep));
    DS_TRY(be->nn->layernorm_bwd(be, d, G[P_LN_W], G[P_LN_B], d, s.e, s.mean, s.rstd, P[P_LN_W],
                                 N, H, false));
    const int32_t *ids, *types = ds_batch_i32(bt, "token_type_ids");
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    DS_TRY(be->nn->embedding_bwd(be, G[P_WORD], d, ids, N, H, E->d.padding_idx));
    DS_TRY(be->nn->bcast_add_bwd(be, G[P_POS], d, B, T * H));
    if (types) DS_TRY(be->nn->embedding_bwd(be, G[P_TYPE], d, types, N, H, -1));
    else
        DS_TRY(be->nn->bcast_add_bwd(be, G[P_TYPE], d, N, H));
    return DS_OK;
}

static const ds_module_ops k_bert_embed_ops = {
    .type = "bert_embeddings",
    .out_elems = be_out_elems,
    .saved_bytes = be_saved_bytes,
    .scratch_bytes = be_scratch_bytes,
    .forward = be_forward,
    .backward = be_backward,
    .destroy = ds_module_free,
};

ds_status ds_mod_bert_embeddings_create(const char *name, const ds_bert_embed_desc *d,
                                        ds_module **out_m) {
    *out_m = NULL;
    if (d->vocab <= 0 || d->hidden <= 0 || d->max_positions <= 0 || d->type_vocab <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "bert embeddings %s: vocab=%d hidden=%d max_positions=%d type_vocab=%d must "
                      "all be > 0",
                      name, d->vocab, d->hidden, d->max_positions, d->type_vocab);
    if (!(d->dropout >= 0.0f && d->dropout < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "bert embeddings %s: dropout %g must be in [0, 1)", name,
                      (double)d->dropout);
    if (d->padding_idx >= d->vocab)
        return DS_ERR(DS_ERR_INVALID_ARG, "bert embeddings %s: padding_idx %d >= vocab %d", name,
                      d->padding_idx, d->vocab);
    ds_module *m;
    DS_TRY(ds_module_create(&k_bert_embed_ops, name, P_COUNT, sizeof(bert_embed_impl), &m));
    ((bert_embed_impl *)m->impl)->d = *d;
    float sd = d->init_std;
    ds_status st = ds_module_param(m, P_WORD, NULL, "word_embeddings.weight", d->vocab, d->hidden,
                                   DS_INIT_NORMAL, 0.0f, sd);
    /* a batch touches few of the vocabulary's rows (sparse_gradients), and
     * reads only those its input_ids name (rows gathered at stages 1-2) */
    if (st == DS_OK) {
        m->params[P_WORD].row_sparse_grad = true;
        snprintf(m->params[P_WORD].rows_read_by, sizeof m->params[P_WORD].rows_read_by,
                 "input_ids");
    }
    if (st == DS_OK && d->padding_idx >= 0) { /* HF zeroes the padding row at init */
        m->params[P_WORD].has_zero_row = true;
        m->params[P_WORD].zero_row = d->padding_idx;
    }
    if (st == DS_OK)
        st = ds_module_param(m, P_POS, NULL, "position_embeddings.weight", d->max_positions,
                             d->hidden, DS_INIT_NORMAL, 0.0f, sd);
    if (st == DS_OK)
        st = ds_module_param(m, P_TYPE, NULL, "token_type_embeddings.weight", d->type_vocab,
                             d->hidden, DS_INIT_NORMAL, 0.0f, sd);
    if (st == DS_OK)
        st = ds_module_param(m, P_LN_W, NULL, "LayerNorm.weight", d->hidden, 0, DS_INIT_ONES,
                             0.0f, 0.0f);
    if (st == DS_OK)
        st = ds_module_param(m, P_LN_B, NULL, "LayerNorm.bias", d->hidden, 0, DS_INIT_ZEROS, 0.0f,
                             0.0f);
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
