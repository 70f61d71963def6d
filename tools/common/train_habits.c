/* Evaluation during training, the best model, early stopping and the
 * --metrics cadence (train_habits.h). */
#define _XOPEN_SOURCE 700
#include "tools/common/train_habits.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "engine/io/ckpt_dir.h"
#include "tools/common/trainer.h"
#include "tools/common/trainer_run.h"

void tr_eval_put(tr_eval_result *r, const char *name, double value) {
    if (r->n == TR_EVAL_MAX) return;
    r->name[r->n] = name;
    r->value[r->n++] = value;
}

bool tr_metric_known(const char *names, const char *metric, bool *higher_better) {
    if (!names || !metric || !metric[0]) return false;
    size_t ml = strlen(metric);
    bool found = false;
    for (const char *p = names; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == ml && strncmp(p, metric, n) == 0) found = true;
        p += n + (end != NULL);
    }
    *higher_better = strcmp(metric, "loss") != 0 && strcmp(metric, "perplexity") != 0;
    return found;
}

void tr_monitor_eval(engine_t *e, const char *prog, const tr_eval_result *res, int64_t samples) {
    ds_monitor *m = ds_get_monitor(e);
    for (int i = 0; m && i < res->n; i++) {
        char tag[64];
        snprintf(tag, sizeof tag, "Eval/%s", res->name[i]);
        if (ds_monitor_write(m, tag, res->value[i], samples) != DS_OK) {
            /* a log file that cannot be written does not end the training */
            fprintf(stderr, "%s: monitor: %s\n", prog, ds_last_error());
            return;
        }
    }
    if (ds_monitor_flush(m) != DS_OK) fprintf(stderr, "%s: monitor: %s\n", prog, ds_last_error());
}

void tr_habits_init(tr_habits *h, const tr_opts *o, tr_evaluate_fn evaluate, void *eval_user,
                    tr_habits_describe_fn describe, void *describe_user) {
    memset(h, 0, sizeof *h);
    h->o = o;
    h->evaluate = evaluate;
    h->eval_user = eval_user;
    h->describe = describe;
    h->describe_user = describe_user;
    h->higher_better = true;
    if (o->save_best) tr_metric_known(o->save_best, o->save_best, &h->higher_better);
}

void tr_habits_record(const tr_habits *h, tr_run *r) {
    const tr_opts *o = h->o;
    /* a run without these flags writes the file it always wrote */
    if (!r->metrics || (!o->eval_steps && !o->save_best && o->logging_steps == 1)) return;
    tr_jline top, t;
    tr_jline_begin(&top, r->metrics);
    tr_jline_key(&top, "trainer");
    tr_jline_begin(&t, r->metrics);
    tr_jline_int(&t, "eval_steps", (long long)o->eval_steps);
    tr_jline_key(&t, "save_best");
    if (o->save_best) fprintf(r->metrics, "\"%s\"", o->save_best); /* a checked metric name */
    else fputs("null", r->metrics);
    tr_jline_int(&t, "early_stopping", o->early_stopping);
    tr_jline_int(&t, "logging_steps", (long long)o->logging_steps);
    tr_jline_int(&t, "total_steps", (long long)r->total);
    tr_jline_end(&t);
    tr_jline_end(&top);
    fputc('\n', r->metrics);
    tr_metrics_written(r);
}

bool tr_habits_log(tr_habits *h, ds_step_info *info, bool last) {
    if (!h) return true;
    h->loss_sum += info->loss;
    h->loss_n++;
    if (info->step % h->o->logging_steps != 0 && !last) return false;
    info->loss = h->loss_sum / (double)h->loss_n;
    h->loss_sum = 0.0;
    h->loss_n = 0;
    return true;
}

/* ---- the best model's folder ---- */

/* fsync every file of a flat folder, then the folder: the new best must be
 * on disk before it replaces the old one (ds_ckpt_commit_dir renames only). */
static ds_status sync_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return DS_ERR(DS_ERR_IO, "cannot open %s: %s", dir, strerror(errno));
    ds_status st = DS_OK;
    struct dirent *ent;
    while (st == DS_OK && (ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char path[4608];
        snprintf(path, sizeof path, "%.4300s/%s", dir, ent->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0)
            st = DS_ERR(DS_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
    }
    closedir(d);
    return st == DS_OK ? ds_ckpt_fsync_dir(dir) : st;
}

/* SAVE_DIR/best as a whole: the weights and the description into
 * best.tmp, synced, then made SAVE_DIR/best in one step as a checkpoint tag
 * is (ds_ckpt_commit_dir: rename, or an atomic exchange with the old best),
 * so a crash leaves the old best or the new one, never half of one and
 * never none. Collective. */
static ds_status save_best(tr_habits *h, tr_run *r, char *dir, size_t cap) {
    char tmp[4300], w[4400];
    snprintf(dir, cap, "%s/best", h->o->save_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(w, sizeof w, "%s/model.safetensors", tmp);
    ds_status st = DS_OK;
    if (r->rank == 0) {
        st = ds_ckpt_remove_flat_dir(tmp); /* a crashed save's leftovers */
        if (st == DS_OK && mkdir(tmp, 0777) != 0)
            st = DS_ERR(DS_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        if (st == DS_OK && h->describe) st = h->describe(h->describe_user, tmp);
    }
    DS_TRY(tr_agree(r->e, st, "prepare the best model's folder"));
    DS_TRY(ds_save_weights(r->e, w));
    if (r->rank == 0) {
        st = sync_folder(tmp);
        if (st == DS_OK) st = ds_ckpt_commit_dir(h->o->save_dir, "best");
    }
    return tr_agree(r->e, st, "replace the best model's folder");
}

/* ---- resuming: the state rides in each checkpoint's client state ---- */

/* r->client, which every later checkpoint stores: the run's length and
 * this state, so --resume goes on judging against the same best. */
static void set_client(const tr_habits *h, tr_run *r) {
    snprintf(r->client, sizeof r->client,
             "{\"total_steps\": %lld, \"habits\": {\"best\": %.17g, \"best_step\": %lld, "
             "\"bad_evals\": %d, \"evals\": %d}}", (long long)r->total,
             h->best_step > 0 ? h->best : 0.0, (long long)h->best_step, h->bad_evals, h->evals);
}

/* The state from the checkpoint this run loaded, r->ckpt_tag (--resume's
 * latest or newest complete one, --resume-from's, a retry's): not `latest`,
 * which may be absent or name another. Every rank reads the same file:
 * every rank sees the checkpoint folder. */
static ds_status load_state(tr_habits *h, const tr_run *r) {
    if (!r->ckpt_tag[0])
        return DS_ERR(DS_ERR_INTERNAL, "resumed at step %lld without a checkpoint's tag",
                      (long long)r->start);
    char *json = NULL;
    DS_TRY(ds_checkpoint_client_state(r->o->ckpt_dir, r->ckpt_tag, &json));
    json_t *root = json ? json_loads(json, 0, NULL) : NULL;
    free(json);
    json_t *s = json_object_get(root, "habits");
    if (json_is_object(s)) { /* absent: saved by a run without these flags */
        h->best = json_number_value(json_object_get(s, "best"));
        h->best_step = json_integer_value(json_object_get(s, "best_step"));
        h->bad_evals = (int)json_integer_value(json_object_get(s, "bad_evals"));
        h->evals = (int)json_integer_value(json_object_get(s, "evals"));
    }
    json_decref(root);
    return DS_OK;
}

int tr_habits_resume(tr_habits *h, tr_run *r) {
    if (!h->o->eval_steps && !h->o->save_best) return 0; /* the client state stays as it was */
    set_client(h, r);
    if (r->start == 0 || !r->o->ckpt_dir) return 0;
    if (load_state(h, r) != DS_OK) return tr_fail(r->prog, "--resume: the trainer state");
    set_client(h, r);
    if (r->rank == 0 && h->best_step > 0)
        printf("%s: --resume: best %s %.4f at step %lld, %d evaluations without improvement\n",
               r->prog, h->o->save_best, h->best, (long long)h->best_step, h->bad_evals);
    /* a checkpoint of an evaluation step was saved before that evaluation:
     * evaluate it again (the same weights, the same numbers) */
    if (!h->o->eval_steps || r->start % h->o->eval_steps != 0) return 0;
    ds_step_info li;
    ds_last_step_info(r->e, &li);
    li.step = r->start;
    int rc = tr_habits_after_step(h, r, &li);
    return rc < 0 ? 0 : rc; /* stopped: h->stopped says so */
}

/* ---- after a step ---- */

static void write_eval_line(tr_run *r, const ds_step_info *info, const tr_eval_result *res,
                            bool best) {
    tr_jline top, d;
    tr_jline_begin(&top, r->metrics);
    tr_jline_int(&top, "eval_step", (long long)info->step);
    tr_jline_int(&top, "samples", (long long)info->samples);
    tr_jline_key(&top, "dev");
    tr_jline_begin(&d, r->metrics);
    for (int i = 0; i < res->n; i++) tr_jline_num(&d, res->name[i], "%.6f", res->value[i]);
    tr_jline_int(&d, "total", (long long)res->samples);
    tr_jline_end(&d);
    tr_jline_bool(&top, "best", best);
    tr_jline_end(&top);
    fputc('\n', r->metrics);
    tr_metrics_written(r);
}

int tr_habits_after_step(tr_habits *h, tr_run *r, const ds_step_info *info) {
    const tr_opts *o = h->o;
    if (!o->eval_steps || info->step % o->eval_steps != 0) return 0;
    char what[128];
    tr_eval_result res = {0};
    if (h->evaluate(h->eval_user, r->e, r->eval_batch, &res) != DS_OK) {
        snprintf(what, sizeof what, "evaluating at step %lld", (long long)info->step);
        return tr_fail(r->prog, what);
    }
    h->evals++;
    tr_monitor_eval(r->e, r->prog, &res, info->samples);

    bool improved = false;
    double v = NAN;
    if (o->save_best) {
        for (int i = 0; i < res.n; i++)
            if (strcmp(res.name[i], o->save_best) == 0) v = res.value[i];
        /* strictly better, as HF's early_stopping_threshold 0; NaN never is */
        improved = isfinite(v) && (h->best_step == 0 || (h->higher_better ? v > h->best
                                                                          : v < h->best));
    }
    if (r->rank == 0) {
        printf("%s: step %lld dev:", r->prog, (long long)info->step);
        for (int i = 0; i < res.n; i++) printf(" %s %.4f", res.name[i], res.value[i]);
        printf(" (%lld samples)\n", (long long)res.samples);
        if (r->metrics) write_eval_line(r, info, &res, improved);
    }
    if (!o->save_best) return 0;
    if (improved) {
        char dir[4200];
        h->best = v;
        h->best_step = info->step;
        h->bad_evals = 0;
        set_client(h, r);
        if (save_best(h, r, dir, sizeof dir) != DS_OK) {
            snprintf(what, sizeof what, "saving the best model (step %lld)", (long long)info->step);
            return tr_fail(r->prog, what);
        }
        if (r->rank == 0)
            printf("%s: best %s %.4f at step %lld, saved to %s\n", r->prog, o->save_best, v,
                   (long long)info->step, dir);
        return 0;
    }
    h->bad_evals++;
    set_client(h, r);
    if (o->early_stopping && h->bad_evals >= o->early_stopping) {
        if (r->rank == 0)
            printf("%s: early stopping at step %lld: %s has not improved on %.4f (step %lld) "
                   "in %d evaluations\n", r->prog, (long long)info->step, o->save_best, h->best,
                   (long long)h->best_step, h->bad_evals);
        h->stopped = true;
        return -1;
    }
    return 0;
}

void tr_habits_finish(const tr_habits *h, tr_run *r) {
    if (r->rank != 0 || !r->metrics || (!h->o->eval_steps && !h->o->save_best)) return;
    tr_jline top, b;
    tr_jline_begin(&top, r->metrics);
    tr_jline_int(&top, "evaluations", h->evals);
    tr_jline_bool(&top, "early_stopped", h->stopped);
    if (h->o->save_best) {
        tr_jline_key(&top, "best");
        tr_jline_begin(&b, r->metrics);
        tr_jline_key(&b, "metric");
        fprintf(r->metrics, "\"%s\"", h->o->save_best);
        if (h->best_step > 0) tr_jline_num(&b, "value", "%.6f", h->best);
        tr_jline_int(&b, "step", (long long)h->best_step);
        tr_jline_end(&b);
    }
    tr_jline_end(&top);
    fputc('\n', r->metrics);
    tr_metrics_written(r);
}
