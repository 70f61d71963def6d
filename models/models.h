/* The bundled models, built from the modules in models/.
 *
 *   mlp   token embeddings -> masked mean pool -> [linear -> relu] x n -> linear -> xent
 *   bert  BertForSequenceClassification: embeddings (word + position + type,
 *         layer norm, dropout) -> encoder layers -> tanh pooler over [CLS] ->
 *         dropout -> classifier -> cross-entropy
 *   gpt2  GPT2LMHeadModel: token + position embeddings -> pre-LN causal blocks ->
 *         final layer norm -> tied output projection -> causal cross-entropy
 *
 * Parameter names are Hugging Face's, so weights round-trip with
 * transformers. They are built from the public module API
 * (engine/core/module.h) exactly as a user's model would be.
 *
 * The classifiers' inputs (batch tensors / dataset columns):
 *   input_ids       int32 [B, T]  token ids, padded
 *   attention_mask  fp32  [B, T]  1 for a real token, 0 for padding (optional: all 1)
 *   token_type_ids  int32 [B, T]  bert only, optional (all 0)
 *   labels          int32 [B]     target: class index (DS_IGNORE_INDEX skips the row)
 *   weights         fp32  [B]     optional target: the row's loss weight, e.g.
 *                                 class_weight[label] (CrossEntropyLoss(weight)) */
#ifndef DS_MODELS_MODELS_H
#define DS_MODELS_MODELS_H

#include <stdbool.h>

#include "engine/core/module.h"
#include "engine/core/status.h"
#include "engine/data/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dataset in the classifiers' layout: n rows of input_ids [seq_len],
 * attention_mask [seq_len] and labels, zeroed, with the class names copied
 * (NULL: "0", "1", ...). Fill row i's tokens and set its mask to 1 for its
 * real tokens. Owned by the caller (ds_dataset_destroy). */
ds_status ds_cls_dataset_create(size_t n, int seq_len, int n_classes,
                                const char *const *class_names, ds_dataset **out);
/* Add (or overwrite) the "weights" column: weights[i] = class_weights[label
 * of row i], for a class-weighted loss. Errors: DS_ERR_INVALID_ARG (no
 * labels column, a label outside [0, n_classes), a weight not finite or < 0). */
ds_status ds_cls_dataset_set_class_weights(ds_dataset *d, const float *class_weights);

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
 *   "loss"        xent        (no parameters; per-row weights from the batch's "weights")
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
 *   "loss"                     cross-entropy, per-row weights from the batch's "weights"
 * Initialised as HF's _init_weights: Linear and Embedding weights
 * N(0, initializer_range), biases 0, LayerNorm weight 1 and bias 0, and the
 * pad_token_id row of the word embeddings zero (it never gets a gradient).
 * Errors: DS_ERR_INVALID_ARG naming the field and its value. */
ds_status ds_bert_create(const ds_bert_desc *d, ds_model **out);

/* The fields of a Hugging Face GPT2Config that shape the model. Zero means
 * the default where one is given (GPT-2 small's). */
typedef struct ds_gpt2_desc {
    int vocab_size;             /* 50257 */
    int n_positions;            /* 1024: learned position table rows */
    int n_embd;                 /* 768 */
    int n_layer;                /* 12 */
    int n_head;                 /* 12 */
    int n_inner;                /* 4 * n_embd when 0 */
    float resid_pdrop;          /* dropout after attention and MLP projections */
    float embd_pdrop;           /* dropout after token + position embeddings */
    float attn_pdrop;           /* dropout on attention probabilities */
    float layer_norm_epsilon;   /* 1e-5 when 0 */
    float initializer_range;    /* 0.02 when 0 */
    int max_seq_len;            /* longest sequence the engine plans for; n_positions when 0 */
    bool token_ids_set;         /* bos/eos_token_id below are the tokenizer's (else they
                                   are unknown: null in config.json) */
    int bos_token_id, eos_token_id; /* e.g. the end-of-text id for both, as GPT-2 */
    bool dropout_set;           /* the three pdrop fields are meant as given, zeros
                                   included; false: 0.1 each when all three are 0 */
} ds_gpt2_desc;

/* New GPT2LMHeadModel (activation "gelu_new", the tanh approximation;
 * learned absolute positions; pre-LayerNorm blocks; causal self-attention
 * that also skips padded keys; the output projection tied to the token
 * embedding). Inputs:
 *   input_ids       int32 [B, T]
 *   attention_mask  fp32  [B, T]  optional: 1 real, 0 padding (padded keys skipped)
 *   labels          int32 [B, T]  target: usually input_ids with DS_IGNORE_INDEX at
 *                                 padding and prompt positions; position t is scored
 *                                 on labels[t + 1], as Hugging Face shifts them
 * Modules and Hugging Face parameter names:
 *   "transformer.embed"   transformer.wte.weight [V, E], transformer.wpe.weight [P, E]
 *   "transformer.h.i"     transformer.h.i.ln_1.{weight,bias}, .attn.c_attn.{weight [E, 3E],bias},
 *                         .attn.c_proj.{weight [E, E],bias}, .ln_2.*, .mlp.c_fc.{weight [E, I],
 *                         bias}, .mlp.c_proj.{weight [I, E],bias} (Conv1D layout [in, out];
 *                         checkpointable)
 *   "lm_head"             transformer.ln_f.{weight,bias}; lm_head.weight tied to
 *                         transformer.wte.weight (stored once, under that name)
 *   "loss"                causal cross-entropy over the vocabulary
 * ds_predict gives the logits [B, T, V]. Trained on rows of T tokens, the
 * last position is never scored (nothing follows it), so its position
 * embedding learns nothing: sample with at most T - 1 tokens of context.
 * Initialised as HF's _init_weights:
 * N(0, initializer_range) weights and embeddings, zero biases, LayerNorm 1 and
 * 0, and each c_proj weight N(0, initializer_range / sqrt(2 n_layer)).
 * Errors: DS_ERR_INVALID_ARG naming the field and its value. */
ds_status ds_gpt2_create(const ds_gpt2_desc *d, ds_model **out);

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_MODELS_H */
