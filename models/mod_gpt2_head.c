/* "gpt2_lm_head": GPT2Model's final layer norm and GPT2LMHeadModel's output
 * projection, [B, T, E] -> logits [B, T, V]:
 *   Hf     = ln_f(x)
 *   logits = Hf wte^T          (lm_head: nn.Linear(E, V, bias=False), its weight
 *                               tied to the token embedding wte [V, E])
 * ln_f is owned here (its parameters keep GPT2Model's names,
 * transformer.ln_f.*); the projection weight is the embedding module's
 * parameter, declared with ds_module_tie (module.h, rule 6): it arrives in
 * ctx->tied[0] and its gradient, d wte += dlogits^T Hf, is accumulated into
 * ctx->tied_grads[0], where the engine adds the embedding's own use.
 *
 * saved:   Hf [N, E], ln_f's mean and rstd [N]      (N = B T)
 * scratch: backward: dHf [N, E] */

#include "models/modules.h"

enum { P_LN_W = 0, P_LN_B, P_COUNT };

typedef struct head_impl {
    int vocab, n_embd;
    float ln_eps;
} head_impl;

typedef struct head_saved {
    float *hf, *mean, *rstd;
} head_saved;

static size_t head_layout(const ds_module *m, int B, int T, void *base, head_saved *s) {
    const head_impl *L = m->impl;
    size_t N = (size_t)B * T;
    ds_carve c = ds_carve_begin(base);
    s->hf = ds_carve_f32(&c, N * L->n_embd);
    s->mean = ds_carve_f32(&c, N);
    s->rstd = ds_carve_f32(&c, N);
    return c.off;
}

static size_t head_out_elems(const ds_module *m, int B, int T) {
    return (size_t)B * T * ((const head_impl *)m->impl)->vocab;
}

static size_t head_saved_bytes(const ds_module *m, int B, int T) {
    head_saved s;
    return head_layout(m, B, T, NULL, &s);
}

static size_t head_scratch_bytes(const ds_module *m, int B, int T) {
    ds_carve c = ds_carve_begin(NULL);
    ds_carve_f32(&c, (size_t)B * T * ((const head_impl *)m->impl)->n_embd);
    return c.off;
}

static ds_status head_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const head_impl *L = m->impl;
    ds_backend *be = ctx->be;
    int N = ctx->batch->B * ctx->batch->T, E = L->n_embd;
    head_saved s;
    head_layout(m, ctx->batch->B, ctx->batch->T, ctx->saved, &s);
    DS_TRY(be->nn->layernorm_fwd(be, s.hf, s.mean, s.rstd, ctx->x, ctx->params[P_LN_W],
                                 ctx->params[P_LN_B], N, E, L->ln_eps));
    /* logits [N, V] = Hf wte^T: wte [V, E] is nn.Linear's [out, in] layout */
    return ds_linear_fwd(be, ctx->y, s.hf, E, ctx->tied[0], N, E, L->vocab, 0.0f);
}

static ds_status head_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    if (!ctx->dy || !ctx->dx)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: backward needs dy and dx", m->name);
    if (!ctx->tied_grads || !ctx->tied_grads[0])
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no gradient slot for the tied %s", m->name,
                      m->tied[0].target);
    const head_impl *L = m->impl;
    ds_backend *be = ctx->be;
    int N = ctx->batch->B * ctx->batch->T, E = L->n_embd, V = L->vocab;
    head_saved s;
    head_layout(m, ctx->batch->B, ctx->batch->T, ctx->saved, &s);
    ds_carve c = ds_carve_begin(ctx->scratch);
    float *dhf = ds_carve_f32(&c, (size_t)N * E);
    /* d wte += dlogits^T Hf (accumulated: the embedding adds its own use) */
    DS_TRY(ds_linear_bwd_w(be, ctx->tied_grads[0], ctx->dy, s.hf, E, N, E, V));
    /* dHf = dlogits wte */
    DS_TRY(ds_linear_bwd_x(be, dhf, E, ctx->dy, ctx->tied[0], N, E, V, 0.0f));
    return be->nn->layernorm_bwd(be, ctx->dx, ctx->grads[P_LN_W], ctx->grads[P_LN_B], dhf,
                                 ctx->x, s.mean, s.rstd, ctx->params[P_LN_W], N, E, false);
}

/* logits = Hf wte^T over the N = B T positions: a linear layer of vocab outputs */
static void head_plan_gemms(const ds_module *m, int B, int T, ds_gemm_plan *plan) {
    const head_impl *L = m->impl;
    ds_linear_plan_gemms(plan, B * T, L->n_embd, L->vocab);
}

static const ds_module_ops k_gpt2_head_ops = {
    .type = "gpt2_lm_head",
    .out_elems = head_out_elems,
    .saved_bytes = head_saved_bytes,
    .scratch_bytes = head_scratch_bytes,
    .forward = head_forward,
    .backward = head_backward,
    .destroy = ds_module_free,
    .plan_gemms = head_plan_gemms,
};

ds_status ds_mod_gpt2_head_create(const char *name, const ds_gpt2_head_desc *d,
                                  ds_module **out_m) {
    *out_m = NULL;
    if (d->vocab <= 0 || d->n_embd <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2 lm head %s: vocab=%d n_embd=%d must be > 0",
                      name, d->vocab, d->n_embd);
    if (!d->ln_prefix || !d->tied_to)
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2 lm head %s: ln_prefix and tied_to are required",
                      name);
    if (!(d->ln_eps > 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "gpt2 lm head %s: ln_eps %g must be > 0", name,
                      (double)d->ln_eps);
    ds_module *m;
    DS_TRY(ds_module_create(&k_gpt2_head_ops, name, P_COUNT, sizeof(head_impl), &m));
    head_impl *L = m->impl;
    L->vocab = d->vocab;
    L->n_embd = d->n_embd;
    L->ln_eps = d->ln_eps;
    ds_status st = ds_module_param(m, P_LN_W, d->ln_prefix, "weight", d->n_embd, 0, DS_INIT_ONES,
                                   0.0f, 0.0f);
    if (st == DS_OK) m->params[P_LN_W].no_decay = true; /* ln_f, an nn.LayerNorm (HF's rule) */
    if (st == DS_OK)
        st = ds_module_param(m, P_LN_B, d->ln_prefix, "bias", d->n_embd, 0, DS_INIT_ZEROS, 0.0f,
                             0.0f);
    if (st == DS_OK) st = ds_module_tie(m, d->alias, d->tied_to, d->vocab, d->n_embd);
    if (st != DS_OK) {
        ds_module_free(m);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out_m = m;
    return DS_OK;
}
