/* Opening libzero-engine-cuda.so at run time (engine/backend/cuda_plugin.h). */
#include "engine/backend/cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const ds_cuda_plugin *g_plugin;

/* dlopen `path`; on failure append "path: why" to the report. */
static void *try_open(const char *path, char *report, size_t cap) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t n = strlen(report);
        const char *why = dlerror();
        snprintf(report + n, cap - n, "%s%s (%s)", n ? "; " : "", path, why ? why : "not found");
    }
    return h;
}

/* The directory of the shared library this function is in, or "" when the
 * library is linked statically into the program. */
static void own_dir(char *dir, size_t cap) {
    Dl_info info;
    dir[0] = 0;
    if (!dladdr((void *)&ds_cuda_plugin_get, &info) || !info.dli_fname) return;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return;
    size_t n = (size_t)(slash - info.dli_fname);
    if (n + 1 > cap) return;
    memcpy(dir, info.dli_fname, n);
    dir[n] = 0;
}

static ds_status load(void) {
    char report[2048] = "";
    void *h = NULL;
    const char *env = getenv("DS_CUDA_PLUGIN");
    if (env && *env) {
        h = try_open(env, report, sizeof report);
        if (!h)
            return DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module named by DS_CUDA_PLUGIN cannot be "
                          "opened: %s", report);
    }
    if (!h) {
        char dir[PATH_MAX], path[PATH_MAX + 64];
        own_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(path, sizeof path, "%s/%s", dir, DS_CUDA_PLUGIN_FILE);
            h = try_open(path, report, sizeof report);
        }
    }
    if (!h) h = try_open(DS_CUDA_PLUGIN_FILE, report, sizeof report);
    if (!h)
        return DS_ERR(DS_ERR_UNSUPPORTED, "no CUDA module: this build or install of zero-engine "
                      "has no GPU support (configure with -DDS_CUDA=ON on a machine with the CUDA "
                      "toolkit and NCCL); tried %s", report);
    dlerror();
    void *sym = dlsym(h, DS_CUDA_PLUGIN_ENTRY);
    const char *why = dlerror();
    if (!sym || why) {
        dlclose(h);
        return DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module has no %s: %s", DS_CUDA_PLUGIN_ENTRY,
                      why ? why : "NULL symbol");
    }
    ds_cuda_plugin_entry entry;
    memcpy(&entry, &sym, sizeof entry); /* object pointer -> function pointer, as POSIX allows */
    const ds_cuda_plugin *p = entry();
    if (!p || p->version != DS_CUDA_PLUGIN_VERSION || p->struct_size != sizeof *p) {
        dlclose(h);
        return DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module is of another version of zero-engine "
                      "(interface %u, this library wants %u): install both from one build",
                      p ? p->version : 0u, DS_CUDA_PLUGIN_VERSION);
    }
    g_plugin = p; /* the handle stays open for the life of the process */
    return DS_OK;
}

ds_status ds_cuda_plugin_get(const ds_cuda_plugin **out) {
    *out = NULL;
    pthread_mutex_lock(&g_lock);
    ds_status st = g_plugin ? DS_OK : load();
    *out = g_plugin;
    pthread_mutex_unlock(&g_lock);
    return st;
}
