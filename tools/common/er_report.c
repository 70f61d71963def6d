/* engine-run --report (see er_report.h). Each row says what was found and
 * where it came from; what is missing is a row too ("not found: ..."), so a
 * report pasted into a bug tells the reader what the run could use.
 *
 * The GPU rows ask the libraries themselves (dlopen: the CUDA driver
 * libcuda.so.1, the runtime libcudart, NCCL's libnccl.so.2), so a CPU-only
 * build can still say what a machine offers, and a CUDA build says what its
 * module would find at run time. */
#include "tools/common/er_report.h"

#include <cblas.h>
#include <dlfcn.h>
#include <jansson.h>
#include <mpi.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "engine/backend/cpu/cpu_isa.h"
#include "engine/backend/cuda_plugin.h"
#include "engine/engine.h"
#include "offload/aio_internal.h"
#include "tools/common/er_env.h"

#define ROW "%-16s "

/* The CPU's model name from /proc/cpuinfo, "" when absent. */
static void cpu_model(char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, cap, "%s", v);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

static void report_cpu(FILE *out) {
    char model[256];
    cpu_model(model, sizeof model);
    fprintf(out, ROW "%s, %ld logical cores online\n", "cpu", model[0] ? model : "(unknown model)",
            sysconf(_SC_NPROCESSORS_ONLN));
#if defined(__x86_64__) || defined(__i386__)
    /* What the kernels' variants need (cpu_isa.h): the CPU's flags as the
     * compiler's run-time check sees them (it includes the OS's support of
     * the wide registers), plus F16C and AVX512-BF16 from cpuid. */
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    bool bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
    fprintf(out, ROW "avx %s, avx2 %s, fma %s, f16c %s, avx512f %s, avx512bw %s, avx512vl %s, "
            "avx512dq %s, avx512_bf16 %s\n", "cpu features",
            __builtin_cpu_supports("avx") ? "yes" : "no",
            __builtin_cpu_supports("avx2") ? "yes" : "no",
            __builtin_cpu_supports("fma") ? "yes" : "no", f16c ? "yes" : "no",
            __builtin_cpu_supports("avx512f") ? "yes" : "no",
            __builtin_cpu_supports("avx512bw") ? "yes" : "no",
            __builtin_cpu_supports("avx512vl") ? "yes" : "no",
            __builtin_cpu_supports("avx512dq") ? "yes" : "no", bf16 ? "yes" : "no");
#else
    fprintf(out, ROW "(not an x86 CPU: the kernels are the scalar build)\n", "cpu features");
#endif
}

static void report_backends(FILE *out) {
    /* the cpu kernels this build has, which this CPU runs, and the pick */
    char built[256] = "", runs[256] = "";
    for (int i = 0; ds_cpu_isa_names[i]; i++) {
        const char *n = ds_cpu_isa_names[i];
        snprintf(built + strlen(built), sizeof built - strlen(built), "%s%s", i ? ", " : "", n);
        if (ds_cpu_variant_find(n))
            snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s", runs[0] ? ", " : "",
                     n);
    }
    const ds_cpu_variant *v = NULL;
    ds_status st = ds_cpu_variant_pick(&v);
    const char *env = getenv("DS_CPU_ISA");
    fprintf(out, ROW "cpu (OpenBLAS + OpenMP): kernels built for %s; this CPU runs %s; chosen: ",
            "backends", built, runs[0] ? runs : "none");
    if (st == DS_OK) fprintf(out, "%s%s%s%s\n", v->ops->name, env ? " (DS_CPU_ISA=" : "",
                             env ? env : "", env ? ")" : "");
    else fprintf(out, "none: %s\n", ds_last_error());
    const ds_cuda_plugin *p = NULL;
    if (ds_cuda_plugin_get(&p) == DS_OK) {
        Dl_info info;
        const char *where = dladdr((const void *)p->backend_init, &info) && info.dli_fname
                                ? info.dli_fname
                                : DS_CUDA_PLUGIN_FILE;
        fprintf(out, ROW "cuda (cuBLAS, NCCL): module %s, interface version %u\n", "", where,
                p->version);
        ds_cuda_plugin_put();
    } else {
        fprintf(out, ROW "cuda: not available: %s\n", "", ds_last_error());
    }
    fprintf(out, ROW "mpi (rings over point-to-point messages); nccl with the cuda module, "
            "or on cuda mpi through host memory (zero_engine.comm)\n", "comm");
}

static void report_openblas(FILE *out) {
    int par = openblas_get_parallel();
    fprintf(out, ROW "%s; core %s; %d thread%s, threading %s\n", "openblas",
            openblas_get_config(), openblas_get_corename(), openblas_get_num_threads(),
            openblas_get_num_threads() == 1 ? "" : "s",
            par == 0 ? "none (sequential build)" : par == 1 ? "pthreads" : par == 2 ? "OpenMP"
                                                                                     : "unknown");
    fprintf(out, ROW "OpenMP %d (spec date), %d thread%s by default (OMP_NUM_THREADS=%s)\n",
            "openmp", _OPENMP, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s",
            getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "unset");
}

/* Whether OpenBLAS's core fits the CPU, and what engine-run does about it
 * (blas_core.h): the same decision as the launch, so a report pasted into a
 * bug says why a run set OPENBLAS_CORETYPE or warned. */
static void report_blas_core(FILE *out) {
    ds_blas_core_probe p;
    const char *bad = er_blas_core_probe(&p);
    if (bad) {
        fprintf(out, ROW "%s\n", "blas core", bad);
        return;
    }
    const char *set = NULL;
    char why[256];
    switch (ds_blas_core_check(&p, &set, why, sizeof why)) {
    case DS_BLAS_CORE_OK:
        if (!p.dynamic)
            fprintf(out, ROW "%s, fixed when OpenBLAS was built (not DYNAMIC_ARCH)\n", "blas core",
                    p.core);
        else
            fprintf(out, ROW "%s%s%s%s: nothing to change\n", "blas core", p.core,
                    p.coretype_set ? " (OPENBLAS_CORETYPE=" : "", p.coretype,
                    p.coretype_set ? ")" : "");
        break;
    case DS_BLAS_CORE_FALLBACK:
        fprintf(out, ROW "%s: engine-run sets OPENBLAS_CORETYPE=%s for the ranks it starts; "
                "started otherwise, rank 0 warns\n", "blas core", why, set);
        break;
    case DS_BLAS_CORE_NOT_TAKEN:
        fprintf(out, ROW "%s; rank 0 warns\n", "blas core", why);
        break;
    case DS_BLAS_CORE_TOO_NEW:
        fprintf(out, ROW "%s; ds_initialize refuses it\n", "blas core", why);
        break;
    }
}

static void report_mpi(FILE *out) {
    /* both may be called before MPI_Init (MPI-3) */
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0, ver = 0, sub = 0;
    MPI_Get_library_version(lib, &len);
    MPI_Get_version(&ver, &sub);
    lib[strcspn(lib, "\n")] = '\0';
    fprintf(out, ROW "%s; MPI standard %d.%d\n", "mpi", lib, ver, sub);
}

static void *open_first(const char *const *names, const char **which) {
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            *which = names[i];
            return h;
        }
    }
    return NULL;
}

/* The CUDA driver API's few calls, by name (no CUDA header needed). */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_int_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);

static void report_gpus(FILE *out) {
    const char *which = NULL;
    static const char *const drv[] = {"libcuda.so.1", "libcuda.so", NULL};
    void *h = open_first(drv, &which);
    if (!h) {
        fprintf(out, ROW "no CUDA driver (libcuda.so.1 not found): no GPU usable\n", "cuda");
    } else {
        cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
        cu_int_fn drv_ver = (cu_int_fn)dlsym(h, "cuDriverGetVersion");
        cu_int_fn count = (cu_int_fn)dlsym(h, "cuDeviceGetCount");
        cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
        cu_name_fn name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
        cu_mem_fn mem = (cu_mem_fn)dlsym(h, "cuDeviceTotalMem_v2");
        int v = 0, n = 0, rc = -1;
        if (init && drv_ver && count && get && name && mem) {
            drv_ver(&v);
            rc = init(0);
            if (rc == 0) count(&n);
        }
        fprintf(out, ROW "driver %s, CUDA %d.%d; ", "cuda", which, v / 1000, v % 1000 / 10);
        if (rc != 0) fprintf(out, "cuInit failed (error %d): no GPU usable\n", rc);
        else fprintf(out, "%d visible GPU%s (CUDA_VISIBLE_DEVICES=%s)\n", n, n == 1 ? "" : "s",
                     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
        for (int i = 0; rc == 0 && i < n; i++) {
            int dev = 0;
            char nm[256] = "?";
            size_t bytes = 0;
            if (get(&dev, i) == 0) {
                name(nm, (int)sizeof nm, dev);
                mem(&bytes, dev);
            }
            fprintf(out, ROW "gpu %d: %s, %.1f GiB\n", "", i, nm, (double)bytes / (1u << 30));
        }
        dlclose(h);
    }
    static const char *const rt[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                     "libcudart.so.11.0", NULL};
    h = open_first(rt, &which);
    if (h) {
        cu_int_fn rv = (cu_int_fn)dlsym(h, "cudaRuntimeGetVersion");
        int v = 0;
        if (rv) rv(&v);
        fprintf(out, ROW "%s, CUDA %d.%d\n", "cuda runtime", which, v / 1000, v % 1000 / 10);
        dlclose(h);
    } else {
        fprintf(out, ROW "not found (libcudart.so)\n", "cuda runtime");
    }
    static const char *const nc[] = {"libnccl.so.2", "libnccl.so", NULL};
    h = open_first(nc, &which);
    if (h) {
        cu_int_fn gv = (cu_int_fn)dlsym(h, "ncclGetVersion");
        int v = 0;
        if (gv) gv(&v);
        /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9 */
        fprintf(out, ROW "%s, %d.%d.%d\n", "nccl", which, v / 10000, v / 100 % 100, v % 100);
        dlclose(h);
    } else {
        fprintf(out, ROW "not found (libnccl.so.2)\n", "nccl");
    }
}

static void report_features(FILE *out) {
    fprintf(out, ROW "checkpoints zstd %s; config jansson %s; NVMe swap io_uring %s\n",
            "features", ZSTD_versionString(), jansson_version_str(),
            !ds_aio_uring_built() ? "not built (liburing absent at build time; the thread pool "
                                    "does the I/O)"
            : ds_aio_uring_usable(8) ? "built and usable"
                                     : "built, but this kernel refuses it (the thread pool does "
                                       "the I/O)");
}

int er_report(FILE *out) {
    fprintf(out, "zero-engine report (engine-run --report)\n");
    fprintf(out, ROW "%d.%d.%d\n", "version", DS_VERSION_MAJOR, DS_VERSION_MINOR,
            DS_VERSION_PATCH);
    report_backends(out);
    report_cpu(out);
    report_openblas(out);
    report_blas_core(out);
    report_mpi(out);
    report_gpus(out);
    report_features(out);
    fflush(out);
    return 0;
}
