/* Accuracy, per-class precision / recall / F1, macro and weighted F1. */
#include "metrics/metrics.h"

#include <stdlib.h>
#include <string.h>

static double ratio(int64_t a, int64_t b) { return b > 0 ? (double)a / (double)b : 0.0; }

ds_status ds_cls_report_compute(const int64_t *confusion, int C, ds_cls_report *out) {
    memset(out, 0, sizeof *out);
    if (C <= 0) return DS_ERR(DS_ERR_INVALID_ARG, "metrics: %d classes", C);
    out->per_class = calloc((size_t)C, sizeof *out->per_class);
    if (!out->per_class) return DS_ERR(DS_ERR_OOM, "metrics: out of host memory");
    out->n_classes = C;
    int64_t correct = 0;
    for (int t = 0; t < C; t++)
        for (int p = 0; p < C; p++) {
            int64_t v = confusion[(size_t)t * C + p];
            if (v < 0) {
                ds_cls_report_free(out);
                return DS_ERR(DS_ERR_INVALID_ARG, "metrics: negative count %lld at (%d, %d)",
                              (long long)v, t, p);
            }
            out->total += v;
            if (t == p) correct += v;
        }
    out->accuracy = ratio(correct, out->total);
    for (int c = 0; c < C; c++) {
        int64_t tp = confusion[(size_t)c * C + c], predicted = 0, support = 0;
        for (int k = 0; k < C; k++) {
            predicted += confusion[(size_t)k * C + c];
            support += confusion[(size_t)c * C + k];
        }
        ds_class_metrics *m = &out->per_class[c];
        m->precision = ratio(tp, predicted);
        m->recall = ratio(tp, support);
        m->f1 = (m->precision + m->recall) > 0.0
                    ? 2.0 * m->precision * m->recall / (m->precision + m->recall)
                    : 0.0;
        m->support = support;
        out->macro_f1 += m->f1 / C;
        out->macro_precision += m->precision / C;
        out->macro_recall += m->recall / C;
        out->weighted_f1 += m->f1 * ratio(support, out->total);
    }
    return DS_OK;
}

void ds_cls_report_free(ds_cls_report *r) {
    free(r->per_class);
    r->per_class = NULL;
}

void ds_cls_report_print(const ds_cls_report *r, const char *const *names, FILE *f) {
    int w = 12;
    for (int c = 0; c < r->n_classes; c++) {
        int len = (int)strlen(names[c]);
        if (len > w) w = len;
    }
    fprintf(f, "%*s %10s %10s %10s %10s\n", w, "class", "precision", "recall", "f1", "support");
    for (int c = 0; c < r->n_classes; c++) {
        const ds_class_metrics *m = &r->per_class[c];
        fprintf(f, "%*s %10.4f %10.4f %10.4f %10lld\n", w, names[c], m->precision, m->recall,
                m->f1, (long long)m->support);
    }
    fprintf(f, "%*s %10s %10s %10.4f %10lld\n", w, "accuracy", "", "", r->accuracy,
            (long long)r->total);
    fprintf(f, "%*s %10.4f %10.4f %10.4f %10lld\n", w, "macro avg", r->macro_precision,
            r->macro_recall, r->macro_f1, (long long)r->total);
    fprintf(f, "%*s %10s %10s %10.4f %10lld\n", w, "weighted avg", "", "", r->weighted_f1,
            (long long)r->total);
}
