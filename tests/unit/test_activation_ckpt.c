/* Activation checkpointing: recomputing each encoder layer in backward
 * gives bit-identical training (dropout masks are regenerated from the same
 * counter-based stream) while keeping fewer activations. DeepSpeed's
 * partition_activations and cpu_checkpointing are accepted on the cpu
 * backend and change nothing: no model parallelism to split over, and host
 * memory is where the activations are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"

#define STEPS 5

/* section: the activation_checkpointing section's body, NULL for none */
static int run(const char *section, const ds_dataset *data, double *loss, uint64_t *act_bytes) {
    ds_bert_desc bd = {.vocab_size = 60, .hidden_size = 32, .num_hidden_layers = 3,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .hidden_dropout_prob = 0.1f,
                       .attention_probs_dropout_prob = 0.1f, .n_classes = 3, .max_seq_len = 16};
    ds_model *model;
    if (ds_bert_create(&bd, &model) != DS_OK) return 1;
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"steps_per_print\": 1000,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}}%s%s%s}",
             section ? ", \"activation_checkpointing\": {" : "", section ? section : "",
             section ? "}" : "");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        printf("FAIL: %s\n", ds_last_error());
        return 1;
    }
    for (int i = 0; i < STEPS; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            printf("FAIL: %s\n", ds_last_error());
            return 1;
        }
        loss[i] = info.loss;
    }
    ds_mem_report r;
    ds_memory_report(e, &r);
    *act_bytes = r.bytes[DS_MEM_ACTIVATIONS][DS_PLACE_DEVICE];
    ds_finalize(e);
    return 0;
}

int main(void) {
    const int T = 16;
    const char *names[3] = {"a", "b", "c"};
    ds_dataset *data;
    if (ds_cls_dataset_create(64, T, 3, names, &data) != DS_OK) return 1;
    int32_t *ids = ds_dataset_i32(data, "input_ids"), *labels = ds_dataset_i32(data, "labels");
    float *mask = ds_dataset_f32(data, "attention_mask");
    for (size_t i = 0; i < 64; i++) {
        int len = 4 + (int)(i % 12);
        for (int t = 0; t < len; t++) {
            ids[i * T + (size_t)t] = (int)((i * 7 + (size_t)t * 3) % 60);
            mask[i * T + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 3);
    }
    double plain[STEPS], recomputed[STEPS], placed[STEPS];
    uint64_t act_plain, act_ckpt, act_placed;
    if (run(NULL, data, plain, &act_plain) || run("", data, recomputed, &act_ckpt) ||
        run("\"partition_activations\": true, \"cpu_checkpointing\": true", data, placed,
            &act_placed))
        return 1;
    ds_dataset_destroy(data);
    int fails = 0;
    for (int i = 0; i < STEPS; i++) /* same arithmetic in the same order: exact */
        if (plain[i] != recomputed[i] || placed[i] != recomputed[i]) {
            printf("FAIL: step %d loss %.9g with checkpointing, %.9g with partition_activations "
                   "and cpu_checkpointing too, %.9g without\n", i + 1, recomputed[i], placed[i],
                   plain[i]);
            fails++;
        }
    if (act_placed != act_ckpt) {
        printf("FAIL: partition_activations and cpu_checkpointing kept %llu activation bytes, "
               "plain checkpointing %llu\n", (unsigned long long)act_placed,
               (unsigned long long)act_ckpt);
        fails++;
    }
    printf("activations: %llu bytes kept without checkpointing, %llu with\n",
           (unsigned long long)act_plain, (unsigned long long)act_ckpt);
    if (!(act_ckpt < act_plain)) {
        printf("FAIL: checkpointing did not reduce activation memory\n");
        fails++;
    }
    printf("%s\n", fails ? "test_activation_ckpt: FAILED" : "test_activation_ckpt: ok");
    return fails != 0;
}
