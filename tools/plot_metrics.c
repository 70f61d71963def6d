/* plot_metrics: draw a training run's --metrics file as one SVG picture.
 *
 *   plot_metrics METRICS.jsonl OUT.svg [--title TEXT]
 *
 * Six panels, always in the same place (960 x 820 pixels), so a picture of
 * any run reads the same way:
 *   training loss (each step, and an exponential moving average, weight 0.9,
 *   debiased as TensorBoard's smoothing) | learning rate
 *   gradient norm (before clipping)       | dev metrics over steps (accuracy,
 *                                            F1s: --eval-steps, and the final)
 *   dev loss over steps                   | memory per rank by purpose, stacked,
 *                                            beside the ZeRO paper's model-state
 *                                            bytes for the same Psi, N and stage
 * A panel with nothing to draw says which flag would fill it. Lines the
 * tool does not know are skipped, so the file of any trainer version draws.
 * Steps logged again (a run resumed after a crash, or gone back by
 * --retries) replace the earlier lines from that step on.
 * Exit 0, or 1 with one line on stderr (an unreadable file, a line that is
 * not JSON naming its number), 2 for the command line. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/mem.h"

#define W 960
#define H 820
#define PW 400 /* a panel's plot area */
#define PH 190
#define BARS_W 270 /* the memory panel's bars; its legend to their right */

typedef struct series {
    char name[48];
    double *x, *y;
    size_t n, cap;
} series;

#define MAX_DEV 8
#define MAX_RANKS 64

typedef struct run {
    series loss, lr, gnorm;
    series dev[MAX_DEV]; /* accuracy, macro_f1, ... (not loss or perplexity) */
    int n_dev;
    series dev_loss;
    int64_t last_step;
    /* the last step line's memory: [rank][purpose], all places together */
    double mem[MAX_RANKS][DS_MEM_PURPOSE_COUNT];
    int n_ranks;
    double formula; /* model_state_formula bytes; 0: not given */
} run;

static int push(series *s, double x, double y) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

/* Drop the points at x >= from: a run that went back (--resume after a
 * crash, --retries) logs those steps again, and the later lines count. */
static void rewind_to(series *s, double from) {
    while (s->n > 0 && s->x[s->n - 1] >= from) s->n--;
}

/* Every dev series back to before step x: an evaluation at x replaces what
 * an earlier run of the same file put there and after (a resume evaluates
 * its checkpoint's step again before its first step line, so the step
 * lines' rewind came too late: the old points at 6 and 9 stayed and the
 * curve went 3, 6, 9, 3, 6, 9). */
static void rewind_dev(run *r, double x) {
    rewind_to(&r->dev_loss, x);
    for (int i = 0; i < r->n_dev; i++) rewind_to(&r->dev[i], x);
}

static void series_free(series *s) {
    free(s->x);
    free(s->y);
}

/* A number member, NAN when absent or null (a non-finite value). */
static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static series *dev_series(run *r, const char *name) {
    for (int i = 0; i < r->n_dev; i++)
        if (strcmp(r->dev[i].name, name) == 0) return &r->dev[i];
    if (r->n_dev == MAX_DEV) return NULL;
    series *s = &r->dev[r->n_dev++];
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* The dev numbers of one evaluation at `step`. */
static int add_dev(run *r, const json_t *dev, double step) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)dev, k, v) {
        if (!json_is_number(v) || strcmp(k, "total") == 0 || strcmp(k, "nats") == 0 ||
            strcmp(k, "tokens") == 0 || strcmp(k, "bytes") == 0 || strcmp(k, "rows") == 0 ||
            strcmp(k, "perplexity") == 0 || strcmp(k, "bits_per_byte") == 0)
            continue;
        series *s = strcmp(k, "loss") == 0 ? &r->dev_loss : dev_series(r, k);
        if (s && push(s, step, json_number_value(v))) return -1;
    }
    return 0;
}

static void add_memory(run *r, const json_t *mem) {
    size_t i;
    json_t *row;
    r->n_ranks = 0;
    json_array_foreach(mem, i, row) {
        if (i >= MAX_RANKS) break;
        for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++) {
            double b = 0.0;
            for (int q = 0; q < DS_PLACE_COUNT; q++) {
                double x = num(json_object_get(row, ds_mem_place_name((ds_mem_place)q)),
                               ds_mem_purpose_name((ds_mem_purpose)p));
                if (isfinite(x)) b += x;
            }
            r->mem[i][p] = b;
        }
        r->n_ranks = (int)i + 1;
    }
}

static int read_run(const char *path, run *r) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "plot_metrics: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    long no = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        no++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        if (!json_is_object(o)) {
            fprintf(stderr, "plot_metrics: %s line %ld: not a JSON object (%s)\n", path, no,
                    o ? "another value" : err.text);
            json_decref(o);
            rc = 1;
            break;
        }
        const json_t *step = json_object_get(o, "step");
        const json_t *es = json_object_get(o, "eval_step");
        const json_t *ev = json_object_get(o, "eval");
        if (json_is_integer(step)) {
            double s = (double)json_integer_value(step);
            if (json_integer_value(step) <= r->last_step) { /* the run went back */
                rewind_to(&r->loss, s);
                rewind_to(&r->lr, s);
                rewind_to(&r->gnorm, s);
                rewind_to(&r->dev_loss, s);
                for (int i = 0; i < r->n_dev; i++) rewind_to(&r->dev[i], s);
            }
            r->last_step = json_integer_value(step);
            double l = num(o, "loss"), lr = num(o, "lr"), g = num(o, "grad_norm");
            if ((isfinite(l) && push(&r->loss, s, l)) || (isfinite(lr) && push(&r->lr, s, lr)) ||
                (isfinite(g) && push(&r->gnorm, s, g)))
                rc = 1;
            const json_t *mem = json_object_get(o, "memory_bytes");
            if (json_is_array(mem)) add_memory(r, mem);
            double fm = num(o, "model_state_formula");
            if (isfinite(fm)) r->formula = fm;
        } else if (json_is_integer(es) && json_is_object(json_object_get(o, "dev"))) {
            double x = (double)json_integer_value(es);
            rewind_dev(r, x); /* a resumed run evaluates its checkpoint's step again */
            rc = add_dev(r, json_object_get(o, "dev"), x);
        } else if (json_is_object(ev)) { /* the evaluation after training */
            rewind_dev(r, (double)r->last_step);
            rc = add_dev(r, ev, (double)r->last_step);
        }
        json_decref(o);
        if (rc) fprintf(stderr, "plot_metrics: out of memory\n");
    }
    free(line);
    fclose(f);
    return rc;
}

/* ---- drawing ---- */

/* Text as XML character data. */
static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
}

/* 1, 2 or 5 times a power of ten, about (hi - lo) / 5. */
static double nice_step(double lo, double hi) {
    double raw = (hi - lo) / 5.0;
    if (!(raw > 0)) return 1.0;
    double p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1.0 : m < 3.5 ? 2.0 : m < 7.5 ? 5.0 : 10.0) * p;
}

typedef struct axes {
    double x0, y0; /* the plot area's top left, pixels */
    double xlo, xhi, ylo, yhi;
} axes;

static double px(const axes *a, double x) { return a->x0 + (x - a->xlo) / (a->xhi - a->xlo) * PW; }
static double py(const axes *a, double y) {
    return a->y0 + PH - (y - a->ylo) / (a->yhi - a->ylo) * PH;
}

static void panel_frame(FILE *f, double x0, double y0, const char *title) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"t\">", x0, y0 - 10);
    xml_text(f, title);
    fprintf(f, "</text>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n",
            x0, y0, PW, PH);
}

static void empty_panel(FILE *f, double x0, double y0, const char *title, const char *why) {
    panel_frame(f, x0, y0, title);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"note\" text-anchor=\"middle\">", x0 + PW / 2.0,
            y0 + PH / 2.0);
    xml_text(f, why);
    fputs("</text>\n", f);
}

/* A tick label with as many decimals as the tick step needs (1.755,
 * 1.760 rather than 1.76 twice); %g for the very small and large. */
static void tick_label(char *buf, size_t cap, double y, double step) {
    if (fabs(y) < step * 1e-9) y = 0.0;
    int dec = (int)ceil(-log10(step) - 1e-9);
    if (step >= 1e-4 && fabs(y) < 1e6) snprintf(buf, cap, "%.*f", dec > 0 ? dec : 0, y);
    else snprintf(buf, cap, "%.3g", y);
}

static void ticks(FILE *f, const axes *a) {
    double ys = nice_step(a->ylo, a->yhi);
    for (double y = ceil(a->ylo / ys) * ys; y <= a->yhi + ys * 1e-9; y += ys) {
        double yy = py(a, y);
        char label[32];
        tick_label(label, sizeof label, y, ys);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n",
                a->x0, yy, a->x0 + PW, yy, a->x0 - 4, yy + 4, label);
    }
    double xs = nice_step(a->xlo, a->xhi);
    if (xs < 1) xs = 1; /* steps are whole */
    for (double x = ceil(a->xlo / xs) * xs; x <= a->xhi + xs * 1e-9; x += xs)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%.0f</text>\n",
                px(a, x), a->y0 + PH + 14, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">step</text>\n",
            a->x0 + PW, a->y0 + PH + 28);
}

/* Axes around every point of the given series, with a little room. */
static bool fit(axes *a, series *const *s, int n, double x0, double y0, bool from_zero) {
    a->x0 = x0;
    a->y0 = y0;
    a->xlo = a->ylo = INFINITY;
    a->xhi = a->yhi = -INFINITY;
    size_t pts = 0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < s[i]->n; k++, pts++) {
            a->xlo = fmin(a->xlo, s[i]->x[k]);
            a->xhi = fmax(a->xhi, s[i]->x[k]);
            a->ylo = fmin(a->ylo, s[i]->y[k]);
            a->yhi = fmax(a->yhi, s[i]->y[k]);
        }
    if (!pts) return false;
    if (from_zero && a->ylo > 0) a->ylo = 0;
    if (a->xhi <= a->xlo) a->xhi = a->xlo + 1;
    double pad = (a->yhi - a->ylo) * 0.05;
    if (!(pad > 0)) pad = fabs(a->yhi) * 0.05 + 1e-12;
    a->yhi += pad;
    if (!from_zero || a->ylo < 0) a->ylo -= pad;
    return true;
}

static void polyline(FILE *f, const axes *a, const double *x, const double *y, size_t n,
                     const char *color, double width, bool dots) {
    if (n == 0) return;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" points=\"", color, width);
    for (size_t k = 0; k < n; k++) fprintf(f, "%s%.1f,%.1f", k ? " " : "", px(a, x[k]), py(a, y[k]));
    fputs("\"/>\n", f);
    for (size_t k = 0; dots && k < n; k++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(a, x[k]), py(a, y[k]),
                color);
}

/* Entry i of a legend in the top right corner, or the bottom right (dev
 * metrics climb towards the top). */
static void legend(FILE *f, const axes *a, int i, const char *color, const char *label,
                   bool bottom) {
    double x = a->x0 + PW - 120, y = bottom ? a->y0 + PH - 10 - 15 * i : a->y0 + 14 + 15 * i;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"4\" fill=\"%s\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">", x, y - 4, color, x + 16, y);
    xml_text(f, label);
    fputs("</text>\n", f);
}

static const char *const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

static void line_panel(FILE *f, double x0, double y0, const char *title, series *s,
                       const char *color, bool from_zero, const char *why) {
    axes a;
    series *one[1] = {s};
    if (!fit(&a, one, 1, x0, y0, from_zero)) {
        empty_panel(f, x0, y0, title, why);
        return;
    }
    panel_frame(f, x0, y0, title);
    ticks(f, &a);
    polyline(f, &a, s->x, s->y, s->n, color, 1.5, s->n == 1);
}

/* Raw loss thin and light, its EMA (weight 0.9, debiased as TensorBoard
 * does: divided by 1 - 0.9^k) bold. */
static void loss_panel(FILE *f, double x0, double y0, const run *r) {
    axes a;
    series *one[1] = {(series *)&r->loss};
    if (!fit(&a, one, 1, x0, y0, false)) {
        empty_panel(f, x0, y0, "training loss", "no step lines (train with --metrics FILE)");
        return;
    }
    panel_frame(f, x0, y0, "training loss");
    ticks(f, &a);
    double *ema = malloc(r->loss.n * sizeof *ema);
    polyline(f, &a, r->loss.x, r->loss.y, r->loss.n, "#9ecae1", 1.0, r->loss.n == 1);
    if (ema) {
        double m = 0.0, w = 1.0;
        for (size_t k = 0; k < r->loss.n; k++) {
            m = 0.9 * m + 0.1 * r->loss.y[k];
            w *= 0.9;
            ema[k] = m / (1.0 - w);
        }
        polyline(f, &a, r->loss.x, ema, r->loss.n, "#08519c", 2.5, false);
        free(ema);
    }
    legend(f, &a, 0, "#9ecae1", "each step", false);
    legend(f, &a, 1, "#08519c", "EMA 0.9", false);
}

static void dev_panel(FILE *f, double x0, double y0, run *r) {
    axes a;
    series *all[MAX_DEV];
    for (int i = 0; i < r->n_dev; i++) all[i] = &r->dev[i];
    if (!fit(&a, all, r->n_dev, x0, y0, true)) {
        empty_panel(f, x0, y0, "dev metrics", "no dev metrics (train_cls --eval-steps N)");
        return;
    }
    if (a.yhi < 1.0 && a.ylo >= 0) a.yhi = 1.0; /* accuracy and F1 live in [0, 1] */
    panel_frame(f, x0, y0, "dev metrics");
    ticks(f, &a);
    for (int i = 0; i < r->n_dev; i++) {
        polyline(f, &a, r->dev[i].x, r->dev[i].y, r->dev[i].n, k_colors[i], 2.0, true);
        legend(f, &a, i, k_colors[i], r->dev[i].name, true);
    }
}

/* Stacked bars: one per rank, its memory by purpose (every place), and one
 * for the ZeRO formula's model state (params + grads + master + optimizer)
 * per rank, so the sharding is seen, not claimed. */
static void memory_panel(FILE *f, double x0, double y0, const run *r) {
    static const char *const pc[DS_MEM_PURPOSE_COUNT] = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                                         "#d62728", "#9467bd", "#8c564b",
                                                         "#7f7f7f"};
    if (r->n_ranks == 0) {
        empty_panel(f, x0, y0, "memory per rank",
                    "no memory figures (train_cls --metrics writes them)");
        return;
    }
    const double mib = 1024.0 * 1024.0;
    double top = r->formula / mib;
    for (int k = 0; k < r->n_ranks; k++) {
        double s = 0;
        for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++) s += r->mem[k][p] / mib;
        top = fmax(top, s);
    }
    axes a = {.x0 = x0, .y0 = y0, .xlo = 0, .xhi = 1, .ylo = 0, .yhi = top > 0 ? top * 1.08 : 1};
    panel_frame(f, x0, y0, "memory per rank by purpose, MiB (last step)");
    double ys = nice_step(0, a.yhi);
    for (double y = 0; y <= a.yhi; y += ys) {
        char label[32];
        tick_label(label, sizeof label, y, ys);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n",
                x0, py(&a, y), x0 + BARS_W, py(&a, y), x0 - 4, py(&a, y) + 4, label);
    }
    int bars = r->n_ranks + (r->formula > 0);
    double slot = (double)BARS_W / bars, bw = fmin(48.0, slot * 0.7);
    for (int k = 0; k < bars; k++) {
        double cx = x0 + slot * (k + 0.5), base = 0;
        bool formula = k == r->n_ranks;
        for (int p = 0; p < (formula ? 1 : DS_MEM_PURPOSE_COUNT); p++) {
            double v = (formula ? r->formula : r->mem[k][p]) / mib;
            if (v <= 0) continue;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
                    cx - bw / 2, py(&a, base + v), bw, py(&a, base) - py(&a, base + v),
                    formula ? "url(#hatch)" : pc[p]);
            base += v;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">", cx,
                y0 + PH + 14);
        if (formula) fputs("ZeRO formula", f);
        else fprintf(f, "rank %d", k);
        fputs("</text>\n", f);
    }
    if (r->formula > 0)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
                "stroke-dasharray=\"4 3\"/>\n", x0, py(&a, r->formula / mib), x0 + BARS_W,
                py(&a, r->formula / mib));
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++) {
        double y = y0 + 16 + 15 * p;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">%s</text>\n", x0 + BARS_W + 12, y - 9, pc[p],
                x0 + BARS_W + 26, y, ds_mem_purpose_name((ds_mem_purpose)p));
    }
    if (r->formula > 0)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"url(#hatch)\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">model state,</text>"
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\">the paper's formula</text>\n",
                x0 + BARS_W + 12, y0 + 16 + 15 * 7.5 - 9, x0 + BARS_W + 26, y0 + 16 + 15 * 7.5, x0 + BARS_W + 26,
                y0 + 16 + 15 * 8.5);
}

static int draw(const run *rc, const char *out, const char *title) {
    run *r = (run *)rc;
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "plot_metrics: cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
            "<style>.t{font-size:14px;font-weight:bold}.tick{font-size:11px;fill:#333}"
            ".note{font-size:12px;fill:#777}.frame{fill:none;stroke:#999}"
            ".grid{stroke:#e5e5e5}</style>\n"
            "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#ddd\"/>"
            "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#555\" stroke-width=\"2\"/>"
            "</pattern></defs>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fputs("<text x=\"24\" y=\"26\" class=\"t\" font-size=\"16\">", f);
    xml_text(f, title);
    fputs("</text>\n", f);
    const double cx[2] = {60, 540}, cy[3] = {70, 330, 590};
    loss_panel(f, cx[0], cy[0], r);
    line_panel(f, cx[1], cy[0], "learning rate", &r->lr, "#2ca02c", true,
               "no step lines (train with --metrics FILE)");
    line_panel(f, cx[0], cy[1], "gradient norm (before clipping)", &r->gnorm, "#d62728", true,
               "no step lines (train with --metrics FILE)");
    dev_panel(f, cx[1], cy[1], r);
    line_panel(f, cx[0], cy[2], "dev loss", &r->dev_loss, "#9467bd", false,
               "no dev loss (--eval-steps N)");
    memory_panel(f, cx[1], cy[2], r);
    fputs("</svg>\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "plot_metrics: writing %s: %s\n", out, strerror(errno));
        return 1;
    }
    return 0;
}

static const char k_usage[] =
    "usage: plot_metrics METRICS.jsonl OUT.svg [--title TEXT]\n"
    "Draw a train_cls / train_lm --metrics file as one SVG (960 x 820): training\n"
    "loss (each step and smoothed), learning rate, gradient norm, dev metrics and\n"
    "dev loss over steps (--eval-steps), and each rank's memory by purpose beside\n"
    "the ZeRO formula's model state.\n";

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *title = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--title")) {
            if (++i == argc) {
                fprintf(stderr, "plot_metrics: --title needs a value (see plot_metrics --help)\n");
                return 2;
            }
            title = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "plot_metrics: unknown option %s (see plot_metrics --help)\n", argv[i]);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            fprintf(stderr, "plot_metrics: unexpected argument %s (see plot_metrics --help)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "plot_metrics: give METRICS.jsonl and OUT.svg (see plot_metrics --help)\n");
        return 2;
    }
    run r;
    memset(&r, 0, sizeof r);
    int rc = read_run(in, &r);
    if (rc == 0) rc = draw(&r, out, title ? title : in);
    series_free(&r.loss);
    series_free(&r.lr);
    series_free(&r.gnorm);
    series_free(&r.dev_loss);
    for (int i = 0; i < r.n_dev; i++) series_free(&r.dev[i]);
    return rc;
}
