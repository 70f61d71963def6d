/* hf/hf_weights.c: safetensors checkpoints onto a model's parameters.
 *
 * The model here is a hand-built ds_model with BERT's parameter names (no
 * compute), so the name mapping is tested on its own:
 *   - "bert."-prefixed names, F32: everything installed with its values;
 *   - BertModel / sentence-transformers names (no prefix) in F16 with a
 *     position_ids buffer: prefix added, buffer ignored, classifier.* reported
 *     as newly initialised, values rounded as fp16;
 *   - no pooler and an MLM head: pooler missing, head unexpected;
 *   - TensorFlow-era LayerNorm.gamma/beta names, BF16;
 *   - a sharded folder (index + 3 shards written by ds_st_sharded) and the
 *     index file given directly;
 *   - mis-shaped tensors: DS_ERR_DATA naming each with both shapes, and
 *     nothing installed; a non-float tensor; two names for one parameter;
 *     an index naming a tensor its shard lacks; a folder without weights; a
 *     folder with only pytorch_model.bin; a failing set callback;
 * and the checkpoint transformers' save_pretrained wrote for the reference
 * model (tests/data/bert_ref_tiny_hf, F16) loads onto the reference's
 * parameter list with every value equal to the dump's, rounded to fp16. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/io/safetensors.h"
#include "hf/hf.h"
#include "tests/unit/ref_dump.h"
#include "tests/unit/test_util.h"

/* ---- a model with BERT names and no compute ---- */

static const ds_module_ops k_fake_ops = {.type = "fake"};

typedef struct pdef {
    const char *name;
    int ndim;
    int64_t s0, s1;
} pdef;

/* A mini BERT: 1 layer, hidden 4, vocab 10, 2 classes. */
static const pdef k_mini[] = {
    {"bert.embeddings.word_embeddings.weight", 2, 10, 4},
    {"bert.embeddings.position_embeddings.weight", 2, 8, 4},
    {"bert.embeddings.token_type_embeddings.weight", 2, 2, 4},
    {"bert.embeddings.LayerNorm.weight", 1, 4, 0},
    {"bert.embeddings.LayerNorm.bias", 1, 4, 0},
    {"bert.encoder.layer.0.attention.self.query.weight", 2, 4, 4},
    {"bert.encoder.layer.0.attention.self.query.bias", 1, 4, 0},
    {"bert.encoder.layer.0.output.LayerNorm.weight", 1, 4, 0},
    {"bert.encoder.layer.0.output.LayerNorm.bias", 1, 4, 0},
    {"bert.pooler.dense.weight", 2, 4, 4},
    {"bert.pooler.dense.bias", 1, 4, 0},
    {"classifier.weight", 2, 2, 4},
    {"classifier.bias", 1, 2, 0},
};
#define N_MINI ((int)(sizeof k_mini / sizeof k_mini[0]))

/* One module per parameter (the loader only walks modules and params). */
static ds_model *fake_model(const pdef *defs, int n) {
    ds_model *m = calloc(1, sizeof *m);
    m->n_modules = n;
    m->modules = calloc((size_t)n, sizeof *m->modules);
    for (int i = 0; i < n; i++) {
        ds_module *mod = calloc(1, sizeof *mod);
        mod->ops = &k_fake_ops;
        snprintf(mod->name, sizeof mod->name, "m%d", i);
        mod->n_params = 1;
        mod->params = calloc(1, sizeof *mod->params);
        snprintf(mod->params[0].name, DS_MAX_NAME, "%s", defs[i].name);
        mod->params[0].ndim = defs[i].ndim;
        mod->params[0].shape[0] = defs[i].s0;
        mod->params[0].shape[1] = defs[i].s1;
        m->modules[i] = mod;
    }
    return m;
}

static void fake_free(ds_model *m) {
    for (int i = 0; i < m->n_modules; i++) {
        free(m->modules[i]->params);
        free(m->modules[i]);
    }
    free(m->modules);
    free(m);
}

static int64_t numel_def(const pdef *d) { return d->ndim == 1 ? d->s0 : d->s0 * d->s1; }

/* Value i of parameter k: an integer over 64, exact in fp32 whatever the
 * compiler contracts (-march=native makes a*b+c one fma), not always in
 * BF16 (8 significant bits), so rounding on the way in is exercised. */
static float value(int k, int64_t i) { return (float)(37 * k - 11 * (int)i + 1) / 64.0f; }

/* ---- what `set` received ---- */

typedef struct sink {
    const pdef *defs;
    int n;
    float *got[64];
    size_t numel[64];
    int calls;
    int fail_at; /* call index that fails, -1 never */
} sink;

static ds_status sink_set(void *user, const char *name, const float *data, size_t numel) {
    sink *s = user;
    if (s->calls++ == s->fail_at) return DS_ERR(DS_ERR_BACKEND, "injected failure at %s", name);
    for (int k = 0; k < s->n; k++)
        if (strcmp(s->defs[k].name, name) == 0) {
            free(s->got[k]);
            s->got[k] = malloc(numel * sizeof(float));
            memcpy(s->got[k], data, numel * sizeof(float));
            s->numel[k] = numel;
            return DS_OK;
        }
    return DS_ERR(DS_ERR_INVALID_ARG, "set: unknown %s", name);
}

static void sink_reset(sink *s, const pdef *defs, int n) {
    for (int k = 0; k < 64; k++) free(s->got[k]);
    memset(s, 0, sizeof *s);
    s->defs = defs;
    s->n = n;
    s->fail_at = -1;
}

/* Parameter k installed with value(k, i) rounded through `dt`. */
static void expect_values(const sink *s, int k, ds_st_dtype dt, const char *what) {
    if (!s->got[k]) {
        CHECK(0, "%s: %s not installed", what, s->defs[k].name);
        return;
    }
    CHECK((int64_t)s->numel[k] == numel_def(&s->defs[k]), "%s: %s numel %zu", what, s->defs[k].name,
          s->numel[k]);
    for (int64_t i = 0; i < numel_def(&s->defs[k]); i++) {
        float v = value(k, i);
        float want = dt == DS_ST_F16 ? ds_f16_to_f32(ds_f32_to_f16(v))
                     : dt == DS_ST_BF16 ? ds_bf16_to_f32(ds_f32_to_bf16(v))
                                        : v;
        if (s->got[k][i] != want) {
            CHECK(0, "%s: %s[%lld] = %g, want %g", what, s->defs[k].name, (long long)i,
                  s->got[k][i], want);
            return;
        }
    }
}

/* ---- checkpoints ---- */

typedef struct ck_entry {
    const char *name; /* name in the file */
    int k;            /* k_mini index for shape and values, -1 for extras */
    ds_st_dtype dt;
    int ndim;
    int64_t s0, s1; /* shape override when ndim > 0 */
} ck_entry;

static ds_st_decl decl_of(const ck_entry *e) {
    ds_st_decl d = {.name = e->name, .dtype = e->dt};
    if (e->ndim > 0) {
        d.ndim = e->ndim;
        d.shape[0] = e->s0;
        d.shape[1] = e->s1;
    } else {
        d.ndim = k_mini[e->k].ndim;
        d.shape[0] = k_mini[e->k].s0;
        d.shape[1] = k_mini[e->k].s1;
    }
    return d;
}

static void feed_entry(void *w, bool sharded, const ck_entry *e) {
    ds_st_decl d = decl_of(e);
    uint64_t n = 1;
    for (int i = 0; i < d.ndim; i++) n *= (uint64_t)d.shape[i];
    ds_status st = DS_OK;
    if (ds_st_dtype_is_float(e->dt)) {
        float *v = malloc(sizeof(float) * (n + 1));
        for (uint64_t i = 0; i < n; i++) v[i] = value(e->k < 0 ? 99 : e->k, (int64_t)i);
        st = sharded ? ds_st_sharded_write_f32(w, v, n) : ds_st_writer_write_f32(w, v, n);
        free(v);
    } else {
        size_t bytes = n * ds_st_dtype_size(e->dt);
        unsigned char *z = calloc(bytes + 1, 1);
        st = sharded ? ds_st_sharded_write(w, z, bytes) : ds_st_writer_write(w, z, bytes);
        free(z);
    }
    CHECK(st == DS_OK, "writing %s: %s", e->name, ds_last_error());
}

static void write_ckpt(const char *path, const ck_entry *e, int n) {
    ds_st_decl d[64] = {{0}};
    for (int i = 0; i < n; i++) d[i] = decl_of(&e[i]);
    ds_st_writer *w;
    ds_status st = ds_st_writer_open(path, d, n, NULL, 0, &w);
    CHECK(st == DS_OK, "open %s: %s", path, ds_last_error());
    if (st != DS_OK) return;
    for (int i = 0; i < n; i++) feed_entry(w, false, &e[i]);
    st = ds_st_writer_finish(w);
    CHECK(st == DS_OK, "finish %s: %s", path, ds_last_error());
}

static char g_dir[] = "/tmp/ds_test_hfw_XXXXXX";

static const char *tmp_path(const char *name) {
    static char p[4][600];
    static int r;
    r = (r + 1) % 4;
    snprintf(p[r], sizeof p[r], "%s/%s", g_dir, name);
    return p[r];
}

static bool listed(char **names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

/* ---- cases ---- */

static void test_prefixed_f32(ds_model *m, sink *s) {
    ck_entry e[N_MINI];
    for (int k = 0; k < N_MINI; k++) e[k] = (ck_entry){k_mini[k].name, k, DS_ST_F32, 0, 0, 0};
    const char *p = tmp_path("prefixed.safetensors");
    write_ckpt(p, e, N_MINI);
    sink_reset(s, k_mini, N_MINI);
    ds_hf_load_report rep;
    ds_status st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_OK, "prefixed: %s", ds_last_error());
    CHECK(rep.n_loaded == N_MINI && rep.n_missing == 0 && rep.n_unexpected == 0 &&
              !rep.prefix_added && rep.n_files == 1,
          "prefixed report: loaded %d missing %d unexpected %d prefix %d", rep.n_loaded,
          rep.n_missing, rep.n_unexpected, rep.prefix_added);
    for (int k = 0; k < N_MINI; k++) expect_values(s, k, DS_ST_F32, "prefixed");
    ds_hf_load_report_free(&rep);
}

static void test_base_model_f16(ds_model *m, sink *s) {
    /* BertModel / sentence-transformers: no "bert.", no classifier, a buffer */
    ck_entry e[N_MINI + 1];
    char names[N_MINI][DS_MAX_NAME];
    int n = 0;
    e[n++] = (ck_entry){"embeddings.position_ids", -1, DS_ST_I64, 2, 1, 8};
    for (int k = 0; k < N_MINI; k++) {
        if (strncmp(k_mini[k].name, "classifier", 10) == 0) continue;
        snprintf(names[k], DS_MAX_NAME, "%s", k_mini[k].name + 5);
        e[n++] = (ck_entry){names[k], k, DS_ST_F16, 0, 0, 0};
    }
    const char *p = tmp_path("base.safetensors");
    write_ckpt(p, e, n);
    sink_reset(s, k_mini, N_MINI);
    ds_hf_load_report rep;
    ds_status st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_OK, "base model: %s", ds_last_error());
    CHECK(rep.n_loaded == N_MINI - 2 && rep.n_missing == 2 && rep.n_unexpected == 0 &&
              rep.n_ignored_buffers == 1 && rep.prefix_added,
          "base report: loaded %d missing %d unexpected %d ignored %d prefix %d", rep.n_loaded,
          rep.n_missing, rep.n_unexpected, rep.n_ignored_buffers, rep.prefix_added);
    CHECK(listed(rep.missing, rep.n_missing, "classifier.weight") &&
              listed(rep.missing, rep.n_missing, "classifier.bias"),
          "classifier.* newly initialised");
    for (int k = 0; k < N_MINI - 2; k++) expect_values(s, k, DS_ST_F16, "base f16");
    CHECK(s->got[N_MINI - 1] == NULL && s->got[N_MINI - 2] == NULL, "classifier left alone");
    ds_hf_load_report_print(&rep, stdout);
    ds_hf_load_report_free(&rep);
}

static void test_no_pooler_mlm_head(ds_model *m, sink *s) {
    ck_entry e[N_MINI + 1];
    int n = 0;
    for (int k = 0; k < N_MINI; k++)
        if (!strstr(k_mini[k].name, "pooler") && !strstr(k_mini[k].name, "classifier"))
            e[n++] = (ck_entry){k_mini[k].name, k, DS_ST_F32, 0, 0, 0};
    e[n++] = (ck_entry){"cls.predictions.bias", -1, DS_ST_F32, 1, 10, 0};
    const char *p = tmp_path("mlm.safetensors");
    write_ckpt(p, e, n);
    sink_reset(s, k_mini, N_MINI);
    ds_hf_load_report rep;
    ds_status st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_OK, "mlm: %s", ds_last_error());
    CHECK(rep.n_missing == 4 && listed(rep.missing, rep.n_missing, "bert.pooler.dense.weight") &&
              listed(rep.missing, rep.n_missing, "bert.pooler.dense.bias"),
          "pooler + classifier missing: %d", rep.n_missing);
    CHECK(rep.n_unexpected == 1 && listed(rep.unexpected, rep.n_unexpected, "cls.predictions.bias"),
          "MLM head unexpected: %d", rep.n_unexpected);
    ds_hf_load_report_free(&rep);
}

static void test_gamma_beta_bf16(ds_model *m, sink *s) {
    ck_entry e[N_MINI];
    char names[N_MINI][DS_MAX_NAME];
    for (int k = 0; k < N_MINI; k++) {
        snprintf(names[k], DS_MAX_NAME, "%s", k_mini[k].name);
        char *ln = strstr(names[k], "LayerNorm.");
        if (ln && strcmp(ln, "LayerNorm.weight") == 0) strcpy(ln, "LayerNorm.gamma");
        if (ln && strcmp(ln, "LayerNorm.bias") == 0) strcpy(ln, "LayerNorm.beta");
        e[k] = (ck_entry){names[k], k, DS_ST_BF16, 0, 0, 0};
    }
    const char *p = tmp_path("tf.safetensors");
    write_ckpt(p, e, N_MINI);
    sink_reset(s, k_mini, N_MINI);
    ds_hf_load_report rep;
    ds_status st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_OK && rep.n_loaded == N_MINI && rep.n_unexpected == 0,
          "gamma/beta: %s (loaded %d, unexpected %d)", ds_last_error(), rep.n_loaded,
          rep.n_unexpected);
    for (int k = 0; k < N_MINI; k++) expect_values(s, k, DS_ST_BF16, "gamma/beta bf16");
    ds_hf_load_report_free(&rep);
}

static void test_sharded(ds_model *m, sink *s) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sharded", g_dir);
    mkdir(dir, 0755);
    ds_st_decl d[N_MINI];
    ck_entry e[N_MINI];
    for (int k = 0; k < N_MINI; k++) {
        e[k] = (ck_entry){k_mini[k].name, k, DS_ST_F32, 0, 0, 0};
        d[k] = decl_of(&e[k]);
    }
    ds_st_sharded *w;
    ds_status st = ds_st_sharded_open(dir, "model", d, N_MINI, 200, NULL, 0, &w);
    CHECK(st == DS_OK, "sharded open: %s", ds_last_error());
    if (st != DS_OK) return;
    int shards = ds_st_sharded_count(w);
    for (int k = 0; k < N_MINI; k++) feed_entry(w, true, &e[k]);
    CHECK(ds_st_sharded_finish(w) == DS_OK, "sharded finish: %s", ds_last_error());
    CHECK(shards >= 3, "expected >= 3 shards, got %d", shards);
    for (int pass = 0; pass < 2; pass++) {
        char p[700];
        snprintf(p, sizeof p, "%s%s", dir, pass ? "/model.safetensors.index.json" : "");
        sink_reset(s, k_mini, N_MINI);
        ds_hf_load_report rep;
        st = ds_hf_load_weights(m, p, sink_set, s, &rep);
        CHECK(st == DS_OK && rep.n_loaded == N_MINI && rep.n_files == shards,
              "sharded via %s: %s (loaded %d, files %d)", p, ds_last_error(), rep.n_loaded,
              rep.n_files);
        /* the folder and the index itself both name the index as the source */
        char want[700];
        snprintf(want, sizeof want, "%s/model.safetensors.index.json", dir);
        CHECK(st == DS_OK && rep.source && strcmp(rep.source, want) == 0,
              "sharded via %s: source %s, expected %s", p, rep.source ? rep.source : "(null)", want);
        for (int k = 0; k < N_MINI; k++) expect_values(s, k, DS_ST_F32, "sharded");
        ds_hf_load_report_free(&rep);
    }
    /* an index naming a tensor that its shard does not hold */
    char ip[700];
    snprintf(ip, sizeof ip, "%s/bad.index.json", dir);
    FILE *fp = fopen(ip, "w");
    char shard1[64];
    ds_st_shard_name("model", 0, shards, shard1, sizeof shard1);
    fprintf(fp, "{\"metadata\": {}, \"weight_map\": {\"classifier.bias\": \"%s\"}}", shard1);
    fclose(fp);
    sink_reset(s, k_mini, N_MINI);
    ds_hf_load_report rep;
    st = ds_hf_load_weights(m, ip, sink_set, s, &rep);
    CHECK(st == DS_ERR_CORRUPT && strstr(ds_last_error(), "classifier.bias") &&
              strstr(ds_last_error(), shard1),
          "index naming an absent tensor: %s %s", ds_status_to_string(st), ds_last_error());
    ds_hf_load_report_free(&rep);
}

static void test_errors(ds_model *m, sink *s) {
    ds_hf_load_report rep;
    /* two mis-shaped tensors: both named with both shapes, nothing installed */
    ck_entry e[N_MINI];
    for (int k = 0; k < N_MINI; k++) e[k] = (ck_entry){k_mini[k].name, k, DS_ST_F32, 0, 0, 0};
    e[0] = (ck_entry){k_mini[0].name, 0, DS_ST_F32, 2, 11, 4};
    e[N_MINI - 2] = (ck_entry){k_mini[N_MINI - 2].name, N_MINI - 2, DS_ST_F32, 2, 3, 4};
    const char *p = tmp_path("misshaped.safetensors");
    write_ckpt(p, e, N_MINI);
    sink_reset(s, k_mini, N_MINI);
    ds_status st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_ERR_DATA, "mis-shaped: %s", ds_status_to_string(st));
    CHECK(strstr(ds_last_error(), "bert.embeddings.word_embeddings.weight: checkpoint [11, 4] vs "
                                  "model [10, 4]") &&
              strstr(ds_last_error(), "classifier.weight: checkpoint [3, 4] vs model [2, 4]"),
          "mis-shaped message: %s", ds_last_error());
    CHECK(rep.n_mismatched == 2, "report lists %d mis-shaped", rep.n_mismatched);
    CHECK(s->calls == 0, "nothing installed on a mis-shape (%d calls)", s->calls);
    printf("  mis-shaped -> %s\n", ds_last_error());
    ds_hf_load_report_free(&rep);

    /* an integer tensor where a parameter is */
    for (int k = 0; k < N_MINI; k++) e[k] = (ck_entry){k_mini[k].name, k, DS_ST_F32, 0, 0, 0};
    e[3].dt = DS_ST_I32;
    p = tmp_path("int.safetensors");
    write_ckpt(p, e, N_MINI);
    sink_reset(s, k_mini, N_MINI);
    st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_ERR_DATA && strstr(ds_last_error(), k_mini[3].name) &&
              strstr(ds_last_error(), "I32"),
          "integer tensor: %s", ds_last_error());
    ds_hf_load_report_free(&rep);

    /* one parameter under two names */
    ck_entry two[2] = {{k_mini[4].name, 4, DS_ST_F32, 0, 0, 0},
                       {k_mini[4].name + 5, 4, DS_ST_F32, 0, 0, 0}};
    p = tmp_path("twice.safetensors");
    write_ckpt(p, two, 2);
    sink_reset(s, k_mini, N_MINI);
    st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_ERR_DATA && strstr(ds_last_error(), "both map onto"), "two names: %s",
          ds_last_error());
    ds_hf_load_report_free(&rep);

    /* a failing set: its status comes back, with the parameter named */
    p = tmp_path("prefixed.safetensors");
    sink_reset(s, k_mini, N_MINI);
    s->fail_at = 2;
    st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_ERR_BACKEND && strstr(ds_last_error(), "injected") &&
              strstr(ds_last_error(), k_mini[2].name),
          "set failure: %s %s", ds_status_to_string(st), ds_last_error());
    ds_hf_load_report_free(&rep);

    /* folders without safetensors */
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    mkdir(empty, 0755);
    st = ds_hf_load_weights(m, empty, sink_set, s, &rep);
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), empty), "empty folder: %s", ds_last_error());
    char pt[700];
    snprintf(pt, sizeof pt, "%s/pytorch_model.bin", empty);
    FILE *fp = fopen(pt, "w");
    fputs("pickle", fp);
    fclose(fp);
    st = ds_hf_load_weights(m, empty, sink_set, s, &rep);
    CHECK(st == DS_ERR_UNSUPPORTED && strstr(ds_last_error(), "pytorch_model.bin"),
          "pickle only: %s", ds_last_error());
    /* a corrupt file: the reader's error */
    p = tmp_path("junk.safetensors");
    fp = fopen(p, "w");
    fputs("not a safetensors file at all", fp);
    fclose(fp);
    st = ds_hf_load_weights(m, p, sink_set, s, &rep);
    CHECK(st == DS_ERR_CORRUPT && strstr(ds_last_error(), p), "junk: %s", ds_last_error());
}

/* The checkpoint transformers wrote (F16) onto the dump's parameter list. */
static void test_transformers_checkpoint(void) {
    ref_dump ref;
    char err[512];
    if (ref_dump_load(DS_TEST_DATA_DIR "/bert_ref_tiny.bin", &ref, err, sizeof err) != 0) {
        CHECK(0, "%s", err);
        return;
    }
    int n = ref_dump_n_params(&ref);
    pdef *defs = calloc((size_t)n, sizeof *defs);
    for (int i = 0; i < n; i++) {
        int ndim;
        int64_t shape[4];
        ref_dump_param_f32(&ref, "param", ref_dump_param_name(&ref, i), NULL, &ndim, shape);
        defs[i] = (pdef){ref_dump_param_name(&ref, i), ndim, shape[0], ndim > 1 ? shape[1] : 0};
    }
    ds_model *m = fake_model(defs, n);
    sink s = {0};
    sink_reset(&s, defs, n);
    ds_hf_load_report rep;
    ds_status st = ds_hf_load_weights(m, DS_TEST_DATA_DIR "/bert_ref_tiny_hf", sink_set, &s, &rep);
    CHECK(st == DS_OK && rep.n_loaded == n && rep.n_missing == 0 && rep.n_unexpected == 0,
          "transformers checkpoint: %s (loaded %d of %d, missing %d, unexpected %d)",
          ds_last_error(), rep.n_loaded, n, rep.n_missing, rep.n_unexpected);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        size_t numel;
        const float *want = ref_dump_param_f32(&ref, "param", defs[i].name, &numel, NULL, NULL);
        if (!s.got[i] || s.numel[i] != numel) {
            CHECK(0, "%s not installed with %zu values", defs[i].name, numel);
            continue;
        }
        /* save_pretrained ran model.half(): round to nearest even, as dtype.h */
        for (size_t j = 0; j < numel && bad < 5; j++)
            if (s.got[i][j] != ds_f16_to_f32(ds_f32_to_f16(want[j]))) {
                CHECK(0, "%s[%zu] = %.8g, dump %.8g as fp16 %.8g", defs[i].name, j, s.got[i][j],
                      want[j], ds_f16_to_f32(ds_f32_to_f16(want[j])));
                bad++;
            }
    }
    ds_hf_load_report_free(&rep);
    sink_reset(&s, defs, n);
    fake_free(m);
    free(defs);
    ref_dump_free(&ref);
}

int main(void) {
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    ds_model *m = fake_model(k_mini, N_MINI);
    sink s = {0};
    test_prefixed_f32(m, &s);
    test_base_model_f16(m, &s);
    test_no_pooler_mlm_head(m, &s);
    test_gamma_beta_bf16(m, &s);
    test_sharded(m, &s);
    test_errors(m, &s);
    sink_reset(&s, k_mini, N_MINI);
    fake_free(m);
    test_transformers_checkpoint();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (test_fails() == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    if (test_fails()) fprintf(stderr, "test_hf_weights: files kept in %s\n", g_dir);
    return test_finish("test_hf_weights");
}
