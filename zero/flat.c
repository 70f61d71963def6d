/* Flat parameter space layout. */
#include "zero/flat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static ds_status resolve_ties(const ds_model *model, ds_flat *f);

ds_status ds_flat_create(const ds_model *model, int world, ds_flat **out) {
    *out = NULL;
    if (!model || model->n_modules <= 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "flat parameter space: model has no modules");
    if (world < 1) return DS_ERR(DS_ERR_INVALID_ARG, "flat parameter space: world %d < 1", world);
    int n_params = 0;
    for (int m = 0; m < model->n_modules; m++) n_params += model->modules[m]->n_params;

    ds_flat *f = calloc(1, sizeof *f);
    if (f) {
        f->params = calloc((size_t)(n_params ? n_params : 1), sizeof *f->params);
        f->modules = calloc((size_t)model->n_modules, sizeof *f->modules);
    }
    if (!f || !f->params || !f->modules) {
        ds_flat_destroy(f);
        return DS_ERR(DS_ERR_OOM, "flat parameter space: out of host memory");
    }
    f->n_params = n_params;
    f->n_modules = model->n_modules;
    f->world = world;

    int64_t off = 0;
    int k = 0;
    for (int m = 0; m < model->n_modules; m++) {
        const ds_module *mod = model->modules[m];
        f->modules[m].first_param = k;
        f->modules[m].n_params = mod->n_params;
        f->modules[m].begin = off;
        for (int p = 0; p < mod->n_params; p++, k++) {
            const ds_param_desc *d = &mod->params[p];
            int64_t numel = ds_param_numel(d);
            if (numel <= 0) {
                ds_flat_destroy(f);
                return DS_ERR(DS_ERR_INVALID_ARG, "parameter %s has %lld elements", d->name,
                              (long long)numel);
            }
            for (int q = 0; q < k; q++)
                if (strcmp(f->params[q].desc->name, d->name) == 0) {
                    ds_flat_destroy(f);
                    return DS_ERR(DS_ERR_INVALID_ARG, "parameter name %s appears twice", d->name);
                }
            f->params[k] = (ds_flat_param){.desc = d, .module = m, .numel = numel, .offset = off};
            f->numel += numel;
            off = round_up(off + numel, DS_FLAT_ALIGN);
        }
        f->modules[m].end = off;
    }
    f->used = off;
    f->padded = round_up(off, (int64_t)world * DS_FLAT_ALIGN);
    f->part = f->padded / world;
    ds_status st = resolve_ties(model, f);
    if (st != DS_OK) {
        ds_flat_destroy(f);
        return st;
    }
    *out = f;
    return DS_OK;
}

void ds_flat_destroy(ds_flat *f) {
    if (!f) return;
    free(f->params);
    free(f->modules);
    free(f->ties);
    free(f->tied_params);
    free(f);
}

static int find_owned(const ds_flat *f, const char *name) {
    for (int i = 0; i < f->n_params; i++)
        if (strcmp(f->params[i].desc->name, name) == 0) return i;
    return -1;
}

int ds_flat_find(const ds_flat *f, const char *name) {
    int i = find_owned(f, name);
    if (i >= 0) return i;
    for (int k = 0; k < f->n_ties; k++)
        if (f->ties[k].desc->name[0] && strcmp(f->ties[k].desc->name, name) == 0)
            return f->ties[k].param;
    return -1;
}

int ds_flat_tied_index(const ds_flat *f, int param) {
    for (int j = 0; j < f->n_tied_params; j++)
        if (f->tied_params[j] == param) return j;
    return -1;
}

static bool same_shape(const ds_param_tie *t, const ds_param_desc *p) {
    if (t->ndim != p->ndim) return false;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != p->shape[i]) return false;
    return true;
}

/* "[768, 2304]" */
static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Resolve every module's ties against the parameters of earlier modules. */
static ds_status resolve_ties(const ds_model *model, ds_flat *f) {
    int n = 0;
    for (int m = 0; m < model->n_modules; m++) n += model->modules[m]->n_tied;
    f->ties = calloc((size_t)(n ? n : 1), sizeof *f->ties);
    f->tied_params = calloc((size_t)(n ? n : 1), sizeof *f->tied_params);
    if (!f->ties || !f->tied_params) return DS_ERR(DS_ERR_OOM, "flat parameter space: ties");
    for (int m = 0; m < model->n_modules; m++) {
        const ds_module *mod = model->modules[m];
        f->modules[m].first_tie = f->n_ties;
        f->modules[m].n_ties = mod->n_tied;
        for (int k = 0; k < mod->n_tied; k++) {
            const ds_param_tie *t = &mod->tied[k];
            int p = find_owned(f, t->target);
            if (p < 0)
                return DS_ERR(DS_ERR_INVALID_ARG, "module %s ties to parameter %s, which no module "
                              "declares", mod->name, t->target);
            const ds_flat_param *fp = &f->params[p];
            if (fp->module >= m)
                return DS_ERR(DS_ERR_INVALID_ARG, "module %s ties to %s, owned by module %s, which "
                              "does not come before it (declare the parameter in the first module "
                              "that uses it)", mod->name, t->target,
                              model->modules[fp->module]->name);
            if (!same_shape(t, fp->desc)) {
                char a[96], b[96];
                shape_str(t->ndim, t->shape, a, sizeof a);
                shape_str(fp->desc->ndim, fp->desc->shape, b, sizeof b);
                return DS_ERR(DS_ERR_INVALID_ARG, "module %s ties to %s with shape %s, the "
                              "parameter's is %s", mod->name, t->target, a, b);
            }
            if (t->name[0] && find_owned(f, t->name) >= 0)
                return DS_ERR(DS_ERR_INVALID_ARG, "module %s: tie alias %s is also a parameter's "
                              "name", mod->name, t->name);
            int j = ds_flat_tied_index(f, p);
            if (j < 0) {
                j = f->n_tied_params++;
                f->tied_params[j] = p;
            }
            f->ties[f->n_ties++] = (ds_flat_tie){.desc = t, .module = m, .param = p, .target = j};
        }
    }
    return DS_OK;
}

int ds_flat_clip(const ds_flat *f, int rank, int64_t begin, int64_t end, int64_t *out_begin,
                 int64_t *out_end) {
    int64_t lo = (int64_t)rank * f->part, hi = lo + f->part;
    int64_t b = begin > lo ? begin : lo, e = end < hi ? end : hi;
    if (b >= e) return 0;
    *out_begin = b;
    *out_end = e;
    return 1;
}
