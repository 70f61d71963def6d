/* The entry point of libzero-engine-cuda.so: the table the library reads
 * when it opens this module (engine/backend/cuda_plugin.h). */
#include "engine/backend/cuda_plugin.h"
#include "engine/backend/nn.h"
#include "engine/comm/comm_internal.h"

static const ds_cuda_plugin k_plugin = {
    .version = DS_CUDA_PLUGIN_VERSION,
    .struct_size = sizeof(ds_cuda_plugin),
    .layout = DS_CUDA_PLUGIN_LAYOUT,
    .backend_init = ds_backend_cuda_init,
    .nn = &ds_nn_cuda,
    .nccl_create = ds_comm_nccl_create,
};

__attribute__((visibility("default"))) const ds_cuda_plugin *ds_cuda_plugin_v1(void) {
    return &k_plugin;
}
