/* The directory train_cls --save-dir writes and predict reads:
 *
 *   DIR/config.json        Hugging Face style: for BERT a BertConfig with
 *                          "architectures": ["BertForSequenceClassification"],
 *                          id2label / label2id; plus a "zero_engine" object
 *                          (tokenizer kind, max_seq_len, mlp shape)
 *   DIR/model.safetensors  every parameter in fp32 under its Hugging Face name
 *   DIR/vocab.txt          the tokenizer's vocabulary, one token per line
 *   DIR/tokenizer_config.json  the WordPiece tokenizer's options (do_lower_case,
 *                          strip_accents, tokenize_chinese_chars), as
 *                          BertTokenizer reads them; not for the char
 *                          tokenizer, which is the engine's own (one token
 *                          per character, no HF equivalent)
 *
 * so BertForSequenceClassification.from_pretrained(DIR) and, for WordPiece,
 * AutoTokenizer.from_pretrained(DIR) load it as is. */
#ifndef DS_MODELS_SAVED_MODEL_H
#define DS_MODELS_SAVED_MODEL_H

#include "engine/core/status.h"
#include "models/models.h"

typedef struct ds_saved_model {
    char kind[16];        /* "bert" | "mlp" */
    ds_bert_desc bert;    /* kind "bert" */
    ds_mlp_desc mlp;      /* kind "mlp" */
    int n_classes;
    char **class_names;   /* [n_classes], owned */
    char tokenizer[16];   /* "char" | "wordpiece" */
    int do_lower_case;    /* wordpiece */
    int strip_accents;    /* wordpiece: -1 as do_lower_case, 0 no, 1 yes */
    int tokenize_chinese_chars; /* wordpiece */
    int max_seq_len;
} ds_saved_model;

/* Write DIR/config.json and, for WordPiece, DIR/tokenizer_config.json (DIR
 * is created if missing; a tokenizer_config.json left by an earlier save
 * of another tokenizer goes). */
ds_status ds_saved_model_write(const char *dir, const ds_saved_model *m);
/* Read DIR/config.json. Errors name the file and the key. */
ds_status ds_saved_model_read(const char *dir, ds_saved_model *out);
void ds_saved_model_free(ds_saved_model *m);

/* Build the model the config describes (owned by the caller). */
ds_status ds_saved_model_build(const ds_saved_model *m, ds_model **out);

#endif /* DS_MODELS_SAVED_MODEL_H */
