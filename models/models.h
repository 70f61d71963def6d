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
 * passed to ds_initialize). Modules and parameter names:
 *   "embeddings"  embed_pool  embeddings.word_embeddings.weight [vocab, embed_dim]
 *   "mlp.i"       linear+relu mlp.i.weight [hidden, in], mlp.i.bias [hidden]
 *   "classifier"  linear      classifier.weight [n_classes, hidden], .bias
 *   "loss"        xent        (no parameters)
 * Initialised as torch.nn would (Embedding N(0, 1); Linear U(+-1/sqrt(in))).
 * Errors: DS_ERR_INVALID_ARG naming the field and its value. */
ds_status ds_mlp_create(const ds_mlp_desc *d, ds_model **out);

/* The fields of a Hugging Face BertConfig that shape the model. Zero means
 * the default where one is given. */
typedef struct ds_bert_desc {
    int vocab_size;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int intermediate_size;      /* default 4 * hidden_size when 0 */
    int max_position_embeddings;
    int type_vocab_size;        /* default 2 when 0 */
    float hidden_dropout_prob;  /* also the classifier dropout, as HF when
                                   classifier_dropout is None */
    float attention_probs_dropout_prob;
    float layer_norm_eps;       /* default 1e-12 when 0 */
    float initializer_range;    /* default 0.02 when 0 */
    int n_classes;
    int max_seq_len;            /* longest batch the engine will plan for;
                                   default max_position_embeddings when 0 */
    int pad_token_id;           /* word embedding row that gets no gradient
                                   (nn.Embedding padding_idx); HF's default 0 */
} ds_bert_desc;

/* New BertForSequenceClassification (hidden_act "gelu", absolute
 * positions). Modules and Hugging Face parameter names:
 *   "bert.embeddings"          bert.embeddings.{word,position,token_type}_embeddings.weight,
 *                              bert.embeddings.LayerNorm.{weight,bias}
 *   "bert.encoder.layer.i"     bert.encoder.layer.i.attention.self.{query,key,value}.{weight,bias},
 *                              ...attention.output.dense.*, ...attention.output.LayerNorm.*,
 *                              ...intermediate.dense.*, ...output.dense.*, ...output.LayerNorm.*
 *                              (checkpointable: activation checkpointing may recompute it)
 *   "bert.pooler"              bert.pooler.dense.{weight,bias} (+ the classifier dropout)
 *   "classifier"               classifier.{weight,bias}
 *   "loss"                     cross-entropy, class weights from batch->class_weights
 * Initialised as HF's _init_weights: Linear and Embedding weights
 * N(0, initializer_range), biases 0, LayerNorm weight 1 and bias 0, and the
 * pad_token_id row of the word embeddings zero (it never gets a gradient).
 * Errors: DS_ERR_INVALID_ARG naming the field and its value. */
ds_status ds_bert_create(const ds_bert_desc *d, ds_model **out);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_MODELS_H */
