/* The MLP text classifier:
 *   embeddings (embed_pool) -> mlp.0 .. mlp.{n-1} (linear + relu) -> classifier -> loss
 * Initialised as the same model written with torch.nn would be (nn.Embedding
 * N(0, 1), nn.Linear U(-1/sqrt(in), 1/sqrt(in))). */
#include <stdio.h>
#include <stdlib.h>

#include "models/model_build.h"
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

    ds_model_builder mb;
    DS_TRY(ds_model_builder_begin(&mb, "mlp", n_hidden + 3));
    ds_module *m = NULL;
    ds_status st = ds_mod_embed_pool_create("embeddings", "embeddings.word_embeddings",
                                            d->vocab_size, d->embed_dim, &m);
    ds_model_builder_add(&mb, &st, m);
    int in = d->embed_dim;
    for (int i = 0; i < n_hidden && st == DS_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "mlp.%d", i);
        st = ds_mod_linear_create(name, name, in, d->hidden_dim, DS_ACT_RELU,
                                  DS_LINEAR_INIT_TORCH, 0.0f, &m);
        ds_model_builder_add(&mb, &st, m);
        in = d->hidden_dim;
    }
    if (st == DS_OK) {
        st = ds_mod_linear_create("classifier", "classifier", in, d->n_classes, DS_ACT_NONE,
                                  DS_LINEAR_INIT_TORCH, 0.0f, &m);
        ds_model_builder_add(&mb, &st, m);
    }
    if (st == DS_OK) {
        st = ds_mod_xent_create("loss", d->n_classes, &m);
        ds_model_builder_add(&mb, &st, m);
    }
    if (st != DS_OK) {
        ds_model_builder_abort(&mb);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    mb.model->n_classes = d->n_classes;
    mb.model->vocab_size = d->vocab_size;
    mb.model->max_seq_len = d->max_seq_len;
    mb.model->hidden_size = d->hidden_dim;
    *out = mb.model;
    return DS_OK;
}
