/* The engine's GPT-2 against Hugging Face transformers' GPT2LMHeadModel,
 * through the public API only.
 *
 * The reference (tests/data/gpt2_ref_tiny.bin, written by
 * tools/make_gpt2_reference.py, read with the BERT test's reader bert_ref.c:
 * the same DSREF format) is transformers run in float64 and stored as
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
 * Metrics and tolerances are test_bert_parity.c's, for the same reasons: the
 * engine computes in float32 with its own summation orders (blocked gemm,
 * OpenMP reductions, its exp), so the yardstick is how far PyTorch's own
 * float32 run lands from the float64 truth (the dump's torch_fp32_vs_fp64,
 * printed beside each figure); each tolerance is that figure times a margin
 * of about 10-250 for different-but-correct orders, below what a wrong
 * formula produces. Measured by breaking the engine on purpose: the erf GELU
 * instead of gelu_new moves the logits by 2.7e-4 relative and the gradients
 * by 3.1e-4; attention that ignores attention_mask moves the step-0 loss by
 * 2.7e-3 and the gradients by 0.2; a non-causal key, a missing 1/sqrt(d) or
 * the lm_head term missing from wte's gradient move them by O(1).
 *
 *   logits          max|d| / max|ref|      <= 1e-4   (torch fp32: 4.1e-7)
 *   step-0 loss     |d| / |ref|            <= 1e-5   (torch fp32: 1.0e-7)
 *   step 1, 2 loss  |d| / |ref|            <= 1e-4   (torch fp32: 1.0e-7; after updates)
 *   gradients       ||d|| / ||ref|| each   <= 1e-4   (torch fp32: 6.7e-7 worst)
 *   updates         ||d(after - before)|| / ||ref(after - before)||
 *                                          <= 1e-3   (torch fp32: 4.5e-5 worst, a LayerNorm
 *                                                     weight: Adam divides by sqrt(v), which
 *                                                     amplifies gradient noise on small entries)
 *   after, element  |d| <= 0.02 * lr                 (torch fp32: 0.0017 lr; one Adam step is
 *                                                     about lr, so 2% of a step)
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bert_ref.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

#define TOL_LOGITS 1e-4
#define TOL_LOSS0 1e-5
#define TOL_LOSS_LATER 1e-4
#define TOL_GRAD 1e-4
#define TOL_UPDATE 1e-3
#define TOL_AFTER_LR 0.02
#define TOL_DECAY_REL 1e-6
#define TOL_ZERO_GRAD_GLOBAL 1e-6
#define ADAM_STEP_BOUND 1.003

static const char *k_config =
    "{\"train_batch_size\": 3, \"train_micro_batch_size_per_gpu\": 3,"
    " \"gradient_accumulation_steps\": 1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"betas\": [0.9, 0.999],"
    "   \"eps\": 1e-8, \"weight_decay\": 0.01}},"
    " \"gradient_clipping\": 0.0,"
    " \"zero_optimization\": {\"stage\": 0}}";

static double hdr_num(const bert_ref *ref, const char *section, const char *key) {
    return json_number_value(json_object_get(json_object_get(ref->hdr, section), key));
}

static int cfg_int(const bert_ref *ref, const char *key) {
    return (int)json_integer_value(json_object_get(json_object_get(ref->hdr, "config"), key));
}

static float cfg_num(const bert_ref *ref, const char *key) {
    return (float)json_number_value(json_object_get(json_object_get(ref->hdr, "config"), key));
}

/* The dump's GPT2Config (the reader fills only BERT's fields). */
static ds_gpt2_desc desc_of(const bert_ref *ref) {
    ds_gpt2_desc d = {
        .vocab_size = cfg_int(ref, "vocab_size"),
        .n_positions = cfg_int(ref, "n_positions"),
        .n_embd = cfg_int(ref, "n_embd"),
        .n_layer = cfg_int(ref, "n_layer"),
        .n_head = cfg_int(ref, "n_head"),
        .n_inner = cfg_int(ref, "n_inner"),
        .resid_pdrop = cfg_num(ref, "resid_pdrop"),
        .embd_pdrop = cfg_num(ref, "embd_pdrop"),
        .attn_pdrop = cfg_num(ref, "attn_pdrop"),
        .layer_norm_epsilon = cfg_num(ref, "layer_norm_epsilon"),
        .initializer_range = cfg_num(ref, "initializer_range"),
        .max_seq_len = ref->T,
        .dropout_set = true, /* the zeros are meant */
    };
    return d;
}

/* The element range [*lo, *hi) of `name` whose exact gradient is zero, or
 * false. */
static bool zero_range(const bert_ref *ref, const char *name, size_t *lo, size_t *hi) {
    json_t *r = json_object_get(json_object_get(ref->hdr, "zero_true_grad"), name);
    if (!r) return false;
    *lo = (size_t)json_integer_value(json_array_get(r, 0));
    *hi = (size_t)json_integer_value(json_array_get(r, 1));
    return true;
}

static bool in_range(size_t j, bool has, size_t lo, size_t hi) { return has && j >= lo && j < hi; }

int main(void) {
    bert_ref ref;
    char err[512];
    if (bert_ref_load(DS_TEST_DATA_DIR "/gpt2_ref_tiny.bin", &ref, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL %s\n", err);
        return 1;
    }
    const double lr = hdr_num(&ref, "optimizer", "lr");
    const double wd = hdr_num(&ref, "optimizer", "weight_decay");
    const int steps = (int)json_integer_value(json_object_get(ref.hdr, "steps"));
    const ds_gpt2_desc gd = desc_of(&ref);
    const int B = ref.B, T = ref.T, V = gd.vocab_size;
    printf("reference: %s, torch %s, transformers %s\n",
           json_string_value(json_object_get(json_object_get(ref.hdr, "generator"), "model")),
           json_string_value(json_object_get(json_object_get(ref.hdr, "generator"), "torch")),
           json_string_value(json_object_get(json_object_get(ref.hdr, "generator"), "transformers")));

    engine_t *e = NULL;
    int np = bert_ref_n_params(&ref);
    float *buf = NULL, *buf2 = NULL, *logits = NULL;
    double grad_global = 0;

    size_t n_ids, n_mask, n_labels, n_logits;
    const int32_t *ids = bert_ref_i32(&ref, "input_ids", &n_ids);
    const float *mask = bert_ref_f32(&ref, "attention_mask", &n_mask, NULL, NULL);
    const int32_t *labels = bert_ref_i32(&ref, "labels", &n_labels);
    const float *ref_logits = bert_ref_f32(&ref, "logits", &n_logits, NULL, NULL);
    const float *ref_losses = bert_ref_f32(&ref, "step_losses", NULL, NULL, NULL);
    if (!ids || !mask || !labels || !ref_logits || !ref_losses || n_ids != (size_t)(B * T) ||
        n_mask != n_ids || n_labels != n_ids || n_logits != (size_t)B * T * V) {
        fprintf(stderr, "FAIL: dump lacks inputs or outputs\n");
        bert_ref_free(&ref);
        return 1;
    }
    ds_batch batch = {.B = B, .T = T};
    ds_batch_set(&batch, "input_ids", DS_I32, ids);
    ds_batch_set(&batch, "attention_mask", DS_F32, mask);
    ds_batch_set(&batch, "labels", DS_I32, labels);

    ds_model *model = NULL;
    CHECK_OK_GOTO(ds_gpt2_create(&gd, &model), out);
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = k_config;
    d.model = model; /* the engine owns it from here, also on failure */
    d.quiet = true;
    CHECK_OK_GOTO(ds_initialize(&d, &e), out);
    CHECK(ds_world_size(e) == 1, "world size %d", ds_world_size(e));

    /* the model's parameters are exactly the reference's, by name and size */
    const ds_model *m = ds_get_model(e);
    int n_model = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            const ds_param_desc *pd = &m->modules[i]->params[p];
            size_t numel = 0;
            CHECK(bert_ref_param_f32(&ref, "param", pd->name, &numel, NULL, NULL) != NULL,
                  "model parameter %s is not in the reference", pd->name);
            CHECK(numel == (size_t)ds_param_numel(pd), "%s: %zu elements in the reference, %lld "
                  "in the model", pd->name, numel, (long long)ds_param_numel(pd));
            n_model++;
        }
    CHECK(n_model == np, "model has %d parameters, reference %d", n_model, np);

    size_t total = 0, wte_n = (size_t)V * gd.n_embd;
    for (int i = 0; i < np; i++) {
        size_t numel;
        const float *v =
            bert_ref_param_f32(&ref, "param", bert_ref_param_name(&ref, i), &numel, NULL, NULL);
        CHECK_OK_GOTO(ds_set_param(e, bert_ref_param_name(&ref, i), v, numel), out);
        total += numel;
    }
    buf = malloc(sizeof(float) * total);
    buf2 = malloc(sizeof(float) * total);
    logits = malloc(sizeof(float) * n_logits);
    CHECK(ds_output_elems(e, B, T) == n_logits, "ds_output_elems %zu, want B T V = %zu",
          ds_output_elems(e, B, T), n_logits);

    /* ---- logits, every position (padded ones attend to the real keys
     * before them, as HF's do) ---- */
    CHECK_OK_GOTO(ds_predict(e, &batch, logits), out);
    double dmax = 0, rmax = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < n_logits; i++) {
        double dd = fabs((double)logits[i] - ref_logits[i]);
        if (dd > dmax) dmax = dd, worst_at = i;
        rmax = fmax(rmax, fabs((double)ref_logits[i]));
    }
    printf("logits       max|d|/max|ref| = %.2e (tol %.0e; torch fp32 %.1e)\n", dmax / rmax,
           TOL_LOGITS, hdr_num(&ref, "torch_fp32_vs_fp64", "logits_max_abs_over_max_abs"));
    CHECK(dmax / rmax <= TOL_LOGITS,
          "logits differ: max|d| %.3e at [%zu, %zu, %zu] (engine %.7f, ref %.7f), max|ref| %.3e",
          dmax, worst_at / ((size_t)T * V), worst_at / V % T, worst_at % V, logits[worst_at],
          ref_logits[worst_at], rmax);

    /* ---- three steps ---- */
    const char *worst_g = "", *worst_u = "", *worst_a = "";
    double worst_gv = 0, worst_uv = 0, worst_av = 0;
    for (int step = 0; step < steps; step++) {
        float loss;
        CHECK_OK_GOTO(ds_forward(e, &batch, &loss), out);
        double rel = fabs((double)loss - ref_losses[step]) / fabs((double)ref_losses[step]);
        double tol = step == 0 ? TOL_LOSS0 : TOL_LOSS_LATER;
        printf("loss step %d  engine %.7f ref %.7f rel %.2e (tol %.0e)\n", step, loss,
               ref_losses[step], rel, tol);
        CHECK(rel <= tol, "step %d loss %.7f vs %.7f (rel %.2e)", step, loss, ref_losses[step],
              rel);
        CHECK_OK_GOTO(ds_backward(e), out);
        if (step == 0) {
            for (int i = 0; i < np; i++) {
                size_t numel;
                const float *g = bert_ref_param_f32(&ref, "grad", bert_ref_param_name(&ref, i),
                                                    &numel, NULL, NULL);
                for (size_t j = 0; j < numel; j++) grad_global += (double)g[j] * g[j];
            }
            grad_global = sqrt(grad_global);
            for (int i = 0; i < np; i++) {
                const char *name = bert_ref_param_name(&ref, i);
                size_t numel, lo = 0, hi = 0;
                const float *g = bert_ref_param_f32(&ref, "grad", name, &numel, NULL, NULL);
                bool has_zero = zero_range(&ref, name, &lo, &hi);
                CHECK_OK_GOTO(ds_get_grad(e, name, buf, numel), out);
                double dn = 0, rn = 0, zn = 0;
                for (size_t j = 0; j < numel; j++) {
                    if (in_range(j, has_zero, lo, hi)) {
                        zn += (double)buf[j] * buf[j];
                        continue;
                    }
                    double x = (double)buf[j] - g[j];
                    dn += x * x;
                    rn += (double)g[j] * g[j];
                }
                double r = sqrt(dn) / sqrt(rn);
                if (r > worst_gv) worst_gv = r, worst_g = name;
                CHECK(r <= TOL_GRAD, "gradient %s: ||d||/||ref|| = %.3e (||ref|| %.3e)", name, r,
                      sqrt(rn));
                if (has_zero) {
                    printf("grad %-44s [%zu, %zu) |g| = %.2e (exactly 0 in theory; bound %.1e)\n",
                           name, lo, hi, sqrt(zn), TOL_ZERO_GRAD_GLOBAL * grad_global);
                    CHECK(sqrt(zn) <= TOL_ZERO_GRAD_GLOBAL * grad_global,
                          "gradient of %s[%zu, %zu) should be ~0: norm %.3e (global %.3e)", name,
                          lo, hi, sqrt(zn), grad_global);
                }
            }
            printf("gradients    worst ||d||/||ref|| = %.2e at %s (tol %.0e; torch fp32 %.1e)\n",
                   worst_gv, worst_g, TOL_GRAD,
                   hdr_num(&ref, "torch_fp32_vs_fp64", "grad_norm_rel_max"));
            /* the tie: the alias reads the same summed gradient */
            CHECK_OK_GOTO(ds_get_grad(e, "transformer.wte.weight", buf, wte_n), out);
            CHECK_OK_GOTO(ds_get_grad(e, "lm_head.weight", buf2, wte_n), out);
            CHECK(memcmp(buf, buf2, wte_n * sizeof(float)) == 0,
                  "ds_get_grad of lm_head.weight differs from transformer.wte.weight's");
        }
        CHECK_OK_GOTO(ds_step(e), out);
    }

    /* ---- parameters after the steps ---- */
    const double decay = pow(1.0 - lr * wd, steps);
    for (int i = 0; i < np; i++) {
        const char *name = bert_ref_param_name(&ref, i);
        size_t numel, lo = 0, hi = 0;
        const float *p0 = bert_ref_param_f32(&ref, "param", name, &numel, NULL, NULL);
        const float *p3 = bert_ref_param_f32(&ref, "after", name, NULL, NULL, NULL);
        const float *g = bert_ref_param_f32(&ref, "grad", name, NULL, NULL, NULL);
        bool has_zero = zero_range(&ref, name, &lo, &hi);
        CHECK_OK_GOTO(ds_get_param(e, name, buf, numel), out);
        double dn = 0, rn = 0, amax = 0, decay_worst = 0, zworst = 0;
        size_t decay_at = 0, amax_at = 0;
        for (size_t j = 0; j < numel; j++) {
            if (in_range(j, has_zero, lo, hi)) {
                zworst = fmax(zworst, fabs((double)buf[j] - p0[j] * decay));
                continue;
            }
            double du = ((double)buf[j] - p0[j]) - ((double)p3[j] - p0[j]);
            double ru = (double)p3[j] - p0[j];
            dn += du * du;
            rn += ru * ru;
            double a = fabs((double)buf[j] - p3[j]);
            if (a > amax) amax = a, amax_at = j;
            if (g[j] == 0.0f) {
                double want = p0[j] * decay;
                double rel = fabs((double)buf[j] - want) / fmax(fabs(want), 1e-30);
                if (rel > decay_worst) decay_worst = rel, decay_at = j;
            }
        }
        double u = sqrt(dn) / sqrt(rn);
        if (u > worst_uv) worst_uv = u, worst_u = name;
        if (amax / lr > worst_av) worst_av = amax / lr, worst_a = name;
        CHECK(u <= TOL_UPDATE, "update of %s: ||d||/||ref|| = %.3e", name, u);
        CHECK(amax <= TOL_AFTER_LR * lr, "%s[%zu] after the steps: engine %.8g ref %.8g (%.3f lr)",
              name, amax_at, buf[amax_at], p3[amax_at], amax / lr);
        CHECK(decay_worst <= TOL_DECAY_REL,
              "%s[%zu] has no gradient: after %.8g, want %.8g * (1 - lr wd)^%d = %.8g (rel %.2e)",
              name, decay_at, buf[decay_at], p0[decay_at], steps, p0[decay_at] * decay,
              decay_worst);
        if (has_zero) {
            printf("after %-43s [%zu, %zu) max|after - decayed| = %.2f lr (bound %.2f lr)\n", name,
                   lo, hi, zworst / lr, steps * ADAM_STEP_BOUND);
            CHECK(zworst <= steps * ADAM_STEP_BOUND * lr,
                  "%s[%zu, %zu) moved %.3e from its decayed value, more than Adam's bound", name,
                  lo, hi, zworst);
        }
    }
    printf("updates      worst ||d||/||ref|| = %.2e at %s (tol %.0e; torch fp32 %.1e)\n", worst_uv,
           worst_u, TOL_UPDATE, hdr_num(&ref, "torch_fp32_vs_fp64", "update_norm_rel_max"));
    printf("after        worst max|d| = %.4f lr at %s (tol %.2f lr; torch fp32 %.4f lr)\n",
           worst_av, worst_a, TOL_AFTER_LR,
           hdr_num(&ref, "torch_fp32_vs_fp64", "after_max_abs_over_lr"));
    /* the tie survives the updates: one tensor under two names */
    CHECK_OK_GOTO(ds_get_param(e, "transformer.wte.weight", buf, wte_n), out);
    CHECK_OK_GOTO(ds_get_param(e, "lm_head.weight", buf2, wte_n), out);
    CHECK(memcmp(buf, buf2, wte_n * sizeof(float)) == 0,
          "after the steps lm_head.weight differs from transformer.wte.weight");

out:
    ds_finalize(e);
    free(buf);
    free(buf2);
    free(logits);
    bert_ref_free(&ref);
    return test_finish("test_gpt2_parity");
}
