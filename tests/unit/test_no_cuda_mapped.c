/* A CPU run maps no CUDA library (engine/backend/cuda_plugin.h): after
 * ds_initialize and a training step with zero_engine.backend "cpu", and again
 * with "auto" where no GPU is usable (it falls back to cpu and closes the CUDA
 * module it opened to look), /proc/self/maps names none of libcudart,
 * libcublas, libcurand, libnccl, libcuda.so nor the module itself.
 *
 * Meaningful in a DS_CUDA=ON build (the quickstart's default where nvcc
 * exists), where the module and the libraries it links are there to be
 * mapped: it first opens the module by hand and checks that the maps then
 * name it and the CUDA runtime, so the scan is shown to see what it looks
 * for, and that closing it unmaps them. A DS_CUDA=OFF build runs the same
 * scans (nothing can map CUDA there; it still checks the cpu path loads
 * nothing by another route). Where a GPU is usable "auto" picks cuda, so
 * that scan is left out and said so. */
#include <stdio.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/backend/cuda_plugin.h"
#include "engine/engine.h"
#include "models/models.h"
#include "tests/unit/test_util.h"

static const char *const k_cuda_libs[] = {"libcudart", "libcublas", "libcurand", "libnccl",
                                          "libcuda.so", "libzero-engine-cuda"};
enum { N_LIBS = sizeof k_cuda_libs / sizeof k_cuda_libs[0] };

/* Which of k_cuda_libs this process maps now: mapped[i], and the first line
 * naming each, for the message. Returns how many are mapped. */
static int scan_maps(int mapped[N_LIBS], char first[N_LIBS][256]) {
    memset(mapped, 0, N_LIBS * sizeof mapped[0]);
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) TEST_DIE("cannot read /proc/self/maps");
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        for (int i = 0; i < N_LIBS; i++) {
            if (!mapped[i] && strstr(line, k_cuda_libs[i])) {
                mapped[i] = 1;
                snprintf(first[i], sizeof first[i], "%.200s", line); /* enough to name it */
            }
        }
    }
    fclose(f);
    int n = 0;
    for (int i = 0; i < N_LIBS; i++) n += mapped[i];
    return n;
}

static void check_none_mapped(const char *when) {
    int mapped[N_LIBS];
    char first[N_LIBS][256];
    if (scan_maps(mapped, first) == 0) {
        printf("%s: no CUDA library mapped\n", when);
        return;
    }
    for (int i = 0; i < N_LIBS; i++)
        if (mapped[i]) TEST_FAIL("%s: %s is mapped: %s", when, k_cuda_libs[i], first[i]);
}

/* ds_initialize with zero_engine.backend `backend` and one training step. */
static void train_one_step(const char *backend) {
    enum { T = 4, N = 8 };
    ds_dataset *d;
    REQUIRE_OK(ds_cls_dataset_create(N, T, 2, NULL, &d));
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    for (int i = 0; i < N * T; i++) {
        ids[i] = i % 10;
        mask[i] = 1.0f;
    }
    for (int i = 0; i < N; i++) labels[i] = i % 2;
    ds_mlp_desc md = {.vocab_size = 10, .max_seq_len = T, .embed_dim = 4, .hidden_dim = 4,
                      .n_classes = 2};
    ds_model *m;
    REQUIRE_OK(ds_mlp_create(&md, &m));
    char json[256];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 4, \"zero_engine\": {\"backend\": \"%s\"}, "
             "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}",
             backend);
    ds_init_desc id;
    ds_init_desc_defaults(&id);
    id.config_json = json;
    id.model = m;
    id.train_data = d;
    id.quiet = true;
    engine_t *e = NULL;
    REQUIRE_OK(ds_initialize(&id, &e));
    ds_step_info info;
    CHECK_OK(ds_train_batch(e, &info));
    ds_finalize(e);
    ds_dataset_destroy(d);
}

int main(void) {
    /* the scan sees the module and the CUDA runtime while it is open, and
     * closing it unmaps them */
    const ds_cuda_plugin *p;
    if (ds_cuda_plugin_get(&p) == DS_OK) {
        int mapped[N_LIBS];
        char first[N_LIBS][256];
        scan_maps(mapped, first);
        CHECK(mapped[0] && mapped[N_LIBS - 1], "the CUDA module is open but the maps name %s%s",
              mapped[0] ? "" : "no libcudart ", mapped[N_LIBS - 1] ? "" : "no module");
        ds_cuda_plugin_put();
        check_none_mapped("after closing the CUDA module");
    } else {
        printf("no CUDA module here (%s): the scans below check the cpu path alone\n",
               ds_last_error());
    }

    check_none_mapped("at start-up");
    train_one_step("cpu");
    check_none_mapped("after a step with backend cpu");

    ds_backend_desc bd = {.kind = DS_BACKEND_CUDA};
    ds_backend *be = NULL;
    if (ds_backend_create(&bd, &be) == DS_OK) {
        ds_backend_destroy(be);
        printf("a GPU is usable here: \"auto\" picks cuda, so its scan is left out\n");
    } else {
        printf("no GPU backend here (%s)\n", ds_last_error());
        check_none_mapped("after a failed cuda backend");
        train_one_step("auto");
        check_none_mapped("after a step with backend auto (fell back to cpu)");
    }
    return test_finish("test_no_cuda_mapped");
}
