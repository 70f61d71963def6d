/* Rank 0's progress while training and evaluating (see progress.h). */
#include "tools/common/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* A terminal is redrawn at most this often: faster only costs the terminal
 * time, and a step of a small model takes well under a millisecond. */
#define REDRAW_S 0.1

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_progress_hms(double s, char *buf, size_t cap) {
    if (!(s >= 0) || !isfinite(s)) {
        snprintf(buf, cap, "?");
        return;
    }
    long long t = (long long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%lld:%02lld", t / 60, t % 60);
}

/* "95.2", "12.2k", "3.41M": rates in a status line's few columns */
static void si(double v, char *buf, size_t cap) {
    if (v >= 1e6) snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, cap, "%.1fk", v / 1e3);
    else snprintf(buf, cap, "%.1f", v);
}

static int term_width(int fd) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

/* DS_PROGRESS_TTY=1 or 0 when set (engine-run sets it from its own stdout:
 * mpirun hands its ranks a pseudo-terminal even when the output goes to a
 * file), else whether stdout is a terminal. */
static bool progress_tty(void) {
    const char *v = getenv("DS_PROGRESS_TTY");
    if (v && (v[0] == '0' || v[0] == '1') && !v[1]) return v[0] == '1';
    return isatty(fileno(stdout));
}

void tr_progress_start(tr_progress *p, const char *prog, int rank, int64_t start, int64_t total,
                       double samples_per_epoch, int64_t steps_per_print,
                       double tokens_per_sample, int64_t samples_before) {
    memset(p, 0, sizeof *p);
    p->prog = prog;
    p->out = stdout;
    p->on = rank == 0;
    p->tty = p->on && progress_tty();
    p->start = start;
    p->total = total;
    p->samples_per_epoch = samples_per_epoch > 0 ? samples_per_epoch : 1;
    p->every = steps_per_print > 0 ? steps_per_print : 10;
    p->tokens_per_sample = tokens_per_sample;
    p->t0 = p->t_last_draw = p->t_last_print = now_s();
    p->samples0 = p->samples_last_print = samples_before;
    p->width = p->tty ? term_width(fileno(stdout)) : 80;
}

/* Erase what the terminal's line holds. */
static void clear_line(tr_progress *p) {
    if (!p->drawn) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->drawn = false;
}

void tr_progress_before_step(tr_progress *p, int64_t next_step) {
    if (p->tty && next_step % p->every == 0) clear_line(p);
}

/* The time `remaining` more units take at the rate of `taken` in `elapsed`;
 * NaN (printed "?") before the first. */
static double time_left(double elapsed, int64_t taken, int64_t remaining) {
    return taken > 0 ? elapsed / (double)taken * (double)(remaining > 0 ? remaining : 0) : NAN;
}

/* Steps per second so far and the time the remaining steps take at it. */
static void rates(const tr_progress *p, const ds_step_info *info, double t, double *elapsed,
                  double *left, double *sps) {
    *elapsed = t - p->t0;
    *left = time_left(*elapsed, info->step - p->start, p->total - info->step);
    *sps = *elapsed > 0 ? (double)(info->samples - p->samples0) / *elapsed : 0.0;
}

static void draw(tr_progress *p, const ds_step_info *info, double t) {
    double elapsed, left, sps;
    rates(p, info, t, &elapsed, &left, &sps);
    char el[32], lf[32], line[512];
    tr_progress_hms(elapsed, el, sizeof el);
    tr_progress_hms(left, lf, sizeof lf);
    double pct = p->total > 0 ? 100.0 * (double)info->step / (double)p->total : 100.0;
    char rs[32], rt[32];
    si(sps, rs, sizeof rs);
    si(sps * p->tokens_per_sample, rt, sizeof rt);
    /* the most wanted first: a narrow terminal cuts the end */
    int n = snprintf(line, sizeof line,
                     "train %lld/%lld %.0f%% %s<%s | loss %.4f | lr %.2e | epoch %.2f | "
                     "%s samples/s %s tokens/s",
                     (long long)info->step, (long long)p->total, pct, el, lf,
                     p->loss_n ? p->loss_sum / (double)p->loss_n : info->loss, info->lr,
                     (double)info->samples / p->samples_per_epoch, rs, rt);
    /* a line longer than the terminal wraps, and \r then redraws only its
     * last row: cut it to the width */
    if (n > p->width - 1) n = p->width - 1;
    if (n < 0) n = 0;
    fprintf(p->out, "\r\033[K%.*s", n, line);
    fflush(p->out);
    p->drawn = true;
    p->t_last_draw = t;
    p->loss_sum = 0;
    p->loss_n = 0;
}

static void print_line(tr_progress *p, const ds_step_info *info, double t) {
    double elapsed, left, sps;
    rates(p, info, t, &elapsed, &left, &sps);
    /* the rate of this interval, as the line's loss is */
    double dt = t - p->t_last_print;
    double isps = dt > 0 ? (double)(info->samples - p->samples_last_print) / dt : sps;
    char el[32], lf[32];
    tr_progress_hms(elapsed, el, sizeof el);
    tr_progress_hms(left, lf, sizeof lf);
    double pct = p->total > 0 ? 100.0 * (double)info->step / (double)p->total : 100.0;
    fprintf(p->out,
            "%s: step %lld/%lld (%.0f%%) epoch %.2f loss %.4f (mean of %lld step%s) lr %.2e "
            "%.1f samples/s %.0f tokens/s elapsed %s left %s\n",
            p->prog, (long long)info->step, (long long)p->total, pct,
            (double)info->samples / p->samples_per_epoch,
            p->loss_n ? p->loss_sum / (double)p->loss_n : info->loss, (long long)p->loss_n,
            p->loss_n == 1 ? "" : "s", info->lr, isps, isps * p->tokens_per_sample, el, lf);
    fflush(p->out);
    p->t_last_print = t;
    p->samples_last_print = info->samples;
    p->loss_sum = 0;
    p->loss_n = 0;
}

void tr_progress_step(tr_progress *p, const ds_step_info *info) {
    if (!p->on) return;
    if (isfinite(info->loss)) {
        p->loss_sum += info->loss;
        p->loss_n++;
    }
    double t = now_s();
    bool last = info->step >= p->total;
    if (p->tty) {
        if (last || t - p->t_last_draw >= REDRAW_S || info->step % p->every == 0)
            draw(p, info, t);
    } else if (last || info->step % p->every == 0) {
        print_line(p, info, t);
    }
}

void tr_progress_end(tr_progress *p) {
    if (p->tty && p->drawn) {
        fputc('\n', p->out);
        fflush(p->out);
        p->drawn = false;
    }
}

/* Evaluation: one at a time per process, so its clock can live here. */
static double g_eval_t0;

void tr_progress_eval(const char *prog, const char *what, int rank, int64_t done, int64_t calls,
                      int64_t rows) {
    if (rank != 0 || calls <= 0) return;
    double t = now_s();
    if (done <= 0) { /* before the first call: its time counts too */
        g_eval_t0 = t;
        return;
    }
    double el = t - g_eval_t0;
    bool tty = progress_tty();
    if (tty) {
        char a[32], b[32];
        double left = time_left(el, done, calls - done);
        tr_progress_hms(el, a, sizeof a);
        tr_progress_hms(left, b, sizeof b);
        if (done < calls)
            printf("\r\033[K%s %lld/%lld %.0f%% | %s < %s", what, (long long)done,
                   (long long)calls, 100.0 * (double)done / (double)calls, a, b);
        else
            printf("\r\033[K"); /* the caller's report follows on a clean line */
        fflush(stdout);
    } else if (done == calls) {
        printf("%s: %s: %lld rows in %.2f s (%.1f rows/s)\n", prog, what, (long long)rows, el,
               el > 0 ? (double)rows / el : 0.0);
        fflush(stdout);
    }
}
