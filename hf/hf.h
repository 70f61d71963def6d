/* Hugging Face interoperability: a BERT config.json into ds_bert_desc, a
 * GPT-2 config.json into and out of ds_gpt2_desc, and safetensors
 * checkpoints onto a model's parameters by name.
 *
 *     ds_bert_desc d;
 *     DS_TRY(ds_hf_bert_config_read("MiniLM/config.json", 6, &d));
 *     d.max_seq_len = 128;                       // what the trainer will feed
 *     ds_model *m;
 *     DS_TRY(ds_bert_create(&d, &m));
 *     ... ds_initialize(.model = m) -> engine e ...
 *     ds_hf_load_report rep;
 *     DS_TRY(ds_hf_load_weights(ds_get_model(e), "MiniLM", set_into_engine, e, &rep));
 *     ds_hf_load_report_print(&rep, stderr);    // "newly initialised: classifier.weight, ..."
 *     ds_hf_load_report_free(&rep);
 *
 * where set_into_engine(e, name, data, numel) calls ds_set_param(e, ...).
 *
 * Names. The model's parameters carry BertForSequenceClassification's
 * names ("bert.encoder.layer.0.attention.self.query.weight", "classifier.bias").
 * Checkpoints of BertModel and sentence-transformers (all-MiniLM-L6-v2) name
 * the same tensors without "bert." ("embeddings.word_embeddings.weight");
 * both are accepted, as are TensorFlow-era "LayerNorm.gamma"/".beta" for
 * ".weight"/".bias" (transformers renames them the same way).
 *
 * GPT-2 likewise: GPT2LMHeadModel's "transformer.h.0.attn.c_attn.weight" or
 * the original gpt2 checkpoints' "h.0.attn.c_attn.weight", "wte.weight"
 * (GPT2Model's names). "lm_head.weight", when present, is the alias of the
 * tied transformer.wte.weight: it loads wte when the checkpoint has no
 * wte of its own and is otherwise ignored (counted). The causal-mask
 * buffers of older checkpoints ("h.0.attn.bias", "h.0.attn.masked_bias")
 * are skipped. Conv1D weights are stored [in, out] by transformers and
 * taken as they are. */
#ifndef DS_MODELS_HF_H
#define DS_MODELS_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/core/module.h"
#include "engine/core/status.h"
#include "models/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a Hugging Face BERT config.json into *out (all fields set).
 *
 * Required keys (errors name the file and the key): vocab_size,
 * hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
 * max_position_embeddings. Optional, with BertConfig's defaults:
 * type_vocab_size (2), hidden_dropout_prob (0.1),
 * attention_probs_dropout_prob (0.1), layer_norm_eps (1e-12),
 * initializer_range (0.02), hidden_act ("gelu"), pad_token_id (0; null
 * also 0). classifier_dropout must be null or equal hidden_dropout_prob
 * (the engine's classifier dropout is hidden_dropout_prob, as HF's when
 * classifier_dropout is null).
 *
 * n_classes > 0 sets out->n_classes; n_classes == 0 takes it from the
 * file's "id2label" (its size) or "num_labels", else BertConfig's default 2.
 * out->max_seq_len = max_position_embeddings (lower it to what batches need).
 *
 * Errors: DS_ERR_IO when unreadable; DS_ERR_CONFIG "<file>: <key>: ..." for
 * invalid JSON, a missing required key, a wrong type or range, hidden_size
 * not divisible by num_attention_heads; DS_ERR_UNSUPPORTED "<file>:
 * <key>: ..." for hidden_act other than "gelu" (the erf GELU the engine
 * implements), model_type other than "bert", position_embedding_type other
 * than "absolute", is_decoder or add_cross_attention true. */
/* v as the double with the fewest significant decimal digits that reads
 * back as the same float (0.1f as 0.1), as Python writes a config's values:
 * a config writer's json_real, dumped with JSON_REAL_PRECISION(9). */
double ds_hf_shortest(float v);

ds_status ds_hf_bert_config_read(const char *config_json_path, int n_classes, ds_bert_desc *out);

/* Read a Hugging Face GPT-2 config.json (GPT2Config, as save_pretrained
 * writes it) into *out (all fields set, dropout_set true: the file's
 * dropouts are meant as given, zeros included).
 *
 * Required keys (errors name the file and the key): vocab_size, n_embd,
 * n_layer, n_head, n_positions. Optional, with GPT2Config's defaults:
 * n_inner (null or absent: 4 n_embd, stored as 0), resid_pdrop, embd_pdrop,
 * attn_pdrop (0.1 each), layer_norm_epsilon (1e-5), initializer_range
 * (0.02), activation_function ("gelu_new"). out->max_seq_len = n_positions
 * (lower it to what batches need). Keys that do not shape the model
 * (architectures, bos/eos_token_id, n_ctx, summary_*, use_cache, ...) are
 * not read.
 *
 * Errors: DS_ERR_IO when unreadable; DS_ERR_CONFIG "<file>: <key>: ..." for
 * invalid JSON, a missing required key, a wrong type or range, n_embd not
 * divisible by n_head; DS_ERR_UNSUPPORTED "<file>: <key>: ..." for
 * model_type other than "gpt2", activation_function other than "gelu_new"
 * or "gelu_pytorch_tanh" (the same tanh approximation), tie_word_embeddings
 * false (the engine's output projection is the token embedding),
 * scale_attn_weights false, scale_attn_by_inverse_layer_idx or
 * add_cross_attention true. reorder_and_upcast_attn is accepted either way
 * (it changes only how fp16 rounds; the engine computes attention in fp32). */
ds_status ds_hf_gpt2_config_read(const char *path, ds_gpt2_desc *out);

/* Write *d (models.h's defaults filled in first) as a Hugging Face
 * config.json at `path`, so GPT2LMHeadModel.from_pretrained(folder) builds
 * the same model: model_type "gpt2", architectures ["GPT2LMHeadModel"],
 * activation_function "gelu_new", tie_word_embeddings true, the shape, the
 * dropouts, layer_norm_epsilon and initializer_range (floats in their
 * shortest decimal form, which read back to the same float), n_inner null
 * when it is the default 4 n_embd, bos/eos_token_id the descriptor's when
 * token_ids_set (else null: the tokenizer is unknown). The folder must exist; the file is written
 * atomically (path.tmp, fsync, rename), so a reader never sees half of it.
 * Errors: DS_ERR_INVALID_ARG (an invalid descriptor, naming the field),
 * DS_ERR_IO naming the file, DS_ERR_OOM. */
ds_status ds_hf_gpt2_config_write(const char *path, const ds_gpt2_desc *d);

/* Installs one parameter: `data` holds `numel` fp32 values in the model's
 * layout (row-major, the shape the model declared). Returns DS_OK or a
 * failure, which stops the load and is passed up. */
typedef ds_status (*ds_hf_set_fn)(void *user, const char *name, const float *data, size_t numel);

/* What a load found, transformers-style. Strings are owned by the report. */
typedef struct ds_hf_load_report {
    int n_loaded;          /* parameters installed through `set` */
    int n_missing;         /* model parameters absent from the checkpoint: */
    char **missing;        /*   they keep their initial values ("newly initialised") */
    int n_unexpected;      /* checkpoint tensors with no model parameter: */
    char **unexpected;     /*   ignored (a pooler or an MLM head the model lacks) */
    int n_mismatched;      /* "NAME: checkpoint [a, b] vs model [c, d]"; the load */
    char **mismatched;     /*   fails with DS_ERR_DATA when there is any */
    int n_ignored_buffers; /* buffers, not parameters: "*.position_ids" (BERT),
                              "*.attn.bias", "*.attn.masked_bias" (GPT-2's causal mask) */
    int n_ignored_aliases; /* tie aliases ("lm_head.weight") of a parameter the
                              checkpoint also holds under its own name */
    bool prefix_added;     /* checkpoint names lacked the base-model prefix: */
    char prefix[16];       /*   this one ("bert.", "transformer.") */
    int n_files;           /* safetensors files read (shards) */
    char *source;          /* the file read: `path` itself, or the model.safetensors / */
                           /*   index .json found in folder `path` (errors name it too) */
} ds_hf_load_report;

/* Load a safetensors checkpoint onto m's parameters through `set`.
 *
 * `path` is a folder (holding model.safetensors, or else the sharded
 * model.safetensors.index.json and its shards: transformers' order), an
 * index .json file, or one .safetensors file. F32, F16, BF16 and F64 tensors are converted to fp32;
 * one tensor at a time is held in memory.
 *
 * Every name and shape is checked before anything is installed, so a failed
 * load leaves the model untouched (unless `set` itself fails midway).
 * *rep is filled on success and on DS_ERR_DATA (free it in both cases; it is
 * zeroed on the other errors, where freeing is harmless too).
 *
 * Errors: DS_ERR_IO "<path>: no model.safetensors or
 * model.safetensors.index.json" for a folder without a checkpoint (and
 * DS_ERR_UNSUPPORTED when it holds only pytorch_model.bin, a pickle);
 * DS_ERR_CORRUPT from the safetensors reader, or when an index names a
 * tensor its file lacks; DS_ERR_DATA listing every mis-shaped tensor with
 * both shapes, a non-float tensor for a parameter, or two checkpoint tensors
 * mapping onto one parameter; whatever `set` returns. */
ds_status ds_hf_load_weights(const ds_model *m, const char *path, ds_hf_set_fn set, void *user,
                             ds_hf_load_report *rep);

/* The report as transformers prints it: loaded count, then "newly
 * initialised" (missing), "unused" (unexpected), mis-shaped names. */
void ds_hf_load_report_print(const ds_hf_load_report *rep, FILE *fp);
void ds_hf_load_report_free(ds_hf_load_report *rep); /* safe on a zeroed report */

#ifdef __cplusplus
}
#endif
#endif /* DS_MODELS_HF_H */
