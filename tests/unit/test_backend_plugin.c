/* The CUDA module is opened at run time (engine/backend/cuda_plugin.h): in a
 * build without it, asking for cuda is DS_ERR_UNSUPPORTED saying there is no
 * CUDA module and where it looked; DS_CUDA_PLUGIN naming a missing file is
 * refused with that path; zero_engine.backend "auto" then trains on cpu. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

int main(void) {
    ds_backend_desc d = {.kind = DS_BACKEND_CUDA};
    ds_backend *be = NULL;
    ds_status st = ds_backend_create(&d, &be);
#ifndef DS_HAVE_CUDA
    CHECK(st == DS_ERR_UNSUPPORTED && !be && strstr(ds_last_error(), "no CUDA module") &&
              strstr(ds_last_error(), "libzero-engine-cuda.so.0"),
          "cuda without the module: %d %s", (int)st, ds_last_error());
#else
    /* the module is there; without a GPU it fails naming the CUDA error */
    if (st == DS_OK) ds_backend_destroy(be);
    else CHECK(!strstr(ds_last_error(), "no CUDA module"), "module not found: %s", ds_last_error());
#endif
    /* DS_CUDA_PLUGIN is read when the module is first looked for, and a
     * failed look is not remembered: set it and ask again */
    setenv("DS_CUDA_PLUGIN", "/nonexistent/libzero-engine-cuda.so.0", 1);
#ifndef DS_HAVE_CUDA
    st = ds_backend_create(&d, &be);
    CHECK(st == DS_ERR_UNSUPPORTED && strstr(ds_last_error(), "DS_CUDA_PLUGIN") &&
              strstr(ds_last_error(), "/nonexistent/libzero-engine-cuda.so.0"),
          "DS_CUDA_PLUGIN to a missing file: %s", ds_last_error());
#endif
    unsetenv("DS_CUDA_PLUGIN");

    /* "auto" falls back to cpu and trains */
    ds_mlp_desc md = {.vocab_size = 10, .max_seq_len = 4, .embed_dim = 4, .hidden_dim = 4,
                      .n_classes = 2};
    ds_model *m;
    REQUIRE_OK(ds_mlp_create(&md, &m));
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = "{\"train_micro_batch_size_per_gpu\": 2, \"zero_engine\": {\"backend\": "
                     "\"auto\"}, \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}";
    id.model = m;
    id.quiet = true;
    engine_t *e = NULL;
    CHECK_OK(ds_initialize(&id, &e));
    ds_finalize(e);
    return test_finish("test_backend_plugin");
}
