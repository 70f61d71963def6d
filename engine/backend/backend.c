/* Backend construction and the accounted allocation wrappers. */
#include "engine/backend/backend.h"

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
