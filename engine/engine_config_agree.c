/* Every rank runs the same resolved config, or none runs.
 *
 * Each rank reads its own ds_config.json (across hosts, each host's copy)
 * and resolves "auto" from what it is given. Ranks that disagree on a value
 * that shapes the collectives (the ZeRO stage, hpZ or MiCS group sizes, a
 * bucket size, the micro-batch) do not fail cleanly: seen, a split that
 * waits until comm_timeout_s, MPI_ERR_TRUNCATE in a gather, a segfault. So
 * after "auto" is resolved, before anything collective is built, the ranks
 * compare a hash of their resolved config with rank 0's; where one differs,
 * rank 0's config crosses to every rank, and each rank that differs names
 * the first key where it does, with both values, in a DS_ERR_CONFIG every
 * rank fails with. One broadcast of 8 bytes and one small all-reduce when
 * all agree. Left out of the comparison: what each host may set for itself
 * (its nvme_path, its aio settings, its thread count) and what only rank 0
 * uses (the monitors' and the profiler's output files). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/io/hash.h"

/* Keys a host may set for itself, or only rank 0 reads ("a.b": b inside a). */
static const char *const k_local[] = {
    "zero_optimization.offload_optimizer.nvme_path", "zero_optimization.offload_param.nvme_path",
    "aio", "zero_engine.num_threads", "tensorboard.output_path", "tensorboard.job_name",
    "csv_monitor.output_path", "csv_monitor.job_name", "flops_profiler.output_file"};

/* The resolved config as compared: without k_local, keys sorted, compact.
 * NULL when out of memory. */
static char *comparable(const ds_config *cfg) {
    char *full = ds_config_to_json(cfg);
    json_t *root = full ? json_loads(full, 0, NULL) : NULL;
    free(full);
    if (!root) return NULL;
    for (size_t i = 0; i < sizeof k_local / sizeof *k_local; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s", k_local[i]);
        json_t *at = root;
        char *key = path, *dot;
        while ((dot = strchr(key, '.')) && at) { /* down to the last key's object */
            *dot = '\0';
            at = json_object_get(at, key);
            key = dot + 1;
        }
        if (json_is_object(at)) json_object_del(at, key);
    }
    char *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return out;
}

/* path + "." + key (or "[i]") into out; a path past cap is cut (a config's
 * keys nest a few levels: never, in practice). */
static void child_path(char *out, size_t cap, const char *path, const char *key, size_t idx) {
    int n = key ? snprintf(out, cap, "%s%s%s", path, path[0] ? "." : "", key)
                : snprintf(out, cap, "%s[%zu]", path, idx);
    if (n < 0) out[0] = '\0';
}

/* A value as compact JSON, for the message ("(absent)" for none). */
static void show(const json_t *v, char *out, size_t cap) {
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(out, cap, "%s", s ? s : "(absent)");
    free(s);
}

/* The first path (depth first, in rank 0's key order, then keys only this
 * rank has) where a and b differ; false when they are equal. */
static bool first_diff(const json_t *a, const json_t *b, const char *path, char *where,
                       size_t cap, const json_t **va, const json_t **vb) {
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *x;
        char sub[512];
        json_object_foreach((json_t *)a, k, x) {
            child_path(sub, sizeof sub, path, k, 0);
            if (first_diff(x, json_object_get(b, k), sub, where, cap, va, vb)) return true;
        }
        json_object_foreach((json_t *)b, k, x) {
            if (json_object_get(a, k)) continue;
            child_path(sub, sizeof sub, path, k, 0);
            return first_diff(NULL, x, sub, where, cap, va, vb);
        }
        return false;
    }
    if (json_is_array(a) && json_is_array(b) && json_array_size(a) == json_array_size(b)) {
        char sub[512];
        for (size_t i = 0; i < json_array_size(a); i++) {
            child_path(sub, sizeof sub, path, NULL, i);
            if (first_diff(json_array_get(a, i), json_array_get(b, i), sub, where, cap, va, vb))
                return true;
        }
        return false;
    }
    if (a && b && json_equal(a, b)) return false;
    snprintf(where, cap, "%s", path[0] ? path : "(the whole config)");
    *va = a;
    *vb = b;
    return true;
}

/* This rank's message naming the first key where it differs from rank 0. */
static ds_status name_difference(const char *mine, const char *rank0, int rank) {
    json_error_t je;
    json_t *a = json_loads(rank0, 0, &je), *b = json_loads(mine, 0, &je);
    char where[512] = "", va_s[160], vb_s[160];
    const json_t *va = NULL, *vb = NULL;
    bool found = a && b && first_diff(a, b, "", where, sizeof where, &va, &vb);
    show(va, va_s, sizeof va_s);
    show(vb, vb_s, sizeof vb_s);
    json_decref(a);
    json_decref(b);
    if (!found) /* same values, different text: cannot happen with one writer */
        return DS_ERR(DS_ERR_CONFIG, "rank %d's resolved config differs from rank 0's", rank);
    return DS_ERR(DS_ERR_CONFIG, "%s: rank 0 runs with %s, rank %d with %s (every rank must "
                  "resolve the same ds_config: the same file on every host, the same \"auto\" "
                  "inputs)", where, va_s, rank, vb_s);
}

ds_status ds_engine_config_agree(engine_t *e) {
    ds_comm *c = e->comm;
    if (c->world == 1) return DS_OK;
    char *mine = comparable(&e->cfg);
    uint64_t h[2] = {mine ? ds_xxh64(mine, strlen(mine), 0) : 0, 0};
    h[1] = h[0];
    ds_status st = ds_comm_host_broadcast(c, &h[1], sizeof h[1], 0);
    int32_t differ = mine && h[0] != h[1] ? 1 : 0, missing = mine ? 0 : 1;
    int32_t counts[2] = {differ, missing};
    if (st == DS_OK) st = ds_comm_host_all_reduce(c, counts, 2, DS_I32, DS_REDUCE_SUM);
    if (st != DS_OK) {
        free(mine);
        return st;
    }
    ds_status local = DS_OK;
    if (counts[1] > 0) { /* some rank could not write its config: nothing to compare */
        local = mine ? DS_OK : DS_ERR(DS_ERR_OOM, "the resolved config: out of host memory");
    } else if (counts[0] > 0) {
        uint64_t len = c->rank == 0 ? (uint64_t)strlen(mine) + 1 : 0;
        st = ds_comm_host_broadcast(c, &len, sizeof len, 0);
        char *rank0 = st == DS_OK ? (c->rank == 0 ? mine : malloc(len)) : NULL;
        int32_t ok = rank0 != NULL, all_ok = ok;
        if (st == DS_OK) st = ds_comm_host_all_reduce(c, &all_ok, 1, DS_I32, DS_REDUCE_MIN);
        if (st == DS_OK && all_ok) st = ds_comm_host_broadcast(c, rank0, len, 0);
        if (st != DS_OK) {
            if (rank0 != mine) free(rank0);
            free(mine);
            return st;
        }
        if (!all_ok)
            local = ok ? DS_ERR(DS_ERR_CONFIG, "the ranks' resolved configs differ")
                       : DS_ERR(DS_ERR_OOM, "rank 0's config: out of host memory");
        else if (differ) /* the ranks like rank 0 read this message (ds_comm_agree) */
            local = name_difference(mine, rank0, c->rank);
        if (rank0 != mine) free(rank0);
    }
    free(mine);
    ds_status worst;
    DS_TRY(ds_comm_agree(c, local, &worst));
    return worst;
}
