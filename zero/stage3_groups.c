/* hpZ's secondary copy, MiCS's hierarchical gather and replica all-reduce
 * for stage 3 (zero/stage3_groups.h). */
#include "zero/stage3_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/codec_q8.h"
#include "zero/grad_sparse.h"
#include "zero/zero_util.h"

ds_status ds_s3_groups_create(ds_s3_groups *x, const ds_config *cfg, ds_comm *world,
                              ds_backend *be, ds_dtype pt) {
    memset(x, 0, sizeof *x);
    x->be = be;
    x->pt = pt;
    x->qwz = cfg->zero_quantized_weights;
    DS_TRY(ds_zero_groups_create(cfg, world, &x->g));
    x->part = x->g.part ? x->g.part : world;
    return DS_OK;
}

ds_status ds_s3_groups_alloc(ds_s3_groups *x, const ds_flat *pflat, int64_t max_span) {
    x->n_modules = pflat->n_modules;
    size_t es = ds_dtype_size(x->pt);
    if (x->g.hpz > 1) {
        x->hflat = ds_flat_view(pflat, x->g.hpz);
        x->sec_valid = calloc((size_t)(x->n_modules > 0 ? x->n_modules : 1), sizeof(bool));
        if (!x->sec_valid) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
        DS_TRY(ds_backend_alloc(x->be, DS_MEM_PARAMS, DS_PLACE_DEVICE,
                                (size_t)x->hflat.part * es, &x->sec));
    }
    if (x->g.inter) {
        x->hbuf_bytes = ds_s3_hier_buffer_bytes((size_t)max_span, es, x->qwz, x->g.shard);
        DS_TRY(ds_backend_alloc(x->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, x->hbuf_bytes, &x->hbuf));
        x->hcounts = calloc((size_t)x->g.shard, sizeof *x->hcounts);
        if (!x->hcounts) return DS_ERR(DS_ERR_OOM, "stage 3: out of host memory");
    }
    return DS_OK;
}

void ds_s3_groups_free(ds_s3_groups *x) {
    size_t es = ds_dtype_size(x->pt);
    if (x->be) {
        ds_backend_free(x->be, DS_MEM_PARAMS, DS_PLACE_DEVICE, x->sec, (size_t)x->hflat.part * es);
        ds_backend_free(x->be, DS_MEM_BUFFERS, DS_PLACE_DEVICE, x->hbuf, x->hbuf_bytes);
    }
    free(x->sec_valid);
    free(x->hcounts);
    ds_grad_sparse_destroy(x->rsparse); /* reads no communicator */
    x->rsparse = NULL;
    ds_zero_groups_destroy(&x->g);
    x->sec = x->hbuf = NULL;
    x->sec_valid = NULL;
    x->hcounts = NULL;
}

const void *ds_s3_secondary_at(const ds_s3_groups *x, int64_t begin) {
    int64_t hlo = (int64_t)x->g.sec->rank * x->hflat.part;
    return ds_at(x->sec, x->pt, (begin > hlo ? begin : hlo) - hlo);
}

ds_status ds_s3_secondary_piece(ds_s3_groups *x, int64_t begin, void *dst, size_t n) {
    DS_TRY(x->be->ops->memcpy(x->be, dst, ds_s3_secondary_at(x, begin),
                              n * ds_dtype_size(x->pt), DS_COPY_D2D, NULL));
    return DS_OK;
}

ds_status ds_s3_fill_secondary(ds_s3_groups *x, int m, const void *span, ds_dtype st,
                               int64_t begin, int64_t len) {
    int64_t b, e;
    if (ds_flat_clip(&x->hflat, x->g.sec->rank, begin, begin + len, &b, &e)) {
        int64_t hlo = (int64_t)x->g.sec->rank * x->hflat.part;
        void *dst = ds_at(x->sec, x->pt, b - hlo);
        const void *src = ds_at((void *)span, st, b - begin);
        if (st == x->pt)
            DS_TRY(x->be->ops->memcpy(x->be, dst, src, (size_t)(e - b) * ds_dtype_size(x->pt),
                                      DS_COPY_D2D, NULL));
        else /* qwZ under fp16/bf16: the dequantized fp32 span, in the working dtype */
            DS_TRY(x->be->ops->cast(x->be, dst, x->pt, src, st, (size_t)(e - b)));
    }
    x->sec_valid[m] = true;
    return DS_OK;
}

void ds_s3_invalidate(ds_s3_groups *x) {
    if (x->sec_valid) memset(x->sec_valid, 0, (size_t)x->n_modules * sizeof(bool));
}

size_t ds_s3_hier_buffer_bytes(size_t max_span, size_t es, bool qwz, int shard) {
    size_t full = max_span * es, rec = qwz ? ds_q8_records_bytes_max(max_span, shard) : 0;
    return full > rec ? full : rec;
}

ds_status ds_s3_hier_gather(ds_s3_groups *x, void *buf, const size_t *counts, ds_dtype t) {
    int g = x->g.per_host, hosts = x->g.shard / g, p = x->part->rank, l = p % g;
    size_t es = ds_dtype_size(t), packed = 0, mine_at = 0;
    for (int j = 0; j < hosts; j++) {
        x->hcounts[j] = counts[j * g + l];
        if (j == p / g) mine_at = packed;
        packed += x->hcounts[j];
    }
    if (counts[p] > 0)
        DS_TRY(x->be->ops->memcpy(x->be, ds_at(x->hbuf, t, (int64_t)mine_at),
                                  ds_at(buf, t, (int64_t)ds_zero_block_offset(counts, p)),
                                  counts[p] * es, DS_COPY_D2D, NULL));
    DS_TRY(ds_comm_all_gatherv(x->g.inter, x->hbuf, x->hcounts, t));
    packed = 0;
    for (int j = 0; j < hosts; j++) {
        size_t n = x->hcounts[j];
        if (n > 0)
            DS_TRY(x->be->ops->memcpy(
                x->be, ds_at(buf, t, (int64_t)ds_zero_block_offset(counts, j * g + l)),
                ds_at(x->hbuf, t, (int64_t)packed), n * es, DS_COPY_D2D, NULL));
        packed += n;
    }
    for (int j = 0; j < hosts; j++)
        DS_TRY(ds_comm_all_gatherv(x->g.intra,
                                   ds_at(buf, t, (int64_t)ds_zero_block_offset(counts, j * g)),
                                   counts + j * g, t));
    return DS_OK;
}

static ds_status sparse_replicas_job(void *arg) {
    DS_TRY(ds_grad_sparse_replicas(arg));
    return DS_OK;
}

ds_status ds_s3_sparse_replicas(ds_s3_groups *x, const ds_flat *pflat, int part, ds_dtype gt,
                                void *grads) {
    if (!x->g.repl || x->rsparse) return DS_OK;
    DS_TRY(ds_grad_sparse_create_replicas(x->be, x->g.repl, pflat, part, gt, grads,
                                          &x->rsparse));
    return DS_OK;
}

ds_status ds_s3_sum_replicas(ds_s3_groups *x, ds_comm_worker *w, void *grads, size_t n,
                             ds_dtype gt) {
    if (!x->g.repl || x->repl_done) return DS_OK;
    ds_comm_job j = {.kind = DS_JOB_ALL_REDUCE, .comm = x->g.repl, .buf = grads, .count = n,
                     .t = gt};
    if (x->rsparse) /* the tables' rows and the dense pieces around them, in one job */
        j = (ds_comm_job){.kind = DS_JOB_FN, .fn = sparse_replicas_job, .arg = x->rsparse};
    snprintf(j.what, sizeof j.what, "MiCS gradient all-reduce across %d shard groups",
             x->g.replicas);
    DS_TRY(ds_comm_job_submit(w, &j));
    DS_TRY(ds_comm_job_wait(w, &j));
    x->repl_done = true;
    return DS_OK;
}

ds_status ds_s3_replica_host_sum(ds_s3_groups *x, float *host, int64_t n, const char *name) {
    if (!x->g.repl || x->repl_done) return DS_OK;
    if (n > INT32_MAX)
        return DS_ERR(DS_ERR_INVALID_ARG, "get_grad of %s under MiCS: %lld elements exceed one "
                      "host all-reduce", name, (long long)n);
    DS_TRY(ds_comm_host_all_reduce(x->g.repl, host, (size_t)n, DS_F32, DS_REDUCE_SUM));
    return DS_OK;
}
