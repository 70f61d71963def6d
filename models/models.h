/* The bundled models, built from the modules in models/.
 *
 *   mlp   token embeddings -> masked mean pool -> [linear -> relu] x n -> linear -> xent
 *   bert  BertForSequenceClassification: embeddings (word + position + type,
 *         layer norm, dropout) -> encoder layers -> tanh pooler over [CLS] ->
 *         dropout -> classifier -> cross-entropy
 *
 * Parameter names are Hugging Face's, so weights round-trip with
 * transformers. */
#ifndef DS_MODELS_MODELS_H
#define DS_MODELS_MODELS_H

#include "engine/core/module.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_mlp_desc {
    int vocab_size;
    int max_seq_len;
    int embed_dim;   /* token embedding width */
    int hidden_dim;  /* width of the hidden layers */
    int n_hidden;    /* hidden layers (linear + relu); default 1 when 0 */
    int n_classes;
} ds_mlp_desc;

/* New MLP classifier; *out is owned by the caller (or by the engine once
 * passed to ds_initialize). */
ds_status ds_mlp_create(const ds_mlp_desc *d, ds_model **out);

typedef struct ds_bert_desc {
    int vocab_size;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int intermediate_size;
    int max_position_embeddings;
    int type_vocab_size;        /* default 2 when 0 */
    float hidden_dropout_prob;
    float attention_probs_dropout_prob;
    float layer_norm_eps;       /* default 1e-12 when 0 */
    float initializer_range;    /* default 0.02 when 0 */
    int n_classes;
    int max_seq_len;            /* longest batch the engine will plan for */
} ds_bert_desc;

ds_status ds_bert_create(const ds_bert_desc *d, ds_model **out);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_MODELS_H */
