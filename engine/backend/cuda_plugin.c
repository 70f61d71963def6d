/* Opening libzero-engine-cuda.so at run time (engine/backend/cuda_plugin.h). */
#include "engine/backend/cuda_plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend/nn.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const ds_cuda_plugin *g_plugin;
static void *g_handle;
static int g_users; /* ds_cuda_plugin_get calls not yet matched by _put */

/* What a failed dlopen of one place means. */
typedef enum { OPEN_OK, OPEN_ABSENT, OPEN_BROKEN } open_result;

/* dlopen `path`. A module that is not there appends "path (why)" to
 * `absent`; one that is there but does not load (a library it links is
 * missing, a file that is no shared object) writes "path cannot be loaded:
 * why" to `broken`,
 * which is the cause to report. `bare` is the loader's search by file name,
 * where "there" is told from the loader's message, which names the file it
 * could not find (a missing dependency's message names the dependency). */
static open_result try_open(const char *path, bool bare, void **h, char *absent, size_t acap,
                            char *broken, size_t bcap) {
    *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*h) return OPEN_OK;
    const char *why = dlerror();
    if (!why) why = "unknown loader error";
    char not_found[PATH_MAX + 64];
    snprintf(not_found, sizeof not_found, "%s: cannot open shared object file", path);
    bool there = bare ? strncmp(why, not_found, strlen(not_found)) != 0 : access(path, F_OK) == 0;
    if (there) {
        snprintf(broken, bcap, "%s cannot be loaded: %s", path, why);
        return OPEN_BROKEN;
    }
    size_t n = strlen(absent);
    snprintf(absent + n, acap - n, "%s%s (%s)", n ? "; " : "", path, why);
    return OPEN_ABSENT;
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

/* A module that is there but does not load: the cause is what it links. */
static ds_status broken_module(const char *report) {
    return DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module %s (install the CUDA "
                  "runtime, cuBLAS, cuRAND and NCCL libraries it was built against, or put "
                  "them on LD_LIBRARY_PATH)", report);
}

static ds_status load(void) {
    char absent[2048] = "", broken[PATH_MAX + 1024] = "";
    void *h = NULL;
    const char *env = getenv("DS_CUDA_PLUGIN");
    if (env && *env) {
        open_result r = try_open(env, false, &h, absent, sizeof absent, broken, sizeof broken);
        if (r == OPEN_BROKEN) return broken_module(broken);
        if (r == OPEN_ABSENT)
            return DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module named by DS_CUDA_PLUGIN is not "
                          "there: %s", absent);
    }
    if (!h) {
        char dir[PATH_MAX], path[PATH_MAX + 64];
        own_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(path, sizeof path, "%s/%s", dir, DS_CUDA_PLUGIN_FILE);
            if (try_open(path, false, &h, absent, sizeof absent, broken, sizeof broken) ==
                OPEN_BROKEN)
                return broken_module(broken);
        }
    }
    if (!h && try_open(DS_CUDA_PLUGIN_FILE, true, &h, absent, sizeof absent, broken,
                       sizeof broken) == OPEN_BROKEN)
        return broken_module(broken);
    if (!h)
        return DS_ERR(DS_ERR_UNSUPPORTED, "no CUDA module: this build or install of zero-engine "
                      "has no GPU support (configure with -DDS_CUDA=ON on a machine with the CUDA "
                      "toolkit and NCCL); tried %s", absent);
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
    /* the message is made before dlclose: the table lives in the module */
    if (!p || p->version != DS_CUDA_PLUGIN_VERSION || p->struct_size != sizeof *p) {
        ds_status st = DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module is of another version of "
                              "zero-engine (interface %u, this library wants %u): install both "
                              "from one build", p ? p->version : 0u, DS_CUDA_PLUGIN_VERSION);
        dlclose(h);
        return st;
    }
    static const uint32_t want[DS_CUDA_PLUGIN_LAYOUT_N] = DS_CUDA_PLUGIN_LAYOUT;
    static const char *const names[DS_CUDA_PLUGIN_LAYOUT_N] = DS_CUDA_PLUGIN_LAYOUT_NAMES;
    for (int k = 0; k < DS_CUDA_PLUGIN_LAYOUT_N; k++)
        if (p->layout[k] != want[k]) {
            ds_status st = DS_ERR(DS_ERR_UNSUPPORTED, "the CUDA module was built with another "
                                  "%s (%u bytes, this library's %u) under the same interface "
                                  "%u: install both from one build", names[k], p->layout[k],
                                  want[k], p->version);
            dlclose(h);
            return st;
        }
    g_plugin = p;
    g_handle = h;
    return DS_OK;
}

ds_status ds_cuda_plugin_get(const ds_cuda_plugin **out) {
    *out = NULL;
    pthread_mutex_lock(&g_lock);
    ds_status st = g_plugin ? DS_OK : load();
    if (st == DS_OK) g_users++;
    *out = g_plugin;
    pthread_mutex_unlock(&g_lock);
    return st;
}

void ds_cuda_plugin_put(void) {
    pthread_mutex_lock(&g_lock);
    if (g_users > 0 && --g_users == 0) {
        /* nothing uses it: unmap it and the CUDA libraries it brought in, so
         * a run that looked for a GPU and fell back to cpu carries none */
        dlclose(g_handle);
        g_handle = NULL;
        g_plugin = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}
