/* Backend construction and the accounted allocation wrappers. */
#include "engine/backend/backend.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/backend/cuda_plugin.h"
#include "engine/backend/nn.h"

ds_status ds_backend_create(const ds_backend_desc *desc, ds_backend **out) {
    *out = NULL;
    if (!desc) return DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_create: desc is NULL");
    ds_backend *be = calloc(1, sizeof *be);
    if (!be) return DS_ERR(DS_ERR_OOM, "ds_backend_create: out of host memory");
    be->kind = desc->kind;
    be->device = desc->device;
    be->mem = desc->mem;
    ds_status st;
    switch (desc->kind) {
    case DS_BACKEND_CPU:
        st = ds_backend_cpu_init(be, desc); /* sets be->nn: its instruction set's table */
        break;
    case DS_BACKEND_CUDA: { /* opened at run time: CPU programs carry no CUDA */
        const ds_cuda_plugin *p;
        st = ds_cuda_plugin_get(&p);
        if (st == DS_OK) {
            st = p->backend_init(be, desc);
            be->nn = p->nn;
            if (st != DS_OK) ds_cuda_plugin_put(); /* no GPU: the module is closed again */
        }
        break;
    }
    default:
        st = DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_create: unknown backend kind %d",
                    (int)desc->kind);
    }
    if (st != DS_OK) {
        free(be);
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    *out = be;
    return DS_OK;
}

void ds_backend_destroy(ds_backend *be) {
    if (!be) return;
    if (be->ops) ds_backend_free(be, DS_MEM_WORKSPACE, DS_PLACE_DEVICE, be->gemm_ws,
                                 be->gemm_ws_bytes);
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    if (be->kind == DS_BACKEND_CUDA) ds_cuda_plugin_put(); /* after its code ran */
    free(be);
}

ds_status ds_backend_set_gemm_inputs(ds_backend *be, ds_dtype t) {
    if (!be) return DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_set_gemm_inputs: backend is NULL");
    if (t != DS_F32 && t != DS_BF16)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_backend_set_gemm_inputs: GEMM inputs must be fp32 or bf16, got %s (%d)",
                      ds_dtype_name(t), (int)t);
    be->gemm_inputs = t;
    return DS_OK;
}

static ds_status tapped_gemm(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                             float alpha, const float *A, int lda, int64_t strideA,
                             const float *B, int ldb, int64_t strideB, float beta, float *C,
                             int ldc, int64_t strideC, int batch) {
    const ds_gemm_call call = {.transa = transa, .transb = transb, .m = m, .n = n, .k = k,
                               .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch,
                               .strideA = strideA, .strideB = strideB, .strideC = strideC,
                               .alpha = alpha, .beta = beta};
    ds_status st = be->untapped->gemm(be, transa, transb, m, n, k, alpha, A, lda, strideA, B,
                                      ldb, strideB, beta, C, ldc, strideC, batch);
    if (st == DS_OK) be->tap(be->tap_ctx, &call); /* a refused call computed nothing */
    return st;
}

static ds_status tapped_gemm_bias(ds_backend *be, bool transa, bool transb, int m, int n, int k,
                                  const float *A, int lda, const float *B, int ldb,
                                  const float *bias, float *C) {
    const ds_gemm_call call = {.transa = transa, .transb = transb, .m = m, .n = n, .k = k,
                               .lda = lda, .ldb = ldb, .ldc = n, .batch = 1, .alpha = 1.0f,
                               .beta = 1.0f};
    ds_status st = be->untapped->gemm_bias(be, transa, transb, m, n, k, A, lda, B, ldb, bias, C);
    if (st == DS_OK) be->tap(be->tap_ctx, &call); /* as in tapped_gemm */
    return st;
}

ds_status ds_backend_tap_gemm(ds_backend *be, ds_gemm_tap_fn tap, void *ctx) {
    if (!be || !tap) return DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_tap_gemm: NULL argument");
    if (be->untapped)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_tap_gemm: the gemm slot is tapped already "
                                          "(the flops profiler and bench_train's --gemm-replay "
                                          "each tap it; one at a time)");
    be->untapped = be->ops;
    be->tapped = *be->ops;
    be->tapped.gemm = tapped_gemm;
    be->tapped.gemm_bias = tapped_gemm_bias;
    be->tap = tap, be->tap_ctx = ctx;
    be->ops = &be->tapped;
    return DS_OK;
}

void ds_backend_untap_gemm(ds_backend *be) {
    if (!be || !be->untapped) return;
    be->ops = be->untapped;
    be->untapped = NULL;
    be->tap = NULL, be->tap_ctx = NULL;
}

/* The copies' element size, row padding and B's alignment per backend:
 * cpu rounds into fp32 copies that its fp32 kernels read, B on a 64-byte
 * line (cpu_gemm_bf16.c); cuda stores bf16 with rows padded to 8 elements
 * (16-byte tensor-core rows) and B 256-byte aligned as cudaMalloc's own
 * buffers are (cuda_gemm_bf16.cu). */
ds_gemm_ws ds_gemm_workspace_of(ds_backend_kind kind, bool transa, bool transb, int m, int n,
                                int k, int64_t strideA, int64_t strideB, int batch) {
    if (kind == DS_BACKEND_CUDA)
        return ds_gemm_ws_of(sizeof(uint16_t), 8, 256, transa, transb, m, n, k, strideA, strideB,
                             batch);
    return ds_gemm_ws_of(sizeof(float), 1, 64, transa, transb, m, n, k, strideA, strideB, batch);
}

void ds_gemm_plan_add(ds_gemm_plan *p, bool transa, bool transb, int m, int n, int k,
                      int64_t strideA, int64_t strideB, int batch) {
    p->gemms++;
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return; /* the slot needs no copies */
    size_t b = ds_gemm_workspace_of(p->kind, transa, transb, m, n, k, strideA, strideB, batch).bytes;
    if (b > p->bytes) p->bytes = b;
}

/* Grow the workspace to `bytes`: the old buffer is freed first (on cuda
 * cudaFree waits for the kernels still reading it), so the accountant's
 * peak is the new size, not both. */
static ds_status grow_workspace(ds_backend *be, size_t bytes) {
    ds_backend_free(be, DS_MEM_WORKSPACE, DS_PLACE_DEVICE, be->gemm_ws, be->gemm_ws_bytes);
    be->gemm_ws = NULL;
    be->gemm_ws_bytes = 0;
    DS_TRY(ds_backend_alloc(be, DS_MEM_WORKSPACE, DS_PLACE_DEVICE, bytes, &be->gemm_ws));
    be->gemm_ws_bytes = bytes;
    return DS_OK;
}

ds_status ds_backend_reserve_gemm_workspace(ds_backend *be, size_t bytes, bool complete) {
    if (!be) return DS_ERR(DS_ERR_INVALID_ARG, "ds_backend_reserve_gemm_workspace: backend is NULL");
    if (bytes > be->gemm_ws_bytes) {
        ds_status st = grow_workspace(be, bytes);
        if (st != DS_OK) {
            ds_error_prefix("reserving the GEMM workspace of bf16 inputs");
            return st;
        }
    }
    be->gemm_ws_planned = complete;
    return DS_OK;
}

ds_status ds_backend_gemm_workspace(ds_backend *be, const ds_gemm_ws *w, void **out) {
    *out = NULL;
    if (w->bytes > be->gemm_ws_need) be->gemm_ws_need = w->bytes;
    if (w->bytes > be->gemm_ws_bytes) {
        if (be->gemm_ws_planned && !be->gemm_ws_warned) {
            be->gemm_ws_warned = true;
            fprintf(stderr,
                    "[zero-engine] warning: the GEMM workspace of bf16 inputs grows from %zu to "
                    "%zu bytes inside a step (A packed %d x %d x %d, B %d x %d x %d): a GEMM "
                    "larger than the modules declare (ds_module_ops.plan_gemms, "
                    "engine/core/module.h); the accountant records it\n",
                    be->gemm_ws_bytes, w->bytes, w->a.copies, w->a.rows, w->a.ld, w->b.copies,
                    w->b.rows, w->b.ld);
        }
        ds_status st = grow_workspace(be, w->bytes);
        if (st != DS_OK) {
            ds_error_prefix("growing the GEMM workspace of bf16 inputs");
            return st;
        }
    }
    *out = be->gemm_ws;
    return DS_OK;
}

static _Thread_local bool tl_serial;

void ds_backend_thread_serial(bool on) { tl_serial = on; }

bool ds_backend_thread_is_serial(void) { return tl_serial; }

ds_status ds_backend_alloc(ds_backend *be, ds_mem_purpose purpose, ds_mem_place place,
                           size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) return DS_OK;
    ds_status st = be->ops->alloc(be, bytes, place, out);
    if (st != DS_OK) {
        ds_error_prefix("allocating %zu bytes of %s on %s", bytes, ds_mem_purpose_name(purpose),
                        ds_mem_place_name(place));
        ds_error_trace(__FILE__, __LINE__);
        return st;
    }
    ds_mem_add(be->mem, purpose, place, (int64_t)bytes);
    return DS_OK;
}

void ds_backend_free(ds_backend *be, ds_mem_purpose purpose, ds_mem_place place, void *ptr,
                     size_t bytes) {
    if (!ptr) return;
    be->ops->free(be, ptr, place);
    ds_mem_add(be->mem, purpose, place, -(int64_t)bytes);
}
