/* train_lm's command line: the trainers' shared flags (trainer_opts.h) and
 * the language model's own. */
#ifndef DS_TOOLS_LM_OPTS_H
#define DS_TOOLS_LM_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "tools/common/trainer_opts.h"

typedef struct lm_opts {
    tr_opts tr;                /* --config, --data, --epochs, --save-dir, ...;
                                  max_steps 0: no training (evaluate, generate) */
    int format;                /* ds_lm_format (text/lm_text.h); 0: from the suffix */
    const char *text_field;    /* JSON lines key (NULL: "text") */
    const char *column;        /* CSV column (NULL: text | sentence | 文本 | review) */
    const char *tokenizer;     /* "byte" | "char" */
    bool tokenizer_set;        /* --tokenizer given (refused with an --init folder
                                  that brings its own) */
    int seq_len;
    /* sampling after training */
    int generate;              /* new tokens; 0: none */
    const char *prompt;        /* NULL: "" */
    double temperature;        /* 0: greedy */
    int top_k;                 /* 0: the whole vocabulary */
    uint64_t sample_seed;
    bool sample_seed_set;
} lm_opts;

/* Parse argv. Returns -1 to go on, 0 after --help, 2 after a usage error
 * (one line on stderr naming the flag). */
int lm_opts_parse(int argc, char **argv, lm_opts *o);

#endif /* DS_TOOLS_LM_OPTS_H */
