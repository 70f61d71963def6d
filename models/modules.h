/* Internal to models/: the module constructors the bundled models are built
 * from, and the small helpers they share (module allocation, parameter
 * naming, workspace layout, the GEMM calls of a linear layer).
 *
 * Every module follows engine/core/module.h, as a user's would: it declares
 * its parameters and never allocates; forward/backward receive everything in
 * a ds_module_ctx; parameter gradients are ACCUMULATED; dx is written;
 * saved/scratch sizes are exact functions of (B, T). Each module's forward
 * and backward lay out their saved and scratch areas with the same ds_carve
 * walk that computes the sizes, so the two cannot disagree. Batch tensors go
 * by Hugging Face's names: input_ids, attention_mask, token_type_ids,
 * labels. */
#ifndef DS_MODELS_MODULES_H
#define DS_MODELS_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/nn.h"
#include "engine/core/module.h"
#include "models/models.h" /* ds_gpt2_desc */

/* ---- the bundled classifiers' inputs ----
 * input_ids int32 [B, T], attention_mask fp32 [B, T] (optional: all ones),
 * token_type_ids int32 [B, T] (optional, when type_vocab > 0), labels int32
 * [B] (target), weights fp32 [B] (optional target: per-row loss weights); T
 * up to max_seq_len. The ids' ranges declared: [0, vocab), [0, type_vocab),
 * labels [0, n_classes) or DS_IGNORE_INDEX. */
ds_status ds_cls_model_inputs(ds_model *model, int max_seq_len, int vocab, int type_vocab,
                              int n_classes);

/* ---- linear layer pieces (PyTorch layout: W [out, in], y = x W^T + b) ----
 * x and dx have row stride ldx / lddx (the [CLS] rows of [B, T, H] are a
 * strided view). */

/* y[N, out] = x[N, in] W^T + beta * y */
ds_status ds_linear_fwd(ds_backend *be, float *y, const float *x, int ldx, const float *W, int N,
                        int in, int out, float beta);
/* y[N, out] = x[N, in] W^T + b (b NULL: no bias), through the backend's
 * gemm_bias slot: the bias joins the product's sums as if y held b's rows
 * and the GEMM added to them (beta 1), so no pass over y after the GEMM
 * adds the bias. On OpenBLAS the slot fills y with the rows first, in
 * place of its beta 0's own clearing pass: BERT-mini's three Q, K, V
 * projections of a layer in 0.93-0.99 of the time (bench/RESULTS.md, "The
 * bias in the GEMM"); cpu's bf16 dot product starts its sums from the bias,
 * with no pass at all. The bits are those of the GEMM then the bias while
 * the GEMM sums k in one block (OpenBLAS's SkylakeX kernels: in <= 384,
 * the dot product: in <= 256; bench_kernels counts the differing
 * elements); past that the bias joins the first block's sum instead of the
 * last, within the same rounding bound (tests/unit/test_linear_bias.c). */
ds_status ds_linear_bias_fwd(ds_backend *be, float *y, const float *x, int ldx, const float *W,
                             const float *b, int N, int in, int out);
/* dW[out, in] += dy[N, out]^T x[N, in] */
ds_status ds_linear_bwd_w(ds_backend *be, float *dW, const float *dy, const float *x, int ldx,
                          int N, int in, int out);
/* dx[N, in] = dy[N, out] W + beta * dx */
ds_status ds_linear_bwd_x(ds_backend *be, float *dx, int lddx, const float *dy, const float *W,
                          int N, int in, int out, float beta);

/* The three GEMMs above for N rows, added to a plan (ds_module_ops.plan_gemms). */
void ds_linear_plan_gemms(ds_gemm_plan *plan, int N, int in, int out);

/* The per-head products of attention over nb sequences of T keys, Tq of
 * them queried, heads hd wide (a call per head, nb products each):
 * forward S = Q K^T and C = P V, backward dP = dC V^T, dV = P^T dC,
 * dQ = dS K and dK = dS^T Q. */
void ds_attn_plan_gemms(ds_gemm_plan *plan, int nb, int Tq, int T, int hd);

/* ---- attention in chunks of the batch ----
 * A backend with chunk_bytes (cpu) runs a layer's attention a few samples
 * at a time, so that a chunk's probabilities stay in its cores' caches from
 * the scores through the softmax to the context: as many consecutive
 * samples as chunk_bytes of probabilities hold, at least one per thread
 * (each thread takes whole products). The values do not depend on the
 * chunks: each product and softmax row is computed alone, with the dropout
 * stream and the mask rows of the whole batch. With chunk_bytes 0 (cuda)
 * the whole batch is one chunk. */

/* Samples per chunk of a batch of B samples of nh heads, Tq queries and T
 * keys (the last chunk may hold fewer). */
int ds_attn_chunk_rows(const ds_backend *be, int B, int nh, int Tq, int T);
/* The dropout keep mask's words of sample `first` on (nh Tq rows of T keys
 * per sample, nn.h), or NULL without a mask. */
uint32_t *ds_attn_keep_rows(uint32_t *keep, int nh, int Tq, int T, int first);

/* ---- modules ---- */

/* How a linear layer's weights start. */
typedef enum ds_linear_init {
    DS_LINEAR_INIT_TORCH = 0, /* nn.Linear: W, b ~ U(-1/sqrt(in), 1/sqrt(in)) */
    DS_LINEAR_INIT_HF,        /* BERT: W ~ N(0, std), b = 0 */
} ds_linear_init;

/* "linear": [B, in] -> act([B, in] W^T + b) [B, out]; params
 * "<param_prefix>.weight", "<param_prefix>.bias". */
ds_status ds_mod_linear_create(const char *name, const char *param_prefix, int in, int out,
                               ds_act act, ds_linear_init init, float std, ds_module **out_m);

/* "embed_pool": batch input_ids -> mean of their embeddings over the
 * attention_mask [B, E];
 * param "<param_prefix>.weight" [vocab, E] ~ N(0, 1) as nn.Embedding. */
ds_status ds_mod_embed_pool_create(const char *name, const char *param_prefix, int vocab, int E,
                                   ds_module **out_m);

/* "xent": cross-entropy over C classes (models/mod_xent.c). */
typedef struct ds_xent_desc {
    int n_classes;
    const char *labels;  /* int32 target input: [B], or [B, T] when per_token (default
                            "labels") */
    const char *weights; /* optional fp32 per-row weights input, [B] or [B, T]; NULL: none */
    bool per_token;      /* logits [B, T, C], one label per position */
    bool shift;          /* causal LM: position t is scored on label t + 1 */
} ds_xent_desc;
ds_status ds_mod_xent_create(const char *name, const ds_xent_desc *d, ds_module **out_m);

/* "bert_embeddings": batch -> dropout(LayerNorm(word + position + type)),
 * [B, T, H]. Params under "<name>.": word_embeddings.weight [V, H],
 * position_embeddings.weight [P, H], token_type_embeddings.weight [TV, H],
 * LayerNorm.weight, LayerNorm.bias. Rows of padding_idx (-1: none) get no
 * gradient, as nn.Embedding(padding_idx=...). */
typedef struct ds_bert_embed_desc {
    int vocab, hidden, max_positions, type_vocab, padding_idx;
    float dropout, ln_eps, init_std;
} ds_bert_embed_desc;
ds_status ds_mod_bert_embeddings_create(const char *name, const ds_bert_embed_desc *d,
                                        ds_module **out_m);

/* "encoder_layer": one post-LN BERT layer, [B, T, H] -> [B, T, H], with the
 * padding mask from the batch's "attention_mask". Params under "<name>." with Hugging Face's
 * names (attention.self.query.weight, ..., output.LayerNorm.bias).
 *
 * cls_only: compute the output of position 0 only (the other output rows are
 * written as zeros, and their incoming gradient is ignored). Keys and values
 * still come from every position, so that row is exactly what the full layer
 * gives. This is the last layer of a sequence classifier, whose pooler reads
 * only [CLS]: its queries, attention rows, output projection, feed-forward
 * and layer norms shrink from B T rows to B (a fifth of a 4-layer BERT's
 * matmuls at T = 128), with the same loss and gradients. */
typedef struct ds_encoder_desc {
    int hidden, heads, intermediate;
    float hidden_dropout, attn_dropout, ln_eps, init_std;
    bool cls_only;
} ds_encoder_desc;
ds_status ds_mod_encoder_layer_create(const char *name, const ds_encoder_desc *d,
                                      ds_module **out_m);

/* "bert_pooler": [B, T, H] -> dropout(tanh([CLS] W^T + b)) [B, H]; params
 * "<name>.dense.weight", "<name>.dense.bias". The dropout is the one
 * BertForSequenceClassification applies before its classifier. */
ds_status ds_mod_bert_pooler_create(const char *name, int hidden, float dropout, float init_std,
                                    ds_module **out_m);

/* ---- GPT-2 (GPT2LMHeadModel; models/mod_gpt2_*.c, assembled in gpt2.c) ----
 * Hugging Face's Conv1D layout throughout: weights [in, out], y = x W + b. */

/* *out = *in with models.h's defaults filled in (every field then explicit,
 * dropout_set true), or DS_ERR_INVALID_ARG naming the field and its value:
 * what ds_gpt2_create builds from, and what a config writer writes. */
ds_status ds_gpt2_resolve(const ds_gpt2_desc *in, ds_gpt2_desc *out);

/* "gpt2_embed": batch input_ids -> dropout(wte[ids] + wpe[0..T)) [B, T, E].
 * Params "<param_prefix>.wte.weight" [vocab, n_embd], "<param_prefix>.wpe.weight"
 * [n_positions, n_embd], both N(0, init_std). */
typedef struct ds_gpt2_embed_desc {
    int vocab, n_embd, n_positions;
    float embd_pdrop, init_std;
} ds_gpt2_embed_desc;
ds_status ds_mod_gpt2_embed_create(const char *name, const char *param_prefix,
                                   const ds_gpt2_embed_desc *d, ds_module **out_m);

/* "gpt2_block": one pre-LN GPT2Block, [B, T, E] -> [B, T, E]:
 *   x1 = x  + dropout(attn(ln_1(x)) c_proj)       causal self-attention that
 *   y  = x1 + dropout(gelu_new(ln_2(x1) c_fc) c_proj)   also skips padded keys
 * with the optional batch "attention_mask" (fp32 [B, T], 1 real, 0 padding).
 * Params under "<name>." with Hugging Face's names: ln_1.{weight,bias},
 * attn.c_attn.{weight [E, 3E], bias [3E]}, attn.c_proj.{weight [E, E], bias},
 * ln_2.*, mlp.c_fc.{weight [E, I], bias [I]}, mlp.c_proj.{weight [I, E], bias}.
 * Init: weights N(0, init_std), both c_proj weights N(0, proj_std), biases 0,
 * layer norms 1 and 0. Checkpointable (its forward is a pure function of
 * the parameters, x, the batch and ctx->seed). */
typedef struct ds_gpt2_block_desc {
    int n_embd, n_head, n_inner;
    float resid_pdrop, attn_pdrop, ln_eps, init_std, proj_std;
} ds_gpt2_block_desc;
ds_status ds_mod_gpt2_block_create(const char *name, const ds_gpt2_block_desc *d,
                                   ds_module **out_m);

/* "gpt2_lm_head": [B, T, E] -> logits [B, T, vocab] = ln_f(x) wte^T. Owns
 * "<ln_prefix>.weight", "<ln_prefix>.bias" (the final layer norm, 1 and 0)
 * and ties `alias` [vocab, E] to the earlier module's parameter `tied_to`
 * (the token embedding): it reads ctx->tied[0] and accumulates its gradient
 * into ctx->tied_grads[0]. */
typedef struct ds_gpt2_head_desc {
    int vocab, n_embd;
    float ln_eps;
    const char *ln_prefix; /* "transformer.ln_f" */
    const char *alias;     /* "lm_head.weight" */
    const char *tied_to;   /* "transformer.wte.weight" */
} ds_gpt2_head_desc;
ds_status ds_mod_gpt2_head_create(const char *name, const ds_gpt2_head_desc *d,
                                  ds_module **out_m);

#endif /* DS_MODELS_MODULES_H */
