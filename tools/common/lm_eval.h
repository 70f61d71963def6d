/* train_lm's evaluation on dev (loss, perplexity, bits per byte) and its
 * sampling loop. Both are collective: every rank calls them with the same
 * arguments (ZeRO stage 3 gathers parameters inside ds_evaluate and
 * ds_predict). */
#ifndef DS_TOOLS_LM_EVAL_H
#define DS_TOOLS_LM_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "text/lm_text.h"

typedef struct lm_eval_result {
    double nats;    /* summed loss over the predicted tokens, all ranks */
    double tokens;  /* predicted tokens (the loss's weight) */
    double bytes;   /* their UTF-8 bytes (token_bytes) */
    double loss;    /* nats / tokens */
    double ppl;     /* exp(loss) */
    double bpb;     /* nats / ln 2 / bytes (NaN when bytes is 0) */
    int64_t rows;
} lm_eval_result;

/* Evaluate the packed rows of `dev` (text/lm_text.h layout) in calls of
 * `batch` rows (<= the planned micro batch). Rank r takes rows r, r + world,
 * ... (no padding, so each row, and each token, counts once); ranks with
 * fewer rows still join every call with an empty batch. The loss's weight is
 * checked against the targets the rows hold. */
ds_status lm_evaluate(engine_t *e, const ds_dataset *dev, int batch, lm_eval_result *out);

/* "loss 2.3456 nats/token, perplexity 10.44, 3.3839 bits/byte (N tokens,
 * M bytes, R rows)". */
void lm_eval_print(FILE *f, const char *prefix, const lm_eval_result *r);
/* The --metrics line {"<key>": {"loss": ..., "perplexity": ..., ...}}: a
 * number that is not finite is null and named in the object's "nonfinite"
 * (tr_jline). */
void lm_eval_write_line(FILE *f, const char *key, const lm_eval_result *r);

typedef struct lm_gen_opts {
    int n_new;          /* tokens to generate */
    const char *prompt; /* UTF-8 */
    double temperature; /* 0: greedy */
    int top_k;          /* 0: all */
    uint64_t seed;
    int seq_len;        /* the training rows' length: the context keeps the last
                           seq_len - 1 tokens, the positions training predicts from */
} lm_gen_opts;

/* Continue <|endoftext|> + prompt by n_new tokens with the engine's model.
 * Every rank runs the loop (B = 1, T = the context's length); rank 0's
 * choice of each token is broadcast so every rank's context stays the same.
 * *text (rank 0, else NULL; free()) receives the generated text, valid UTF-8
 * (ds_lm_utf8_sanitize), *text_len its length. */
ds_status lm_generate(engine_t *e, const ds_lm_tokenizer *t, const lm_gen_opts *g, char **text,
                      size_t *text_len);

#endif /* DS_TOOLS_LM_EVAL_H */
