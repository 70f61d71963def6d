/* BertForSequenceClassification assembled from the modules of models/:
 *   bert.embeddings -> bert.encoder.layer.0 .. L-1 -> bert.pooler (+ dropout)
 *   -> classifier -> loss */
#include <limits.h>
#include <stdio.h>

#include "models/models.h"
#include "models/modules.h"

/* d with the documented defaults filled in, or an error naming the field. */
static ds_status bert_resolve(const ds_bert_desc *in, ds_bert_desc *d) {
    *d = *in;
    if (d->type_vocab_size == 0) d->type_vocab_size = 2;
    if (d->layer_norm_eps == 0.0f) d->layer_norm_eps = 1e-12f;
    if (d->initializer_range == 0.0f) d->initializer_range = 0.02f;
    if (d->intermediate_size == 0 && d->hidden_size > 0) {
        /* past INT_MAX / 4 the default does not fit an int (nor the product) */
        if (d->hidden_size > INT_MAX / 4)
            return DS_ERR(DS_ERR_INVALID_ARG, "bert: hidden_size %d: the default "
                          "intermediate_size (4 * hidden_size) exceeds %d; give "
                          "intermediate_size", d->hidden_size, INT_MAX);
        d->intermediate_size = 4 * d->hidden_size;
    }
    if (d->max_seq_len == 0) d->max_seq_len = d->max_position_embeddings;
#define POSITIVE(f)                                                                       \
    if (d->f <= 0) return DS_ERR(DS_ERR_INVALID_ARG, "bert: " #f " must be > 0, got %d", d->f)
    POSITIVE(vocab_size);
    POSITIVE(hidden_size);
    POSITIVE(num_hidden_layers);
    POSITIVE(num_attention_heads);
    POSITIVE(intermediate_size);
    POSITIVE(max_position_embeddings);
    POSITIVE(type_vocab_size);
    POSITIVE(max_seq_len);
#undef POSITIVE
    if (d->hidden_size % d->num_attention_heads != 0)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "bert: hidden_size %d is not a multiple of num_attention_heads %d",
                      d->hidden_size, d->num_attention_heads);
    if (d->max_seq_len > d->max_position_embeddings)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "bert: max_seq_len %d exceeds max_position_embeddings %d", d->max_seq_len,
                      d->max_position_embeddings);
    if (!(d->hidden_dropout_prob >= 0.0f && d->hidden_dropout_prob < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "bert: hidden_dropout_prob must be in [0, 1), got %g",
                      (double)d->hidden_dropout_prob);
    if (!(d->attention_probs_dropout_prob >= 0.0f && d->attention_probs_dropout_prob < 1.0f))
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "bert: attention_probs_dropout_prob must be in [0, 1), got %g",
                      (double)d->attention_probs_dropout_prob);
    if (!(d->layer_norm_eps > 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "bert: layer_norm_eps must be > 0, got %g",
                      (double)d->layer_norm_eps);
    if (!(d->initializer_range > 0.0f))
        return DS_ERR(DS_ERR_INVALID_ARG, "bert: initializer_range must be > 0, got %g",
                      (double)d->initializer_range);
    if (d->n_classes < 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "bert: n_classes must be >= 2, got %d", d->n_classes);
    if (d->pad_token_id < 0 || d->pad_token_id >= d->vocab_size)
        return DS_ERR(DS_ERR_INVALID_ARG, "bert: pad_token_id %d is outside [0, vocab_size %d)",
                      d->pad_token_id, d->vocab_size);
    return DS_OK;
}

ds_status ds_bert_create(const ds_bert_desc *in, ds_model **out) {
    *out = NULL;
    if (!in) return DS_ERR(DS_ERR_INVALID_ARG, "ds_bert_create: desc is NULL");
    ds_bert_desc d;
    DS_TRY(bert_resolve(in, &d));
    float sd = d.initializer_range;

    ds_model *model;
    DS_TRY(ds_model_create("bert", &model));
    ds_status st = ds_cls_model_inputs(model, d.max_seq_len, d.vocab_size, d.type_vocab_size,
                                       d.n_classes);
    ds_module *m = NULL;
    ds_bert_embed_desc ed = {
        .vocab = d.vocab_size,
        .hidden = d.hidden_size,
        .max_positions = d.max_position_embeddings,
        .type_vocab = d.type_vocab_size,
        .padding_idx = d.pad_token_id,
        .dropout = d.hidden_dropout_prob,
        .ln_eps = d.layer_norm_eps,
        .init_std = sd,
    };
    if (st == DS_OK) st = ds_mod_bert_embeddings_create("bert.embeddings", &ed, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    ds_encoder_desc ld = {
        .hidden = d.hidden_size,
        .heads = d.num_attention_heads,
        .intermediate = d.intermediate_size,
        .hidden_dropout = d.hidden_dropout_prob,
        .attn_dropout = d.attention_probs_dropout_prob,
        .ln_eps = d.layer_norm_eps,
        .init_std = sd,
    };
    for (int i = 0; i < d.num_hidden_layers && st == DS_OK; i++) {
        char name[64];
        snprintf(name, sizeof name, "bert.encoder.layer.%d", i);
        /* the pooler reads only [CLS]: the last layer computes that row alone */
        ld.cls_only = i == d.num_hidden_layers - 1;
        st = ds_mod_encoder_layer_create(name, &ld, &m);
        if (st == DS_OK) st = ds_model_add_module(model, m);
    }
    if (st == DS_OK)
        st = ds_mod_bert_pooler_create("bert.pooler", d.hidden_size, d.hidden_dropout_prob, sd,
                                       &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st == DS_OK)
        st = ds_mod_linear_create("classifier", "classifier", d.hidden_size, d.n_classes,
                                  DS_ACT_NONE, DS_LINEAR_INIT_HF, sd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    ds_xent_desc xd = {.n_classes = d.n_classes, .weights = "weights"};
    if (st == DS_OK) st = ds_mod_xent_create("loss", &xd, &m);
    if (st == DS_OK) st = ds_model_add_module(model, m);
    if (st != DS_OK) {
        ds_model_destroy(model);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    model->n_classes = d.n_classes;
    model->vocab_size = d.vocab_size;
    model->hidden_size = d.hidden_size;
    *out = model;
    return DS_OK;
}
