/* train_cls's command line: the trainers' shared flags (trainer_opts.h) and
 * the classifier's own. */
#ifndef DS_TOOLS_TRAIN_CLS_OPTS_H
#define DS_TOOLS_TRAIN_CLS_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/common/trainer_opts.h"

typedef struct tc_opts {
    tr_opts tr;                /* --config, --data, --epochs, --save-dir, ... */
    const char *model;         /* "bert" | "mlp" */
    const char *vocab;         /* a char vocabulary to use; NULL: built */
    int max_seq_len;
    int intermediate;
    bool class_weight_inverse;
    char **labels;             /* --labels a,b,c (owned) */
    int n_labels;
    bool drop_conflicts;
} tc_opts;

/* Parse argv. Returns -1 to go on, 0 after --help, 2 after a usage error
 * (one line on stderr naming the flag). */
int tc_opts_parse(int argc, char **argv, tc_opts *o);
void tc_opts_free(tc_opts *o);

#endif /* DS_TOOLS_TRAIN_CLS_OPTS_H */
