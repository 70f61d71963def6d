/* The MLP text classifier:
 *   embeddings (embed_pool) -> mlp.0 .. mlp.{n-1} (linear + relu) -> classifier -> loss
 * Initialised as the same model written with torch.nn would be (nn.Embedding
 * N(0, 1), nn.Linear U(-1/sqrt(in), 1/sqrt(in))). */
#include <stdio.h>
#include <stdlib.h>

#include "models/models.h"
#include "models/modules.h"

ds_status ds_mlp_create(const ds_mlp_desc *d, ds_model **out) {
    *out = NULL;
    if (!d) return DS_ERR(DS_ERR_INVALID_ARG, "ds_mlp_create: desc is NULL");
    int n_hidden = d->n_hidden == 0 ? 1 : d->n_hidden;
    if (d->vocab_size <= 0 || d->embed_dim <= 0 || d->hidden_dim <= 0 || d->max_seq_len <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "mlp: vocab_size=%d embed_dim=%d hidden_dim=%d max_seq_len=%d must all be "
                      "> 0",
                      d->vocab_size, d->embed_dim, d->hidden_dim, d->max_seq_len);
    if (n_hidden < 0 || n_hidden > 64)
        return DS_ERR(DS_ERR_INVALID_ARG, "mlp: n_hidden must be in 0..64, got %d", d->n_hidden);
    if (d->n_classes < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "mlp: n_classes must be >= 2, got %d", d->n_classes);

    ds_model *model;
    DS_TRY(ds_model_create("mlp", &model));
    ds_status st = ds_cls_model_inputs(model, d->max_seq_len, d->vocab_size, 0, d->n_classes);
    ds_module *m = NULL;
    if (st == DS_OK)
        st = ds_mod_embed_pool_create("embeddings", "embeddings.word_embeddings", d->vocab_size,
                                      d->embed_dim, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    int in = d->embed_dim;
    for (int i = 0; i < n_hidden && st == DS_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "mlp.%d", i);
        st = ds_mod_linear_create(name, name, in, d->hidden_dim, DS_ACT_RELU,
                                  DS_LINEAR_INIT_TORCH, 0.0f, &m);
        if (st == DS_OK) st = ds_model_add_module(model, m);
        in = d->hidden_dim;
    }
    if (st == DS_OK)
        st = ds_mod_linear_create("classifier", "classifier", in, d->n_classes, DS_ACT_NONE,
                                  DS_LINEAR_INIT_TORCH, 0.0f, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    ds_xent_desc xd = {.n_classes = d->n_classes, .weights = "weights"};
    if (st == DS_OK) st = ds_mod_xent_create("loss", &xd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st != DS_OK) {
        ds_model_destroy(model);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    model->n_classes = d->n_classes;
    model->vocab_size = d->vocab_size;
    model->hidden_size = d->hidden_dim;
    *out = model;
    return DS_OK;
}
