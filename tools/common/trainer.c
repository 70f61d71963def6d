/* Shared pieces of the bundled trainers (see trainer.h). */
#include "tools/common/trainer.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

int tr_exit_code(ds_status st) {
    switch (st) {
    case DS_ERR_INVALID_ARG:
    case DS_ERR_CONFIG:
    case DS_ERR_DATA:
    case DS_ERR_CORRUPT:
    case DS_ERR_UNSUPPORTED: return 2;
    default: return 1;
    }
}

int tr_fail(const char *prog, const char *what) {
    const char *why = ds_last_error();
    if (!what) fprintf(stderr, "%s: %s\n", prog, why);
    else fprintf(stderr, "%s: %s%s%s\n", prog, what, *why ? ": " : "", why);
    return tr_exit_code(ds_last_status());
}

void tr_error_name_flag(const char *flag, const char *path) {
    ds_error_saved e;
    ds_error_save(&e);
    char msg[sizeof e.msg];
    size_t n = strlen(path);
    int w;
    if (strncmp(e.msg, path, n) == 0 && e.msg[n] == ':')
        w = snprintf(msg, sizeof msg, "%s %s", flag, e.msg);
    else
        w = snprintf(msg, sizeof msg, "%s %s: %s", flag, path, e.msg);
    if (w >= (int)sizeof msg) /* a message at the buffer's end loses its tail, marked */
        memcpy(msg + sizeof msg - 4, "...", 4);
    memcpy(e.msg, msg, sizeof e.msg);
    ds_error_restore(&e);
}

/* A folder reads as "read error" deep in stdio; say what it is. */
static ds_status folder_error(const char *flag, const char *path) {
    return DS_ERR(DS_ERR_DATA, "%s %s: is a folder, not a file (give the data file itself)", flag,
                  path);
}

ds_status tr_check_not_folder(const char *flag, const char *path) {
    struct stat s;
    if (stat(path, &s) == 0 && S_ISDIR(s.st_mode)) return folder_error(flag, path);
    return DS_OK;
}

ds_status tr_check_input_file(const char *flag, const char *path) {
    struct stat s;
    if (stat(path, &s) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: %s", flag, path,
                      errno == ENOENT ? "no such file" : strerror(errno));
    if (S_ISDIR(s.st_mode)) return folder_error(flag, path);
    if (access(path, R_OK) != 0)
        return DS_ERR(DS_ERR_DATA, "%s %s: not readable: %s", flag, path, strerror(errno));
    return DS_OK;
}

/* ---- preemption ---- */

static _Atomic(double) g_deadline_s;
static const char *g_prog = "trainer";

/* The watchdog: asleep until a preemption signal, then the bound. Past it
 * the process ends with the signal's code, whatever it was doing (a save cut
 * short leaves TAG.tmp, never a damaged checkpoint: latest still names the
 * last complete one). Only async-signal-safe calls after the wait. */
static void *watchdog(void *arg) {
    (void)arg;
    int sig = ds_preempt_wait();
    if (!sig) return NULL;
    double d = atomic_load(&g_deadline_s);
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    char msg[320];
    int n = snprintf(msg, sizeof msg, "%s: %s came %.0f s ago and the save and exit did not "
                     "finish within zero_engine.preempt_deadline_s: exiting %d without them "
                     "(latest still names the last complete checkpoint)\n", g_prog,
                     ds_signal_name(sig), d, 128 + sig);
    if (n > 0) {
        ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
        (void)w;
    }
    _exit(128 + sig);
    return NULL;
}

ds_status tr_preempt_start(tr_preempt *p, engine_t *e, const char *prog, int extra_signal,
                           const char *ckpt_dir) {
    *p = (tr_preempt){.prog = prog, .ckpt_dir = ckpt_dir,
                      .deadline_s = ds_get_config(e)->preempt_deadline_s};
    g_prog = prog;
    atomic_store(&g_deadline_s, p->deadline_s);
    DS_TRY(ds_preempt_install(e, extra_signal ? &extra_signal : NULL, extra_signal ? 1 : 0));
    static bool started;
    if (!started) {
        pthread_t t;
        if (pthread_create(&t, NULL, watchdog, NULL) != 0)
            return DS_ERR(DS_ERR_INTERNAL, "%s: cannot start the preemption watchdog", prog);
        pthread_detach(t);
        started = true;
    }
    if (ds_rank(e) != 0) return DS_OK;
    int sigs[8], n = ds_preempt_signals(sigs, 8);
    char names[128] = "";
    for (int k = 0; k < n && k < 8; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 k == 0 ? "" : k + 1 == n ? " or " : ", ", ds_signal_name(sigs[k]));
    if (ckpt_dir)
        printf("%s: on %s every rank saves a checkpoint into %s at the next step boundary and "
               "the job exits 128 + the signal (143 for SIGTERM), within %g s of the signal "
               "(zero_engine.preempt_deadline_s)\n", prog, names, ckpt_dir, p->deadline_s);
    else
        printf("%s: on %s the job stops at the next step boundary and exits 128 + the signal "
               "within %g s, without a checkpoint (no --ckpt-dir or --save-dir)\n", prog, names,
               p->deadline_s);
    return DS_OK;
}

void tr_preempt_observe(tr_preempt *p, engine_t *e, double step_s, double save_s) {
    if (p->warned || ds_rank(e) != 0 || step_s + save_s <= p->deadline_s) return;
    p->warned = true;
    printf("%s: warning: a step (%.1f s) and a save (%.1f s) take longer than the %g s a "
           "preemption may take (zero_engine.preempt_deadline_s): raise it, and the scheduler's "
           "grace period with it\n", p->prog, step_s, save_s, p->deadline_s);
}

int tr_preempt_stop(tr_preempt *p, engine_t *e, const ds_step_info *info, bool saved,
                    const char *client_state_json) {
    int sig = info->stop_signal, rank = ds_rank(e);
    ds_preempt_info pi;
    ds_preempt_get(&pi);
    char when[96] = "on another rank";
    if (pi.signo && pi.during == DS_PREEMPT_IN_SAVE) snprintf(when, sizeof when, "during a save");
    else if (pi.signo && pi.during == DS_PREEMPT_IN_STEP)
        snprintf(when, sizeof when, "during micro-batch %d of %d", pi.micro, pi.gas);
    else if (pi.signo) snprintf(when, sizeof when, "between steps");
    if (p->ckpt_dir && !saved && ds_save_checkpoint(e, p->ckpt_dir, NULL, client_state_json) != DS_OK) {
        fprintf(stderr, "%s: %s: saving a checkpoint before exiting: %s\n", p->prog,
                ds_signal_name(sig), ds_last_error());
        return 1;
    }
    if (p->ckpt_dir && !saved && p->keep > 0 && ds_checkpoint_prune(e, p->ckpt_dir, p->keep) != DS_OK) {
        fprintf(stderr, "%s: %s: removing old checkpoints (--save-total-limit %d): %s\n", p->prog,
                ds_signal_name(sig), p->keep, ds_last_error());
        return 1;
    }
    ds_preempt_get(&pi); /* the time after the save */
    if (rank == 0) {
        if (p->ckpt_dir)
            printf("%s: %s (came %s): saved %s/global_step%lld; exiting %d, %.2f s after the "
                   "signal\n", p->prog, ds_signal_name(sig), when, p->ckpt_dir,
                   (long long)info->step, 128 + sig, pi.seconds_ago);
        else
            printf("%s: %s (came %s): stopped after step %lld without a checkpoint; exiting %d\n",
                   p->prog, ds_signal_name(sig), when, (long long)info->step, 128 + sig);
        fflush(stdout);
    }
    return 128 + sig;
}

void tr_jline_begin(tr_jline *l, FILE *f) {
    *l = (tr_jline){.f = f};
    fputc('{', f);
}

/* key as a JSON string: a class label may hold quotes or backslashes */
void tr_jline_key(tr_jline *l, const char *key) {
    FILE *f = l->f;
    fputs(l->members++ ? ", \"" : "\"", f);
    for (const unsigned char *c = (const unsigned char *)key; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputs("\": ", f);
}

void tr_jline_num(tr_jline *l, const char *key, const char *fmt, double x) {
    tr_jline_key(l, key);
    if (isfinite(x)) {
        fprintf(l->f, fmt, x);
        return;
    }
    fputs("null", l->f);
    int n = snprintf(l->nonfinite + l->nf_len, sizeof l->nonfinite - l->nf_len, "%s\"%s\"",
                     l->nf_len ? ", " : "", key);
    if (n > 0 && l->nf_len + (size_t)n < sizeof l->nonfinite) l->nf_len += (size_t)n;
    else l->nonfinite[l->nf_len] = '\0'; /* a key that does not fit is left out of the list */
}

void tr_jline_int(tr_jline *l, const char *key, long long v) {
    tr_jline_key(l, key);
    fprintf(l->f, "%lld", v);
}

void tr_jline_bool(tr_jline *l, const char *key, bool v) {
    tr_jline_key(l, key);
    fputs(v ? "true" : "false", l->f);
}

void tr_jline_end(tr_jline *l) {
    if (l->nf_len) {
        tr_jline_key(l, "nonfinite");
        fprintf(l->f, "[%s]", l->nonfinite);
    }
    fputc('}', l->f);
}
