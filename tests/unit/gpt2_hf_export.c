/* gpt2_hf_export DIR: writes what transformers needs to load the engine's
 * GPT-2, for tests/tools/check_gpt2_hf.py to check against
 * GPT2LMHeadModel.from_pretrained (run by test_gpt2_hf_export.sh).
 *
 * The model is the reference's (tests/data/gpt2_ref_tiny.bin: config and
 * initial weights), set into an engine, then:
 *   DIR/config.json          ds_hf_gpt2_config_write
 *   DIR/model.safetensors    ds_save_weights (every owned parameter once, under
 *                            its HF name: transformer.wte.weight, no lm_head.weight)
 *   DIR/batch.json           B, T and the file names below
 *   DIR/input_ids.i32, attention_mask.f32   the reference batch, raw little-endian
 *   DIR/logits.f32           the engine's ds_predict logits [B, T, V] on it
 * Exit 0 on success, 1 (with the error) otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "hf/hf.h"
#include "models/models.h"
#include "tests/unit/ref_dump.h"

static int write_raw(const char *dir, const char *name, const void *data, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        perror(path);
        if (f) fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

static int cfg_int(const ref_dump *ref, const char *key) {
    return (int)json_integer_value(json_object_get(json_object_get(ref->hdr, "config"), key));
}

static float cfg_num(const ref_dump *ref, const char *key) {
    return (float)json_number_value(json_object_get(json_object_get(ref->hdr, "config"), key));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    ref_dump ref;
    char err[512];
    if (ref_dump_load(DS_TEST_DATA_DIR "/gpt2_ref_tiny.bin", &ref, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ds_gpt2_desc d = {.vocab_size = cfg_int(&ref, "vocab_size"),
                      .n_positions = cfg_int(&ref, "n_positions"),
                      .n_embd = cfg_int(&ref, "n_embd"),
                      .n_layer = cfg_int(&ref, "n_layer"),
                      .n_head = cfg_int(&ref, "n_head"),
                      .n_inner = cfg_int(&ref, "n_inner"),
                      .layer_norm_epsilon = cfg_num(&ref, "layer_norm_epsilon"),
                      .initializer_range = cfg_num(&ref, "initializer_range"),
                      .dropout_set = true};
    const int B = ref.B, T = ref.T;
    const int32_t *ids = ref_dump_i32(&ref, "input_ids", NULL);
    const float *mask = ref_dump_f32(&ref, "attention_mask", NULL, NULL, NULL);
    engine_t *e = NULL;
    float *logits = NULL;
    int rc = 1;
    char path[4096];
    ds_model *model;
    if (ds_gpt2_create(&d, &model) != DS_OK) goto out;
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = "{\"train_batch_size\": 3, \"optimizer\": {\"type\": \"AdamW\", "
                     "\"params\": {\"lr\": 1e-3}}}";
    id.model = model;
    id.quiet = true;
    if (ds_initialize(&id, &e) != DS_OK) goto out;
    for (int i = 0; i < ref_dump_n_params(&ref); i++) {
        size_t numel;
        const char *name = ref_dump_param_name(&ref, i);
        const float *v = ref_dump_param_f32(&ref, "param", name, &numel, NULL, NULL);
        if (ds_set_param(e, name, v, numel) != DS_OK) goto out;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (ds_hf_gpt2_config_write(path, &d) != DS_OK) goto out;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ds_save_weights(e, path) != DS_OK) goto out;
    ds_batch batch = {.B = B, .T = T};
    ds_batch_set(&batch, "input_ids", DS_I32, ids);
    ds_batch_set(&batch, "attention_mask", DS_F32, mask);
    size_t n = ds_output_elems(e, B, T);
    logits = malloc(n * sizeof(float));
    if (ds_predict(e, &batch, logits) != DS_OK) goto out;
    char meta[256];
    int len = snprintf(meta, sizeof meta,
                       "{\"B\": %d, \"T\": %d, \"V\": %d, \"input_ids\": \"input_ids.i32\", "
                       "\"attention_mask\": \"attention_mask.f32\", \"logits\": \"logits.f32\"}\n",
                       B, T, d.vocab_size);
    if (write_raw(dir, "batch.json", meta, (size_t)len) ||
        write_raw(dir, "input_ids.i32", ids, sizeof(int32_t) * (size_t)B * T) ||
        write_raw(dir, "attention_mask.f32", mask, sizeof(float) * (size_t)B * T) ||
        write_raw(dir, "logits.f32", logits, sizeof(float) * n))
        goto out;
    printf("gpt2_hf_export: wrote %s/{config.json, model.safetensors, batch.json, ...}\n", dir);
    rc = 0;
out:
    if (rc) fprintf(stderr, "gpt2_hf_export: %s\n", ds_last_error());
    ds_finalize(e);
    free(logits);
    ref_dump_free(&ref);
    return rc;
}
