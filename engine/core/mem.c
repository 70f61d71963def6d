/* Memory accountant: counters per (purpose, place) behind one mutex. */
#include "engine/core/mem.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ds_mem {
    pthread_mutex_t lock;
    int64_t bytes[DS_MEM_PURPOSE_COUNT][DS_PLACE_COUNT];
    int64_t peak[DS_MEM_PURPOSE_COUNT][DS_PLACE_COUNT];
    int64_t total[DS_PLACE_COUNT];
    int64_t total_peak[DS_PLACE_COUNT];
};

ds_status ds_mem_create(ds_mem **out) {
    ds_mem *m = calloc(1, sizeof *m);
    if (!m) return DS_ERR(DS_ERR_OOM, "memory accountant: out of host memory");
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return DS_OK;
}

void ds_mem_destroy(ds_mem *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void ds_mem_add(ds_mem *m, ds_mem_purpose purpose, ds_mem_place place, int64_t bytes) {
    if (!m) return;
    DS_ASSERT(purpose < DS_MEM_PURPOSE_COUNT && place < DS_PLACE_COUNT);
    pthread_mutex_lock(&m->lock);
    int64_t *b = &m->bytes[purpose][place];
    *b += bytes;
    DS_ASSERT(*b >= 0); /* releasing more than was recorded is a bookkeeping bug */
    if (*b > m->peak[purpose][place]) m->peak[purpose][place] = *b;
    m->total[place] += bytes;
    if (m->total[place] > m->total_peak[place]) m->total_peak[place] = m->total[place];
    pthread_mutex_unlock(&m->lock);
}

ds_status ds_mem_host_alloc(ds_mem *m, ds_mem_purpose purpose, size_t bytes, const char *what,
                            void **out) {
    *out = NULL;
    if (bytes == 0) return DS_OK;
    void *p = calloc(1, bytes);
    if (!p)
        return DS_ERR(DS_ERR_OOM, "out of host memory allocating %zu bytes for %s", bytes,
                      what ? what : ds_mem_purpose_name(purpose));
    ds_mem_add(m, purpose, DS_PLACE_HOST, (int64_t)bytes);
    *out = p;
    return DS_OK;
}

void ds_mem_host_free(ds_mem *m, ds_mem_purpose purpose, void *p, size_t bytes) {
    if (!p) return;
    free(p);
    ds_mem_add(m, purpose, DS_PLACE_HOST, -(int64_t)bytes);
}

void ds_mem_snapshot(const ds_mem *m, ds_mem_report *out) {
    memset(out, 0, sizeof *out);
    if (!m) return;
    pthread_mutex_lock((pthread_mutex_t *)&m->lock);
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        for (int l = 0; l < DS_PLACE_COUNT; l++) {
            out->bytes[p][l] = (uint64_t)m->bytes[p][l];
            out->peak[p][l] = (uint64_t)m->peak[p][l];
        }
    for (int l = 0; l < DS_PLACE_COUNT; l++) {
        out->total[l] = (uint64_t)m->total[l];
        out->total_peak[l] = (uint64_t)m->total_peak[l];
    }
    pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
}

const char *ds_mem_purpose_name(ds_mem_purpose p) {
    static const char *const names[DS_MEM_PURPOSE_COUNT] = {
        "params", "grads", "master", "optim", "buffers", "activations", "other", "workspace"};
    return (unsigned)p < DS_MEM_PURPOSE_COUNT ? names[p] : "?";
}

const char *ds_mem_place_name(ds_mem_place p) {
    return p == DS_PLACE_DEVICE ? "device" : p == DS_PLACE_HOST ? "host"
           : p == DS_PLACE_NVME ? "nvme" : "?";
}
