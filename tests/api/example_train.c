/* A user program: includes only the public header, links the installed
 * library through pkg-config, trains an MLP on a synthetic task and checks
 * that it learned (test_installed_api.sh). The README's C program is
 * examples/hello_train, tested the same way by example_hello_train.
 *
 *   cc example_train.c $(pkg-config --cflags --libs zero-engine) -o example_train
 *   mpirun -np 2 ./example_train
 */
#include <stdio.h>
#include <stdlib.h>

#include <engine/engine.h>
#include <models/models.h>

/* Class = whether token 5 appears in the row: learnable by an embedding
 * mean-pool MLP, not by chance. */
static ds_dataset *make_data(size_t n, int T, int vocab) {
    const char *names[2] = {"absent", "present"};
    ds_dataset *d;
    if (ds_cls_dataset_create(n, T, 2, names, &d) != DS_OK) return NULL;
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    unsigned s = 12345;
    for (size_t i = 0; i < n; i++) {
        int len = 4 + (int)(i % (size_t)(T - 4));
        int label = (int)(i % 2);
        for (int t = 0; t < len; t++) {
            s = s * 1103515245u + 12345u;
            ids[i * (size_t)T + (size_t)t] = 6 + (int)((s >> 16) % (unsigned)(vocab - 6));
            mask[i * (size_t)T + (size_t)t] = 1.0f;
        }
        if (label) ids[i * (size_t)T + (size_t)(i % (size_t)len)] = 5;
        labels[i] = label;
    }
    return d;
}

int main(void) {
    const int T = 16, V = 40;
    ds_dataset *data = make_data(512, T, V);
    if (!data) {
        fprintf(stderr, "example: %s\n", ds_last_error());
        return 1;
    }
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 32, .hidden_dim = 64,
                      .n_hidden = 1, .n_classes = 2};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) {
        fprintf(stderr, "example: %s\n", ds_last_error());
        return 1;
    }
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_batch_size\": 32,"
                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
                    " \"steps_per_print\": 20}";
    d.model = model;
    d.train_data = data;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) {
        fprintf(stderr, "example: %s\n", ds_last_error());
        return 1;
    }
    double first = 0, last = 0;
    for (int i = 0; i < 60; i++) {
        ds_step_info info;
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "example: %s\n", ds_last_error());
            ds_finalize(e);
            return 1;
        }
        if (i < 5) first += info.loss / 5;
        if (i >= 55) last += info.loss / 5;
    }
    int rank = ds_rank(e);
    ds_finalize(e);
    ds_dataset_destroy(data);
    if (rank == 0) printf("example: mean loss of the first 5 steps %.4f, of the last 5 %.4f\n",
                          first, last);
    /* ln 2 = 0.693 is chance; a learned model is far below it. */
    if (!(last < 0.5 * first)) {
        if (rank == 0) printf("example: FAILED to learn\n");
        return 1;
    }
    return 0;
}
