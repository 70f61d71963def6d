/* The memory accountant: every allocation of the engine goes through it.
 *
 * Each allocation is tagged by purpose (what the bytes hold) and place (where
 * they live). The accountant keeps current and peak bytes per (purpose, place)
 * so the engine can print, per rank, how model state is sharded next to the
 * ZeRO paper's formula for the same parameter count, world size and stage.
 *
 * The accountant does not allocate itself: the backend does (device memory,
 * pinned host memory); ds_mem_alloc() calls the backend and records the bytes.
 * Plain host allocations of the engine (tables, file buffers) go through
 * ds_mem_host_alloc() so they count too. Thread-safe: the communication thread
 * may allocate while the main thread computes. */
#ifndef DS_CORE_MEM_H
#define DS_CORE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_mem_purpose {
    DS_MEM_PARAMS = 0,    /* working parameters (compute dtype) */
    DS_MEM_GRADS,         /* gradients (communication dtype) */
    DS_MEM_MASTER,        /* fp32 master weights (mixed precision only) */
    DS_MEM_OPTIM,         /* optimizer moments */
    DS_MEM_BUFFERS,       /* communication buckets, gather buffers, scratch */
    DS_MEM_ACTIVATIONS,   /* saved activations and their gradients */
    DS_MEM_OTHER,         /* data batches, tables, file buffers */
    DS_MEM_WORKSPACE,     /* the backend's GEMM workspace: bf16-rounded copies of a GEMM's
                             A and B, sized before the first step (backend.h) */
    DS_MEM_PURPOSE_COUNT
} ds_mem_purpose;

typedef enum ds_mem_place {
    DS_PLACE_DEVICE = 0,  /* backend memory: host RAM on cpu, HBM on cuda */
    DS_PLACE_HOST,        /* host RAM (pinned when the backend is cuda) */
    DS_PLACE_NVME,        /* files on disk: optimizer state swapped to offload_optimizer.nvme_path */
    DS_PLACE_COUNT
} ds_mem_place;

typedef struct ds_mem ds_mem;

/* Snapshot of one accountant; bytes[purpose][place]. */
typedef struct ds_mem_report {
    uint64_t bytes[DS_MEM_PURPOSE_COUNT][DS_PLACE_COUNT];
    uint64_t peak[DS_MEM_PURPOSE_COUNT][DS_PLACE_COUNT];
    uint64_t total[DS_PLACE_COUNT];
    uint64_t total_peak[DS_PLACE_COUNT];
} ds_mem_report;

/* New accountant; *out owns it, free with ds_mem_destroy. */
ds_status ds_mem_create(ds_mem **out);
void ds_mem_destroy(ds_mem *m);

/* Record `bytes` more (or fewer, for a release) of (purpose, place). The
 * backend-facing allocation helpers live in engine/backend/backend.h
 * (ds_backend_alloc), which calls this; use it directly only for memory the
 * accountant cannot see being allocated (e.g. a library's internal buffer). */
void ds_mem_add(ds_mem *m, ds_mem_purpose purpose, ds_mem_place place, int64_t bytes);

/* Plain host memory, counted under `purpose` at DS_PLACE_HOST. Zeroed.
 * Fails with DS_ERR_OOM naming `what` and the size. */
ds_status ds_mem_host_alloc(ds_mem *m, ds_mem_purpose purpose, size_t bytes, const char *what,
                            void **out);
void ds_mem_host_free(ds_mem *m, ds_mem_purpose purpose, void *p, size_t bytes);

void ds_mem_snapshot(const ds_mem *m, ds_mem_report *out);

/* "params", "grads", "master", "optim", "buffers", "activations", "other",
 * "workspace" */
const char *ds_mem_purpose_name(ds_mem_purpose p);
/* "device", "host", "nvme" */
const char *ds_mem_place_name(ds_mem_place p);

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_MEM_H */
