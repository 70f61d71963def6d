/* The checks test_bert_parity.c and test_gpt2_parity.c share: an engine on
 * one rank, given a reference dump's initial weights (tests/unit/ref_dump.h),
 * trained on the dump's batch and compared with it step by step. The test
 * builds the model and the batch, runs the steps and keeps its own
 * tolerances (its header comment says why each is what it is):
 *
 *   ref_dump ref;
 *   if (ref_parity_load(DS_TEST_DATA_DIR "/x_ref_tiny.bin", &ref) != 0) return 1;
 *   ds_batch batch = {.B = ref.B, .T = ref.T};
 *   if (ref_parity_input(&ref, &batch, "input_ids", (size_t)ref.B * ref.T) != 0) ...
 *   ref_parity p = {0};
 *   CHECK(ref_parity_start(&p, &ref, &k_tol, k_config, model) == 0, "setup");
 *   if (!p.buf) goto out;                       // no engine, or weights not set
 *   ... ds_predict, ref_parity_logits_rel(&p, ...) ...
 *   for (int step = 0; step < p.steps; step++) {
 *       CHECK_OK_GOTO(ds_forward(p.e, &batch, &loss), out);
 *       CHECK(ref_parity_loss(&p, step, loss) == 0, ...);
 *       CHECK_OK_GOTO(ds_backward(p.e), out);
 *       if (step == 0) CHECK(ref_parity_grads(&p) == 0, ...);
 *       CHECK_OK_GOTO(ds_step(p.e), out);
 *   }
 *   CHECK(ref_parity_after(&p) == 0, ...);
 * out:
 *   ref_parity_end(&p);
 *   ref_dump_free(&ref);
 *
 * The checks print what they measure beside the tolerance and PyTorch's own
 * float32 figure (the dump's torch_fp32_vs_fp64), report each failure as
 * test_util.h does and return how many failed (test_util.h's counter is per
 * file, so the test CHECKs the count).
 *
 * Entries whose exact gradient is zero (ref_dump_zero_range) carry only
 * rounding noise, which Adam turns into +-lr steps of random sign: they are
 * left out of the gradient and update metrics and checked against bounds
 * instead (zero_grad_global, adam_step_bound). */
#ifndef DS_TESTS_REF_PARITY_H
#define DS_TESTS_REF_PARITY_H

#include <stddef.h>

#include "engine/engine.h"
#include "tests/unit/ref_dump.h"

typedef struct ref_tols {
    double logits;          /* max|d| / max|ref| */
    double loss0;           /* |d| / |ref| of the step-0 loss */
    double loss_later;      /* |d| / |ref| of the later steps' losses */
    double grad;            /* ||d|| / ||ref|| of each step-0 gradient */
    double update;          /* ||d(after - before)|| / ||ref(after - before)|| each */
    double after_lr;        /* max |d| after the steps, in units of lr */
    double decay_rel;       /* entries with gradient exactly 0: after vs before
                               (1 - lr wd)^steps, relative */
    double zero_grad_global; /* zero-true-grad entries: |g| / the global gradient norm */
    double adam_step_bound; /* the most one Adam step moves an entry, in units of lr */
    double yardstick;       /* > 0: a metric for which the dump carries PyTorch's own
                               float32 figure (torch_fp32_vs_fp64) is also held to
                               this multiple of that figure (ref_parity_tol) */
    double after_yardstick; /* > 0: the multiple for `after_lr` instead (an element
                               max of Adam-normalised noise, more sensitive to the
                               sgemm kernel than the norms) */
} ref_tols;

typedef struct ref_parity {
    const ref_dump *ref;
    const ref_tols *tol;
    engine_t *e;     /* owned: ref_parity_end */
    float *buf;      /* room for every parameter (owned) */
    double lr, wd;   /* hdr.optimizer */
    int steps;       /* hdr.steps */
} ref_parity;

/* ref_dump_load, then prints "reference: <model>, torch <v>, transformers
 * <v>" (hdr.generator). Returns 0, or -1 after printing "FAIL <why>". */
int ref_parity_load(const char *path, ref_dump *ref);

/* Sets input `name` of batch to the dump's tensor of that name, with its
 * dtype ("i32": DS_I32, "f32": DS_F32); it must hold `numel` values.
 * Returns 0, or -1 after printing "FAIL ..." when it is absent, of another
 * size or not accepted. */
int ref_parity_input(const ref_dump *ref, ds_batch *batch, const char *name, size_t numel);

/* ds_initialize (quiet) with config_json and model (owned by the engine
 * from here, also on failure); then checks that it runs
 * on one rank and that the model's parameters are exactly the reference's,
 * by name and size, and sets each to its "param/" value. p->buf is NULL
 * when the dump has no step_losses for its steps, there is no engine or a
 * weight could not be set (nothing else can be checked). Returns the failed
 * checks. */
int ref_parity_start(ref_parity *p, const ref_dump *ref, const ref_tols *tol,
                     const char *config_json, ds_model *model);
/* ds_finalize and free; a zeroed or failed start is fine. */
void ref_parity_end(ref_parity *p);

/* The tolerance of a metric: `tol`, or, when tol->yardstick > 0 and the
 * dump's torch_fp32_vs_fp64 has `key`, the smaller of `tol` and yardstick x
 * that figure (not below 2^-24: one float32 rounding, for a scalar such as
 * a loss whose PyTorch figure may by chance be 0). */
double ref_parity_tol(const ref_parity *p, double tol, const char *key);

/* max|a - ref| / max|ref| over n values, printed with its tolerance and
 * torch's figure; *at (may be NULL): the index of the largest |a - ref|.
 * The test checks it (and says where on failure, in its layout). */
double ref_parity_logits_rel(const ref_parity *p, const float *logits, const float *ref_logits,
                             size_t n, size_t *at);

/* The loss of ds_forward at `step` against hdr's step_losses[step]
 * (loss0 at step 0, loss_later after). */
int ref_parity_loss(const ref_parity *p, int step, float loss);

/* After the step-0 ds_backward: every gradient against "grad/P". */
int ref_parity_grads(ref_parity *p);

/* After the steps: every parameter against "after/P" (the update norm, each
 * element, decoupled weight decay where the gradient is exactly 0). */
int ref_parity_after(ref_parity *p);

#endif
