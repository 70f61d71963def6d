/* The engine's GPT-2 against Hugging Face transformers' GPT2LMHeadModel,
 * through the public API only.
 *
 * The reference (tests/data/gpt2_ref_tiny.bin, written by
 * tools/make_gpt2_reference.py, read with ref_dump.c: the BERT dump's
 * DSREF format) is transformers run in float64 and stored as
 * float32: the exact answer rounded once. Tiny GPT-2 (vocab 97, n_embd 32, 2
 * layers, 4 heads, n_inner 128, 16 positions, gelu_new, dropout 0, the output
 * projection tied to wte), a 3 x 10 batch with right padding (attention_mask
 * 0, labels -100), a masked hole inside row 0 (so later real queries must
 * skip a padded key) and 3 unscored prompt positions, the causal LM loss
 * (labels shifted by one), AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
 * decay 0.01 on every parameter), three steps on the same batch, no
 * clipping.
 *
 * Here: ds_initialize (stage 0, one rank, that optimizer), ds_gpt2_create
 * from the dump's config, ds_set_param for every weight, then
 *   ds_predict          -> logits [B, T, V]  vs "logits" (every position)
 *   ds_forward x 3      -> losses            vs "step_losses"
 *   ds_get_grad (step 0, after ds_backward)  vs "grad/P"; wte's is the sum of
 *                                               its embedding and lm_head uses
 *   ds_step x 3, ds_get_param                vs "after/P"
 * and the tie: "lm_head.weight" reads back as transformer.wte.weight, value
 * and gradient, before and after the updates.
 *
 * The metrics are test_bert_parity.c's (the checks are theirs too:
 * ref_parity.c). The engine computes in float32 with its own summation
 * orders (blocked gemm, OpenMP reductions, its exp), so the yardstick is how
 * far PyTorch's own float32 run lands from the float64 truth (the dump's
 * torch_fp32_vs_fp64, printed beside each figure). Each metric with such a
 * figure is held to 4 x that figure (k_tol.yardstick; ref_parity_tol keeps
 * the fixed bound below when it is tighter, and never goes under one float32
 * rounding, 2^-24). Why 4: the engine's distance from the truth is float32
 * rounding of the same operations in other orders, the size of PyTorch's:
 * measured 0.78-1.2 x the figure here (logits 4.3e-7 = 1.05x, gradients
 * 5.2e-7 = 0.78x, updates 5.0e-5 = 1.12x, after 0.0015 lr = 0.88x, the
 * step 1-2 losses 1.2e-7 = 1.2x, one ulp of 4.3; the step-0 loss is exact),
 * the same under DS_CPU_ISA scalar / avx2 / avx512 and 1-8 threads, at most
 * 1.3x under OpenBLAS's other sgemm kernels (OPENBLAS_CORETYPE Haswell,
 * Sandybridge: after 0.0022 lr), and up to 1.8x on test_bert_parity's
 * model; 4 leaves twice the largest ratio seen, while a wrong formula
 * lands hundreds of times above: measured by breaking the engine on purpose,
 * the erf GELU instead of gelu_new moves the logits by 2.7e-4 relative (660
 * x torch's) and the gradients by 3.1e-4; attention that ignores
 * attention_mask moves the step-0 loss by 2.7e-3 and the gradients by 0.2;
 * a non-causal key, a missing 1/sqrt(d) or the lm_head term missing from
 * wte's gradient move them by O(1). The fixed bounds (test_bert_parity's,
 * what a wrong formula exceeds) stay for a dump without the figures.
 *
 *                                          4 x torch fp32      fixed bound
 *   logits          max|d| / max|ref|      4 x 4.1e-7 = 1.6e-6   1e-4
 *   step-0 loss     |d| / |ref|            4 x 1.0e-7 = 4.1e-7   1e-5
 *   step 1, 2 loss  |d| / |ref|            4 x 1.0e-7 = 4.1e-7   1e-4 (after updates)
 *   gradients       ||d|| / ||ref|| each   4 x 6.7e-7 = 2.7e-6   1e-4 (torch's worst tensor)
 *   updates         ||d(after - before)|| / ||ref(after - before)||
 *                                          4 x 4.5e-5 = 1.8e-4   1e-3 (torch's worst, a
 *                                                     LayerNorm weight: Adam divides by
 *                                                     sqrt(v), which amplifies gradient
 *                                                     noise on small entries)
 *   after, element  |d| / lr               4 x 0.0017 = 0.0068   0.02 (one Adam step is
 *                                                     about lr)
 *   decay only      entries whose reference gradient is exactly 0 (wpe's rows past T):
 *                   after == before * (1 - lr * wd)^3 within 1e-6 relative (three fp32
 *                   roundings are 2e-7): checks decoupled weight decay exactly.
 *
 * Entries whose exact gradient is identically zero (the dump's zero_true_grad:
 * the key third of every attn.c_attn.bias, since softmax ignores a shift
 * common to all keys of a row) carry only rounding noise, which Adam
 * normalises into +-lr steps of random sign; no implementation can reproduce
 * them. For those: gradient norm <= 1e-6 x the global gradient norm, and each
 * element moves from before * (1 - lr wd)^3 by at most 3.01 lr (Adam's step
 * is at most lr * 1.003 per step for these betas); the rest of the tensor is
 * checked as above. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/ref_dump.h"
#include "tests/unit/ref_parity.h"
#include "tests/unit/test_util.h"

/* The table above. */
static const ref_tols k_tol = {
    .logits = 1e-4,
    .loss0 = 1e-5,
    .loss_later = 1e-4,
    .grad = 1e-4,
    .update = 1e-3,
    .after_lr = 0.02,
    .decay_rel = 1e-6,
    .zero_grad_global = 1e-6,
    .adam_step_bound = 1.003,
    .yardstick = 4, /* x PyTorch's own float32 figure: the header says why 4 */
};

static const char *k_config =
    "{\"train_batch_size\": 3, \"train_micro_batch_size_per_gpu\": 3,"
    " \"gradient_accumulation_steps\": 1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"betas\": [0.9, 0.999],"
    "   \"eps\": 1e-8, \"weight_decay\": 0.01}},"
    " \"gradient_clipping\": 0.0,"
    " \"zero_optimization\": {\"stage\": 0}}";

/* The tie: lm_head.weight and transformer.wte.weight read back the same n
 * floats through get (ds_get_param or ds_get_grad). */
static void check_tie(engine_t *e, ds_status (*get)(engine_t *, const char *, float *, size_t),
                      float *a, float *b, size_t n, const char *what) {
    CHECK_OK(get(e, "transformer.wte.weight", a, n));
    CHECK_OK(get(e, "lm_head.weight", b, n));
    CHECK(memcmp(a, b, n * sizeof(float)) == 0,
          "%s of lm_head.weight differs from transformer.wte.weight's", what);
}

int main(void) {
    ref_dump ref;
    if (ref_parity_load(DS_TEST_DATA_DIR "/gpt2_ref_tiny.bin", &ref) != 0) return 1;
    const ds_gpt2_desc gd = ref_dump_gpt2_desc(&ref);
    const int B = ref.B, T = ref.T, V = gd.vocab_size;
    const size_t BT = (size_t)B * T;
    ref_parity p = {0};
    float *buf2 = NULL, *logits = NULL;

    ds_batch batch = {.B = B, .T = T};
    size_t n_logits;
    const float *ref_logits = ref_dump_f32(&ref, "logits", &n_logits, NULL, NULL);
    if (ref_parity_input(&ref, &batch, "input_ids", BT) ||
        ref_parity_input(&ref, &batch, "attention_mask", BT) ||
        ref_parity_input(&ref, &batch, "labels", BT) || !ref_logits ||
        n_logits != BT * V) {
        fprintf(stderr, "FAIL: dump lacks inputs or outputs\n");
        ref_dump_free(&ref);
        return 1;
    }

    ds_model *model = NULL;
    CHECK_OK_GOTO(ds_gpt2_create(&gd, &model), out);
    CHECK(ref_parity_start(&p, &ref, &k_tol, k_config, model) == 0,
          "engine set up from the reference");
    if (!p.buf) goto out;
    engine_t *e = p.e;
    const size_t wte_n = (size_t)V * gd.n_embd;
    buf2 = malloc(sizeof(float) * wte_n);
    logits = malloc(sizeof(float) * n_logits);
    CHECK(ds_output_elems(e, B, T) == n_logits, "ds_output_elems %zu, want B T V = %zu",
          ds_output_elems(e, B, T), n_logits);

    /* ---- logits, every position (padded ones attend to the real keys
     * before them, as HF's do) ---- */
    CHECK_OK_GOTO(ds_predict(e, &batch, logits), out);
    size_t at;
    double rel = ref_parity_logits_rel(&p, logits, ref_logits, n_logits, &at);
    CHECK(rel <= ref_parity_tol(&p, k_tol.logits, "logits_max_abs_over_max_abs"),
          "logits differ: max|d|/max|ref| %.3e, worst at [%zu, %zu, %zu] (engine %.7f, ref %.7f)",
          rel, at / ((size_t)T * V), at / V % T, at % V, logits[at], ref_logits[at]);

    /* ---- the steps ---- */
    for (int step = 0; step < p.steps; step++) {
        float loss;
        CHECK_OK_GOTO(ds_forward(e, &batch, &loss), out);
        CHECK(ref_parity_loss(&p, step, loss) == 0, "loss of step %d", step);
        CHECK_OK_GOTO(ds_backward(e), out);
        if (step == 0) {
            CHECK(ref_parity_grads(&p) == 0, "gradients of step 0");
            /* the alias reads the same summed gradient */
            check_tie(e, ds_get_grad, p.buf, buf2, wte_n, "ds_get_grad");
        }
        CHECK_OK_GOTO(ds_step(e), out);
    }

    /* ---- parameters after the steps ---- */
    CHECK(ref_parity_after(&p) == 0, "parameters after %d steps", p.steps);
    /* the tie survives the updates: one tensor under two names */
    check_tie(e, ds_get_param, p.buf, buf2, wte_n, "after the steps, ds_get_param");

out:
    ref_parity_end(&p);
    free(buf2);
    free(logits);
    ref_dump_free(&ref);
    return test_finish("test_gpt2_parity");
}
