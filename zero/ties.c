/* Accumulators for the gradients of tied parameters. */
#include "zero/ties.h"

#include <stdlib.h>

struct ds_ties {
    ds_backend *be;
    const ds_flat *flat;
    float **acc;     /* [n_tied_params] fp32, the parameter's numel */
    float ***slots;  /* per module: acc pointers of its ties, or NULL */
};

static size_t numel_of(const ds_ties *t, int j) {
    return (size_t)t->flat->params[t->flat->tied_params[j]].numel;
}

void ds_ties_destroy(ds_ties *t) {
    if (!t) return;
    for (int j = 0; t->acc && j < t->flat->n_tied_params; j++)
        ds_backend_free(t->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, t->acc[j], numel_of(t, j) * 4);
    for (int m = 0; t->slots && m < t->flat->n_modules; m++) free(t->slots[m]);
    free(t->slots);
    free(t->acc);
    free(t);
}

ds_status ds_ties_create(ds_backend *be, const ds_flat *f, ds_ties **out) {
    *out = NULL;
    ds_ties *t = calloc(1, sizeof *t);
    if (!t) return DS_ERR(DS_ERR_OOM, "tied gradients: out of host memory");
    t->be = be;
    t->flat = f;
    ds_status st = DS_OK;
    if (f->n_ties > 0) {
        t->acc = calloc((size_t)f->n_tied_params, sizeof *t->acc);
        t->slots = calloc((size_t)f->n_modules, sizeof *t->slots);
        if (!t->acc || !t->slots) st = DS_ERR(DS_ERR_OOM, "tied gradients: out of host memory");
        for (int j = 0; st == DS_OK && j < f->n_tied_params; j++)
            st = ds_backend_alloc(be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, numel_of(t, j) * 4,
                                  (void **)&t->acc[j]); /* zeroed */
        for (int m = 0; st == DS_OK && m < f->n_modules; m++) {
            const ds_flat_module *fm = &f->modules[m];
            if (fm->n_ties == 0) continue;
            t->slots[m] = calloc((size_t)fm->n_ties, sizeof(float *));
            if (!t->slots[m]) {
                st = DS_ERR(DS_ERR_OOM, "tied gradients: out of host memory");
                break;
            }
            for (int k = 0; k < fm->n_ties; k++)
                t->slots[m][k] = t->acc[f->ties[fm->first_tie + k].target];
        }
    }
    if (st != DS_OK) {
        ds_ties_destroy(t);
        return st;
    }
    *out = t;
    return DS_OK;
}

float **ds_ties_grad_slots(ds_ties *t, int m) { return t->slots ? t->slots[m] : NULL; }

ds_status ds_ties_fold(ds_ties *t, int m, float *const *own) {
    const ds_flat *f = t->flat;
    if (f->n_ties == 0) return DS_OK;
    const ds_flat_module *fm = &f->modules[m];
    for (int j = 0; j < f->n_tied_params; j++) {
        int p = f->tied_params[j];
        if (f->params[p].module != m) continue;
        size_t n = numel_of(t, j);
        DS_TRY(t->be->ops->axpy(t->be, own[p - fm->first_param], DS_F32, 1.0f, t->acc[j], DS_F32,
                                n));
        DS_TRY(t->be->ops->memset(t->be, t->acc[j], 0, n * sizeof(float), NULL));
    }
    return DS_OK;
}

ds_status ds_ties_clear(ds_ties *t) {
    for (int j = 0; t->acc && j < t->flat->n_tied_params; j++)
        DS_TRY(t->be->ops->memset(t->be, t->acc[j], 0, numel_of(t, j) * sizeof(float), NULL));
    return DS_OK;
}

static bool slot_span(const ds_flat *f, int m, int64_t threshold) {
    int64_t span = f->modules[m].end - f->modules[m].begin;
    return span > 0 && span >= threshold;
}

int ds_ties_held(const ds_flat *f, int m, int64_t persistence_threshold, int *out) {
    const ds_flat_module *fm = &f->modules[m];
    int n = 0;
    for (int k = -1; k < fm->n_ties; k++) {
        int o = k < 0 ? m : f->params[f->ties[fm->first_tie + k].param].module;
        if (!slot_span(f, o, persistence_threshold)) continue;
        bool seen = false; /* several ties to one owner hold its span once */
        for (int j = 0; j < k && !seen; j++)
            seen = f->params[f->ties[fm->first_tie + j].param].module == o;
        if (seen) continue;
        if (out) { /* insertion by span, descending; equal spans by index */
            int64_t so = f->modules[o].end - f->modules[o].begin;
            int at = n;
            while (at > 0) {
                int p = out[at - 1];
                int64_t sp = f->modules[p].end - f->modules[p].begin;
                if (sp > so || (sp == so && p < o)) break;
                out[at] = p;
                at--;
            }
            out[at] = o;
        }
        n++;
    }
    return n;
}

int ds_ties_max_held(const ds_flat *f, int64_t persistence_threshold) {
    int most = 0;
    for (int m = 0; m < f->n_modules; m++) {
        int n = ds_ties_held(f, m, persistence_threshold, NULL);
        if (n > most) most = n;
    }
    return most;
}
