/* A user's model written against the public module API, as someone outside
 * the library would write one, for the tests of row-wise communication
 * (test_sparse_grads: sparse_gradients; test_param_rows: rows_read_by;
 * test_grads_final takes its loss).
 *
 *   "bag":  y[b, :] = sum over t with attention_mask[b, t] != 0 of
 *           W[input_ids[b, t], :], W a vocab x width table (normal, std 0.5)
 *           flagged row_sparse_grad (with `around`, + pre + post, two biases
 *           declared before and after W); plain loops over host memory (the
 *           cpu backend)
 *   "loss": sum over b, e of (x[b, e] - target[b])^2 / B; the rows are the
 *           weight (module.h rule 5)
 *
 * Inputs: input_ids [B, T] int32, attention_mask [B, T] fp32, target [B]
 * fp32. */
#ifndef DS_TESTS_USER_BAG_H
#define DS_TESTS_USER_BAG_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct ub_desc {
    int vocab, width, max_seq_len;
    bool rows;    /* declare rows_read_by "input_ids" on the table */
    bool negzero; /* backward stores column 0's gradient as 0 x (a negative) = -0.0 */
    bool lie;     /* forward also reads row id + 1 (weighted 1e-3), which the batch
                     does not name */
    float *spy;   /* [vocab * width], or NULL: backward adds into it what it adds into
                     the gradient (the test's view of this rank's local gradient) */
    bool around;  /* the table between two biases of the same module ("pre.bias",
                     "post.bias", [width] each, added to every row of y), so that its
                     span has dense parameters on both sides of the table */
    bool optional_ids; /* input_ids declared DS_INPUT_OPTIONAL: a batch may leave it
                          out, and then the module fails its forward */
} ub_desc;

ds_status ub_model(const ub_desc *d, ds_model **out);

/* The "loss" module alone, over rows of `width` floats and the "target"
 * input, for a test's own models (test_grads_final). */
ds_status ub_sq_loss(int width, ds_module **out);
/* saved_bytes / scratch_bytes of a module that needs none */
size_t ub_no_bytes(const ds_module *m, int B, int T);

#endif /* DS_TESTS_USER_BAG_H */
