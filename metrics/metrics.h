/* Classification metrics from a confusion matrix.
 *
 * The matrix is counts[true_class * C + predicted_class], summed over ranks
 * before this is called, so every dev sample counts exactly once. Precision
 * of a class never predicted and recall of a class with no support are 0
 * (scikit-learn's zero_division=0), and so is their F1. */
#ifndef DS_MODELS_METRICS_H
#define DS_MODELS_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "engine/core/status.h"

typedef struct ds_class_metrics {
    double precision, recall, f1;
    int64_t support; /* true samples of the class */
} ds_class_metrics;

typedef struct ds_cls_report {
    int n_classes;
    int64_t total;
    double accuracy;
    double macro_f1, weighted_f1;
    double macro_precision, macro_recall;
    ds_class_metrics *per_class; /* [n_classes], owned */
} ds_cls_report;

/* Compute the report from a C x C confusion matrix of counts. */
ds_status ds_cls_report_compute(const int64_t *confusion, int C, ds_cls_report *out);
void ds_cls_report_free(ds_cls_report *r);

/* The table a person reads: per-class precision / recall / F1 / support,
 * then accuracy, macro and weighted averages. */
void ds_cls_report_print(const ds_cls_report *r, const char *const *class_names, FILE *f);

#endif /* DS_MODELS_METRICS_H */
