/* Shared pieces of the checkpoint tests (see ckpt_harness.h). */
#include "ckpt_harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tied_model.h"
#include "zero/estimate.h"

void ck_setup_defaults(ck_setup *s) {
    *s = (ck_setup){.model = "mlp", .stage = 0, .precision = "fp32", .total_steps = 20,
                    .dropout = 0.1f, .optimizer = "AdamW"};
}

ds_status ck_tiny_bert(int T, int V, ds_model **out) {
    ds_bert_desc bd = {.vocab_size = V, .hidden_size = 32, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = T,
                       .hidden_dropout_prob = 0.1f, .attention_probs_dropout_prob = 0.1f};
    return ds_bert_create(&bd, out);
}

ds_dataset *ck_make_data(size_t n, int T, int vocab) {
    const char *names[3] = {"a", "b", "c"};
    ds_dataset *d;
    if (ds_cls_dataset_create(n, T, 3, names, &d) != DS_OK) return NULL;
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    unsigned s = 777;
    for (size_t i = 0; i < n; i++) {
        int len = 3 + (int)(i % (size_t)(T - 3));
        int label = (int)((i * 7) % 3);
        for (int t = 0; t < len; t++) {
            s = s * 1103515245u + 12345u;
            ids[i * (size_t)T + (size_t)t] = 4 + (int)((s >> 16) % (unsigned)(vocab - 4));
            mask[i * (size_t)T + (size_t)t] = 1.0f;
        }
        ids[i * (size_t)T] = 1 + label; /* a class-bearing token */
        labels[i] = label;
    }
    return d;
}

ds_dataset *ck_data(void) { return ck_make_data(CK_ROWS, 12, 50); }

ds_status ck_start(const char *config, ds_model *model, const ds_dataset *data, engine_t **out) {
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = config;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    DS_TRY(ds_initialize(&d, out));
    return DS_OK;
}

ds_status ck_engine(const ck_setup *s, const ds_dataset *data, engine_t **out) {
    const int T = 12, V = 50;
    ds_model *model = NULL;
    if (!strcmp(s->model, "tied")) {
        DS_TRY(tm_create(V, 16, T, true, &model));
    } else if (!strcmp(s->model, "bert")) {
        ds_bert_desc bd = {.vocab_size = V, .hidden_size = 32, .num_hidden_layers = 2,
                           .num_attention_heads = 4, .intermediate_size = 64,
                           .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = T,
                           .hidden_dropout_prob = s->dropout,
                           .attention_probs_dropout_prob = s->dropout};
        DS_TRY(ds_bert_create(&bd, &model));
    } else {
        ds_mlp_desc md = {.vocab_size = V, .max_seq_len = T, .embed_dim = 16, .hidden_dim = 32,
                          .n_hidden = 1, .n_classes = 3};
        DS_TRY(ds_mlp_create(&md, &model));
    }
    bool fp16 = !strcmp(s->precision, "fp16"), bf16 = !strcmp(s->precision, "bf16");
    bool sgd = !strcmp(s->optimizer, "SGD");
    char off[1400] = "";
    if (s->nvme)
        snprintf(off, sizeof off,
                 ", \"sub_group_size\": 1024, \"offload_optimizer\": {\"device\": \"nvme\","
                 " \"nvme_path\": \"%s\"}", s->nvme);
    char cfg[4096];
    /* fp16: a 2^20 start overflows for the first steps (skipped steps, scale
     * halving) and a window of 3 doubles it again: the scaler's state moves. */
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": %d, \"gradient_accumulation_steps\": %d,"
             " \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": 0.003, "
             "\"weight_decay\": 0.01%s%s}},"
             " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_min_lr\": 0,"
             " \"warmup_max_lr\": 0.003, \"warmup_num_steps\": 3, \"total_num_steps\": %d}},"
             " \"gradient_clipping\": 1.0, \"steps_per_print\": 1000,"
             " \"zero_optimization\": {\"stage\": %d, \"reduce_bucket_size\": 1000%s},"
             " \"fp16\": {\"enabled\": %s, \"initial_scale_power\": 20, \"loss_scale_window\": 3,"
             " \"hysteresis\": 1}, \"bf16\": {\"enabled\": %s}}",
             CK_GLOBAL_BATCH, CK_GAS, s->optimizer, sgd ? ", \"momentum\": 0.9" : "",
             s->optim_params ? s->optim_params : "",
             s->total_steps, s->stage, off, fp16 ? "true" : "false", bf16 ? "true" : "false");
    DS_TRY(ck_start(cfg, model, data, out));
    return DS_OK;
}

float *ck_params(engine_t *e, size_t *n) {
    const ds_model *m = ds_get_model(e);
    size_t total = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++)
            total += (size_t)ds_param_numel(&m->modules[i]->params[p]);
    float *v = malloc(total * sizeof *v);
    if (!v) return NULL;
    size_t at = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *d = &m->modules[i]->params[p];
            size_t k = (size_t)ds_param_numel(d);
            if (ds_get_param(e, d->name, v + at, k) != DS_OK) {
                fprintf(stderr, "ds_get_param %s: %s\n", d->name, ds_last_error());
                free(v);
                return NULL;
            }
            at += k;
        }
    *n = total;
    return v;
}

int ck_train_counted(engine_t *e, int steps, const char *what, double *loss,
                     ds_comm_stats *comm) {
    ds_comm_stats s0 = {0}, s1;
    for (int i = 0; i < steps; i++) {
        ds_step_info info;
        if (i == 1) ds_comm_report(e, &s0);
        if (ds_train_batch(e, &info) != DS_OK) {
            fprintf(stderr, "%s step %d: %s\n", what, i + 1, ds_last_error());
            ds_finalize(e);
            return 1;
        }
        loss[i] = info.loss;
    }
    ds_comm_report(e, &s1);
    ds_comm_stats_diff(&s1, &s0, comm);
    ds_finalize(e);
    return 0;
}

int ck_loss_band(const double *a, const double *b, int steps, double band, const char *name,
                 double *worst) {
    int fails = 0;
    *worst = 0;
    for (int i = 0; i < steps; i++) {
        double rel = fabs(b[i] - a[i]) / a[0];
        if (rel > *worst) *worst = rel;
        if (rel > band) {
            printf("FAIL: step %d loss %.6f with %s, %.6f without (%.2e of the first loss > "
                   "%.0e)\n", i + 1, b[i], name, a[i], rel, band);
            fails++;
        }
    }
    if (!(b[steps - 1] < b[0])) {
        printf("FAIL: %s did not train: loss %.5f -> %.5f\n", name, b[0], b[steps - 1]);
        fails++;
    }
    return fails;
}

void ck_loss_summary(const double *a, const double *b, int steps, double band, const char *name,
                     double worst) {
    printf("  loss step 1 %.6f / %.6f, step %d %.6f / %.6f (full / %s); worst difference %.3e "
           "of the first loss (band %.0e)\n", a[0], b[0], steps, a[steps - 1], b[steps - 1], name,
           worst, band);
}

void ck_log_step(FILE *f, const ds_step_info *info) {
    fprintf(f, "%lld %a %a %a\n", (long long)info->step, info->loss, info->lr, info->loss_scale);
}

int ck_read_log(const char *path, ck_step *out, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    while (n < cap && fscanf(f, "%lld %la %la %la", &out[n].step, &out[n].loss, &out[n].lr,
                             &out[n].scale) == 4)
        n++;
    fclose(f);
    return n;
}

bool ck_write_floats(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(v, sizeof *v, n, f) == n;
    return fclose(f) == 0 && ok;
}

float *ck_read_floats(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc(bytes > 0 ? (size_t)bytes : 1);
    *n = (size_t)bytes / sizeof *v;
    if (!v || fread(v, sizeof *v, *n, f) != *n) {
        free(v);
        v = NULL;
    }
    fclose(f);
    return v;
}

int ck_buffer_bytes(engine_t *e, int world, uint64_t real[2], uint64_t est[2]) {
    ds_mem_report r, x;
    ds_memory_report(e, &r);
    if (ds_estimate_model(ds_get_model(e), world, ds_get_config(e), DS_BACKEND_CPU, &x) !=
        DS_OK) {
        fprintf(stderr, "estimate: %s\n", ds_last_error());
        return 1;
    }
    const ds_mem_place where[2] = {DS_PLACE_HOST, DS_PLACE_DEVICE};
    for (int k = 0; k < 2; k++) {
        real[k] = r.bytes[DS_MEM_BUFFERS][where[k]];
        est[k] = x.bytes[DS_MEM_BUFFERS][where[k]];
    }
    return 0;
}
