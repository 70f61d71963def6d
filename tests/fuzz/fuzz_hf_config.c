/* Hugging Face config.json readers (hf/hf_config.c: BERT and GPT-2) and
 * the saved classifier's config.json that predict reads
 * (hf/saved_model.c).
 *
 * Input: one flags byte, then the file (mutated with fz_mutate_json, which
 * also puts the int and int64 limits where the file has numbers).
 *   bits 0-1  0: BERT (ds_hf_bert_config_read), n_classes from the file
 *             1: BERT with n_classes 3
 *             2: GPT-2 (ds_hf_gpt2_config_read); a config that reads must
 *                resolve (ds_gpt2_resolve, what ds_gpt2_create builds from)
 *                or be refused with a status, and one that resolves is
 *                written with ds_hf_gpt2_config_write and read back, which
 *                hf.h promises builds the same model
 *             3: a train_cls --save-dir folder's config.json
 *                (ds_saved_model_read) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "models/modules.h"
#include "hf/saved_model.h"
#include "tests/fuzz/fuzz_util.h"

/* Field by field: the structs' padding is not part of the model. */
static int same_gpt2(const ds_gpt2_desc *a, const ds_gpt2_desc *b) {
    return a->vocab_size == b->vocab_size && a->n_positions == b->n_positions &&
           a->n_embd == b->n_embd && a->n_layer == b->n_layer && a->n_head == b->n_head &&
           a->n_inner == b->n_inner && a->resid_pdrop == b->resid_pdrop &&
           a->embd_pdrop == b->embd_pdrop && a->attn_pdrop == b->attn_pdrop &&
           a->layer_norm_epsilon == b->layer_norm_epsilon &&
           a->initializer_range == b->initializer_range && a->max_seq_len == b->max_seq_len &&
           a->token_ids_set == b->token_ids_set &&
           (!a->token_ids_set ||
            (a->bos_token_id == b->bos_token_id && a->eos_token_id == b->eos_token_id)) &&
           a->dropout_set == b->dropout_set;
}

static void gpt2(const char *path) {
    ds_gpt2_desc d, r, back, rback;
    fz_begin();
    if (fz_check(ds_hf_gpt2_config_read(path, &d), "ds_hf_gpt2_config_read") != DS_OK) return;
    fz_begin();
    if (fz_check(ds_gpt2_resolve(&d, &r), "ds_gpt2_resolve") != DS_OK) return;
    char out[512];
    fz_write_to(out, sizeof out, "written_config.json", "", 0);
    fz_begin();
    if (fz_check(ds_hf_gpt2_config_write(out, &r), "ds_hf_gpt2_config_write") != DS_OK)
        fz_fail("a resolved GPT-2 config could not be written: %s", ds_last_error());
    fz_begin();
    if (fz_check(ds_hf_gpt2_config_read(out, &back), "ds_hf_gpt2_config_read(written)") != DS_OK)
        fz_fail("the config ds_hf_gpt2_config_write wrote does not read: %s", ds_last_error());
    fz_begin();
    if (fz_check(ds_gpt2_resolve(&back, &rback), "ds_gpt2_resolve(written)") != DS_OK)
        fz_fail("the config ds_hf_gpt2_config_write wrote does not resolve: %s",
                ds_last_error());
    if (!same_gpt2(&r, &rback))
        fz_fail("written and read back, the GPT-2 config describes another model");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0] & 3;
    const char *path = fz_write("config.json", data + 1, size - 1);
    if (mode <= 1) {
        ds_bert_desc d;
        fz_begin();
        if (fz_check(ds_hf_bert_config_read(path, mode == 1 ? 3 : 0, &d),
                     "ds_hf_bert_config_read") == DS_OK &&
            (d.n_classes < 1 || d.hidden_size % d.num_attention_heads != 0))
            fz_fail("BERT config read with %d classes, hidden %d, heads %d", d.n_classes,
                    d.hidden_size, d.num_attention_heads);
    } else if (mode == 2) {
        gpt2(path);
    } else {
        ds_saved_model m;
        fz_begin();
        if (fz_check(ds_saved_model_read(fz_dir(), &m), "ds_saved_model_read") == DS_OK)
            ds_saved_model_free(&m);
    }
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    return fz_mutate_json(data, size, max_size, seed, 1);
}
