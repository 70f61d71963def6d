/* Monitors (engine/monitor/monitor.h): the config sections, the TensorBoard
 * event file read back by a reader written here from the format's
 * description (TFRecord framing with masked CRC-32C computed bit by bit, not
 * with the library's table; protobuf decoded field by field), the CSV
 * layout of DeepSpeed's csvMonitor, and the engine's per-step scalars.
 *
 *   test_monitor            the checks
 *   test_monitor dump FILE  prints "tag step value" per scalar event (for
 *                           comparing with TensorBoard's own reader) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/multirank/ckpt_harness.h"
#include "tests/unit/test_util.h"

/* ---- an independent reader ---- */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct ev {
    double wall;
    int64_t step;
    char version[32];
    char tag[128];
    float value;
    int has_value;
} ev;

static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *out) {
    uint64_t v = 0;
    for (int sh = 0; *i < n && sh < 64; sh += 7) {
        uint8_t b = p[(*i)++];
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Decode a message, calling back for each field; skips what it does not need. */
typedef int (*field_fn)(void *u, int field, int wire, uint64_t v, const uint8_t *data, size_t len);
static int decode(const uint8_t *p, size_t n, field_fn fn, void *u) {
    size_t i = 0;
    while (i < n) {
        uint64_t key, v = 0, len = 0;
        if (varint(p, n, &i, &key)) return -1;
        int wire = (int)(key & 7), field = (int)(key >> 3);
        const uint8_t *data = NULL;
        if (wire == 0) {
            if (varint(p, n, &i, &v)) return -1;
        } else if (wire == 1 || wire == 5) {
            size_t w = wire == 1 ? 8 : 4;
            if (i + w > n) return -1;
            v = le(p + i, (int)w);
            i += w;
        } else if (wire == 2) {
            if (varint(p, n, &i, &len) || i + len > n) return -1;
            data = p + i;
            i += len;
        } else {
            return -1;
        }
        if (fn(u, field, wire, v, data, (size_t)len)) return -1;
    }
    return 0;
}

static int value_field(void *u, int field, int wire, uint64_t v, const uint8_t *d, size_t len) {
    ev *e = u;
    if (field == 1 && wire == 2 && len < sizeof e->tag) {
        memcpy(e->tag, d, len);
        e->tag[len] = 0;
    } else if (field == 2 && wire == 5) {
        uint32_t bits = (uint32_t)v;
        memcpy(&e->value, &bits, 4);
        e->has_value = 1;
    }
    return 0;
}

static int summary_field(void *u, int field, int wire, uint64_t v, const uint8_t *d, size_t len) {
    (void)v;
    if (field == 1 && wire == 2) return decode(d, len, value_field, u);
    return 0;
}

static int event_field(void *u, int field, int wire, uint64_t v, const uint8_t *d, size_t len) {
    ev *e = u;
    if (field == 1 && wire == 1) memcpy(&e->wall, &v, 8);
    else if (field == 2 && wire == 0) e->step = (int64_t)v;
    else if (field == 3 && wire == 2 && len < sizeof e->version) {
        memcpy(e->version, d, len);
        e->version[len] = 0;
    } else if (field == 5 && wire == 2)
        return decode(d, len, summary_field, u);
    return 0;
}

/* Every record of `path`, CRCs checked; returns the count, -1 on a bad file. */
static int read_events(const char *path, ev *out, int cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0;
    uint8_t hdr[12], buf[4096], foot[4];
    while (fread(hdr, 1, 12, f) == 12) {
        uint64_t len = le(hdr, 8);
        if (le(hdr + 8, 4) != masked(crc32c_bitwise(hdr, 8)) || len > sizeof buf ||
            fread(buf, 1, len, f) != len || fread(foot, 1, 4, f) != 4 ||
            le(foot, 4) != masked(crc32c_bitwise(buf, len)) || n == cap) {
            fclose(f);
            return -1;
        }
        memset(&out[n], 0, sizeof out[n]);
        if (decode(buf, len, event_field, &out[n])) {
            fclose(f);
            return -1;
        }
        n++;
    }
    fclose(f);
    return n;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* ---- the checks ---- */

static char dir[256];

static void test_config(void) {
    ds_config c;
    CHECK_OK(ds_config_parse_string("{}", &c, NULL, NULL));
    CHECK_TRUE(!c.tensorboard.enabled && !c.csv_monitor.enabled);
    CHECK(strcmp(c.tensorboard.job_name, "DeepSpeedJobName") == 0, "%s", c.tensorboard.job_name);
    CHECK(c.tensorboard.output_path[0] == 0, "%s", c.tensorboard.output_path);
    CHECK_OK(ds_config_parse_string("{\"tensorboard\": {\"enabled\": true, \"output_path\": "
                                    "\"runs\", \"job_name\": \"j\"}, \"csv_monitor\": "
                                    "{\"enabled\": true}}", &c, NULL, NULL));
    CHECK_TRUE(c.tensorboard.enabled && c.csv_monitor.enabled);
    CHECK(strcmp(c.tensorboard.output_path, "runs") == 0, "%s", c.tensorboard.output_path);
    CHECK(strcmp(c.tensorboard.job_name, "j") == 0, "%s", c.tensorboard.job_name);
    CHECK(strcmp(c.csv_monitor.job_name, "DeepSpeedJobName") == 0, "%s", c.csv_monitor.job_name);
    char *json = ds_config_to_json(&c);
    CHECK(json && strstr(json, "\"tensorboard\"") && strstr(json, "\"runs\""), "to_json: %s",
          json ? json : "NULL");
    free(json);
    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"tensorboard\": {\"enabled\": 1}}", "tensorboard.enabled"},
        {"{\"tensorboard\": {\"output_path\": 3}}", "tensorboard.output_path: must be a string"},
        {"{\"csv_monitor\": {\"job_name\": \"\"}}", "csv_monitor.job_name: must not be empty"},
        {"{\"csv_monitor\": {\"job_name\": \"..\"}}", "csv_monitor.job_name: must name a folder"},
        {"{\"csv_monitor\": {\"jobname\": \"x\"}}", "csv_monitor.jobname"},
        {"{\"tensorboard\": true}", "tensorboard"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_status st = ds_config_parse_string(bad[i].json, &c, NULL, NULL);
        CHECK(st != DS_OK && strstr(ds_last_error(), bad[i].want), "%s -> %s", bad[i].json,
              st == DS_OK ? "accepted" : ds_last_error());
    }
}

static void test_writer(void) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"tensorboard\": {\"enabled\": true, \"output_path\": \"%s/tb/\", \"job_name\": "
             "\"job\"}, \"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s/csv\", "
             "\"job_name\": \"job\"}}", dir, dir);
    ds_config c;
    REQUIRE_OK(ds_config_parse_string(json, &c, NULL, NULL));
    ds_monitor *m = NULL;
    CHECK_OK(ds_monitor_open(&c, 1, &m)); /* not rank 0: nothing */
    CHECK_TRUE(m == NULL);
    CHECK_OK(ds_monitor_write(NULL, "x", 1.0, 1)); /* a no-op */
    REQUIRE_OK(ds_monitor_open(&c, 0, &m));
    CHECK_OK(ds_monitor_write(m, "Train/Samples/train_loss", 2.5, 16));
    CHECK_OK(ds_monitor_write(m, "Train/Samples/lr", 1e-3, 16));
    CHECK_OK(ds_monitor_write(m, "Train/Samples/train_loss", 0.125, 32));
    CHECK_OK(ds_monitor_write(m, "my metric", -7.0, 3000000000LL)); /* a 5-byte varint */
    CHECK(ds_monitor_write(m, "", 1.0, 1) == DS_ERR_INVALID_ARG, "empty tag accepted");
    char ev_path[512];
    snprintf(ev_path, sizeof ev_path, "%s", ds_monitor_event_file(m));
    ds_monitor_close(m);

    char want_dir[320];
    snprintf(want_dir, sizeof want_dir, "%s/tb/job/events.out.tfevents.", dir);
    CHECK(strncmp(ev_path, want_dir, strlen(want_dir)) == 0, "event file %s", ev_path);
    ev e[16];
    int n = read_events(ev_path, e, 16);
    CHECK(n == 5, "%d records (5 expected: the version and 4 scalars)", n);
    if (n == 5) {
        CHECK(strcmp(e[0].version, "brain.Event:2") == 0, "first event: version '%s'",
              e[0].version);
        CHECK(e[0].wall > 1.6e9, "wall time %f", e[0].wall);
        static const struct {
            const char *tag;
            float v;
            int64_t step;
        } want[] = {{"Train/Samples/train_loss", 2.5f, 16}, {"Train/Samples/lr", 1e-3f, 16},
                    {"Train/Samples/train_loss", 0.125f, 32}, {"my metric", -7.0f, 3000000000LL}};
        for (int i = 0; i < 4; i++) {
            const ev *x = &e[i + 1];
            CHECK(strcmp(x->tag, want[i].tag) == 0, "record %d tag '%s'", i + 1, x->tag);
            /* the float written is the value rounded once to float: exact */
            CHECK(x->has_value && x->value == want[i].v, "record %d value %g", i + 1, x->value);
            CHECK(x->step == want[i].step, "record %d step %lld", i + 1, (long long)x->step);
            CHECK(x->wall >= e[0].wall, "record %d wall %f", i + 1, x->wall);
        }
    }
    /* a flipped byte is caught by the CRC */
    FILE *f = fopen(ev_path, "r+b");
    if (f) {
        fseek(f, 40, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(ch ^ 1, f);
        fclose(f);
        CHECK(read_events(ev_path, e, 16) < 0, "a corrupted file read back as good");
    }

    char p[512];
    snprintf(p, sizeof p, "%s/csv/job/Train_Samples_train_loss.csv", dir);
    char *s = slurp(p);
    CHECK(s && strcmp(s, "step,train_loss\n16,2.5\n32,0.125\n") == 0, "%s: %s", p, s ? s : "absent");
    snprintf(p, sizeof p, "%s/csv/job/Train_Samples_lr.csv", dir);
    s = slurp(p);
    CHECK(s && strcmp(s, "step,lr\n16,0.001\n") == 0, "%s: %s", p, s ? s : "absent");
    snprintf(p, sizeof p, "%s/csv/job/my_metric.csv", dir);
    s = slurp(p);
    CHECK(s && strcmp(s, "step,my metric\n3000000000,-7\n") == 0, "%s: %s", p, s ? s : "absent");

    /* a folder that cannot be made names itself */
    snprintf(json, sizeof json, "{\"csv_monitor\": {\"enabled\": true, \"output_path\": "
             "\"%s/csv/job/my_metric.csv\"}}", dir);
    REQUIRE_OK(ds_config_parse_string(json, &c, NULL, NULL));
    ds_status st = ds_monitor_open(&c, 0, &m);
    CHECK(st == DS_ERR_IO && strstr(ds_last_error(), "my_metric.csv"), "%s",
          st == DS_OK ? "opened" : ds_last_error());
}

/* The engine's scalars: train_loss, lr, grad_norm at each step's global
 * sample count, equal to what ds_train_batch reports. */
/* An engine of a small MLP on the harness's data with config `cfg`. */
static engine_t *mlp_engine(const char *cfg, ds_dataset *data) {
    ds_mlp_desc md = {.vocab_size = 50, .max_seq_len = 12, .embed_dim = 16, .hidden_dim = 32,
                      .n_hidden = 1, .n_classes = 3};
    ds_model *model;
    REQUIRE_OK(ds_mlp_create(&md, &model));
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = cfg;
    d.model = model;
    d.train_data = data;
    d.quiet = true;
    engine_t *e;
    REQUIRE_OK(ds_initialize(&d, &e));
    return e;
}

static void test_engine(void) {
    ds_dataset *data = ck_data();
    char cfg[1200];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.003}}, \"tensorboard\": {\"enabled\": true, \"output_path\": \"%s/eng\"},"
             " \"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s/eng\"}}", dir, dir);
    engine_t *e = mlp_engine(cfg, data);
    REQUIRE_OK(ds_monitor_write(ds_get_monitor(e), "Eval/accuracy", 0.5, 0));
    ds_step_info info[3];
    for (int i = 0; i < 3; i++) CHECK_OK(ds_train_batch(e, &info[i]));
    char ev_path[512];
    snprintf(ev_path, sizeof ev_path, "%s", ds_monitor_event_file(ds_get_monitor(e)));
    ds_finalize(e);
    ds_dataset_destroy(data);

    ev x[128];
    int n = read_events(ev_path, x, 128);
    CHECK(n > 3 * 5, "%s: %d records", ev_path, n);
    int losses = 0, lrs = 0, mems = 0, acc = 0;
    for (int i = 1; i < n; i++) {
        if (strcmp(x[i].tag, "Eval/accuracy") == 0) acc++;
        if (strncmp(x[i].tag, "Train/Samples/memory_", 21) == 0 && x[i].value >= 0) mems++;
        int k = losses < 3 ? losses : 2;
        if (strcmp(x[i].tag, "Train/Samples/train_loss") == 0) {
            CHECK(x[i].step == info[k].samples, "loss %d at %lld, want %lld", k,
                  (long long)x[i].step, (long long)info[k].samples);
            CHECK(x[i].value == (float)info[k].loss, "loss %d: %g vs %g", k, x[i].value,
                  info[k].loss);
            losses++;
        }
        if (strcmp(x[i].tag, "Train/Samples/lr") == 0) {
            CHECK(x[i].value == (float)info[lrs < 3 ? lrs : 2].lr, "lr %g", x[i].value);
            lrs++;
        }
    }
    CHECK(losses == 3 && lrs == 3 && acc == 1, "losses %d lrs %d eval %d", losses, lrs, acc);
    CHECK(mems == 3 * DS_MEM_PURPOSE_COUNT, "%d memory scalars (3 steps x %d purposes)", mems,
          (int)DS_MEM_PURPOSE_COUNT);
    char p[512];
    snprintf(p, sizeof p, "%s/eng/DeepSpeedJobName/Train_Samples_grad_norm.csv", dir);
    char *s = slurp(p);
    int rows = 0;
    for (char *q = s; q && *q; q++) rows += *q == '\n';
    CHECK(s && strncmp(s, "step,grad_norm\n", 15) == 0 && rows == 4, "%s: %s", p,
          s ? s : "absent");
}

/* samples_per_sec after a checkpoint's load: measured from the load, not
 * from ds_initialize. A load that rewinds (a retry's reload, --resume-from
 * an older tag) made the first rate after it negative (fewer samples than
 * the baseline), a resume gave every sample since step 0 over the time
 * since the start. Checked by sign only: a rate is never compared with a
 * time. */
static void test_rate_after_load(void) {
    ds_dataset *data = ck_data();
    char cfg[1200], ck[400];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"params\": "
             "{\"lr\": 0.003}}, \"tensorboard\": {\"enabled\": true, \"output_path\": "
             "\"%s/rate\"}}", dir);
    snprintf(ck, sizeof ck, "%s/rate_ckpt", dir);
    engine_t *e = mlp_engine(cfg, data);
    CHECK_OK(ds_train_batch(e, NULL));
    REQUIRE_OK(ds_save_checkpoint(e, ck, NULL, NULL));
    for (int i = 0; i < 3; i++) CHECK_OK(ds_train_batch(e, NULL));
    REQUIRE_OK(ds_load_checkpoint(e, ck, NULL, DS_LOAD_ALL)); /* back to step 1 */
    CHECK_OK(ds_train_batch(e, NULL));
    char ev_path[512];
    snprintf(ev_path, sizeof ev_path, "%s", ds_monitor_event_file(ds_get_monitor(e)));
    ds_finalize(e);
    ds_dataset_destroy(data);
    ev x[256];
    int n = read_events(ev_path, x, 256), rates = 0;
    for (int i = 1; i < n; i++)
        if (strcmp(x[i].tag, "Train/Samples/samples_per_sec") == 0) {
            rates++;
            CHECK(x[i].value > 0, "samples_per_sec %d (at %lld samples) is %g", rates,
                  (long long)x[i].step, x[i].value);
        }
    CHECK(rates == 5, "%d samples_per_sec values, want 5", rates);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "dump") == 0) {
        static ev e[100000];
        int n = read_events(argv[2], e, 100000);
        if (n < 0) {
            fprintf(stderr, "%s: not a valid event file\n", argv[2]);
            return 1;
        }
        for (int i = 0; i < n; i++)
            if (e[i].has_value) printf("%s %lld %.9g\n", e[i].tag, (long long)e[i].step, e[i].value);
        return 0;
    }
    snprintf(dir, sizeof dir, "/tmp/test_monitor.%d", (int)getpid());
    mkdir(dir, 0777);
    test_config();
    test_writer();
    test_engine();
    test_rate_after_load();
    if (!test_fails()) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    return test_finish("test_monitor");
}
