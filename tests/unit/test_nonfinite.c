/* A run that cannot learn stops, naming why (one rank, the MLP):
 *   - fp32 and bf16: batches whose gradients are all NaN are skipped
 *     zero_engine.max_consecutive_skips times in a row, then ds_step fails
 *     with DS_ERR_NONFINITE naming the step and the key (default 3; 1; and 0,
 *     the first one fails); a NaN row now and then is only skipped;
 *   - fp16 with a dynamic scale: DeepSpeed's skips halve the scale from 2^4
 *     to min_loss_scale 1, and the overflow at the minimum fails naming the
 *     step and min_loss_scale;
 *   - non-finite weights are refused where they come in: ds_set_param (every
 *     loader's end; the parameter is left as it was), a Hugging Face folder
 *     through ds_hf_load_weights and through train_cls --init (exit 1,
 *     "loading --init"), a save (nothing written, latest unchanged), a load
 *     of a checkpoint holding one, and zero_to_fp32 of it: each names the
 *     tensor and the element;
 *   - end to end, train_cls with finite weights too large to learn from
 *     exits 1 with one line naming the step and the key (fp32 and fp16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h"
#include "tests/unit/test_util.h"

static char out[512];

/* The checkpoint tests' data with the attention mask of every row (all:
 * true) or of row 0 only set to NaN: the MLP's pooled embedding, and so the
 * loss and every gradient of a batch holding such a row, are NaN. */
static ds_dataset *nan_data(bool all) {
    ds_dataset *d = ck_data();
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (size_t i = 0; i < (all ? d->n : 1); i++) mask[i * 12] = NAN;
    return d;
}

static engine_t *mlp(const ds_dataset *data, const char *extra) {
    ds_mlp_desc md = {.vocab_size = 50, .max_seq_len = 12, .embed_dim = 16, .hidden_dim = 32,
                      .n_hidden = 1, .n_classes = 3};
    ds_model *model;
    if (ds_mlp_create(&md, &model) != DS_OK) TEST_DIE("model");
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.003}}, \"steps_per_print\": 1000%s}", extra);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) TEST_DIE("engine");
    return e;
}

/* Train until a step fails; that must be step `fail_at` with `needle`. */
static void expect_stop(const char *what, const char *extra, int fail_at, const char *needle) {
    ds_dataset *data = nan_data(true);
    engine_t *e = mlp(data, extra);
    ds_status st = DS_OK;
    int step = 0;
    ds_step_info info;
    while (step < fail_at + 5 && (st = ds_train_batch(e, &info)) == DS_OK) {
        step++;
        CHECK(info.skipped, "%s: step %d was not skipped", what, step);
    }
    char want[64];
    snprintf(want, sizeof want, "step %d:", fail_at);
    CHECK(st == DS_ERR_NONFINITE && step == fail_at - 1 && strstr(ds_last_error(), want) &&
              strstr(ds_last_error(), needle),
          "%s: %d steps, then %s \"%s\"; want a failure at step %d naming %s", what, step,
          ds_status_to_string(st), ds_last_error(), fail_at, needle);
    ds_finalize(e);
    ds_dataset_destroy(data);
}

static void test_steps(void) {
    expect_stop("fp32, default", "", 4, "max_consecutive_skips = 3");
    expect_stop("bf16, 1 skip allowed",
                ", \"bf16\": {\"enabled\": true}, \"zero_engine\": {\"max_consecutive_skips\": 1}",
                2, "max_consecutive_skips = 1");
    expect_stop("fp32, none allowed", ", \"zero_engine\": {\"max_consecutive_skips\": 0}", 1,
                "max_consecutive_skips = 0");
    /* 2^4 -> 2^0 in four skipped steps; the fifth overflow is at the minimum */
    expect_stop("fp16, dynamic scale",
                ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 4, \"hysteresis\": 1, "
                "\"min_loss_scale\": 1}", 5, "fp16.min_loss_scale = 1");

    /* one NaN row in 40: a step now and then is skipped, never 4 in a row */
    ds_dataset *data = nan_data(false);
    engine_t *e = mlp(data, "");
    int skipped = 0;
    ds_step_info info;
    for (int s = 0; s < 15; s++) {
        ds_status st = ds_train_batch(e, &info);
        CHECK(st == DS_OK, "a NaN row now and then: step %d: %s", s + 1, ds_last_error());
        if (st != DS_OK) break;
        skipped += info.skipped;
    }
    CHECK(skipped >= 2 && skipped < 15, "a NaN row now and then: %d of 15 steps skipped", skipped);
    ds_finalize(e);
    ds_dataset_destroy(data);
}

/* ---- weights ------------------------------------------------------------ */

static void test_set_param(engine_t *e) {
    float w[800], before[800];
    CHECK_OK(ds_get_param(e, "embeddings.word_embeddings.weight", before, 800));
    memcpy(w, before, sizeof w);
    w[17] = INFINITY;
    ds_status st = ds_set_param(e, "embeddings.word_embeddings.weight", w, 800);
    CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), "embeddings.word_embeddings.weight") &&
              strstr(ds_last_error(), "element 17 of 800 is inf"),
          "ds_set_param with an inf: %s \"%s\"", ds_status_to_string(st), ds_last_error());
    CHECK_OK(ds_get_param(e, "embeddings.word_embeddings.weight", w, 800));
    CHECK(!memcmp(w, before, sizeof w), "a refused ds_set_param changed the parameter");
}

/* A copy of the tiny BERT's Hugging Face folder whose tensor `bad` has
 * element 3 (every element when `all`) set to `value`, plus a vocab.txt
 * train_cls can use. */
static void poisoned_hf_folder(const char *dir, const char *bad, float value, bool all) {
    char src[1024], dst[1024];
    mkdir(dir, 0755);
    snprintf(src, sizeof src, "cp '%s/bert_ref_tiny_hf/config.json' '%s/'", DS_TEST_DATA_DIR, dir);
    if (system(src) != 0) TEST_DIE("config.json");
    snprintf(dst, sizeof dst, "%s/vocab.txt", dir);
    FILE *v = fopen(dst, "w");
    fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", v);
    fclose(v);
    snprintf(src, sizeof src, "%s/bert_ref_tiny_hf/model.safetensors", DS_TEST_DATA_DIR);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    ds_st_file *f;
    if (ds_st_open(src, &f) != DS_OK) TEST_DIE(src);
    int n = ds_st_count(f);
    ds_st_decl *decl = calloc((size_t)n, sizeof *decl);
    for (int i = 0; i < n; i++) {
        const ds_st_tensor *t = ds_st_tensor_at(f, i);
        decl[i] = (ds_st_decl){.name = t->name, .dtype = DS_ST_F32, .ndim = t->ndim};
        memcpy(decl[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    ds_st_writer *w;
    if (ds_st_writer_open(dst, decl, n, NULL, 0, &w) != DS_OK) TEST_DIE(dst);
    for (int i = 0; i < n; i++) {
        const ds_st_tensor *t = ds_st_tensor_at(f, i);
        float *x = malloc(t->numel * sizeof *x);
        if (ds_st_read_f32(f, t, 0, t->numel, x) != DS_OK) TEST_DIE("read");
        for (size_t k = all ? 0 : 3; !strcmp(t->name, bad) && k < (all ? t->numel : 4); k++)
            x[k] = value;
        if (ds_st_writer_write_f32(w, x, t->numel) != DS_OK) TEST_DIE("write");
        free(x);
    }
    if (ds_st_writer_finish(w) != DS_OK) TEST_DIE("finish");
    free(decl);
    ds_st_close(f);
}

static void test_hf(void) {
    const char *bad = "bert.encoder.layer.1.output.dense.weight";
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/hf_nan", out);
    poisoned_hf_folder(dir, bad, NAN, false);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ds_bert_desc b;
    if (ds_hf_bert_config_read(path, 3, &b) != DS_OK) TEST_DIE("config");
    b.max_seq_len = 12;
    ds_model *model;
    if (ds_bert_create(&b, &model) != DS_OK) TEST_DIE("bert");
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_micro_batch_size_per_gpu\": 2}";
    d.model = model;
    d.quiet = true;
    engine_t *e;
    if (ds_initialize(&d, &e) != DS_OK) TEST_DIE("engine");
    ds_hf_load_report rep = {0};
    ds_status st = ds_hf_load_weights(ds_get_model(e), dir, ds_set_param_cb, e, &rep);
    ds_hf_load_report_free(&rep);
    CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), bad) &&
              strstr(ds_last_error(), "element 3 of"),
          "loading a Hugging Face folder with a NaN: %s \"%s\"", ds_status_to_string(st),
          ds_last_error());
    ds_finalize(e);

    /* the same through train_cls --init: exit 1, one line */
    char cmd[5000], data[800], cfg[800], err[800], line[2048] = "";
    snprintf(data, sizeof data, "%s/d.csv", out);
    snprintf(cfg, sizeof cfg, "%s/c.json", out);
    snprintf(err, sizeof err, "%s/train_cls.err", out);
    FILE *f = fopen(data, "w");
    fputs("label,text\na,one\nb,two\nc,three\na,four\nb,five\nc,six\n", f); /* 3 classes */
    fclose(f);
    f = fopen(cfg, "w");
    fputs("{\"train_micro_batch_size_per_gpu\": 2}", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s/bin/train_cls' --config '%s' --data '%s' --init '%s' "
             "--max-seq-len 12 --max-steps 1 >/dev/null 2>'%s'", DS_BINARY_DIR, cfg, data, dir, err);
    int rc = system(cmd);
    f = fopen(err, "r");
    int lines = 0;
    char more[2048];
    while (f && fgets(lines ? more : line, sizeof line, f)) lines++;
    if (f) fclose(f);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && lines == 1 && strstr(line, "loading --init") &&
              strstr(line, bad) && strstr(line, "element 3 of"),
          "train_cls --init with a NaN: exit %d, %d lines: %s", WEXITSTATUS(rc), lines, line);
}

/* Replace rank 0's shard file of ckpt/TAG by one whose weights section has
 * element `at` (flat) set to NaN, and record it in meta.json (sealed again):
 * a checkpoint as a writer without the save-time check would leave it. */
static void poison_checkpoint(const char *ckpt, const char *tag, int64_t at) {
    char tag_dir[800], shard[900], meta_path[900];
    snprintf(tag_dir, sizeof tag_dir, "%s/%s", ckpt, tag);
    snprintf(shard, sizeof shard, "%s/shard-00000-of-00001.dsck", tag_dir);
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", tag_dir);
    ds_ckpt_reader *r;
    if (ds_ckpt_reader_open(shard, &r) != DS_OK) TEST_DIE(shard);
    ds_ckpt_header h = *ds_ckpt_reader_header(r);
    int64_t lo = h.lo, hi = h.hi;
    float *v = malloc((size_t)(hi - lo) * sizeof *v);
    char tmp[1000];
    snprintf(tmp, sizeof tmp, "%s.new", shard);
    ds_ckpt_writer *w;
    ds_ckpt_write_opts o;
    ds_ckpt_write_opts_defaults(&o);
    o.frame_elems = h.frame_elems;
    if (ds_ckpt_writer_open(tmp, &h, &o, &w) != DS_OK) TEST_DIE(tmp);
    for (uint32_t k = 0; k < DS_CKPT_SECTION_COUNT; k++) {
        if (!ds_ckpt_reader_section(r, k, NULL, NULL)) continue;
        if (ds_ckpt_read(r, k, lo, hi, v) != DS_OK) TEST_DIE("read section");
        if (k == DS_CKPT_WEIGHTS) v[at - lo] = NAN;
        if (ds_ckpt_writer_begin(w, k, lo, hi) != DS_OK ||
            ds_ckpt_writer_append(w, v, (size_t)(hi - lo)) != DS_OK ||
            ds_ckpt_writer_end(w) != DS_OK)
            TEST_DIE("write section");
    }
    ds_ckpt_reader_close(r);
    ds_ckpt_file_info info;
    if (ds_ckpt_writer_finish(w, &info) != DS_OK || rename(tmp, shard) != 0) TEST_DIE("finish");
    free(v);
    ds_ckpt_meta m;
    if (ds_ckpt_meta_read(meta_path, &m) != DS_OK) TEST_DIE("meta");
    m.shards[0].bytes = info.file_bytes;
    m.shards[0].index_hash = info.index_hash;
    if (ds_ckpt_meta_write(meta_path, &m) != DS_OK) TEST_DIE("meta write");
    ds_ckpt_meta_free(&m);
}

static void test_checkpoints(engine_t *e) {
    char ckpt[700], tmp[800], latest[64];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", out);
    CHECK_OK(ds_train_batch(e, NULL));
    CHECK_OK(ds_save_checkpoint(e, ckpt, "good", NULL));

    /* a NaN in the master weights (where no public call can put one) */
    const ds_flat_param *p = &e->flat->params[1];
    float x = NAN;
    CHECK_OK(e->zero->ops->state_io(e->zero, DS_STATE_WEIGHTS, p->offset + 5, p->offset + 6, &x,
                                    true));
    ds_status st = ds_save_checkpoint(e, ckpt, "bad", NULL);
    CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), p->desc->name) &&
              strstr(ds_last_error(), "weights of") && strstr(ds_last_error(), "element 5 of"),
          "saving a NaN weight: %s \"%s\"", ds_status_to_string(st), ds_last_error());
    snprintf(tmp, sizeof tmp, "%s/bad.tmp", ckpt);
    CHECK(access(tmp, F_OK) != 0, "the refused save left %s", tmp);
    CHECK(ds_checkpoint_latest(ckpt, latest, sizeof latest) == DS_OK && !strcmp(latest, "good"),
          "latest after the refused save: %s", latest);

    /* a checkpoint holding a NaN anyway: load and zero_to_fp32 refuse it */
    poison_checkpoint(ckpt, "good", p->offset + 7);
    CHECK(ds_checkpoint_verify(ckpt, NULL) == DS_OK, "the poisoned checkpoint's files are sound: "
          "%s", ds_last_error());
    st = ds_load_checkpoint(e, ckpt, NULL, DS_LOAD_ALL);
    CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), p->desc->name) &&
              strstr(ds_last_error(), "element 7 of"),
          "loading a NaN weight: %s \"%s\"", ds_status_to_string(st), ds_last_error());
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    snprintf(tmp, sizeof tmp, "%s/z2f.safetensors", out);
    st = ds_zero_to_fp32(ckpt, tmp, &o, NULL);
    CHECK(st == DS_ERR_NONFINITE && strstr(ds_last_error(), p->desc->name) &&
              strstr(ds_last_error(), "element 7 of") && access(tmp, F_OK) != 0,
          "zero_to_fp32 of a NaN weight: %s \"%s\"", ds_status_to_string(st), ds_last_error());
}

/* Run train_cls (one process, --init dir, the config json) for 8 steps;
 * returns its exit status and the last stderr line in `line`; `lines`
 * counts them. */
static int train_cls_init(const char *dir, const char *json, const char *name, char *line,
                          size_t cap, int *lines) {
    char cmd[5000], data[800], cfg[800], err[800];
    snprintf(data, sizeof data, "%s/d.csv", out);
    snprintf(cfg, sizeof cfg, "%s/%s.json", out, name);
    snprintf(err, sizeof err, "%s/%s.err", out, name);
    FILE *f = fopen(cfg, "w");
    if (!f) TEST_DIE(cfg);
    fputs(json, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s/bin/train_cls' --config '%s' --data '%s' --init '%s' "
             "--max-seq-len 12 --max-steps 8 >/dev/null 2>'%s'", DS_BINARY_DIR, cfg, data, dir, err);
    int rc = system(cmd);
    f = fopen(err, "r");
    *lines = 0;
    line[0] = '\0';
    while (f && fgets(line, (int)cap, f)) (*lines)++; /* the last line stays */
    if (f) fclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The same stops end to end: a trainer whose weights are finite but so
 * large (3e38, near FLT_MAX, in a whole dense layer: its sums overflow to
 * inf and inf - inf to NaN; 1e30 does not, layer norm's variance overflows
 * first and zeroes the output) that every step's gradients are NaN exits 1
 * with one line (after fp16's skip lines) naming the step and the key, in fp32 after
 * max_consecutive_skips (3) skipped steps, in fp16 when the dynamic scale
 * would go below min_loss_scale (2^16 -> 2^15 -> 2^14 = min, hysteresis 1:
 * the overflow of step 3 would lower it again). */
static void test_trainer_stops(void) {
    char dir[700], line[2048];
    int lines;
    snprintf(dir, sizeof dir, "%s/hf_huge", out);
    poisoned_hf_folder(dir, "bert.encoder.layer.1.output.dense.weight", 3e38f, true);
    int rc = train_cls_init(dir, "{\"train_micro_batch_size_per_gpu\": 2}", "fp32", line,
                            sizeof line, &lines);
    /* lines: one per skipped step, then the error, which names its step once */
    CHECK(rc == 1 && lines == 4 && !strncmp(line, "train_cls: step 4:", 18) &&
              strstr(line, "zero_engine.max_consecutive_skips = 3"),
          "train_cls fp32 that cannot learn: exit %d, %d lines: %s", rc, lines, line);
    rc = train_cls_init(dir, "{\"train_micro_batch_size_per_gpu\": 2, \"fp16\": {\"enabled\": "
                        "true, \"initial_scale_power\": 16, \"hysteresis\": 1, "
                        "\"min_loss_scale\": 16384}}", "fp16", line, sizeof line, &lines);
    /* lines: two per skipped step (the skip, the lower scale), then the error */
    CHECK(rc == 1 && lines == 5 && !strncmp(line, "train_cls: step 3:", 18) &&
              strstr(line, "fp16.min_loss_scale = 16384"),
          "train_cls fp16 that cannot learn: exit %d, %d lines: %s", rc, lines, line);
}

int main(void) {
    snprintf(out, sizeof out, "%s/tests/nonfinite", DS_BINARY_DIR);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    if (system(cmd) != 0) TEST_DIE("work folder");
    test_steps();
    ds_dataset *data = ck_data();
    engine_t *e = mlp(data, "");
    test_set_param(e);
    test_checkpoints(e);
    ds_finalize(e);
    ds_dataset_destroy(data);
    test_hf();
    test_trainer_stops();
    if (test_fails() == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        if (system(cmd) != 0) return 1;
    }
    return test_finish("test_nonfinite");
}
