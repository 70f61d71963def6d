/* The parity checks shared by test_bert_parity.c and test_gpt2_parity.c
 * (see ref_parity.h). Metrics in double, as tools/ref_dump.py computes the
 * torch yardstick. */
#include "tests/unit/ref_parity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_util.h"

int ref_parity_load(const char *path, ref_dump *ref) {
    char err[512];
    if (ref_dump_load(path, ref, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL %s\n", err);
        return -1;
    }
    json_t *gen = json_object_get(ref->hdr, "generator");
    printf("reference: %s, torch %s, transformers %s\n",
           json_string_value(json_object_get(gen, "model")),
           json_string_value(json_object_get(gen, "torch")),
           json_string_value(json_object_get(gen, "transformers")));
    return 0;
}

int ref_parity_input(const ref_dump *ref, ds_batch *batch, const char *name, size_t numel) {
    size_t n = 0;
    const void *data = ref_dump_i32(ref, name, &n);
    ds_dtype dtype = DS_I32;
    if (!data) {
        data = ref_dump_f32(ref, name, &n, NULL, NULL);
        dtype = DS_F32;
    }
    if (!data || n != numel) {
        fprintf(stderr, "FAIL: the dump has no %s of %zu values\n", name, numel);
        return -1;
    }
    if (ds_batch_set(batch, name, dtype, data) != DS_OK) {
        fprintf(stderr, "FAIL: batch input %s: %s\n", name, ds_last_error());
        return -1;
    }
    return 0;
}

int ref_parity_start(ref_parity *p, const ref_dump *ref, const ref_tols *tol,
                     const char *config_json, ds_model *model) {
    int before = test_fails();
    memset(p, 0, sizeof *p);
    p->ref = ref;
    p->tol = tol;
    p->lr = ref_dump_num(ref, "optimizer", "lr");
    p->wd = ref_dump_num(ref, "optimizer", "weight_decay");
    p->steps = (int)json_integer_value(json_object_get(ref->hdr, "steps"));
    size_t n_losses = 0;
    if (!ref_dump_f32(ref, "step_losses", &n_losses, NULL, NULL) || n_losses < (size_t)p->steps) {
        TEST_FAIL("the dump has %zu step_losses for %d steps", n_losses, p->steps);
        ds_model_destroy(model); /* it was to be the engine's */
        return test_fails() - before;
    }
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = config_json;
    d.model = model; /* the engine owns it from here, also on failure */
    d.quiet = true;
    CHECK_OK_GOTO(ds_initialize(&d, &p->e), out);
    CHECK(ds_world_size(p->e) == 1, "world size %d", ds_world_size(p->e));

    /* the model's parameters are exactly the reference's, by name and size */
    const ds_model *m = ds_get_model(p->e);
    int n_model = 0, np = ref_dump_n_params(ref);
    for (int i = 0; i < m->n_modules; i++)
        for (int k = 0; k < m->modules[i]->n_params; k++) {
            const ds_param_desc *pd = &m->modules[i]->params[k];
            size_t numel = 0;
            CHECK(ref_dump_param_f32(ref, "param", pd->name, &numel, NULL, NULL) != NULL,
                  "model parameter %s is not in the reference", pd->name);
            CHECK(numel == (size_t)ds_param_numel(pd), "%s: %zu elements in the reference, %lld "
                  "in the model", pd->name, numel, (long long)ds_param_numel(pd));
            n_model++;
        }
    CHECK(n_model == np, "model has %d parameters, reference %d", n_model, np);

    size_t total = 0;
    for (int i = 0; i < np; i++) {
        size_t numel;
        const char *name = ref_dump_param_name(ref, i);
        const float *v = ref_dump_param_f32(ref, "param", name, &numel, NULL, NULL);
        CHECK_OK_GOTO(ds_set_param(p->e, name, v, numel), out);
        total += numel;
    }
    p->buf = malloc(sizeof(float) * total);
    CHECK(p->buf != NULL, "no memory for %zu floats", total);
out:
    return test_fails() - before;
}

void ref_parity_end(ref_parity *p) {
    ds_finalize(p->e);
    free(p->buf);
    memset(p, 0, sizeof *p);
}

/* ref_parity_tol with the multiple given. */
static double tol_times(const ref_parity *p, double tol, const char *key, double times) {
    json_t *y = json_object_get(json_object_get(p->ref->hdr, "torch_fp32_vs_fp64"), key);
    if (times <= 0 || !json_is_number(y)) return tol;
    return fmin(tol, times * fmax(json_number_value(y), 0x1p-24));
}

double ref_parity_tol(const ref_parity *p, double tol, const char *key) {
    return tol_times(p, tol, key, p->tol->yardstick);
}

double ref_parity_logits_rel(const ref_parity *p, const float *logits, const float *ref_logits,
                             size_t n, size_t *at) {
    double dmax = 0, rmax = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < n; i++) {
        double dd = fabs((double)logits[i] - ref_logits[i]);
        if (dd > dmax) dmax = dd, worst_at = i;
        rmax = fmax(rmax, fabs((double)ref_logits[i]));
    }
    printf("logits       max|d|/max|ref| = %.2e (tol %.1e; torch fp32 %.1e)\n", dmax / rmax,
           ref_parity_tol(p, p->tol->logits, "logits_max_abs_over_max_abs"),
           ref_dump_num(p->ref, "torch_fp32_vs_fp64", "logits_max_abs_over_max_abs"));
    if (at) *at = worst_at;
    return dmax / rmax;
}

int ref_parity_loss(const ref_parity *p, int step, float loss) {
    int before = test_fails();
    const float *ref_losses = ref_dump_f32(p->ref, "step_losses", NULL, NULL, NULL);
    double rel = fabs((double)loss - ref_losses[step]) / fabs((double)ref_losses[step]);
    const char *key = step == 0 ? "loss_rel" : "step_losses_rel_max";
    double tol = ref_parity_tol(p, step == 0 ? p->tol->loss0 : p->tol->loss_later, key);
    printf("loss step %d  engine %.7f ref %.7f rel %.2e (tol %.1e; torch fp32 %.1e)\n", step,
           loss, ref_losses[step], rel, tol, ref_dump_num(p->ref, "torch_fp32_vs_fp64", key));
    CHECK(rel <= tol, "step %d loss %.7f vs %.7f (rel %.2e)", step, loss, ref_losses[step], rel);
    return test_fails() - before;
}

static bool in_range(size_t j, bool has, size_t lo, size_t hi) { return has && j >= lo && j < hi; }

int ref_parity_grads(ref_parity *p) {
    int before = test_fails();
    const ref_dump *ref = p->ref;
    const ref_tols *tol = p->tol;
    int np = ref_dump_n_params(ref);
    /* the reference's global gradient norm, for the zero-true-grad bound */
    double grad_global = 0;
    for (int i = 0; i < np; i++) {
        size_t numel;
        const float *g =
            ref_dump_param_f32(ref, "grad", ref_dump_param_name(ref, i), &numel, NULL, NULL);
        for (size_t j = 0; j < numel; j++) grad_global += (double)g[j] * g[j];
    }
    grad_global = sqrt(grad_global);
    const char *worst_g = "";
    double worst_gv = 0, tol_grad = ref_parity_tol(p, tol->grad, "grad_norm_rel_max");
    for (int i = 0; i < np; i++) {
        const char *name = ref_dump_param_name(ref, i);
        size_t numel, lo = 0, hi = 0;
        const float *g = ref_dump_param_f32(ref, "grad", name, &numel, NULL, NULL);
        bool has_zero = ref_dump_zero_range(ref, name, numel, &lo, &hi);
        CHECK_OK_GOTO(ds_get_grad(p->e, name, p->buf, numel), out);
        double dn = 0, rn = 0, zn = 0;
        for (size_t j = 0; j < numel; j++) {
            if (in_range(j, has_zero, lo, hi)) {
                zn += (double)p->buf[j] * p->buf[j];
                continue;
            }
            double x = (double)p->buf[j] - g[j];
            dn += x * x;
            rn += (double)g[j] * g[j];
        }
        if (!has_zero || hi - lo < numel) { /* something left to compare */
            double r = sqrt(dn) / sqrt(rn);
            if (r > worst_gv) worst_gv = r, worst_g = name;
            CHECK(r <= tol_grad, "gradient %s: ||d||/||ref|| = %.3e (||ref|| %.3e)", name, r,
                  sqrt(rn));
        }
        if (has_zero) {
            printf("grad %-44s [%zu, %zu) |g| = %.2e (exactly 0 in theory; bound %.1e)\n", name,
                   lo, hi, sqrt(zn), tol->zero_grad_global * grad_global);
            CHECK(sqrt(zn) <= tol->zero_grad_global * grad_global,
                  "gradient of %s[%zu, %zu) should be ~0: norm %.3e (global %.3e)", name, lo, hi,
                  sqrt(zn), grad_global);
        }
    }
    printf("gradients    worst ||d||/||ref|| = %.2e at %s (tol %.1e; torch fp32 %.1e)\n",
           worst_gv, worst_g, tol_grad,
           ref_dump_num(ref, "torch_fp32_vs_fp64", "grad_norm_rel_max"));
out:
    return test_fails() - before;
}

int ref_parity_after(ref_parity *p) {
    int before = test_fails();
    const ref_dump *ref = p->ref;
    const ref_tols *tol = p->tol;
    const double lr = p->lr, decay = pow(1.0 - lr * p->wd, p->steps);
    const double tol_update = ref_parity_tol(p, tol->update, "update_norm_rel_max");
    const double tol_after =
        tol_times(p, tol->after_lr, "after_max_abs_over_lr",
                  tol->after_yardstick > 0 ? tol->after_yardstick : tol->yardstick);
    const char *worst_u = "", *worst_a = "";
    double worst_uv = 0, worst_av = 0;
    float *buf = p->buf;
    for (int i = 0; i < ref_dump_n_params(ref); i++) {
        const char *name = ref_dump_param_name(ref, i);
        size_t numel, lo = 0, hi = 0;
        const float *p0 = ref_dump_param_f32(ref, "param", name, &numel, NULL, NULL);
        const float *p3 = ref_dump_param_f32(ref, "after", name, NULL, NULL, NULL);
        const float *g = ref_dump_param_f32(ref, "grad", name, NULL, NULL, NULL);
        bool has_zero = ref_dump_zero_range(ref, name, numel, &lo, &hi);
        CHECK_OK_GOTO(ds_get_param(p->e, name, buf, numel), out);
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
        if (!has_zero || hi - lo < numel) { /* something left to compare */
            double u = sqrt(dn) / sqrt(rn);
            if (u > worst_uv) worst_uv = u, worst_u = name;
            if (amax / lr > worst_av) worst_av = amax / lr, worst_a = name;
            CHECK(u <= tol_update, "update of %s: ||d||/||ref|| = %.3e", name, u);
            CHECK(amax <= tol_after * lr,
                  "%s[%zu] after the steps: engine %.8g ref %.8g (%.3f lr)", name, amax_at,
                  buf[amax_at], p3[amax_at], amax / lr);
            CHECK(decay_worst <= tol->decay_rel,
                  "%s[%zu] has no gradient: after %.8g, want %.8g * (1 - lr wd)^%d = %.8g "
                  "(rel %.2e)",
                  name, decay_at, buf[decay_at], p0[decay_at], p->steps, p0[decay_at] * decay,
                  decay_worst);
        }
        if (has_zero) {
            printf("after %-43s [%zu, %zu) max|after - decayed| = %.2f lr (bound %.2f lr)\n", name,
                   lo, hi, zworst / lr, p->steps * tol->adam_step_bound);
            CHECK(zworst <= p->steps * tol->adam_step_bound * lr,
                  "%s[%zu, %zu) moved %.3e from its decayed value, more than Adam's bound", name,
                  lo, hi, zworst);
        }
    }
    printf("updates      worst ||d||/||ref|| = %.2e at %s (tol %.1e; torch fp32 %.1e)\n", worst_uv,
           worst_u, tol_update, ref_dump_num(ref, "torch_fp32_vs_fp64", "update_norm_rel_max"));
    printf("after        worst max|d| = %.4f lr at %s (tol %.4f lr; torch fp32 %.4f lr)\n",
           worst_av, worst_a, tol_after,
           ref_dump_num(ref, "torch_fp32_vs_fp64", "after_max_abs_over_lr"));
out:
    return test_fails() - before;
}
