/* The smallest whole program on zero-engine: it makes its own data (rows of
 * 16 tokens, class 1 when token 5 is among them), trains the bundled MLP
 * classifier for 60 steps, saves a ZeRO checkpoint into ckpt/ and predicts
 * 64 rows it never trained on. The README's "Use it from C" is this file.
 *
 *   cc hello_train.c $(pkg-config --cflags --libs zero-engine)
 *   ./a.out                          (one rank; or ./a.out --config FILE)
 *   mpirun -np 2 ./a.out             (as root: mpirun --allow-run-as-root ...)
 *   engine-run --np 2 --config ds_config.json ./a.out */
#include <stdio.h>
#include <string.h>

#include <engine/engine.h>
#include <models/models.h>

enum { T = 16, V = 40, STEPS = 60 };

static int fail(const char *what) {
    fprintf(stderr, "hello_train: %s: %s\n", what, ds_last_error());
    return 1;
}

/* n rows in the classifiers' layout: input_ids [T], attention_mask [T], labels */
static ds_dataset *make_rows(int n, unsigned seed) {
    ds_dataset *d;
    if (ds_cls_dataset_create((size_t)n, T, 2, NULL, &d) != DS_OK) return NULL;
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < T; t++) {
            seed = seed * 1103515245u + 12345u;
            ids[i * T + t] = 6 + (int)(seed >> 16) % (V - 6);  /* noise: tokens 6..39 */
            mask[i * T + t] = 1.0f;                             /* a real token */
        }
        labels[i] = (int)(seed >> 8) % 2;
        if (labels[i]) ids[i * T + (int)(seed >> 12) % T] = 5;
    }
    return d;
}

int main(int argc, char **argv) {
    ds_dataset *train = make_rows(512, 1), *test = make_rows(64, 2);
    if (!train || !test) return fail("make_rows");
    ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 32,
                      .hidden_dim = 64, .n_hidden = 1, .n_classes = 2};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) return fail("ds_mlp_create");

    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_batch_size\": 32, \"steps_per_print\": 10,"
                    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}";
    if (argc == 3 && strcmp(argv[1], "--config") == 0)  /* as engine-run passes it */
        d.config_path = argv[2];
    d.hints.total_num_steps = STEPS;  /* for a scheduler's "total_num_steps": "auto" */
    d.model = model;                  /* the engine owns it from here */
    d.train_data = train;             /* borrowed */
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) return fail("ds_initialize");
    double first = 0, last = 0;
    for (int i = 0; i < STEPS; i++) {
        ds_step_info info;            /* step, epoch, loss, lr, grad_norm, ... */
        if (ds_train_batch(e, &info) != DS_OK) return fail("ds_train_batch");
        if (i == 0) first = info.loss;  /* the mean over all ranks' rows */
        last = info.loss;
    }
    if (ds_save_checkpoint(e, "ckpt", NULL, NULL) != DS_OK)  /* ckpt/global_step60 */
        return fail("ds_save_checkpoint");

    /* predict the held-out rows, at most a micro-batch at a time */
    int mb = (int)ds_get_config(e)->train_micro_batch_size_per_gpu, right = 0;
    float logits[64 * 2];             /* [B, n_classes] per call */
    for (int r = 0; r < 64; r += mb) {
        ds_batch b = {.B = r + mb <= 64 ? mb : 64 - r, .T = T};  /* host tensors */
        ds_batch_set(&b, "input_ids", DS_I32, ds_dataset_i32(test, "input_ids") + r * T);
        ds_batch_set(&b, "attention_mask", DS_F32, ds_dataset_f32(test, "attention_mask") + r * T);
        if (ds_predict(e, &b, logits + 2 * r) != DS_OK) return fail("ds_predict");
    }
    for (int i = 0; i < 64; i++)
        right += (logits[2 * i + 1] > logits[2 * i]) == ds_dataset_i32(test, "labels")[i];
    if (ds_rank(e) == 0)
        printf("hello_train: loss %.4f at step 1, %.4f at step %d; held-out: %d of 64 right\n",
               first, last, STEPS, right);
    ds_finalize(e);
    ds_dataset_destroy(train);
    ds_dataset_destroy(test);
    return 0;
}
