/* "xent": the cross-entropy loss module. Logits [R, C] -> y[0] the mean
 * loss over the counted rows, y[1] their weight (module.h, rule 5):
 *
 *   per row    R = B     labels [B]      a sequence classifier
 *   per token  R = B T   labels [B, T]   a token tagger; with `shift`, a causal
 *                                        language model: position t is scored
 *                                        on the label of t + 1 (the last
 *                                        position on nothing), as Hugging
 *                                        Face's *LMHeadModel shifts its labels
 *
 * Rows whose label is DS_IGNORE_INDEX (-100) do not count (padding, prompts).
 * With a weights input, row r counts w_r (class weights become w_r =
 * class_w[y_r], exactly torch.nn.CrossEntropyLoss(weight)). Backward ignores
 * dy and starts the chain with ctx->loss_scale.
 *
 * saved:   probs [R, C], the weight sum (1 float), row losses [R], the
 *          shifted labels [R] (shift only)
 * scratch: nothing */
#include <stdio.h>
#include <string.h>

#include "models/modules.h"

typedef struct xent_impl {
    ds_xent_desc d;
    char labels[DS_MAX_INPUT_NAME], weights[DS_MAX_INPUT_NAME];
} xent_impl;

static int rows_of(const xent_impl *X, int B, int T) { return X->d.per_token ? B * T : B; }

static size_t xe_out_elems(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 2;
}

typedef struct xe_saved {
    float *probs, *wsum, *row_loss;
    int32_t *shifted;
} xe_saved;

static size_t xe_layout(const ds_module *m, int B, int T, void *base, xe_saved *s) {
    const xent_impl *X = m->impl;
    size_t R = (size_t)rows_of(X, B, T);
    ds_carve c = ds_carve_begin(base);
    s->probs = ds_carve_f32(&c, R * (size_t)X->d.n_classes);
    s->wsum = ds_carve_f32(&c, 1);
    s->row_loss = ds_carve_f32(&c, R);
    s->shifted = X->d.shift ? ds_carve_i32(&c, R) : NULL;
    return c.off;
}

static size_t xe_saved_bytes(const ds_module *m, int B, int T) {
    xe_saved s;
    return xe_layout(m, B, T, NULL, &s);
}

static size_t xe_scratch_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

/* The labels (shifted into the saved area when asked) and weights of this
 * batch. */
static ds_status xe_targets(ds_module *m, ds_module_ctx *ctx, const xe_saved *s, bool make,
                            const int32_t **labels, const float **weights) {
    const xent_impl *X = m->impl;
    const ds_batch *bt = ctx->batch;
    DS_TRY(ds_module_input_i32(m, ctx, X->labels, labels));
    *weights = NULL;
    if (X->weights[0] && ds_batch_get(bt, X->weights))
        DS_TRY(ds_module_input_f32(m, ctx, X->weights, weights));
    if (X->d.shift) {
        if (make)
            DS_TRY(ctx->be->nn->shift_labels(ctx->be, s->shifted, *labels, bt->B, bt->T,
                                             DS_IGNORE_INDEX));
        *labels = s->shifted;
    }
    return DS_OK;
}

static ds_status xe_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const xent_impl *X = m->impl;
    const ds_batch *bt = ctx->batch;
    xe_saved s;
    xe_layout(m, bt->B, bt->T, ctx->saved, &s);
    const int32_t *labels;
    const float *weights;
    DS_TRY(xe_targets(m, ctx, &s, true, &labels, &weights));
    ds_status st = ctx->be->nn->xent_fwd(ctx->be, ctx->y, s.wsum, s.probs, s.row_loss, ctx->x,
                                         labels, weights, rows_of(X, bt->B, bt->T), X->d.n_classes,
                                         DS_IGNORE_INDEX);
    if (st != DS_OK) {
        ds_error_prefix("module %s (%s)", m->name, X->labels);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    DS_TRY(ctx->be->ops->memcpy(ctx->be, ctx->y + 1, s.wsum, sizeof(float), DS_COPY_D2D, NULL));
    return DS_OK;
}

static ds_status xe_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const xent_impl *X = m->impl;
    const ds_batch *bt = ctx->batch;
    if (!ctx->dx) return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input gradient slot", m->name);
    xe_saved s;
    xe_layout(m, bt->B, bt->T, ctx->saved, &s);
    const int32_t *labels;
    const float *weights;
    DS_TRY(xe_targets(m, ctx, &s, false, &labels, &weights));
    DS_TRY(ctx->be->nn->xent_bwd(ctx->be, ctx->dx, s.probs, s.wsum, labels, weights,
                                 rows_of(X, bt->B, bt->T), X->d.n_classes, DS_IGNORE_INDEX,
                                 ctx->loss_scale));
    return DS_OK;
}

static const ds_module_ops k_xent_ops = {
    .type = "xent",
    .out_elems = xe_out_elems,
    .saved_bytes = xe_saved_bytes,
    .scratch_bytes = xe_scratch_bytes,
    .forward = xe_forward,
    .backward = xe_backward,
    .destroy = ds_module_free,
};

ds_status ds_mod_xent_create(const char *name, const ds_xent_desc *d, ds_module **out_m) {
    *out_m = NULL;
    if (d->n_classes < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "xent %s: n_classes must be >= 2, got %d", name,
                      d->n_classes);
    if (d->shift && !d->per_token)
        return DS_ERR(DS_ERR_INVALID_ARG, "xent %s: shift needs per_token labels", name);
    const char *labels = d->labels ? d->labels : "labels";
    if (strlen(labels) >= DS_MAX_INPUT_NAME || (d->weights && strlen(d->weights) >= DS_MAX_INPUT_NAME))
        return DS_ERR(DS_ERR_INVALID_ARG, "xent %s: input names have at most %d characters", name,
                      DS_MAX_INPUT_NAME - 1);
    ds_module *m;
    DS_TRY(ds_module_create(&k_xent_ops, name, 0, sizeof(xent_impl), &m));
    xent_impl *X = m->impl;
    X->d = *d;
    snprintf(X->labels, sizeof X->labels, "%s", labels);
    if (d->weights) snprintf(X->weights, sizeof X->weights, "%s", d->weights);
    X->d.labels = X->d.weights = NULL; /* the copies above are the module's */
    *out_m = m;
    return DS_OK;
}
