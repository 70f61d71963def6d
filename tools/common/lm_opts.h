/* train_lm's command line. */
#ifndef DS_TOOLS_LM_OPTS_H
#define DS_TOOLS_LM_OPTS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct lm_opts {
    const char *config, *data, *eval_data, *save_dir, *metrics;
    int format;                /* ds_lm_format (models/lm_text.h); 0: from the suffix */
    const char *text_field;    /* JSON lines key (NULL: "text") */
    const char *column;        /* CSV column (NULL: text | sentence | 文本 | review) */
    const char *tokenizer;     /* "byte" | "char" */
    bool tokenizer_set;        /* --tokenizer given (refused with --init) */
    int min_char_count;
    const char *model_config, *init_dir;
    double dev_ratio;
    int seq_len;
    int epochs;
    int64_t max_steps;         /* -1: from --epochs; 0: no training (evaluate, generate) */
    uint64_t seed;
    int layers, hidden, heads;
    float dropout;
    bool dropout_set;
    double lr, weight_decay;   /* < 0: not given */
    int64_t batch, warmup;     /* <= 0 / < 0: not given */
    int eval_batch;
    /* checkpoints, as train_cls: every save_steps optimizer steps (and at the
     * end) into ckpt_dir, default <save_dir>/checkpoints; resume from
     * ckpt_dir/latest */
    const char *ckpt_dir;
    int64_t save_steps;        /* 0: no checkpoints */
    bool resume;
    char ckpt_dir_buf[4096];
    /* sampling after training */
    int generate;              /* new tokens; 0: none */
    const char *prompt;        /* NULL: "" */
    double temperature;        /* 0: greedy */
    int top_k;                 /* 0: the whole vocabulary */
    uint64_t sample_seed;
} lm_opts;

/* Parse argv. Returns -1 to go on, 0 after --help, 2 after a usage error
 * (one line on stderr naming the flag). */
int lm_opts_parse(int argc, char **argv, lm_opts *o);

#endif /* DS_TOOLS_LM_OPTS_H */
