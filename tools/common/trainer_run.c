/* The trainers' shared run (see trainer_run.h). */
#include "tools/common/trainer_run.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include <unistd.h>

#include "engine/io/ckpt_dir.h"
#include "engine/io/fault.h"
#include "hf/hf.h"
#include "tools/common/metrics_resume.h"
#include "tools/common/progress.h"
#include "tools/common/run_stats.h"
#include "tools/common/train_habits.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the engine and the run's length ---- */

/* Steps per pass over `rows` training rows at the resolved batch keys, as
 * the engine's loader walks an epoch (ds_config_steps_per_epoch): it ends
 * the epoch's last step early, so every row trains once (with
 * dataloader_drop_last, every row of the whole micro-batches). */
static int64_t steps_per_epoch(const ds_config *c, size_t rows) {
    int64_t n = ds_config_steps_per_epoch(c, rows);
    return n < 1 ? 1 : n;
}

/* The scheduler's total_num_steps and the run's length agree: "auto" took
 * hints.epochs (the same rule as steps_per_epoch, so a difference is a bug
 * here), and a number written in the config must match --epochs as it had
 * to match the trainer's step count before the engine computed it. */
static ds_status check_schedule(const tr_run *r, const ds_config *c) {
    bool uses_total = c->scheduler == DS_SCHED_WARMUP_DECAY_LR ||
                      c->scheduler == DS_SCHED_WARMUP_COSINE_LR;
    if (!uses_total || r->o->max_steps >= 0 || c->total_num_steps == r->total) return DS_OK;
    if (c->total_num_steps_auto)
        return DS_ERR(DS_ERR_INTERNAL, "total_num_steps \"auto\" resolved to %lld, but %s "
                      "counts %lld steps (--epochs %d x %lld per epoch)",
                      (long long)c->total_num_steps, r->prog, (long long)r->total,
                      r->o->epochs, (long long)r->per_epoch);
    return DS_ERR(DS_ERR_CONFIG, "%s: scheduler.params.total_num_steps: the config says %lld but "
                  "the run is %lld steps (--epochs %d x %lld per epoch); write \"auto\" to take "
                  "the run's, or make them agree",
                  c->path, (long long)c->total_num_steps, (long long)r->total, r->o->epochs,
                  (long long)r->per_epoch);
}

/* The flags as ds_config_hints: the Hugging Face Trainer's defaults, then
 * what the user gave, each named by its flag for messages and the start-up
 * print. */
static void set_hint(ds_config_hints *h, ds_hint_id id, const char *flag, bool given) {
    h->name[id] = flag;
    if (given) h->is_default[id] = false;
}

static void flags_to_hints(const tr_opts *o, ds_config_hints *h) {
    ds_config_hints_hf_defaults(h);
    if (o->lr > 0) h->lr = o->lr;
    set_hint(h, DS_HINT_LR, "--lr", o->lr > 0);
    if (o->weight_decay >= 0) h->weight_decay = o->weight_decay;
    set_hint(h, DS_HINT_WEIGHT_DECAY, "--weight-decay", o->weight_decay >= 0);
    if (o->adam_beta1 >= 0) h->beta1 = o->adam_beta1;
    set_hint(h, DS_HINT_BETA1, "--adam-beta1", o->adam_beta1 >= 0);
    if (o->adam_beta2 >= 0) h->beta2 = o->adam_beta2;
    set_hint(h, DS_HINT_BETA2, "--adam-beta2", o->adam_beta2 >= 0);
    if (o->adam_epsilon >= 0) h->eps = o->adam_epsilon;
    set_hint(h, DS_HINT_EPS, "--adam-epsilon", o->adam_epsilon >= 0);
    if (o->max_grad_norm >= 0) h->gradient_clipping = o->max_grad_norm;
    set_hint(h, DS_HINT_GRADIENT_CLIPPING, "--max-grad-norm", o->max_grad_norm >= 0);
    if (o->batch > 0) h->micro_batch = o->batch;
    set_hint(h, DS_HINT_MICRO_BATCH, "--batch", o->batch > 0);
    if (o->warmup >= 0) h->warmup_num_steps = o->warmup;
    set_hint(h, DS_HINT_WARMUP, "--warmup", o->warmup >= 0);
    if (o->lr_scheduler_type) h->lr_scheduler_type = o->lr_scheduler_type;
    set_hint(h, DS_HINT_LR_SCHEDULER, "--lr-scheduler-type", o->lr_scheduler_type != NULL);
    /* the trainers train fp32 unless --fp16 / --bf16 or the config says so */
    if (o->fp16) h->fp16 = 1;
    set_hint(h, DS_HINT_FP16, "--fp16", o->fp16);
    if (o->bf16) h->bf16 = 1;
    set_hint(h, DS_HINT_BF16, "--bf16", o->bf16);
    /* The run's length for total_num_steps "auto": the engine counts the
     * steps of --epochs itself at the batch it resolves, so the config is
     * resolved once, there. A scheduler needs at least one step, also when
     * none is taken (--max-steps 0). */
    if (o->max_steps >= 0) h->total_num_steps = o->max_steps > 0 ? o->max_steps : 1;
    else h->epochs = o->epochs;
    set_hint(h, DS_HINT_TOTAL_STEPS, "--max-steps", o->max_steps >= 0);
    set_hint(h, DS_HINT_EPOCHS, "--epochs", true);
}

/* --print-config: rank 0 prints every key of the resolved config on stdout
 * (JSON a later run takes as --config), every rank ends the job, and the
 * program exits 0 without training, as LightningCLI's --print_config does. */
static void print_config_and_exit(tr_run *r) {
    if (r->rank == 0) {
        char *js = ds_config_to_json(ds_get_config(r->e));
        if (js) fputs(js, stdout);
        else fprintf(stderr, "%s: --print-config: out of memory\n", r->prog);
        free(js);
        fflush(stdout);
    }
    tr_run_end(r);
    exit(0);
}

int tr_run_init(tr_run *r, const char *prog, const tr_opts *o, ds_model *model,
                const ds_dataset *train) {
    memset(r, 0, sizeof *r);
    r->prog = prog;
    r->o = o;
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_path = o->config;
    id.model = model;
    id.train_data = train;
    id.seed = o->seed;
    id.quiet = o->print_config; /* the JSON alone, for a file or jq */
    flags_to_hints(o, &id.hints);
    if (ds_initialize(&id, &r->e) != DS_OK) {
        r->e = NULL;
        return tr_fail(prog, "ds_initialize");
    }
    const ds_config *c = ds_get_config(r->e);
    r->rank = ds_rank(r->e);
    r->world = ds_world_size(r->e);
    if (o->print_config) print_config_and_exit(r);
    r->per_epoch = steps_per_epoch(c, train->n);
    /* the samples (all ranks') a pass consumes, its last micro-batch short
     * included: the progress line's epoch is samples over this, right after
     * a resume at another global batch too */
    r->epoch_samples =
        (double)ds_config_rank_rows_per_epoch(c, train->n) * (double)c->world_size;
    r->total = o->max_steps >= 0 ? o->max_steps : r->per_epoch * o->epochs;
    r->micro = c->train_micro_batch_size_per_gpu;
    /* the engine plans its buffers for the micro batch (no allocation
     * later), so an evaluation call takes at most that many rows */
    r->eval_batch = o->eval_batch > 0 && o->eval_batch < r->micro ? o->eval_batch : (int)r->micro;
    if (o->eval_batch_given && o->eval_batch > r->micro && r->rank == 0) /* not a default */
        printf("%s: --eval-batch %d is larger than the micro batch: evaluating %d rows a call "
               "(the engine's buffers are planned for the micro batch)\n", prog, o->eval_batch,
               r->eval_batch);
    snprintf(r->client, sizeof r->client, "{\"total_steps\": %lld}", (long long)r->total);
    if (check_schedule(r, c) != DS_OK) return tr_fail(prog, NULL);
    return 0;
}

/* ---- before the first step ---- */

/* --init's tensors go in through ds_set_param, a collective; but every rank
 * reads the folder itself, and one that cannot (a file missing on its host,
 * a read error) would leave the others waiting in the next ds_set_param.
 * So the ranks agree before each tensor is set and once at the end: each
 * agreement is one all-reduce of [ranks that failed, the sum of their
 * rank + 1, a mark of the tensor each is about to set]. A rank whose load
 * failed makes its final agreement where the others make the one before
 * their next tensor, so every rank learns of the failure at once (the model
 * partly loaded alike on every rank); ranks about to set different tensors
 * (a copy of the folder that lacks some: the loader initialises a missing
 * tensor instead) stop alike too, before a ds_set_param could pair one
 * rank's tensor with another's. */
typedef struct init_agree {
    engine_t *e;
    int rank;
    bool told; /* this rank's load stopped at a failed agreement */
} init_agree;

/* 1..65535 for a tensor's name, 0 for the closing agreement */
static double name_mark(const char *name) {
    if (!name) return 0.0;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
    return 1.0 + (double)(h % 65535u);
}

/* name: the tensor about to be set, NULL at the closing agreement. The
 * marks ride as their sum and the sum of their squares: all ranks' marks
 * are equal exactly when world * sum(m^2) == sum(m)^2, every term an
 * integer far below 2^53, so the doubles are exact. */
static ds_status agree_init(init_agree *a, bool failed, const char *name) {
    double m = name_mark(name);
    double v[4] = {failed ? 1 : 0, failed ? a->rank + 1 : 0, m, m * m};
    DS_TRY(ds_all_reduce_host(a->e, v, 4, DS_F64));
    double world = ds_world_size(a->e);
    if (v[0] == 0 && world * v[3] != v[2] * v[2]) { /* the ranks are at different tensors */
        a->told = true;
        return DS_ERR(DS_ERR_IO, "the ranks' folders differ: at this point of the load some "
                      "rank sets another tensor%s (a copy of the folder on some host with "
                      "other files?); every rank stops",
                      name ? "" : " while this one has no more");
    }
    if (v[0] == 0 || failed) return DS_OK;
    a->told = true;
    if (v[0] == 1)
        return DS_ERR(DS_ERR_IO, "rank %d could not load it (its own error is in its output); "
                      "every rank stops", (int)v[1] - 1);
    return DS_ERR(DS_ERR_IO, "%d ranks could not load it (their own errors are in their "
                  "output); every rank stops", (int)v[0]);
}

static ds_status set_agreed(void *user, const char *name, const float *values, size_t numel) {
    init_agree *a = user;
    DS_TRY(agree_init(a, false, name));
    return ds_set_param(a->e, name, values, numel);
}

static ds_status load_init_weights(tr_run *r) {
    ds_hf_load_report rep = {0};
    init_agree a = {.e = r->e, .rank = r->rank};
    /* DS_FAULT_INJECT=error:init:read:rank=R: tests, a rank that cannot read
     * the folder (engine/io/fault.h) */
    ds_status st = ds_fault_error("init:read", r->rank);
    if (st == DS_OK)
        st = ds_hf_load_weights(ds_get_model(r->e), r->o->init_dir, set_agreed, &a, &rep);
    if (!a.told) { /* the closing agreement: a failure of this rank's own, or none */
        ds_error_saved mine;
        ds_error_save(&mine);
        ds_status agreed = agree_init(&a, st != DS_OK, NULL);
        if (st == DS_OK) st = agreed;
        else ds_error_restore(&mine);
    }
    if (r->rank == 0) ds_hf_load_report_print(&rep, stdout);
    ds_hf_load_report_free(&rep);
    if (st != DS_OK) ds_error_prefix("loading --init %s", r->o->init_dir);
    return st;
}

/* --resume: load the checkpoint --resume-from names, or latest, or without
 * latest the newest complete checkpoint in the folder (as the Hugging Face
 * Trainer's last checkpoint: a job killed between a first save's rename and
 * its latest leaves just that, and a restart must go on from it, not train
 * afresh over the folder and let --save-total-limit prune it); step 0 when
 * the folder holds none. */
static ds_status resume(tr_run *r) {
    const char *dir = r->o->ckpt_dir;
    char tag[256], latest[4200];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    if (r->o->resume_from) {
        snprintf(tag, sizeof tag, "%s", r->o->resume_from);
        char tag_dir[4500];
        snprintf(tag_dir, sizeof tag_dir, "%s/%s", dir, tag);
        if (access(tag_dir, F_OK) != 0) { /* a typo, not a failure a restart gets past */
            char tags[512];
            int n = ds_ckpt_describe_tags(dir, tags, sizeof tags, NULL, 0);
            return DS_ERR(DS_ERR_INVALID_ARG, "%s: no such checkpoint (%s%s)", tag_dir,
                          n ? "the folder holds " : "the folder holds no checkpoint",
                          n ? tags : "");
        }
    } else if (access(latest, F_OK) != 0) {
        char tags[512];
        if (ds_ckpt_describe_tags(dir, tags, sizeof tags, tag, sizeof tag) == 0) {
            if (r->rank == 0)
                printf("%s: --resume: no checkpoint in %s yet, starting from step 0\n", r->prog,
                       dir);
            return DS_OK;
        }
        if (r->rank == 0)
            printf("%s: --resume: %s has no latest (a save that ended before writing it, or "
                   "removed): continuing from the newest complete checkpoint, %s (of %s); "
                   "--resume-from TAG picks another\n", r->prog, dir, tag, tags);
    } else {
        DS_TRY(ds_checkpoint_latest(dir, tag, sizeof tag));
    }
    DS_TRY(ds_load_checkpoint(r->e, dir, tag, DS_LOAD_ALL));
    snprintf(r->ckpt_tag, sizeof r->ckpt_tag, "%s", tag);
    if (r->rank == 0)
        printf("%s: resumed from %s/%s at step %lld\n", r->prog, dir, tag,
               (long long)ds_global_step(r->e));
    return DS_OK;
}

ds_status tr_agree(engine_t *e, ds_status mine, const char *what) {
    int32_t bad = mine != DS_OK;
    DS_TRY(ds_all_reduce_host(e, &bad, 1, DS_I32));
    if (!bad) return DS_OK;
    return mine != DS_OK ? mine : DS_ERR(DS_ERR_IO, "rank 0 could not %s", what);
}

/* Rank 0 writes; every rank learns whether it worked, so none goes on alone. */
static ds_status describe_save_dir(tr_run *r, tr_describe_fn describe, void *user) {
    return tr_agree(r->e, r->rank == 0 ? describe(user, r->o->save_dir) : DS_OK,
                    "write --save-dir");
}

/* The full resolved config beside the run's outputs (the start-up print has
 * only what matters): DIR/ds_config.resolved.json, DIR the folder of
 * --metrics, else --save-dir; written to a .tmp and renamed, so the file is
 * whole or absent. Rank 0. */
static int save_resolved_rank0(tr_run *r) {
    const tr_opts *o = r->o;
    const char *dir = o->save_dir;
    size_t len = dir ? strlen(dir) : 0;
    if (o->metrics) {
        const char *slash = strrchr(o->metrics, '/');
        dir = slash ? o->metrics : ".";
        len = slash ? (size_t)(slash - o->metrics) + (slash == o->metrics) : 1;
    }
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%.*s%sds_config.resolved.json", (int)len, dir,
             len && dir[len - 1] == '/' ? "" : "/");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *json = ds_config_to_json(ds_get_config(r->e));
    if (!json) {
        fprintf(stderr, "%s: out of memory\n", r->prog);
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(json, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(json);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", r->prog, path, strerror(errno));
        if (f) remove(tmp);
        return 1;
    }
    printf("%s: the resolved config, every key: %s (--print-config prints it)\n", r->prog, path);
    return 0;
}

/* A resumed run appends to --metrics what it trains from r->start on: the
 * lines an earlier run wrote after that step (it went on past its last
 * checkpoint before it was stopped) go first, or those steps would be in the
 * file twice (metrics_resume.h). Rank 0. */
static int cut_metrics_rank0(tr_run *r) {
    const tr_opts *o = r->o;
    long kept, dropped;
    /* tr_habits_resume evaluates an evaluation step's checkpoint again */
    bool reevaluated = o->eval_steps > 0 && r->start % o->eval_steps == 0;
    if (tr_metrics_truncate(o->metrics, r->start, reevaluated, &kept, &dropped) != DS_OK) {
        fprintf(stderr, "%s: --metrics at --resume: %s\n", r->prog, ds_last_error());
        return 1;
    }
    if (kept == -1)
        printf("%s: --metrics %s is not a regular file: the steps after %lld are not cut from "
               "it\n", r->prog, o->metrics, (long long)r->start);
    else if (kept == -2)
        printf("%s: --metrics %s holds no step of a run: left as it is, this run appends\n",
               r->prog, o->metrics);
    else if (dropped)
        printf("%s: --metrics %s: kept the %ld lines up to step %lld, removed the %ld written "
               "after it (this run writes those steps again)\n", r->prog, o->metrics, kept,
               (long long)r->start, dropped);
    return 0;
}

int tr_run_prepare(tr_run *r, tr_describe_fn describe, void *user, const char *what) {
    const tr_opts *o = r->o;
    if (o->init_dir && load_init_weights(r) != DS_OK) return tr_fail(r->prog, NULL);
    /* SIGTERM (and --save-on-signal, zero_engine.save_on_signal): save at
     * the next step boundary and exit 128 + the signal. */
    if (tr_preempt_start(&r->stopper, r->e, r->prog, o->save_on_signal, o->ckpt_dir) != DS_OK)
        return tr_fail(r->prog, "preemption handlers");
    r->stopper.keep = o->save_total_limit;
    /* A job that saves (on schedule or when preempted) takes the folder's
     * lock, so a second job started on the same folder stops here, and
     * removes what an earlier job's unfinished saves left (they hold disk
     * space; each removal is printed). */
    if (o->ckpt_dir && ds_checkpoint_clean(r->e, o->ckpt_dir) != DS_OK)
        return tr_fail(r->prog, o->ckpt_dir == o->ckpt_dir_buf
                                    ? "--save-dir's checkpoints folder (no --ckpt-dir given)"
                                    : "--ckpt-dir");
    if (o->resume && resume(r) != DS_OK)
        return tr_fail(r->prog, o->resume_from ? "--resume-from" : "--resume");
    r->start = ds_global_step(r->e);
    if (o->save_dir && describe_save_dir(r, describe, user) != DS_OK) return tr_fail(r->prog, what);
    int32_t bad = 0;
    if (o->metrics && r->rank == 0 && r->start > 0) bad = cut_metrics_rank0(r);
    if (!bad && o->metrics && r->rank == 0 &&
        !(r->metrics = fopen(o->metrics, r->start > 0 ? "a" : "w"))) {
        fprintf(stderr, "%s: cannot write --metrics %s: %s\n", r->prog, o->metrics,
                strerror(errno));
        bad = 1;
    }
    if (!bad && r->rank == 0 && (o->save_dir || o->metrics)) bad = save_resolved_rank0(r);
    /* every rank learns whether rank 0 could write its files, so none
     * trains alone */
    if (ds_all_reduce_host(r->e, &bad, 1, DS_I32) != DS_OK) return tr_fail(r->prog, NULL);
    return bad ? 1 : 0;
}

/* ---- the steps ---- */

static void write_step(tr_run *r, const ds_step_info *info, double sps, tr_step_fields_fn fields,
                       void *user, ds_comm_stats *comm_prev) {
    FILE *f = r->metrics;
    tr_jline l;
    tr_jline_begin(&l, f);
    tr_jline_int(&l, "step", (long long)info->step);
    tr_jline_int(&l, "epoch", (long long)info->epoch);
    tr_jline_num(&l, "loss", "%.6f", info->loss);
    tr_jline_num(&l, "lr", "%.6e", info->lr);
    tr_jline_num(&l, "grad_norm", "%.6f", info->grad_norm);
    fields(user, &l, info, sps);
    tr_comm_fields(&l, r->e, comm_prev);          /* the step's collectives */
    tr_wall_clock_fields(&l, r->e, info->step); /* wall_clock_breakdown's interval */
    tr_jline_end(&l);
    fputc('\n', f);
    tr_metrics_written(r);
}

void tr_metrics_written(tr_run *r) {
    if (!r->metrics) return;
    if (fflush(r->metrics) == 0 && !ferror(r->metrics)) return;
    int err = errno;
    fprintf(stderr, "%s: --metrics %s: a write failed (%s); the run goes on without it, "
            "the lines before it kept (the last may be cut)\n", r->prog, r->o->metrics,
            strerror(err ? err : EIO));
    fclose(r->metrics);
    r->metrics = NULL;
}

/* --retries: step s + 1 failed with st. When every rank's failure was an
 * I/O error (a swap or parameter file's disk: the engine agrees such
 * failures over the ranks, so each holds one) and this run has a
 * checkpoint of its own (r->ckpt_tag: saved here, or resumed from; a
 * folder's latest may be another run's), every rank loads it in full into
 * the same engine (which makes lost offload files anew) and *s becomes the
 * step before the next one to run. Otherwise, or when the load fails (its
 * error then, beside the step's), false with a message for tr_fail. */
static bool retry_step(tr_run *r, ds_status st, int64_t *s) {
    if (st == DS_ERR_COMM || st == DS_ERR_TIMEOUT) return false; /* no agreement to be had */
    ds_error_saved why;
    ds_error_save(&why);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s", r->o->ckpt_dir, r->ckpt_tag);
    int32_t cannot = st != DS_ERR_IO || !r->ckpt_tag[0] || access(dir, F_OK) != 0;
    if (ds_all_reduce_host(r->e, &cannot, 1, DS_I32) != DS_OK || cannot) {
        if (r->rank == 0 && st == DS_ERR_IO)
            fprintf(stderr, "%s: --retries: no checkpoint of this run's to go back to (%s)\n",
                    r->prog, r->ckpt_tag[0] ? "its folder is gone on some rank"
                                            : "none saved or resumed from yet");
        ds_error_restore(&why);
        return false;
    }
    if (r->rank == 0)
        fprintf(stderr, "%s: step %lld failed with an I/O error: %s\n%s: --retries: going back "
                "to %s, this run's last checkpoint\n", r->prog, (long long)*s + 1, why.msg,
                r->prog, dir);
    if (ds_load_checkpoint(r->e, r->o->ckpt_dir, r->ckpt_tag, DS_LOAD_ALL) != DS_OK) {
        ds_error_prefix("step %lld failed (%s); --retries: loading the last checkpoint",
                        (long long)*s + 1, why.msg);
        return false;
    }
    r->start = ds_global_step(r->e); /* where the trainer's habits resume (tr_habits_resume) */
    if (r->rank == 0)
        printf("%s: --retries: resumed from %s at step %lld\n", r->prog, r->o->ckpt_dir,
               (long long)r->start);
    if (r->metrics) { /* the steps after from_step come again: say why, where they do */
        json_t *j = json_pack("{s:{s:I,s:I,s:s}}", "retry", "failed_step", (json_int_t)*s + 1,
                              "from_step", (json_int_t)r->start, "error", why.msg);
        if (j && json_dumpf(j, r->metrics, 0) == 0) fputc('\n', r->metrics);
        json_decref(j);
        tr_metrics_written(r);
    }
    *s = r->start - 1;
    return true;
}

int tr_run_train(tr_run *r, tr_step_fields_fn fields, void *user) {
    const tr_opts *o = r->o;
    double t0 = now_s(), t_last = t0;
    ds_step_info li;
    ds_last_step_info(r->e, &li);
    int64_t samples_last = li.samples, samples_done = 0; /* taken here, retaken included */
    int rc = 0, retries = o->retries;
    int64_t steps_done = 0; /* steps taken here, those a retry took again included */
    /* rank 0's status line (a terminal) or lines (a log); tokens: samples x
     * the padded sequence length the model runs at */
    ds_comm_stats comm_start, comm_prev;
    ds_comm_report(r->e, &comm_start);
    comm_prev = comm_start;
    const ds_model *model = ds_get_model(r->e);
    tr_progress prog;
    tr_progress_start(&prog, r->prog, r->rank, r->start, r->total, r->epoch_samples,
                      ds_get_config(r->e)->steps_per_print,
                      model->max_seq_len > 0 ? (double)model->max_seq_len : 1.0, li.samples);
    for (int64_t s = r->start; rc == 0 && s < r->total; s++) {
        ds_step_info info;
        char what[96];
        if (getenv(DS_FAULT_ENV)) { /* tests: a rank killed or stuck at step s + 1 */
            snprintf(what, sizeof what, "train:step%lld", (long long)s + 1);
            ds_fault_point(what, r->rank);
        }
        tr_progress_before_step(&prog, s + 1);
        ds_status st = ds_train_batch(r->e, &info);
        if (st != DS_OK) {
            tr_progress_end(&prog);
            if (retries > 0 && retry_step(r, st, &s)) {
                retries--;
                /* the trainer's own state as the checkpoint has it, as --resume */
                if (r->habits && (rc = tr_habits_resume(r->habits, r)) != 0) break;
                ds_last_step_info(r->e, &li);
                samples_last = li.samples;
                t_last = now_s();
                tr_progress_start(&prog, r->prog, r->rank, s + 1, r->total, r->epoch_samples,
                                  ds_get_config(r->e)->steps_per_print,
                                  model->max_seq_len > 0 ? (double)model->max_seq_len : 1.0,
                                  li.samples);
                continue;
            }
            /* the step a failure happened in: a timeout names the collective
             * and the bucket or module, this names when (unless the message
             * does already: "step N: ..." from ds_step's can-learn check) */
            snprintf(what, sizeof what, "step %lld:", (long long)s + 1);
            bool named = strncmp(ds_last_error(), what, strlen(what)) == 0;
            snprintf(what, sizeof what, "training step %lld", (long long)s + 1);
            rc = tr_fail(r->prog, named ? NULL : what);
            break;
        }
        steps_done++;
        double t_step = now_s();
        bool saved = o->save_steps > 0 && (info.step % o->save_steps == 0 || s + 1 == r->total);
        if (saved && ds_save_checkpoint(r->e, o->ckpt_dir, NULL, r->client) != DS_OK) {
            snprintf(what, sizeof what, "saving the checkpoint of step %lld", (long long)info.step);
            rc = tr_fail(r->prog, what);
            break;
        }
        if (saved) ds_checkpoint_tag(r->e, r->ckpt_tag, sizeof r->ckpt_tag); /* just saved */
        /* bounded disk use: the newest --save-total-limit (and latest's) stay */
        if (saved && o->save_total_limit > 0 &&
            ds_checkpoint_prune(r->e, o->ckpt_dir, o->save_total_limit) != DS_OK) {
            snprintf(what, sizeof what, "--save-total-limit %d", o->save_total_limit);
            rc = tr_fail(r->prog, what);
            break;
        }
        double t = now_s();
        tr_preempt_observe(&r->stopper, r->e, t_step - t_last, saved ? t - t_step : 0.0);
        double sps = (double)(info.samples - samples_last) / (t - t_last);
        t_last = t;
        samples_done += info.samples - samples_last;
        samples_last = info.samples;
        ds_step_info logged = info; /* --logging-steps: every N-th, its loss the mean */
        if (tr_habits_log(r->habits, &logged, s + 1 == r->total) && r->metrics)
            write_step(r, &logged, sps, fields, user, &comm_prev);
        tr_progress_step(&prog, &info);
        /* every rank sees the same stop_signal: all save, all exit */
        if (info.stop_signal) rc = tr_preempt_stop(&r->stopper, r->e, &info, saved, r->client);
        /* --eval-steps, --save-best, --early-stopping (train_habits.h); every
         * rank decides alike (the evaluation is all-reduced) */
        int hr = rc == 0 && r->habits ? tr_habits_after_step(r->habits, r, &info) : 0;
        if (hr < 0) break;
        if (hr > 0) rc = hr;
    }
    tr_progress_end(&prog);
    r->train_s = now_s() - t0;
    r->train_samples = samples_done;
    r->train_steps = steps_done;
    /* every rank got here alike (a failure or a preemption ends them all) */
    if (rc == 0 && tr_comm_report(r->e, r->prog, &comm_start, steps_done) != DS_OK)
        rc = tr_fail(r->prog, "the communication report");
    return rc;
}

/* ---- the end ---- */

int tr_run_save(tr_run *r) {
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
    if (!r->o->save_dir) return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", r->o->save_dir);
    if (ds_save_weights(r->e, path) != DS_OK) return tr_fail(r->prog, "saving the weights");
    if (r->rank == 0) printf("%s: saved the model to %s\n", r->prog, r->o->save_dir);
    return 0;
}

void tr_run_end(tr_run *r) {
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
    ds_finalize(r->e);
    r->e = NULL;
}

/* ---- evaluation ---- */

ds_status tr_eval_slices(engine_t *e, const ds_dataset *rows, int batch, tr_eval_fn fn,
                         void *user) {
    int rank = ds_rank(e), world = ds_world_size(e);
    ds_sampler s;
    DS_TRY(ds_sampler_init(&s, rows->n, world, rank, 0, false, false, false));
    ds_status st = ds_sampler_set_epoch(&s, 0);
    ds_host_batch hb = {0};
    if (st == DS_OK) st = ds_host_batch_alloc(&hb, rows, ds_get_model(e), batch);
    /* as many calls as the rank with the most rows makes */
    size_t most = (rows->n + (size_t)world - 1) / (size_t)world;
    size_t calls = (most + (size_t)batch - 1) / (size_t)batch;
    tr_progress_eval(program_invocation_short_name, "evaluation", rank, 0, (int64_t)calls,
                     (int64_t)rows->n);
    for (size_t k = 0; st == DS_OK && k < calls; k++) {
        size_t from = k * (size_t)batch;
        size_t left = from < s.num_samples ? s.num_samples - from : 0;
        int count = (int)(left < (size_t)batch ? left : (size_t)batch);
        const size_t *idx = s.indices + (from < s.num_samples ? from : 0);
        st = ds_host_batch_fill(&hb, rows, idx, count);
        if (st == DS_OK) st = fn(user, &hb.batch, idx, count);
        if (st == DS_OK)
            tr_progress_eval(program_invocation_short_name, "evaluation", rank, (int64_t)k + 1,
                             (int64_t)calls, (int64_t)rows->n);
    }
    ds_host_batch_free(&hb);
    ds_sampler_free(&s);
    return st;
}
