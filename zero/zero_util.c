/* Shared helpers of the partitioned stages. */
#include "zero/zero_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ds_zero_counts(const ds_flat *f, int64_t lo, int64_t hi, size_t *counts) {
    for (int r = 0; r < f->world; r++) {
        int64_t b, e;
        counts[r] = ds_flat_clip(f, r, lo, hi, &b, &e) ? (size_t)(e - b) : 0;
    }
}

size_t ds_zero_block_offset(const size_t *counts, int rank) {
    size_t off = 0;
    for (int r = 0; r < rank; r++) off += counts[r];
    return off;
}

ds_status ds_zero_part_to_host(ds_backend *be, ds_comm *comm, const ds_flat *f, int i,
                               const void *part, ds_dtype t, float *host) {
    const ds_flat_param *p = &f->params[i];
    memset(host, 0, (size_t)p->numel * sizeof(float));
    int64_t b, e;
    if (ds_flat_clip(f, comm->rank, p->offset, p->offset + p->numel, &b, &e)) {
        int64_t src = b - (int64_t)comm->rank * f->part;
        float *dst = host + (b - p->offset);
        size_t n = (size_t)(e - b);
        if (t == DS_F32) {
            DS_TRY(be->ops->memcpy(be, dst, (const float *)part + src, n * 4, DS_COPY_D2H, NULL));
        } else {
            /* Low-precision partition: fetch the raw halves, widen on the host. */
            uint16_t *tmp = malloc(n * 2);
            if (!tmp) return DS_ERR(DS_ERR_OOM, "gathering %s: out of host memory", p->desc->name);
            ds_status st = be->ops->memcpy(be, tmp, ds_at((void *)part, t, src), n * 2,
                                           DS_COPY_D2H, NULL);
            for (size_t k = 0; st == DS_OK && k < n; k++) dst[k] = ds_load_f32(tmp, t, k);
            free(tmp);
            DS_TRY(st);
        }
    }
    DS_TRY(ds_comm_host_all_reduce(comm, host, (size_t)p->numel, DS_F32, DS_REDUCE_SUM));
    return DS_OK;
}

ds_status ds_zero_part_from_host(ds_backend *be, const ds_flat *f, int rank, int i, void *part,
                                 ds_dtype t, const float *host) {
    const ds_flat_param *p = &f->params[i];
    int64_t b, e;
    if (!ds_flat_clip(f, rank, p->offset, p->offset + p->numel, &b, &e)) return DS_OK;
    int64_t dst = b - (int64_t)rank * f->part;
    const float *src = host + (b - p->offset);
    size_t n = (size_t)(e - b);
    if (t == DS_F32) {
        DS_TRY(be->ops->memcpy(be, (float *)part + dst, src, n * 4, DS_COPY_H2D, NULL));
        return DS_OK;
    }
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return DS_ERR(DS_ERR_OOM, "setting %s: out of host memory", p->desc->name);
    for (size_t k = 0; k < n; k++) ds_store_f32(tmp, t, k, src[k]);
    ds_status st = be->ops->memcpy(be, ds_at(part, t, dst), tmp, n * 2, DS_COPY_H2D, NULL);
    free(tmp);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_zero_part_sumsq(ds_backend *be, ds_comm *comm, const void *buf, ds_dtype t,
                             size_t n, double *sumsq, int *overflow) {
    double s = 0.0;
    int bad = 0;
    DS_TRY(be->ops->sumsq(be, buf, t, n, &s, &bad));
    double v[2] = {s, (double)bad};
    ds_comm_set_context(comm, "the gradient norm"); /* named if it times out */
    ds_status st = ds_comm_host_all_reduce(comm, v, 2, DS_F64, DS_REDUCE_SUM);
    ds_comm_set_context(comm, NULL);
    DS_TRY(st);
    *sumsq = v[0];
    *overflow = v[1] > 0.0;
    return DS_OK;
}

ds_status ds_zero_init_partition(ds_backend *be, const ds_flat *f, int rank, uint64_t seed,
                                 float *part) {
    DS_TRY(ds_zero_init_partition_range(be, f, rank, seed, 0, f->part, part));
    return DS_OK;
}

ds_status ds_zero_init_partition_range(ds_backend *be, const ds_flat *f, int rank, uint64_t seed,
                                       int64_t b, int64_t e, float *dst) {
    int64_t lo = (int64_t)rank * f->part + b, hi = (int64_t)rank * f->part + e;
    for (int i = 0; i < f->n_params; i++) {
        const ds_flat_param *p = &f->params[i];
        int64_t pb = p->offset > lo ? p->offset : lo;
        int64_t pe = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (pb >= pe) continue;
        DS_TRY(ds_zero_init_range(be, p, i, seed, pb - p->offset, pe - pb, dst + (pb - lo)));
    }
    return DS_OK;
}

ds_status ds_zero_state_copy(ds_backend *be, float *base, int64_t base_lo, int64_t base_hi,
                             int64_t lo, int64_t hi, float *host, bool write) {
    if (lo < base_lo || hi > base_hi || lo > hi)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "optimizer state range [%lld, %lld) outside this rank's [%lld, %lld)",
                      (long long)lo, (long long)hi, (long long)base_lo, (long long)base_hi);
    size_t bytes = (size_t)(hi - lo) * sizeof(float);
    if (!base) {
        if (write)
            return DS_ERR(DS_ERR_INVALID_ARG,
                          "the checkpoint holds optimizer moments this optimizer does not keep");
        memset(host, 0, bytes);
        return DS_OK;
    }
    float *dev = base + (lo - base_lo);
    DS_TRY(be->ops->memcpy(be, write ? (void *)dev : (void *)host, write ? (void *)host : (void *)dev,
                           bytes, write ? DS_COPY_H2D : DS_COPY_D2H, NULL));
    return DS_OK;
}

void ds_zero_describe_range(const ds_flat *f, int64_t lo, int64_t hi, const char *what, char *buf,
                            size_t cap) {
    int first = -1, last = -1;
    for (int m = 0; m < f->n_modules; m++) {
        if (f->modules[m].end <= lo || f->modules[m].begin >= hi || !f->modules[m].n_params)
            continue;
        if (first < 0) first = m;
        last = m;
    }
    if (first < 0) {
        snprintf(buf, cap, "%s of flat elements [%lld, %lld)", what, (long long)lo,
                 (long long)hi);
        return;
    }
    const ds_flat_module *a = &f->modules[first], *b = &f->modules[last];
    const char *pa = f->params[a->first_param].desc->name;
    const char *pb = f->params[b->first_param + b->n_params - 1].desc->name;
    if (first == last)
        snprintf(buf, cap, "%s of module %d of %d (%s%s)", what, first + 1, f->n_modules, pa,
                 a->n_params > 1 ? ", ..." : "");
    else
        snprintf(buf, cap, "%s of modules %d-%d of %d (%s .. %s)", what, first + 1, last + 1,
                 f->n_modules, pa, pb);
}

ds_status ds_zero_fetch(ds_backend *be, void *host, const void *dev, size_t bytes) {
    DS_TRY(be->ops->memcpy(be, host, dev, bytes, DS_COPY_D2H, NULL));
    return be->ops->sync(be);
}

ds_status ds_zero_put(ds_backend *be, void *dev, const void *host, size_t bytes) {
    return be->ops->memcpy(be, dev, host, bytes, DS_COPY_H2D, NULL);
}

static int cmp_span_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

ds_status ds_s3_slot_caps(const int64_t *spans, int n, int64_t persist_threshold,
                          int64_t max_live, int held, int *n_slots, int64_t *caps) {
    if (held > DS_S3_MAX_SLOTS)
        return DS_ERR(DS_ERR_INVALID_ARG, "stage 3: a module uses the parameters of %d modules "
                      "at once; at most %d", held, DS_S3_MAX_SLOTS);
    int64_t *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (!s) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    /* persistent spans (0 < span < threshold) are gathered into their own
     * copy one after another through one slot: the largest of them stands
     * for all (the others would only add slots nobody fills) */
    int64_t persist_max = 0;
    int kept = 0;
    for (int m = 0; m < n; m++) {
        if (spans[m] > 0 && spans[m] < persist_threshold) {
            if (spans[m] > persist_max) persist_max = spans[m];
        } else {
            s[kept++] = spans[m];
        }
    }
    if (persist_max > 0) s[kept++] = persist_max; /* room: at least one was left out */
    n = kept;
    qsort(s, (size_t)n, sizeof *s, cmp_span_desc);
    int k = 0;
    int64_t sum = 0;
    for (; k < DS_S3_MAX_SLOTS; k++) {
        caps[k] = n > 0 ? s[k < n ? k : n - 1] : 0;
        bool need = k < 2 || k < held;
        /* past the budget, or every module with parameters has one */
        if (!need && (caps[k] > max_live - sum || k >= n || caps[k] == 0)) break;
        sum += caps[k];
    }
    free(s);
    *n_slots = k;
    return DS_OK;
}
