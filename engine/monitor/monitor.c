/* The monitors of monitor.h: a TensorBoard event file and DeepSpeed's
 * one-CSV-per-scalar layout, behind one write call. */
#include "engine/monitor/monitor.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "engine/io/ckpt_dir.h"
#include "engine/monitor/tb_events.h"

/* One CSV file per tag; a run logs a dozen or so scalars. */
typedef struct csv_file {
    char *tag;
    FILE *f;
} csv_file;

struct ds_monitor {
    FILE *tb;                 /* NULL: TensorBoard off */
    char tb_path[PATH_MAX];
    char csv_dir[PATH_MAX];   /* "": csv_monitor off */
    csv_file *csv;
    int n_csv, cap_csv;
};

/* mkdir -p (DeepSpeed's os.makedirs(log_dir, exist_ok=True)); the error
 * names the config key. */
static ds_status make_dirs(const char *path, const char *key) {
    ds_status st = ds_ckpt_mkdirs(path);
    if (st != DS_OK) ds_error_prefix("%s", key);
    return st;
}

/* output_path/job_name; output_path "" is the current folder (DeepSpeed
 * joins "" and job_name the same way). */
static ds_status log_dir(const ds_monitor_config *c, const char *key, char *out, size_t cap) {
    const char *base = c->output_path[0] ? c->output_path : ".";
    size_t bl = strlen(base);
    if (snprintf(out, cap, "%s%s%s", base, base[bl - 1] == '/' ? "" : "/", c->job_name) >=
        (int)cap)
        return DS_ERR(DS_ERR_IO, "%s: path too long", key);
    return make_dirs(out, key);
}

static double wall_now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static ds_status tb_put(ds_monitor *m, double wall, int64_t step, const char *tag, float v) {
    uint8_t ev[600], rec[616];
    size_t n = ds_tb_event_encode(ev, sizeof ev, wall, step, tag, v);
    if (n == 0) return DS_ERR(DS_ERR_INVALID_ARG, "tensorboard: tag too long (%zu characters, at "
                              "most 500): %s", tag ? strlen(tag) : 0, tag ? tag : "");
    size_t r = ds_tb_record_frame(rec, ev, n);
    if (fwrite(rec, 1, r, m->tb) != r)
        return DS_ERR(DS_ERR_IO, "tensorboard: writing %s: %s", m->tb_path, strerror(errno));
    return DS_OK;
}

static ds_status tb_open(ds_monitor *m, const ds_monitor_config *c) {
    char dir[PATH_MAX - 128], host[64] = "localhost";
    DS_TRY(log_dir(c, "tensorboard.output_path", dir, sizeof dir));
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    double wall = wall_now();
    /* torch.utils.tensorboard's name: TensorBoard finds files by "tfevents" */
    snprintf(m->tb_path, sizeof m->tb_path, "%s/events.out.tfevents.%010lld.%s.%d.0", dir,
             (long long)wall, host, (int)getpid());
    if (!(m->tb = fopen(m->tb_path, "wb")))
        return DS_ERR(DS_ERR_IO, "tensorboard: cannot create %s: %s", m->tb_path, strerror(errno));
    DS_TRY(tb_put(m, wall, 0, NULL, 0.0f));
    return ds_monitor_flush(m);
}

ds_status ds_monitor_open(const ds_config *cfg, int rank, ds_monitor **out) {
    *out = NULL;
    if (rank != 0 || (!cfg->tensorboard.enabled && !cfg->csv_monitor.enabled)) return DS_OK;
    ds_monitor *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "monitor: out of memory");
    ds_status st = DS_OK;
    if (cfg->tensorboard.enabled) st = tb_open(m, &cfg->tensorboard);
    if (st == DS_OK && cfg->csv_monitor.enabled)
        st = log_dir(&cfg->csv_monitor, "csv_monitor.output_path", m->csv_dir,
                     sizeof m->csv_dir - 256);
    if (st != DS_OK) {
        ds_monitor_close(m);
        return st;
    }
    *out = m;
    return DS_OK;
}

/* The tag's CSV file, opened (and its header written) on first use.
 * DeepSpeed appends ("a+") and writes the header the first time this
 * process sees the tag; so do we. */
static ds_status csv_for(ds_monitor *m, const char *tag, FILE **out) {
    for (int i = 0; i < m->n_csv; i++)
        if (strcmp(m->csv[i].tag, tag) == 0) {
            *out = m->csv[i].f;
            return DS_OK;
        }
    char name[256], path[PATH_MAX];
    size_t tl = strlen(tag);
    if (tl >= sizeof name - 4)
        return DS_ERR(DS_ERR_INVALID_ARG, "csv_monitor: tag too long (%zu characters): %s", tl,
                      tag);
    for (size_t i = 0; i <= tl; i++) name[i] = tag[i] == '/' || tag[i] == ' ' ? '_' : tag[i];
    if (snprintf(path, sizeof path, "%s/%s.csv", m->csv_dir, name) >= (int)sizeof path)
        return DS_ERR(DS_ERR_IO, "csv_monitor: path too long: %s/%s.csv", m->csv_dir, name);
    if (m->n_csv == m->cap_csv) {
        int cap = m->cap_csv ? 2 * m->cap_csv : 16;
        csv_file *g = realloc(m->csv, (size_t)cap * sizeof *g);
        if (!g) return DS_ERR(DS_ERR_OOM, "csv_monitor: out of memory");
        m->csv = g;
        m->cap_csv = cap;
    }
    FILE *f = fopen(path, "a");
    if (!f) return DS_ERR(DS_ERR_IO, "csv_monitor: cannot open %s: %s", path, strerror(errno));
    char *copy = strdup(tag);
    if (!copy) {
        fclose(f);
        return DS_ERR(DS_ERR_OOM, "csv_monitor: out of memory");
    }
    const char *slash = strrchr(tag, '/');
    fprintf(f, "step,%s\n", slash ? slash + 1 : tag);
    m->csv[m->n_csv++] = (csv_file){.tag = copy, .f = f};
    *out = f;
    return DS_OK;
}

ds_status ds_monitor_write(ds_monitor *m, const char *tag, double value, int64_t step) {
    if (!m) return DS_OK;
    if (!tag || !tag[0]) return DS_ERR(DS_ERR_INVALID_ARG, "monitor: empty tag");
    if (m->tb) DS_TRY(tb_put(m, wall_now(), step, tag, (float)value));
    if (m->csv_dir[0]) {
        FILE *f;
        DS_TRY(csv_for(m, tag, &f));
        /* %.9g: a float32's value round-trips; doubles keep 9 digits, more than
           any scalar a run logs is worth */
        if (fprintf(f, "%lld,%.9g\n", (long long)step, value) < 0)
            return DS_ERR(DS_ERR_IO, "csv_monitor: writing %s in %s: %s", tag, m->csv_dir,
                          strerror(errno));
    }
    return DS_OK;
}

ds_status ds_monitor_flush(ds_monitor *m) {
    if (!m) return DS_OK;
    if (m->tb && fflush(m->tb) != 0)
        return DS_ERR(DS_ERR_IO, "tensorboard: writing %s: %s", m->tb_path, strerror(errno));
    for (int i = 0; i < m->n_csv; i++)
        if (fflush(m->csv[i].f) != 0)
            return DS_ERR(DS_ERR_IO, "csv_monitor: writing %s in %s: %s", m->csv[i].tag,
                          m->csv_dir, strerror(errno));
    return DS_OK;
}

const char *ds_monitor_event_file(const ds_monitor *m) { return m && m->tb ? m->tb_path : ""; }
const char *ds_monitor_csv_dir(const ds_monitor *m) { return m ? m->csv_dir : ""; }

void ds_monitor_close(ds_monitor *m) {
    if (!m) return;
    if (m->tb) fclose(m->tb);
    for (int i = 0; i < m->n_csv; i++) {
        fclose(m->csv[i].f);
        free(m->csv[i].tag);
    }
    free(m->csv);
    free(m);
}
