/* Writes the binary seeds of tests/fuzz/corpus (the text seeds are copied by
 * make_corpus.sh, which runs this): small files made by the library's own
 * writers, so every harness starts from inputs that pass every check, with
 * the flags byte each harness reads first.
 *
 *     fuzz_make_seeds CORPUS_DIR
 *
 * writes CORPUS_DIR/{safetensors,ckpt_meta,ckpt_file}/NAME. Every file is a
 * few hundred bytes: libFuzzer mutates small inputs fastest. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_file.h"
#include "engine/io/ckpt_meta.h"
#include "engine/io/ckpt_seal.h"
#include "engine/io/safetensors.h"
#include "models/models.h"

static const char *g_out;

static void die(const char *what) {
    fprintf(stderr, "fuzz_make_seeds: %s: %s\n", what, ds_last_error()[0] ? ds_last_error() : strerror(errno));
    exit(1);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) die(path);
    fclose(f);
    b[len] = '\0';
    *n = (size_t)len;
    return b;
}

/* CORPUS/harness/name = the flags byte, then body[0..n). */
static void seed(const char *harness, const char *name, unsigned char flags, const void *body,
                 size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_out, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_out, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputc(flags, f) == EOF || fwrite(body, 1, n, f) != n || fclose(f) != 0) die(path);
}

/* A seed from a file the library wrote to `tmp`. */
static void seed_file(const char *harness, const char *name, unsigned char flags,
                      const char *tmp) {
    size_t n;
    char *b = slurp(tmp, &n);
    seed(harness, name, flags, b, n);
    free(b);
    unlink(tmp);
}

/* ---- safetensors ---------------------------------------------------------- */

static void st_write(const char *path, const ds_st_decl *d, int n, const ds_st_kv *meta,
                     int n_meta) {
    ds_st_writer *w;
    if (ds_st_writer_open(path, d, n, meta, n_meta, &w) != DS_OK) die(path);
    for (int i = 0; i < n; i++) {
        uint64_t bytes = ds_st_decl_bytes(&d[i]);
        unsigned char *b = malloc(bytes ? bytes : 1);
        for (uint64_t k = 0; k < bytes; k++) b[k] = (unsigned char)(k * 37 + (uint64_t)i);
        if (d[i].dtype == DS_ST_BOOL)
            for (uint64_t k = 0; k < bytes; k++) b[k] &= 1;
        if (ds_st_writer_write(w, b, bytes) != DS_OK) die(path);
        free(b);
    }
    if (ds_st_writer_finish(w) != DS_OK) die(path);
}

static void safetensors_seeds(const char *tmp) {
    const ds_st_decl a[] = {{"a.weight", DS_ST_F32, 2, {2, 3}},
                            {"a.bias", DS_ST_BF16, 1, {3}},
                            {"scale", DS_ST_F64, 0, {0}}};
    const ds_st_kv meta[] = {{"format", "pt"}};
    st_write(tmp, a, 3, meta, 1);
    seed_file("safetensors", "f32_bf16_f64", 0, tmp);
    const ds_st_decl b[] = {{"h", DS_ST_F16, 1, {4}}, {"ids", DS_ST_I64, 1, {2}},
                            {"none", DS_ST_U8, 2, {0, 5}}, {"mask", DS_ST_BOOL, 1, {3}},
                            {"e4m3", DS_ST_F8_E4M3, 1, {2}}};
    st_write(tmp, b, 5, NULL, 0);
    seed_file("safetensors", "f16_i64_empty_bool_f8", 0, tmp);

    /* the weights of the harness's tiny GPT-2, every parameter under its
     * Hugging Face name (mode 3), the token embedding in F16 */
    ds_gpt2_desc gd = {.vocab_size = 8, .n_positions = 4, .n_embd = 4, .n_layer = 1, .n_head = 1};
    ds_model *m;
    if (ds_gpt2_create(&gd, &m) != DS_OK) die("tiny gpt2");
    ds_st_decl d[64];
    int n = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params && n < 64; p++, n++) {
            const ds_param_desc *pd = &m->modules[i]->params[p];
            d[n] = (ds_st_decl){.name = pd->name, .dtype = n == 0 ? DS_ST_F16 : DS_ST_F32,
                                .ndim = pd->ndim};
            memcpy(d[n].shape, pd->shape, sizeof(int64_t) * (size_t)pd->ndim);
        }
    st_write(tmp, d, n, meta, 1);
    ds_model_destroy(m);
    seed_file("safetensors", "tiny_gpt2_weights", 3, tmp);
}

/* ---- meta.json and latest ---------------------------------------------------- */

static void meta_seeds(const char *tmp) {
    ds_ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.format_version = DS_CKPT_FORMAT_VERSION;
    snprintf(m.tag, sizeof m.tag, "global_step3");
    snprintf(m.engine_version, sizeof m.engine_version, "0.1.0");
    m.config_json = "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": 2}}";
    m.world = 2;
    m.stage = 2;
    snprintf(m.precision, sizeof m.precision, "bf16");
    snprintf(m.optimizer, sizeof m.optimizer, "AdamW");
    m.moments = 2;
    m.numel = 17;
    m.used = 32;
    m.padded = 32;
    m.part = 16;
    m.align = 16;
    m.frame_elems = 16;
    ds_ckpt_param_entry params[2] = {
        {.name = "w.weight", .ndim = 2, .shape = {3, 4}, .offset = 0, .numel = 12},
        {.name = "w.bias", .ndim = 1, .shape = {5}, .offset = 16, .numel = 5}};
    m.n_params = 2;
    m.params = params;
    ds_ckpt_shard_entry shards[2];
    for (int r = 0; r < 2; r++) {
        memset(&shards[r], 0, sizeof shards[r]);
        ds_ckpt_shard_name(r, 2, shards[r].file, sizeof shards[r].file);
        shards[r].rank = r;
        shards[r].lo = 16 * r;
        shards[r].hi = 16 * (r + 1);
        shards[r].bytes = 400 + (uint64_t)r;
        shards[r].index_hash = 0x0123456789abcdefull * (uint64_t)(r + 1);
    }
    m.shards = shards;
    m.global_step = 3;
    m.applied_steps = 3;
    m.micro_steps = 6;
    m.samples = 48;
    m.gradient_accumulation_steps = 2;
    m.micro_batch = 4;
    snprintf(m.scheduler, sizeof m.scheduler, "WarmupLR");
    m.sched_iteration = 2;
    m.scaler_enabled = false;
    m.loss_scale = 1.0;
    m.seed = 42;
    m.has_loader = true;
    m.dataset_size = 100;
    m.epoch_samples = 48;
    m.last_loss = 2.5;
    m.last_lr = 1e-3;
    m.last_grad_norm = 0.75;
    m.client_state_json = "{\"best\": 0.5, \"notes\": [1, \"x\"]}";
    if (ds_ckpt_meta_write(tmp, &m) != DS_OK) die(tmp);
    size_t n;
    char *text = slurp(tmp, &n);
    seed("ckpt_meta", "meta_sealed", 0, text, n);
    /* the body a save seals: the same text without its checksum member */
    char *cut = strstr(text, ",\n \"checksum\"");
    if (!cut) die("meta.json without its checksum member");
    strcpy(cut, "\n}\n");
    seed("ckpt_meta", "meta_body", 1, text, strlen(text));
    free(text);
    unlink(tmp);

    static const char tag[] = "global_step3\n";
    char *sealed;
    size_t sn;
    if (ds_ckpt_seal(DS_SEAL_LINE, tag, sizeof tag - 1, &sealed, &sn) != DS_OK) die("seal");
    seed("ckpt_meta", "latest_sealed", 2, sealed, sn);
    free(sealed);
    seed("ckpt_meta", "latest_body", 3, tag, sizeof tag - 1);
}

/* ---- shard files ------------------------------------------------------------- */

static void shard(const char *tmp, int64_t lo, int64_t hi, int n_sections, ds_ckpt_filter filter,
                  int empty_section) {
    ds_ckpt_header h = {.rank = 1, .world = 2, .lo = lo, .hi = hi};
    ds_ckpt_write_opts o;
    ds_ckpt_write_opts_defaults(&o);
    o.filter = filter;
    o.frame_elems = DS_CKPT_FRAME_ELEMS_MIN;
    ds_ckpt_writer *w;
    if (ds_ckpt_writer_open(tmp, &h, &o, &w) != DS_OK) die(tmp);
    for (int s = 0; s < n_sections; s++) {
        int64_t a = lo, b = (s == empty_section) ? lo : hi;
        if (ds_ckpt_writer_begin(w, (uint32_t)s, a, b) != DS_OK) die("begin");
        for (int64_t e = a; e < b; e++) {
            float v = (float)e * 0.25f - (float)s;
            if (ds_ckpt_writer_append(w, &v, 1) != DS_OK) die("append");
        }
        if (ds_ckpt_writer_end(w) != DS_OK) die("end");
    }
    if (ds_ckpt_writer_finish(w, NULL) != DS_OK) die("finish");
}

static void shard_seeds(const char *tmp) {
    shard(tmp, 16, 56, 1, DS_CKPT_FILTER_SHUFFLE, -1);
    seed_file("ckpt_file", "weights_shuffle", 1, tmp);
    shard(tmp, 0, 20, 3, DS_CKPT_FILTER_NONE, -1);
    seed_file("ckpt_file", "three_sections", 1, tmp);
    shard(tmp, 8, 24, 2, DS_CKPT_FILTER_SHUFFLE, 1);
    seed_file("ckpt_file", "empty_moment", 1, tmp);
    shard(tmp, 0, 16, 1, DS_CKPT_FILTER_NONE, -1);
    seed_file("ckpt_file", "one_frame_raw", 0, tmp);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
        return 2;
    }
    g_out = argv[1];
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.seed.tmp", g_out);
    safetensors_seeds(tmp);
    meta_seeds(tmp);
    shard_seeds(tmp);
    return 0;
}
