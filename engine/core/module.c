/* The module API's helpers: module and model construction, batches. */
#include "engine/core/module.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- batches ---- */

size_t ds_tensor_desc_row_elems(const ds_tensor_desc *d, int T) {
    size_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->dims[i] == DS_DIM_SEQ ? (size_t)T : (size_t)d->dims[i];
    return n;
}

static const ds_tensor *batch_find(const ds_batch *b, const char *name) {
    if (!b) return NULL;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->t[i].name, name) == 0) return &b->t[i];
    return NULL;
}

const void *ds_batch_get(const ds_batch *b, const char *name) {
    const ds_tensor *t = batch_find(b, name);
    return t ? t->data : NULL;
}

const int32_t *ds_batch_i32(const ds_batch *b, const char *name) {
    const ds_tensor *t = batch_find(b, name);
    return t && t->dtype == DS_I32 ? (const int32_t *)t->data : NULL;
}

const float *ds_batch_f32(const ds_batch *b, const char *name) {
    const ds_tensor *t = batch_find(b, name);
    return t && t->dtype == DS_F32 ? (const float *)t->data : NULL;
}

ds_status ds_batch_set(ds_batch *b, const char *name, ds_dtype dtype, const void *data) {
    if (!b || !name) return DS_ERR(DS_ERR_INVALID_ARG, "ds_batch_set: batch or name is NULL");
    if (strlen(name) >= DS_MAX_INPUT_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "batch tensor name \"%s\" is longer than %d characters",
                      name, DS_MAX_INPUT_NAME - 1);
    ds_tensor *t = (ds_tensor *)batch_find(b, name);
    if (!t) {
        if (b->n >= DS_MAX_INPUTS)
            return DS_ERR(DS_ERR_INVALID_ARG, "batch tensor %s: a batch holds at most %d tensors",
                          name, DS_MAX_INPUTS);
        t = &b->t[b->n++];
        snprintf(t->name, sizeof t->name, "%s", name);
    }
    t->dtype = dtype;
    t->data = (void *)data;
    return DS_OK;
}

/* ---- modules ---- */

ds_status ds_module_create(const ds_module_ops *ops, const char *name, int n_params,
                           size_t impl_bytes, ds_module **out) {
    *out = NULL;
    if (!ops || !name) return DS_ERR(DS_ERR_INVALID_ARG, "ds_module_create: ops or name is NULL");
    if (strlen(name) >= DS_MAX_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "module name \"%s\" is longer than %d characters", name,
                      DS_MAX_NAME - 1);
    if (n_params < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: %d parameters", name, n_params);
    ds_module *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "module %s: out of host memory", name);
    m->ops = ops;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->n_params = n_params;
    if (n_params > 0) m->params = calloc((size_t)n_params, sizeof *m->params);
    if (impl_bytes > 0) m->impl = calloc(1, impl_bytes);
    if ((n_params > 0 && !m->params) || (impl_bytes > 0 && !m->impl)) {
        ds_module_free(m);
        return DS_ERR(DS_ERR_OOM, "module %s: out of host memory", name);
    }
    *out = m;
    return DS_OK;
}

void ds_module_free(ds_module *m) {
    if (!m) return;
    free(m->params);
    free(m->tied);
    free(m->impl);
    free(m);
}

/* shape[0..n) into ndim/shape; DS_ERR_INVALID_ARG naming `what` */
static ds_status set_shape(const char *what, int n, const int64_t *in, int *ndim, int64_t *shape) {
    if (n < 1 || n > DS_MAX_DIMS || !in)
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s: %d dimensions (1..%d)", what, n,
                      DS_MAX_DIMS);
    for (int k = 0; k < n; k++)
        if (in[k] <= 0)
            return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s: dimension %d is %lld", what, k,
                          (long long)in[k]);
    *ndim = n;
    for (int k = 0; k < DS_MAX_DIMS; k++) shape[k] = k < n ? in[k] : 0;
    return DS_OK;
}

/* (d0[, d1]) as a shape: d1 <= 0 is one dimension */
static int shape2(int64_t d0, int64_t d1, int64_t *s) {
    s[0] = d0;
    s[1] = d1;
    return d1 > 0 ? 2 : 1;
}

ds_status ds_module_param(ds_module *m, int i, const char *prefix, const char *suffix, int64_t d0,
                          int64_t d1, ds_init_kind init, float a, float b) {
    int64_t s[2];
    int n = shape2(d0, d1, s);
    return ds_module_param_nd(m, i, prefix, suffix, n, s, init, a, b);
}

ds_status ds_module_tie(ds_module *m, const char *alias, const char *target, int64_t d0,
                        int64_t d1) {
    int64_t s[2];
    int n = shape2(d0, d1, s);
    return ds_module_tie_nd(m, alias, target, n, s);
}

ds_status ds_module_param_nd(ds_module *m, int i, const char *prefix, const char *suffix,
                             int ndim, const int64_t *shape, ds_init_kind init, float a, float b) {
    if (!m || i < 0 || i >= m->n_params)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_module_param: parameter %d of module %s (it has %d)",
                      i, m ? m->name : "(null)", m ? m->n_params : 0);
    ds_param_desc *p = &m->params[i];
    if (!prefix) prefix = m->name;
    int len = snprintf(p->name, sizeof p->name, "%s.%s", prefix, suffix);
    if (len < 0 || len >= (int)sizeof p->name)
        return DS_ERR(DS_ERR_INVALID_ARG, "parameter name \"%s.%s\" is longer than %d characters",
                      prefix, suffix, DS_MAX_NAME - 1);
    DS_TRY(set_shape(p->name, ndim, shape, &p->ndim, p->shape));
    p->init = init;
    p->init_a = a;
    p->init_b = b;
    return DS_OK;
}

ds_status ds_module_tie_nd(ds_module *m, const char *alias, const char *target, int ndim,
                           const int64_t *shape) {
    if (!m || !target) return DS_ERR(DS_ERR_INVALID_ARG, "ds_module_tie: module or target is NULL");
    if (strlen(target) >= DS_MAX_NAME || (alias && strlen(alias) >= DS_MAX_NAME))
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: tied parameter name longer than %d "
                      "characters", m->name, DS_MAX_NAME - 1);
    ds_param_tie *t = realloc(m->tied, (size_t)(m->n_tied + 1) * sizeof *t);
    if (!t) return DS_ERR(DS_ERR_OOM, "module %s: out of host memory", m->name);
    m->tied = t;
    ds_param_tie *x = &t[m->n_tied];
    memset(x, 0, sizeof *x);
    snprintf(x->target, sizeof x->target, "%s", target);
    if (alias) snprintf(x->name, sizeof x->name, "%s", alias);
    DS_TRY(set_shape(target, ndim, shape, &x->ndim, x->shape));
    m->n_tied++;
    return DS_OK;
}

ds_status ds_module_check_ctx(const ds_module *m, const ds_module_ctx *ctx, bool need_x,
                              bool backward) {
    if (!ctx || !ctx->be)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no context or backend", m->name);
    const ds_batch *b = ctx->batch;
    if (!b || b->B <= 0 || b->T <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: batch missing or empty (B=%d, T=%d)",
                      m->name, b ? b->B : 0, b ? b->T : 0);
    if (need_x && !ctx->x)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no input activation", m->name);
    if (m->n_params > 0 && !ctx->params)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no parameter pointers", m->name);
    if (m->n_tied > 0 && !ctx->tied)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no tied parameter pointers", m->name);
    if (!backward && !ctx->y)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no output buffer", m->name);
    if (backward && m->n_params > 0 && !ctx->grads)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no gradient slots", m->name);
    if (backward && m->n_tied > 0 && !ctx->tied_grads)
        return DS_ERR(DS_ERR_INVALID_ARG, "module %s: no tied gradient slots", m->name);
    return DS_OK;
}

ds_status ds_module_grads_final(const ds_module *m, const ds_module_ctx *ctx, int first) {
    if (first < 0 || first >= m->n_params)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "module %s: ds_module_grads_final(first %d): the module has %d parameters",
                      m->name, first, m->n_params);
    if (!ctx->grads_final) return DS_OK;
    DS_TRY(ctx->grads_final(ctx->grads_final_arg, first));
    return DS_OK;
}

static ds_status module_input(const ds_module *m, const ds_module_ctx *ctx, const char *name,
                              ds_dtype want, const void **out) {
    const ds_batch *b = ctx ? ctx->batch : NULL;
    for (int i = 0; b && i < b->n; i++) {
        if (strcmp(b->t[i].name, name) != 0) continue;
        if (b->t[i].dtype != want)
            return DS_ERR(DS_ERR_INVALID_ARG, "module %s: batch tensor %s is %s, the module reads "
                          "%s", m->name, name, ds_dtype_name(b->t[i].dtype), ds_dtype_name(want));
        *out = b->t[i].data;
        return DS_OK;
    }
    return DS_ERR(DS_ERR_INVALID_ARG, "module %s: the batch has no tensor \"%s\"%s", m->name, name,
                  ctx && !ctx->training ? " (targets are left out when predicting)" : "");
}

ds_status ds_module_input_i32(const ds_module *m, const ds_module_ctx *ctx, const char *name,
                              const int32_t **out) {
    return module_input(m, ctx, name, DS_I32, (const void **)out);
}

ds_status ds_module_input_f32(const ds_module *m, const ds_module_ctx *ctx, const char *name,
                              const float **out) {
    return module_input(m, ctx, name, DS_F32, (const void **)out);
}

/* ---- models ---- */

ds_status ds_model_create(const char *type, ds_model **out) {
    *out = NULL;
    ds_model *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "ds_model_create: out of host memory");
    snprintf(m->type, sizeof m->type, "%s", type ? type : "model");
    *out = m;
    return DS_OK;
}

/* A module the model refuses is the model's to free (ds_model_add_module);
 * one without a destroy callback cannot be, and is left as it is. */
static void destroy_module(ds_module *m) {
    if (m->ops && m->ops->destroy) m->ops->destroy(m);
}

ds_status ds_model_add_module(ds_model *model, ds_module *m) {
    if (!m) return DS_ERR(DS_ERR_INVALID_ARG, "ds_model_add_module: module is NULL");
    if (!model) {
        destroy_module(m);
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_model_add_module: model is NULL");
    }
    for (int i = 0; i < model->n_modules; i++) {
        /* the same module again: the model owns it already, so it stays */
        if (model->modules[i] == m)
            return DS_ERR(DS_ERR_INVALID_ARG, "model %s: module %s added twice (a module appears "
                          "once; to share its weights, ds_module_tie another module to them)",
                          model->type, m->name);
        if (strcmp(model->modules[i]->name, m->name) == 0) {
            DS_ERR(DS_ERR_INVALID_ARG, "model %s: a module named %s is already in it", model->type,
                   m->name);
            destroy_module(m);
            return DS_ERR_INVALID_ARG;
        }
    }
    if (model->n_modules == model->cap_modules) {
        int cap = model->cap_modules ? 2 * model->cap_modules : 8;
        ds_module **mods = realloc(model->modules, (size_t)cap * sizeof *mods);
        if (!mods) {
            destroy_module(m);
            return DS_ERR(DS_ERR_OOM, "model %s: out of host memory", model->type);
        }
        model->modules = mods;
        model->cap_modules = cap;
    }
    model->modules[model->n_modules++] = m;
    return DS_OK;
}

ds_status ds_model_add_input(ds_model *model, const char *name, ds_dtype dtype, int ndim,
                             const int64_t *dims, unsigned flags) {
    if (!model || !name) return DS_ERR(DS_ERR_INVALID_ARG, "ds_model_add_input: model or name is NULL");
    if (strlen(name) == 0 || strlen(name) >= DS_MAX_INPUT_NAME)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input name \"%s\" must have 1..%d characters",
                      model->type, name, DS_MAX_INPUT_NAME - 1);
    if (ds_model_input(model, name))
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s declared twice", model->type, name);
    if (model->n_inputs >= DS_MAX_INPUTS)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: at most %d inputs", model->type,
                      name, DS_MAX_INPUTS);
    if (dtype != DS_I32 && dtype != DS_F32)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: dtype %s (inputs are int32 or "
                      "fp32)", model->type, name, ds_dtype_name(dtype));
    if (ndim < 0 || ndim >= DS_MAX_DIMS || (ndim > 0 && !dims))
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: %d dimensions after the batch "
                      "one (0..%d)", model->type, name, ndim, DS_MAX_DIMS - 1);
    if (flags & ~(unsigned)(DS_INPUT_OPTIONAL | DS_INPUT_TARGET))
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: unknown flags 0x%x", model->type,
                      name, flags);
    ds_tensor_desc *d = &model->inputs[model->n_inputs];
    memset(d, 0, sizeof *d);
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0 && dims[i] != DS_DIM_SEQ)
            return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: dimension %d is %lld (> 0, or "
                          "DS_DIM_SEQ)", model->type, name, i + 1, (long long)dims[i]);
        d->dims[i] = dims[i];
    }
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = dtype;
    d->ndim = ndim;
    d->flags = flags;
    model->n_inputs++;
    return DS_OK;
}

ds_status ds_model_input_range(ds_model *model, const char *name, int32_t lo, int32_t hi,
                               bool ignore_index) {
    if (!model || !name) return DS_ERR(DS_ERR_INVALID_ARG, "ds_model_input_range: NULL argument");
    ds_tensor_desc *d = (ds_tensor_desc *)ds_model_input(model, name);
    if (!d)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: ds_model_input_range: no input %s (declare "
                      "it first: ds_model_add_input)", model->type, name);
    if (d->dtype != DS_I32)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s is %s; a range is for int32 inputs",
                      model->type, name, ds_dtype_name(d->dtype));
    if (hi <= lo)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: input %s: range [%d, %d) is empty",
                      model->type, name, lo, hi);
    d->lo = lo;
    d->hi = hi;
    d->flags = ignore_index ? d->flags | DS_INPUT_IGNORE : d->flags & ~(unsigned)DS_INPUT_IGNORE;
    return DS_OK;
}

ds_status ds_tensor_desc_check_values(const ds_tensor_desc *d, const int32_t *v, size_t rows,
                                      size_t row_elems, const char *what) {
    return ds_tensor_desc_check_rows(d, v, 0, rows, row_elems, what);
}

ds_status ds_tensor_desc_check_rows(const ds_tensor_desc *d, const int32_t *v, size_t first_row,
                                    size_t rows, size_t row_elems, const char *what) {
    if (d->hi <= d->lo) return DS_OK; /* no range declared */
    bool ignore = (d->flags & DS_INPUT_IGNORE) != 0;
    _Static_assert(DS_IGNORE_INDEX == -100, "the message below says -100");
    size_t n = rows * row_elems;
    for (size_t i = 0; i < n; i++) {
        int32_t x = v[i];
        if ((x >= d->lo && x < d->hi) || (ignore && x == DS_IGNORE_INDEX)) continue;
        char elem[48] = "";
        if (row_elems > 1) snprintf(elem, sizeof elem, ", element %zu", i % row_elems);
        return DS_ERR(DS_ERR_INVALID_ARG, "%s %s: row %zu%s holds %d, outside [%d, %d)%s, the "
                      "range the model declares", what, d->name, first_row + i / row_elems, elem, x, d->lo,
                      d->hi, ignore ? " (or -100, ignored)" : "");
    }
    return DS_OK;
}

const ds_tensor_desc *ds_model_input(const ds_model *m, const char *name) {
    for (int i = 0; m && i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, name) == 0) return &m->inputs[i];
    return NULL;
}

/* The callbacks every module needs (the optional plan_gemms is not here). */
static const char *missing_callback(const ds_module_ops *o) {
    if (!o->out_elems) return "out_elems";
    if (!o->saved_bytes) return "saved_bytes";
    if (!o->scratch_bytes) return "scratch_bytes";
    if (!o->forward) return "forward";
    if (!o->backward) return "backward";
    if (!o->destroy) return "destroy";
    return NULL;
}

ds_status ds_model_check(const ds_model *model) {
    if (!model) return DS_ERR(DS_ERR_INVALID_ARG, "ds_model_check: model is NULL");
    if (model->n_modules <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s has no modules (ds_model_add_module)",
                      model->type);
    for (int i = 0; i < model->n_modules; i++) {
        const ds_module *m = model->modules[i];
        if (!m->ops)
            return DS_ERR(DS_ERR_INVALID_ARG, "model %s: module %s has no ops", model->type,
                          m->name);
        const char *cb = missing_callback(m->ops);
        if (cb)
            return DS_ERR(DS_ERR_INVALID_ARG, "model %s: module %s (%s): ops.%s is NULL (every "
                          "module has it; only plan_gemms is optional)", model->type, m->name,
                          m->ops->type ? m->ops->type : "?", cb);
        /* a slot ds_module_create made and no ds_module_param filled: it
         * would train as a one-element parameter with an empty name */
        for (int p = 0; p < m->n_params; p++)
            if (m->params[p].ndim < 1 || !m->params[p].name[0])
                return DS_ERR(DS_ERR_INVALID_ARG, "model %s: module %s: parameter %d of its %d "
                              "was never declared (ds_module_param or ds_module_param_nd)",
                              model->type, m->name, p, m->n_params);
    }
    /* The engine reads the loss and its weight from the last module's output
     * (rule 5 above); a model that ends in a head would be read past its
     * output, and its backward given no gradient. */
    const ds_module *last = model->modules[model->n_modules - 1];
    int T = model->max_seq_len > 0 ? model->max_seq_len : 1;
    size_t n = last->ops->out_elems(last, 1, T);
    if (n != 2)
        return DS_ERR(DS_ERR_INVALID_ARG, "model %s: the last module, %s (%s), outputs %zu floats "
                      "for one row: the loss module comes last and outputs two (the loss, its "
                      "weight)", model->type, last->name, last->ops->type ? last->ops->type : "?",
                      n);
    return DS_OK;
}

void ds_model_destroy(ds_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_modules; i++)
        if (m->modules[i]) destroy_module(m->modules[i]);
    free(m->modules);
    free(m);
}

int64_t ds_model_num_params(const ds_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++)
            n += ds_param_numel(&m->modules[i]->params[p]);
    return n;
}

int ds_model_plan_gemms(const ds_model *m, int B, int T, ds_gemm_plan *plan) {
    int without = 0;
    for (int i = 0; i < m->n_modules; i++) {
        const ds_module *mod = m->modules[i];
        if (mod->ops->plan_gemms) mod->ops->plan_gemms(mod, B, T, plan);
        else without++;
    }
    return without;
}

/* transformers' forbidden_name_patterns, searched in the lower-cased name:
 * r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)",
 * r"_norm(?:$|\.)". */
bool ds_param_decays(const ds_param_desc *p) {
    if (p->no_decay) return false;
    char low[DS_MAX_NAME];
    size_t n = strnlen(p->name, DS_MAX_NAME - 1);
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)p->name[i]);
    low[n] = 0;
    if (strstr(low, "bias") || strstr(low, "layernorm") || strstr(low, "rmsnorm")) return false;
    for (const char *c = low; *c;) { /* each dot-separated component */
        const char *dot = strchr(c, '.');
        size_t len = dot ? (size_t)(dot - c) : strlen(c);
        if ((len == 4 && !strncmp(c, "norm", 4)) || (len >= 5 && !strncmp(c + len - 5, "_norm", 5)))
            return false;
        if (!dot) break;
        c = dot + 1;
    }
    return true;
}
