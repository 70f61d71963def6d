/* The CUDA backend and the NCCL communicator live in a module of their own,
 * libzero-engine-cuda.so, which the library opens at run time when a GPU is
 * asked for (zero_engine.backend "cuda" or "auto", ds_backend_create with
 * DS_BACKEND_CUDA, ds_comm_create with DS_COMM_NCCL). A CPU program then
 * links and loads no CUDA library at all, whatever the machine it was built
 * on had installed.
 *
 * Where the module is looked for, first found wins:
 *   1. $DS_CUDA_PLUGIN (a path), when set;
 *   2. the directory holding libzero-engine.so itself (the build tree, or
 *      the install prefix's lib directory, where `cmake --install` puts both);
 *   3. the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache).
 * It needs the shared libzero-engine (a program linked against the static
 * library would load a second copy of the engine's state with it).
 *
 * Internal to the library: users ask for a backend, not for this. */
#ifndef DS_BACKEND_CUDA_PLUGIN_H
#define DS_BACKEND_CUDA_PLUGIN_H

#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: ds_backend gained chunk_bytes; 3: gemm_inputs; 4: the GEMM workspace
 * (gemm_ws...), which the module's gemm slot takes from backend.c; 5: the
 * nn table gained dropout_ln_fwd; 6: ds_backend_desc.share_devices, ds_comm.stage and
 * DS_COPY_DEFAULT; 7: the onebit slots (1-bit / 0/1 Adam on the device); 8: the rows
 * slots (row-sparse gradients on the device); 9: rows_scatter (the stage-1/2
 * word table by rows on the device); 10: ds_backend_ops gained gemm_bias,
 * ds_backend gained gemm_no_cut and attn_consecutive, attn_softmax_fwd/bwd
 * took b_step; 11: attn_consecutive and b_step taken out again (a module
 * built as 10 passes the softmax's arguments one place off); 12: ds_comm
 * gained check_recs, check_calls and seq_hash, ds_comm_desc
 * check_collectives (the module allocates the NCCL communicator, the
 * library writes them), and the table carries the shared structs' sizes */
#define DS_CUDA_PLUGIN_VERSION 13
#define DS_CUDA_PLUGIN_FILE "libzero-engine-cuda.so.0"
#define DS_CUDA_PLUGIN_ENTRY "ds_cuda_plugin_v1"

/* The sizes of the structs the module and the library both lay out, as
 * the module was built: a changed struct whose interface version was not
 * bumped is then refused at load, naming it, instead of one side writing
 * past the other's allocation. */
#define DS_CUDA_PLUGIN_LAYOUT                                                     \
    {(uint32_t)sizeof(ds_backend), (uint32_t)sizeof(ds_backend_ops),              \
     (uint32_t)sizeof(ds_nn_ops), (uint32_t)sizeof(ds_backend_desc),              \
     (uint32_t)sizeof(ds_comm), (uint32_t)sizeof(ds_comm_desc),                   \
     (uint32_t)sizeof(ds_comm_stats)}
#define DS_CUDA_PLUGIN_LAYOUT_NAMES                                               \
    {"ds_backend", "ds_backend_ops", "ds_nn_ops", "ds_backend_desc", "ds_comm",  \
     "ds_comm_desc", "ds_comm_stats"}
#define DS_CUDA_PLUGIN_LAYOUT_N 7

/* What the module hands the library. */
typedef struct ds_cuda_plugin {
    uint32_t version;       /* DS_CUDA_PLUGIN_VERSION */
    uint32_t struct_size;   /* sizeof(ds_cuda_plugin) the module was built with */
    uint32_t layout[DS_CUDA_PLUGIN_LAYOUT_N]; /* DS_CUDA_PLUGIN_LAYOUT */
    ds_status (*backend_init)(ds_backend *be, const ds_backend_desc *desc);
    const ds_nn_ops *nn;
    ds_status (*nccl_create)(const ds_comm_desc *desc, ds_comm **out);
} ds_cuda_plugin;

/* The module's entry point (exported by libzero-engine-cuda.so). */
typedef const ds_cuda_plugin *(*ds_cuda_plugin_entry)(void);

/* Open the module (once while it is in use) and return its table; each
 * successful call is matched by one ds_cuda_plugin_put when the caller is
 * done with what the table made. Errors, all DS_ERR_UNSUPPORTED: no module
 * (a CPU-only build or install), naming every place tried; a module that is
 * there but cannot be loaded, naming it and the loader's message (a CUDA
 * library it links is missing); a version mismatch. */
ds_status ds_cuda_plugin_get(const ds_cuda_plugin **out);

/* Done with the table: the last put closes the module, which unmaps the CUDA
 * libraries it brought in (a backend "auto" that found no GPU and fell back
 * to cpu leaves none mapped). */
void ds_cuda_plugin_put(void);

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_CUDA_PLUGIN_H */
