/* The user's bag-of-rows model of the row-communication tests; see
 * user_bag.h. */
#include "user_bag.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct bag_impl {
    ub_desc d;
} bag_impl;

/* Which parameter the table is: 1 between the biases, else 0. */
static int table_index(const ub_desc *d) { return d->around ? 1 : 0; }

static size_t bag_out(const ds_module *m, int B, int T) {
    (void)T;
    return (size_t)B * (size_t)((const bag_impl *)m->impl)->d.width;
}

size_t ub_no_bytes(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 0;
}

static ds_status bag_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, false));
    const ub_desc *d = &((const bag_impl *)m->impl)->d;
    const int32_t *ids;
    const float *mask;
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    DS_TRY(ds_module_input_f32(m, ctx, "attention_mask", &mask));
    int B = ctx->batch->B, T = ctx->batch->T, E = d->width, W = table_index(d);
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++)
            ctx->y[b * E + e] = d->around ? ctx->params[0][e] + ctx->params[2][e] : 0.0f;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (mask[b * T + t] == 0.0f) continue;
            int row = ids[b * T + t];
            const float *w = ctx->params[W] + (size_t)row * (size_t)E;
            const float *w2 = ctx->params[W] + (size_t)((row + 1) % d->vocab) * (size_t)E;
            for (int e = 0; e < E; e++)
                ctx->y[b * E + e] += w[e] + (d->lie ? 1e-3f * w2[e] : 0.0f);
        }
    return DS_OK;
}

static ds_status bag_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, false, true));
    const ub_desc *d = &((const bag_impl *)m->impl)->d;
    const int32_t *ids;
    const float *mask;
    DS_TRY(ds_module_input_i32(m, ctx, "input_ids", &ids));
    DS_TRY(ds_module_input_f32(m, ctx, "attention_mask", &mask));
    int B = ctx->batch->B, T = ctx->batch->T, E = d->width, W = table_index(d);
    float *g = ctx->grads[W];
    for (int b = 0; b < B && d->around; b++)
        for (int e = 0; e < E; e++) {
            ctx->grads[0][e] += ctx->dy[b * E + e];
            ctx->grads[2][e] += ctx->dy[b * E + e];
        }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (mask[b * T + t] == 0.0f) continue; /* untouched rows stay exactly zero */
            size_t row = (size_t)ids[b * T + t] * (size_t)E;
            for (int e = 0; e < E; e++) {
                g[row + (size_t)e] += ctx->dy[b * E + e];
                if (d->spy) d->spy[row + (size_t)e] += ctx->dy[b * E + e];
            }
            if (d->negzero) { /* 0 x -(|dy| + 1): -0.0, whatever dy */
                g[row] = 0.0f * -(fabsf(ctx->dy[b * E]) + 1.0f);
                if (d->spy) d->spy[row] = g[row];
            }
        }
    return DS_OK;
}

static const ds_module_ops k_bag_ops = {.type = "bag", .out_elems = bag_out,
                                        .saved_bytes = ub_no_bytes, .scratch_bytes = ub_no_bytes,
                                        .forward = bag_forward, .backward = bag_backward,
                                        .destroy = ds_module_free};

static size_t sq_out(const ds_module *m, int B, int T) {
    (void)m, (void)B, (void)T;
    return 2;
}

static ds_status sq_forward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, false));
    const float *tgt;
    DS_TRY(ds_module_input_f32(m, ctx, "target", &tgt));
    int B = ctx->batch->B, E = *(const int *)m->impl;
    double sum = 0.0;
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++) sum += pow(ctx->x[b * E + e] - tgt[b], 2.0);
    ctx->y[0] = (float)(sum / B);
    ctx->y[1] = (float)B;
    return DS_OK;
}

static ds_status sq_backward(ds_module *m, ds_module_ctx *ctx) {
    DS_TRY(ds_module_check_ctx(m, ctx, true, true));
    const float *tgt;
    DS_TRY(ds_module_input_f32(m, ctx, "target", &tgt));
    int B = ctx->batch->B, E = *(const int *)m->impl;
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++)
            ctx->dx[b * E + e] = 2.0f * ctx->loss_scale / (float)B * (ctx->x[b * E + e] - tgt[b]);
    return DS_OK;
}

static const ds_module_ops k_sq_ops = {.type = "sq_loss", .out_elems = sq_out,
                                       .saved_bytes = ub_no_bytes, .scratch_bytes = ub_no_bytes,
                                       .forward = sq_forward, .backward = sq_backward,
                                       .destroy = ds_module_free};

ds_status ub_sq_loss(int width, ds_module **out) {
    DS_TRY(ds_module_create(&k_sq_ops, "loss", 0, sizeof(int), out));
    *(int *)(*out)->impl = width;
    return DS_OK;
}

ds_status ub_model(const ub_desc *d, ds_model **out) {
    ds_model *model;
    DS_TRY(ds_model_create("user_bag", &model));
    int64_t seq[1] = {DS_DIM_SEQ};
    ds_module *bag = NULL, *loss = NULL;
    ds_status st = ds_model_add_input(model, "input_ids", DS_I32, 1, seq,
                                      d->optional_ids ? DS_INPUT_OPTIONAL : 0);
    if (st == DS_OK) st = ds_model_add_input(model, "attention_mask", DS_F32, 1, seq, 0);
    if (st == DS_OK) st = ds_model_add_input(model, "target", DS_F32, 0, NULL, DS_INPUT_TARGET);
    model->max_seq_len = d->max_seq_len;
    int W = table_index(d);
    if (st == DS_OK)
        st = ds_module_create(&k_bag_ops, "bag", d->around ? 3 : 1, sizeof(bag_impl), &bag);
    if (st == DS_OK) {
        ((bag_impl *)bag->impl)->d = *d;
        st = ds_module_param(bag, W, NULL, "weight", d->vocab, d->width, DS_INIT_NORMAL, 0.0f,
                             0.5f);
        if (st == DS_OK && d->around)
            st = ds_module_param(bag, 0, "pre", "bias", d->width, 0, DS_INIT_NORMAL, 0.0f, 0.1f);
        if (st == DS_OK && d->around)
            st = ds_module_param(bag, 2, "post", "bias", d->width, 0, DS_INIT_ZEROS, 0.0f, 0.0f);
        bag->params[W].row_sparse_grad = true; /* the flags a user sets: module.h */
        if (d->rows)
            snprintf(bag->params[W].rows_read_by, sizeof bag->params[W].rows_read_by,
                     "input_ids");
        ds_status add = ds_model_add_module(model, bag); /* owns bag from here */
        if (st == DS_OK) st = add;
    }
    if (st == DS_OK) st = ub_sq_loss(d->width, &loss);
    if (st == DS_OK) st = ds_model_add_module(model, loss);
    if (st != DS_OK) {
        ds_model_destroy(model);
        return st;
    }
    *out = model;
    return DS_OK;
}
