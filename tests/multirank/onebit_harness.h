/* What test_onebit and test_onebit_local share: the small BERT both train
 * (no dropout, so only the optimizer differs between runs) and the check
 * that every rank holds the same weights. */
#ifndef DS_TESTS_ONEBIT_HARNESS_H
#define DS_TESTS_ONEBIT_HARNESS_H

#include <stdio.h>

#include "ckpt_harness.h"

/* ob_make's data: 2000 rows of 12 tokens over 50 ids, 3 classes. */
static inline ds_dataset *ob_make_data(void) { return ck_make_data(2000, 12, 50); }

/* An engine on `data`: a BERT of 2 layers x 32, stage 0, global batch 16 in
 * 2 micro-steps, WarmupLR to `lr` in 5 steps, clipping 1.0, and the
 * optimizer `type` with `params` appended to its params (", \"k\": v"). */
static inline ds_status ob_make(const char *type, const char *params, double lr,
                                const ds_dataset *data, engine_t **out) {
    ds_model *model = NULL;
    ds_bert_desc bd = {.vocab_size = 50, .hidden_size = 32, .num_hidden_layers = 2,
                       .num_attention_heads = 4, .intermediate_size = 64,
                       .max_position_embeddings = 32, .n_classes = 3, .max_seq_len = 12,
                       .hidden_dropout_prob = 0.0f, .attention_probs_dropout_prob = 0.0f};
    DS_TRY(ds_bert_create(&bd, &model));
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,"
             " \"optimizer\": {\"type\": \"%s\", \"params\": {\"lr\": %g, "
             "\"betas\": [0.9, 0.98], \"weight_decay\": 0.01%s}},"
             " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0,"
             " \"warmup_max_lr\": %g, \"warmup_num_steps\": 5}},"
             " \"gradient_clipping\": 1.0, \"steps_per_print\": 100000,"
             " \"zero_optimization\": {\"stage\": 0, \"reduce_bucket_size\": 1000}}",
             type, lr, params, lr);
    return ck_start(cfg, model, data, out);
}

/* Whether every rank holds the same n floats p (their bits): a hash of
 * each rank's, summed over the ranks, equals the world times its own. */
static inline bool ob_same_everywhere(engine_t *e, const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
    double mine = (double)(h >> 11), sum = mine; /* exact: below 2^53 */
    ds_all_reduce_host(e, &sum, 1, DS_F64);
    return sum == mine * (double)ds_world_size(e);
}

#endif /* DS_TESTS_ONEBIT_HARNESS_H */
