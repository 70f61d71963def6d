/* The CUDA module is opened at run time (engine/backend/cuda_plugin.h): in a
 * build without it, asking for cuda is DS_ERR_UNSUPPORTED saying there is no
 * CUDA module and where it looked; in a build with it and no GPU, the error
 * says what is missing (the driver, or a visible GPU), not that the module
 * is; DS_CUDA_PLUGIN naming a missing file is refused with that path, and
 * naming a file that is there but does not load (here one that is no shared
 * object; in life a module whose cuBLAS or NCCL is not installed) says that
 * module cannot be loaded, with the loader's reason and what to install;
 * a module of this interface number built with another layout of a shared
 * struct (tests/unit/stub_cuda_plugin.c) is refused naming the struct;
 * zero_engine.backend "auto" then trains on cpu. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

int main(void) {
    ds_backend_desc d = {.kind = DS_BACKEND_CUDA};
    ds_backend *be = NULL;
    ds_status st = ds_backend_create(&d, &be);
    bool gpu = st == DS_OK;
#ifndef DS_HAVE_CUDA
    CHECK(st == DS_ERR_UNSUPPORTED && !be && strstr(ds_last_error(), "no CUDA module") &&
              strstr(ds_last_error(), "libzero-engine-cuda.so.0"),
          "cuda without the module: %d %s", (int)st, ds_last_error());
#else
    /* the module is there; without a GPU it fails naming what is missing */
    if (st == DS_OK) ds_backend_destroy(be);
    else CHECK(!strstr(ds_last_error(), "no CUDA module") &&
                   (strstr(ds_last_error(), "no NVIDIA driver") ||
                    strstr(ds_last_error(), "no GPU is visible") ||
                    strstr(ds_last_error(), "update the driver")),
               "no GPU, said as: %s", ds_last_error());
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

    /* a module file that is there and does not load: its cause, not "no
     * module" (the loader reads the header and refuses it) */
    char fake[] = "/tmp/test_backend_plugin_XXXXXX";
    int fd = mkstemp(fake);
    if (fd < 0) TEST_DIE("mkstemp in /tmp");
    static const char k_junk[] = "not a shared object\n";
    CHECK(write(fd, k_junk, sizeof k_junk - 1) == (ssize_t)(sizeof k_junk - 1), "writing %s", fake);
    close(fd);
    setenv("DS_CUDA_PLUGIN", fake, 1);
    st = ds_backend_create(&d, &be);
    char want[128];
    snprintf(want, sizeof want, "the CUDA module %s cannot be loaded: ", fake);
    CHECK(st == DS_ERR_UNSUPPORTED && !be && strstr(ds_last_error(), want) &&
              strstr(ds_last_error(), "install the CUDA runtime, cuBLAS, cuRAND and NCCL") &&
              !strstr(ds_last_error(), "no CUDA module"),
          "a module that does not load: %d %s", (int)st, ds_last_error());
    unlink(fake);

    /* a module of this interface number whose ds_comm is another size (a
     * field added without a version bump): refused at load, naming the
     * struct, before either side writes past the other's allocation */
    setenv("DS_CUDA_PLUGIN", DS_STUB_PLUGIN, 1);
    st = ds_backend_create(&d, &be);
    CHECK(st == DS_ERR_UNSUPPORTED && !be &&
              strstr(ds_last_error(), "the CUDA module was built with another ds_comm") &&
              strstr(ds_last_error(), "install both from one build"),
          "a module of another layout: %d %s", (int)st, ds_last_error());
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

    /* ... where zero_engine.comm "nccl" cannot follow: refused naming the key */
    if (!gpu) {
        REQUIRE_OK(ds_mlp_create(&md, &m));
        id.config_json = "{\"train_micro_batch_size_per_gpu\": 2, \"zero_engine\": {\"backend\": "
                         "\"auto\", \"comm\": \"nccl\"}, \"optimizer\": {\"type\": \"SGD\", "
                         "\"params\": {\"lr\": 0.1}}}";
        id.model = m;
        e = NULL;
        st = ds_initialize(&id, &e);
        CHECK(st == DS_ERR_CONFIG && !e &&
                  strstr(ds_last_error(), "zero_engine.comm: \"nccl\" needs the cuda backend"),
              "comm nccl on auto's cpu: %d %s", (int)st, ds_last_error());
    }
    return test_finish("test_backend_plugin");
}
