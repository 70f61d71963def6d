/* Classification metrics against values worked out by hand. */
#include <math.h>
#include <stdio.h>

#include "metrics/metrics.h"

static int fails;
/* The hand values are rounded to 6 decimals, so compare to 1e-6. */
#define NEAR(a, b)                                                                       \
    do {                                                                                 \
        if (fabs((a) - (b)) > 1e-6) {                                                    \
            printf("FAIL %s:%d: %s = %.8f, expected %.8f\n", __FILE__, __LINE__, #a,     \
                   (double)(a), (double)(b));                                            \
            fails++;                                                                     \
        }                                                                                \
    } while (0)

int main(void) {
    /* rows = true class, columns = predicted */
    const int64_t cm[9] = {5, 1, 0,  /* class 0: 6 samples */
                           2, 3, 1,  /* class 1: 6 samples */
                           0, 0, 0}; /* class 2: no support, predicted once */
    ds_cls_report r;
    if (ds_cls_report_compute(cm, 3, &r) != DS_OK) {
        printf("FAIL: %s\n", ds_last_error());
        return 1;
    }
    NEAR(r.accuracy, 8.0 / 12.0);
    NEAR(r.per_class[0].precision, 5.0 / 7.0);
    NEAR(r.per_class[0].recall, 5.0 / 6.0);
    NEAR(r.per_class[0].f1, 50.0 / 65.0);
    NEAR(r.per_class[1].precision, 0.75);
    NEAR(r.per_class[1].recall, 0.5);
    NEAR(r.per_class[1].f1, 0.6);
    NEAR(r.per_class[2].precision, 0.0); /* zero_division = 0 */
    NEAR(r.per_class[2].f1, 0.0);
    NEAR(r.macro_f1, (50.0 / 65.0 + 0.6) / 3.0);
    NEAR(r.weighted_f1, 0.5 * 50.0 / 65.0 + 0.5 * 0.6);
    if (r.total != 12 || r.per_class[1].support != 6) {
        printf("FAIL: total %lld support %lld\n", (long long)r.total,
               (long long)r.per_class[1].support);
        fails++;
    }
    const char *names[3] = {"none", "like", "anger"};
    ds_cls_report_print(&r, names, stdout);
    ds_cls_report_free(&r);

    const int64_t bad[4] = {1, -1, 0, 2};
    if (ds_cls_report_compute(bad, 2, &r) != DS_ERR_INVALID_ARG) {
        printf("FAIL: negative count accepted\n");
        fails++;
    }
    printf("%s\n", fails ? "test_metrics: FAILED" : "test_metrics: ok");
    return fails != 0;
}
