/* What the checkpoint tests share: a synthetic dataset, an engine from a
 * config string (MLP or a small BERT with dropout), parameter dumps and
 * loss logs. Used by tests/multirank/test_ckpt_*.c and tests/fault/. */
#ifndef DS_TESTS_CKPT_HARNESS_H
#define DS_TESTS_CKPT_HARNESS_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/engine.h"
#include "models/models.h"

/* 40 rows: with the global batch of 16 an epoch ends in the middle of the
 * third step, so resumes cross epoch boundaries and land inside epochs. */
#define CK_ROWS 40
#define CK_GLOBAL_BATCH 16
#define CK_GAS 2

typedef struct ck_setup {
    const char *model;     /* "mlp" | "bert" | "tied" (tied_model.h) */
    int stage;
    const char *precision; /* "fp32" | "fp16" | "bf16" */
    int total_steps;       /* WarmupDecayLR's total_num_steps */
    float dropout;         /* bert: hidden and attention dropout */
    const char *optimizer; /* "AdamW" (default) | "SGD" | "OneBitAdam" | "ZeroOneAdam" */
    const char *optim_params; /* NULL, or more "optimizer.params" members, each
                                 with a leading ", " (", \"freeze_step\": 2") */
    const char *nvme;      /* NULL, or offload_optimizer "nvme" with this nvme_path
                              (sub-groups of 1024 elements, so several per partition) */
} ck_setup;

void ck_setup_defaults(ck_setup *s);

/* n rows of T tokens over 3 classes: row i has 3 + i % (T - 3) tokens drawn
 * from [4, vocab) by a fixed LCG, the first one 1 + label (so the label can
 * be learnt). Owned by the caller (ds_dataset_destroy); NULL on failure. */
ds_dataset *ck_make_data(size_t n, int T, int vocab);
/* A BERT classifier small enough for unit tests (hidden 32, 2 layers of 4
 * heads, intermediate 64, 3 classes, dropout 0.1) for rows of T tokens of a
 * vocabulary of V, as ck_make_data makes them. */
ds_status ck_tiny_bert(int T, int V, ds_model **out);
/* The checkpoint tests' dataset: ck_make_data(CK_ROWS, 12, 50). */
ds_dataset *ck_data(void);

/* A fresh engine of config (JSON text) and model (owned by the engine, also
 * on failure) on data (borrowed), quiet. */
ds_status ck_start(const char *config, ds_model *model, const ds_dataset *data, engine_t **out);

/* A fresh engine of setup s on data (borrowed), quiet. */
ds_status ck_engine(const ck_setup *s, const ds_dataset *data, engine_t **out);

/* All parameters, fp32, in table order, gathered (collective): a malloc'd
 * array of *n floats. */
float *ck_params(engine_t *e, size_t *n);

/* Step log lines: "step loss lr loss_scale" with hex floats (exact). */
void ck_log_step(FILE *f, const ds_step_info *info);

/* Read up to cap step records from path; returns the count (-1 when the
 * file cannot be opened). */
typedef struct ck_step {
    long long step;
    double loss, lr, scale;
} ck_step;
int ck_read_log(const char *path, ck_step *out, int cap);

/* Train e (a fresh engine) `steps` steps, each loss into loss[i], and put
 * into *comm what this rank's collectives sent over steps 2..steps (the
 * first step's one-time gathers left out); finalizes e. 0, or 1 with a
 * line on stderr naming `what` and the step. */
int ck_train_counted(engine_t *e, int steps, const char *what, double *loss,
                     ds_comm_stats *comm);

/* Run b against the reference run a: every step's |b[i] - a[i]| within
 * band times a[0] (a's first loss), and b trained (its last loss below its
 * first); a line "FAIL: ..." for each miss, naming b as `name`. Returns the
 * count of those; *worst: the largest such fraction. */
int ck_loss_band(const double *a, const double *b, int steps, double band, const char *name,
                 double *worst);
/* The line that sums such a comparison up (first and last losses, worst). */
void ck_loss_summary(const double *a, const double *b, int steps, double band, const char *name,
                     double worst);

/* The buffers (DS_MEM_BUFFERS) of e, [0] host and [1] the backend's memory:
 * what its accountant records (real) and what the memory estimate of its
 * model and config at `world` ranks says (est; zero/estimate.h). 0, or 1
 * with a line on stderr. */
int ck_buffer_bytes(engine_t *e, int world, uint64_t real[2], uint64_t est[2]);

bool ck_write_floats(const char *path, const float *v, size_t n);
float *ck_read_floats(const char *path, size_t *n);

#endif /* DS_TESTS_CKPT_HARNESS_H */
