/* Memory estimator: the bytes a configuration will hold per rank, by
 * purpose and place, before anything is allocated. DeepSpeed users know it
 * as estimate_zero2_model_states_mem_needs_all_live / ..._zero3_...; this
 * one follows this engine's own allocations (zero/, offload/) instead of
 * DeepSpeed's rule-of-thumb factors, so it can be checked against the
 * memory report of a real run (ds_memory_report): tests/multirank/test_estimate.c
 * holds every stage, precision and offload combination to 5%.
 *
 *   ds_config cfg;                              // parsed and resolved
 *   ds_mem_report est;                          // bytes[purpose][place] per rank
 *   DS_TRY(ds_estimate_model(model, 4, &cfg, DS_BACKEND_CPU, &est));
 *   // or, for a model not built: Psi and its largest layer only
 *   DS_TRY(ds_estimate_params(2000000000, 67108864, 4, &cfg, DS_BACKEND_CPU, &est));
 *   uint64_t ram = ds_estimate_ram(&est, DS_BACKEND_CPU);   // of this machine, per rank
 *   char fix[512];
 *   if (ds_estimate_fix(model, 0, 0, 4, 4, &cfg, DS_BACKEND_CPU, limit, fix, sizeof fix))
 *       puts(fix);                              // "offload_optimizer device nvme: ..."
 *
 * Counted: parameters, gradients, fp32 master weights and optimizer moments
 * (the ZeRO paper's model states) at their place (device, host RAM, NVMe
 * files), the buffers the strategies and the offload tiers allocate at
 * start-up (gradient buckets, stage-3 gather slots, fp32 compute copies of
 * a module, tied-gradient accumulators, NVMe swap buffers, host staging,
 * sparse_gradients' row lists and records)
 * and, with a model, the engine's activation plan for
 * train_micro_batch_size_per_gpu rows of its max_seq_len (activations,
 * scratch, the device copy of a batch under "other", and with bf16 GEMM
 * inputs the backend's GEMM workspace under "workspace"). Not counted: tables
 * of a few bytes per module or rank, the host data set, and the
 * communicator's scratch (64 MiB at most). Without a model
 * (ds_estimate_params) the layout is one flat range: padding per tensor,
 * tied parameters, stage 3's small persistent modules, the activations and
 * the GEMM workspace are unknown, and a largest layer of 0 leaves out the
 * buffers sized by it. peak[][] equals bytes[][]: everything is allocated
 * once. */
#ifndef DS_ZERO_ESTIMATE_H
#define DS_ZERO_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "engine/core/config.h"
#include "engine/core/mem.h"
#include "engine/core/module.h"
#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most parameters (padded) an estimate takes, 2^50 (about 1.1e15): the
 * byte counts of every purpose, per rank, stay far inside 64 bits. */
#define DS_ESTIMATE_MAX_PARAMS ((int64_t)1 << 50)

/* Per-rank bytes of `model` trained by `world` ranks under the resolved
 * `cfg` (stage, precision, optimizer, offload sections, sub_group_size,
 * buckets, stage-3 limits) on a backend of kind `be`. The model is only
 * read (its parameter table). Errors: DS_ERR_INVALID_ARG (world < 1, a
 * model without modules, a stage outside 0..3, more than
 * DS_ESTIMATE_MAX_PARAMS parameters, a config whose sizes make a byte count
 * leave 64 bits). */
ds_status ds_estimate_model(const ds_model *model, int world, const ds_config *cfg,
                            ds_backend_kind be, ds_mem_report *out);

/* The same from a parameter count alone: `params` (Psi, 1 to
 * DS_ESTIMATE_MAX_PARAMS) parameters whose largest layer (module) has
 * `largest_layer` of them (0: unknown). */
ds_status ds_estimate_params(int64_t params, int64_t largest_layer, int world,
                             const ds_config *cfg, ds_backend_kind be, ds_mem_report *out);

/* Bytes of this machine's RAM a rank of the estimate needs: device plus
 * host on the cpu backend (its device memory is RAM), host on cuda. */
uint64_t ds_estimate_ram(const ds_mem_report *r, ds_backend_kind be);

/* ds_estimate_ram times `ranks` (the ranks of one host), UINT64_MAX where
 * the product leaves 64 bits. */
uint64_t ds_estimate_ram_ranks(const ds_mem_report *r, ds_backend_kind be, int ranks);

/* Model-state bytes (params, grads, master, optim) at `place`. */
uint64_t ds_estimate_state(const ds_mem_report *r, ds_mem_place place);

/* The least offload that makes `ranks_per_host` ranks fit in `ram_limit`
 * bytes of RAM, tried in this order: the config's own places, offload_optimizer
 * cpu (stages 1-3), offload_optimizer nvme, stage 3 with offload_param cpu
 * and the optimizer on cpu, then nvme, then both on nvme; with each, from
 * the fewest changes, sub_group_size 1e8 (optimizer on nvme),
 * offload_param.max_in_cpu 1e7 (parameters on nvme) and
 * stage3_max_live_parameters 0 (stage 3), alone, in pairs, all three, where
 * they lower what the config has. The model is `model` when given, else
 * `params` / `largest_layer` as ds_estimate_params. Writes one sentence
 * naming every config key that changes and the estimate into buf (always
 * terminated) and returns true; false (and the least any try needed) when
 * none fits. */
bool ds_estimate_fix(const ds_model *model, int64_t params, int64_t largest_layer, int world,
                     int ranks_per_host, const ds_config *cfg, ds_backend_kind be,
                     uint64_t ram_limit, char *buf, size_t cap);

/* `bytes` for a message: "1.50 GiB", "12.3 MiB", "340 KiB" or "12 bytes"
 * (binary units) into buf (at least 24 chars); returns buf. */
const char *ds_estimate_size(uint64_t bytes, char *buf);

/* A decimal number at the start of s, strictly: digits with an optional
 * fraction and exponent (2e9, 1.5e9, 2000000000), not NaN, inf, a sign,
 * hexadecimal or leading blanks, which strtod alone takes. *v its value,
 * *end just past it; false when s does not start with one (or it is out of
 * a double's range). For DS_MEM_LIMIT and zero_estimate's counts. */
bool ds_estimate_parse_decimal(const char *s, double *v, const char **end);

/* RAM this process may plan for: the environment's DS_MEM_LIMIT when set
 * (a decimal number of bytes, or with a K, M, G or T suffix, binary, optionally
 * followed by "iB" or "B": 12G, 1.5T, 8589934592; from 1M to 2^63 bytes;
 * exactly "off" turns the start-up check off: *out = 0 and returns DS_OK),
 * else /proc/meminfo's MemAvailable. *out is never 0 otherwise.
 * Errors: DS_ERR_INVALID_ARG (DS_MEM_LIMIT not such a size: NaN, inf,
 * hexadecimal, negative, under 1M, over 2^63 bytes), DS_ERR_IO (no
 * /proc/meminfo and no DS_MEM_LIMIT).
 * Inside a memory cgroup (a container, a Slurm job) the limit is the smaller
 * of MemAvailable and the cgroup's headroom: memory.max less memory.current
 * (cgroup v2) or memory.limit_in_bytes less memory.usage_in_bytes (v1), of
 * this process's cgroup (/proc/self/cgroup) and every one above it, the
 * inactive page cache (memory.stat) not counted as used; "max" is no limit.
 * *source names the one that applied (a static string). */
ds_status ds_estimate_ram_limit(uint64_t *out, const char **source);

/* The same reading the files named: `meminfo` for /proc/meminfo,
 * `self_cgroup` for /proc/self/cgroup, `cgroup_root` for /sys/fs/cgroup
 * (v1 hierarchies under it as memory/...). For tests and unusual mounts. */
ds_status ds_estimate_ram_limit_at(const char *meminfo, const char *self_cgroup,
                                   const char *cgroup_root, uint64_t *out,
                                   const char **source);

#ifdef __cplusplus
}
#endif
#endif /* DS_ZERO_ESTIMATE_H */
