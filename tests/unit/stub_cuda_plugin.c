/* A stand-in for libzero-engine-cuda.so (engine/backend/cuda_plugin.h) that
 * carries this build's interface number but reports a ds_comm 8 bytes
 * larger, as a module built after a field was added to a shared struct
 * without a version bump would: test_backend_plugin checks that the library
 * refuses it at load, naming the struct. It offers nothing to call. */
#include "engine/backend/cuda_plugin.h"
#include "engine/backend/nn.h"

static ds_cuda_plugin g_stub = {
    .version = DS_CUDA_PLUGIN_VERSION,
    .struct_size = sizeof(ds_cuda_plugin),
    .layout = DS_CUDA_PLUGIN_LAYOUT,
};

__attribute__((visibility("default"))) const ds_cuda_plugin *ds_cuda_plugin_v1(void) {
    g_stub.layout[4] = (uint32_t)sizeof(ds_comm) + 8; /* layout[4]: ds_comm */
    return &g_stub;
}
