/* train_cls's command line. */
#ifndef DS_TOOLS_TRAIN_CLS_OPTS_H
#define DS_TOOLS_TRAIN_CLS_OPTS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tc_opts {
    const char *config, *data, *eval_data, *save_dir, *metrics;
    const char *model;         /* "bert" | "mlp" */
    const char *model_config, *vocab, *init_dir;
    double dev_ratio;
    int epochs;
    int64_t max_steps;
    int max_seq_len;
    uint64_t seed;
    int layers, hidden, heads, intermediate;
    float dropout;
    bool dropout_set;
    bool class_weight_inverse;
    double lr, weight_decay;   /* < 0: not given */
    int64_t batch, warmup;     /* <= 0 / < 0: not given */
    int eval_batch;
    int min_char_count;
    char **labels;             /* --labels a,b,c (owned) */
    int n_labels;
    bool drop_conflicts;
    /* checkpoints: every save_steps optimizer steps (and at the end) into
     * ckpt_dir, default <save_dir>/checkpoints; resume from ckpt_dir/latest */
    const char *ckpt_dir;      /* NULL: derived from save_dir (see ckpt_dir_buf) */
    int64_t save_steps;        /* 0: no checkpoints */
    bool resume;
    int save_on_signal;        /* --save-on-signal: a signal besides SIGTERM; 0 none */
    char ckpt_dir_buf[4096];
} tc_opts;

/* Parse argv. Returns -1 to go on, 0 after --help, 2 after a usage error
 * (one line on stderr naming the flag). */
int tc_opts_parse(int argc, char **argv, tc_opts *o);
void tc_opts_free(tc_opts *o);

#endif /* DS_TOOLS_TRAIN_CLS_OPTS_H */
