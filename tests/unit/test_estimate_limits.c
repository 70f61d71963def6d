/* The memory estimator's edges (zero/estimate.h), one process, no MPI:
 *   - DS_MEM_LIMIT: sizes with and without suffixes are read; NaN, inf,
 *     negative and hexadecimal numbers, anything under 1 MiB or over 2^63
 *     bytes is refused naming DS_MEM_LIMIT (they turned the check off or
 *     made everything fit); only "off" turns the check off;
 *   - a memory cgroup's headroom below MemAvailable is the limit, and the
 *     source says which applied: cgroup v2 (memory.max less memory.current,
 *     a parent's limit binding, "max" none) and v1 (memory.limit_in_bytes
 *     less memory.usage_in_bytes, the container's cgroup at the mount's
 *     root), in a fake /proc and /sys/fs/cgroup under a temporary folder;
 *   - the start-up check (ds_engine_check_fit) multiplies by the ranks
 *     really on this host: 8 + 2 ranks on two hosts are 8 on the first
 *     and 2 on the second (it took 5 for both, ceil(world / hosts)),
 *     with a communicator that says so put in place of the engine's;
 *   - absurd sizes through the public API: a parameter count past the
 *     estimator's range is refused (3e18 gave optimizer bytes below the
 *     parameters' after a wrapped multiplication), the largest it takes
 *     keeps every byte count in proportion, and a config's huge
 *     offload_param.buffer_size does not wrap;
 *   - the fix ds_estimate_fix names fits: 1e9 parameters at stage 3 with
 *     both offloads on nvme under 12 GiB need a lower max_in_cpu, smaller
 *     sub-groups and two gather slots together (it said none fits), and
 *     that config, estimated, is under the limit.
 *
 *   test_estimate_limits */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "models/models.h"
#include "tests/unit/test_util.h"
#include "zero/estimate.h"

/* DS_MEM_LIMIT=value must give `want` bytes (0: refused, naming the variable). */
static void mem_limit_is(const char *value, uint64_t want) {
    setenv("DS_MEM_LIMIT", value, 1);
    uint64_t got = 12345;
    const char *source = NULL;
    ds_status st = ds_estimate_ram_limit(&got, &source);
    if (want) {
        CHECK(st == DS_OK && got == want && source && strstr(source, "DS_MEM_LIMIT"),
              "DS_MEM_LIMIT=%s: %s, %llu bytes, want %llu (%s)", value, ds_status_to_string(st),
              (unsigned long long)got, (unsigned long long)want, ds_last_error());
    } else {
        CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "DS_MEM_LIMIT") &&
                  strstr(ds_last_error(), value),
              "DS_MEM_LIMIT=%s must be refused naming it: %s, %llu bytes (%s)", value,
              ds_status_to_string(st), (unsigned long long)got, ds_last_error());
    }
    ds_clear_error();
}

static void check_mem_limit(void) {
    const uint64_t K = 1024, M = K * K, G = M * K;
    mem_limit_is("12G", 12 * G);
    mem_limit_is("12GiB", 12 * G);
    mem_limit_is("12Gi", 12 * G); /* Kubernetes' notation */
    mem_limit_is("12GB", 12 * G);  /* binary too, as the message says */
    mem_limit_is("1.5g", 3 * G / 2);
    mem_limit_is("1M", M); /* the least a limit may be */
    mem_limit_is("1048576", M);
    mem_limit_is("8589934592", 8 * G);
    mem_limit_is("2e9", 2000000000);
    mem_limit_is("8388608T", (uint64_t)1 << 63); /* 2^63 bytes, the most */
    /* each of these turned the check off, made everything fit (nan:
     * "available 8589934592.000 GiB: fits") or was undefined behaviour */
    static const char *bad[] = {"nan", "NaN", "inf", "-inf", "0", "-0", "0.5", "1e30", "-1",
                                "1048575", "0.5M", "8388609T", "1e300G", "0x100000000", "12X",
                                "G", " 12G", "12 G", "12G ", "infinity", "OFF", "none"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) mem_limit_is(bad[i], 0);
    /* the one word that turns it off */
    setenv("DS_MEM_LIMIT", "off", 1);
    uint64_t got = 1;
    const char *source = NULL;
    CHECK(TEST_OK(ds_estimate_ram_limit(&got, &source)) && got == 0,
          "DS_MEM_LIMIT=off: %llu, want 0 (the check off)", (unsigned long long)got);
    unsetenv("DS_MEM_LIMIT");
}

static char g_tmp[256];

/* Writes `text` to g_tmp/rel, making the folders on the way. */
static void put(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, rel);
    for (char *s = path + strlen(g_tmp) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f) TEST_DIE(path);
    fputs(text, f);
    fclose(f);
}

/* The limit read from the fake tree: `want` bytes, the source holding `from`. */
static void limit_is(const char *what, uint64_t want, const char *from) {
    char meminfo[300], self[300], root[300];
    snprintf(meminfo, sizeof meminfo, "%s/proc/meminfo", g_tmp);
    snprintf(self, sizeof self, "%s/proc/self/cgroup", g_tmp);
    snprintf(root, sizeof root, "%s/sys/fs/cgroup", g_tmp);
    uint64_t got = 0;
    const char *source = "";
    ds_status st = ds_estimate_ram_limit_at(meminfo, self, root, &got, &source);
    CHECK(st == DS_OK && got == want && strstr(source, from),
          "%s: %s, %llu bytes from '%s', want %llu from '%s' (%s)", what, ds_status_to_string(st),
          (unsigned long long)got, source, (unsigned long long)want, from, ds_last_error());
    ds_clear_error();
}

static void check_cgroups(void) {
    const uint64_t M = 1024 * 1024, G = M * 1024;
    unsetenv("DS_MEM_LIMIT");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_estimate_limits.XXXXXX");
    if (!mkdtemp(g_tmp)) TEST_DIE("mkdtemp");
    put("proc/meminfo", "MemTotal:       33554432 kB\nMemFree:         1000 kB\n"
                        "MemAvailable:   16777216 kB\n"); /* 16 GiB */
    /* no cgroup files at all: MemAvailable */
    put("proc/self/cgroup", "0::/job/step\n");
    limit_is("no cgroup files", 16 * G, "MemAvailable");
    /* cgroup v2: the job's 4 GiB limit with 1 GiB charged binds its step,
     * which has none of its own ("max") */
    put("sys/fs/cgroup/job/memory.max", "4294967296\n");
    put("sys/fs/cgroup/job/memory.current", "1073741824\n");
    put("sys/fs/cgroup/job/step/memory.max", "max\n");
    put("sys/fs/cgroup/job/step/memory.current", "536870912\n");
    limit_is("cgroup v2, the parent's limit", 3 * G, "memory.max less memory.current (cgroup v2)");
    /* the step's own 2 GiB, 512 MiB charged of which 256 MiB inactive page
     * cache: 1.75 GiB, below the parent's 3 */
    put("sys/fs/cgroup/job/step/memory.max", "2147483648\n");
    put("sys/fs/cgroup/job/step/memory.stat", "anon 268435456\nfile 268435456\n"
                                              "active_file 0\ninactive_file 268435456\n");
    limit_is("cgroup v2, the step's own limit", 2 * G - 256 * M, "cgroup v2");
    /* over its limit: room for nothing (1 byte: 0 would turn the check off) */
    put("sys/fs/cgroup/job/step/memory.current", "3221225472\n");
    put("sys/fs/cgroup/job/step/memory.stat", "inactive_file 0\n");
    limit_is("cgroup v2 over its limit", 1, "cgroup v2");
    /* "max" everywhere: MemAvailable */
    put("sys/fs/cgroup/job/memory.max", "max\n");
    put("sys/fs/cgroup/job/step/memory.max", "max\n");
    limit_is("cgroup v2 without limits", 16 * G, "MemAvailable");
    /* more room than MemAvailable: MemAvailable */
    put("sys/fs/cgroup/job/memory.max", "68719476736\n");
    limit_is("cgroup v2 above MemAvailable", 16 * G, "MemAvailable");
    /* cgroup v1 in a container: /proc/self/cgroup names the host's path,
     * the mount's root is the container's cgroup; 6 GiB, 2 GiB charged of
     * which 1 GiB inactive page cache; the v2 line has no limit */
    put("proc/self/cgroup", "12:pids:/docker/abc\n4:cpuacct,memory:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "6442450944\n");
    put("sys/fs/cgroup/memory/memory.usage_in_bytes", "2147483648\n");
    put("sys/fs/cgroup/memory/memory.stat", "cache 1073741824\ninactive_file 5\n"
                                            "total_inactive_file 1073741824\n");
    limit_is("cgroup v1", 5 * G, "memory.limit_in_bytes less memory.usage_in_bytes (cgroup v1)");
    /* v1 without a limit (the kernel's largest page count) */
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    limit_is("cgroup v1 without a limit", 16 * G, "MemAvailable");
    /* DS_MEM_LIMIT still overrides */
    setenv("DS_MEM_LIMIT", "1T", 1);
    limit_is("DS_MEM_LIMIT over a cgroup", 1024 * G, "DS_MEM_LIMIT");
    unsetenv("DS_MEM_LIMIT");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) TEST_FAIL("could not remove %s", g_tmp);
}

/* Ten ranks on two hosts, 8 on the first and 2 on the second, seen from
 * `rank`: the limit between what the right count and ceil(10 / 2) = 5 need
 * must be judged by the right count. */
static void check_uneven_hosts(void) {
    setenv("DS_MEM_LIMIT", "off", 1);
    /* about 1.3M parameters: every rank's RAM is MiBs, above DS_MEM_LIMIT's 1M least */
    ds_mlp_desc md = {.vocab_size = 20000, .max_seq_len = 8, .embed_dim = 64, .hidden_dim = 64,
                      .n_hidden = 1, .n_classes = 3};
    ds_model *model;
    REQUIRE_OK(ds_mlp_create(&md, &model));
    ds_init_desc d;
    ds_init_desc_defaults(&d);
    d.config_json = "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 0}}";
    d.model = model;
    d.quiet = true;
    engine_t *e;
    REQUIRE_OK(ds_initialize(&d, &e));
    ds_mem_report r;
    REQUIRE_OK(ds_estimate_model(e->model, 10, &e->cfg, e->be->kind, &r));
    uint64_t per_rank = ds_estimate_ram(&r, e->be->kind);
    ds_comm *real = e->comm, fake = *real;
    bool same[10];
    fake.world = 10;
    fake.nhosts = 2;
    fake.peer_same_host = same;
    for (int side = 0; side < 2; side++) {
        /* rank 0 on the host of 8, rank 9 on the host of 2 */
        int here = side == 0 ? 8 : 2;
        fake.rank = side == 0 ? 0 : 9;
        for (int k = 0; k < 10; k++) same[k] = side == 0 ? k < 8 : k >= 8;
        e->comm = &fake;
        /* the host of 8 under 6.5 ranks' worth: refused (5 fitted); the host
         * of 2 under 3 ranks' worth: fits (5 did not) */
        uint64_t lim = side == 0 ? per_rank * 13 / 2 : per_rank * 3;
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)lim);
        setenv("DS_MEM_LIMIT", v, 1);
        ds_status st = ds_engine_check_fit(e);
        char want[64];
        snprintf(want, sizeof want, "%d ranks on this host", here);
        if (side == 0)
            CHECK(st == DS_ERR_OOM && strstr(ds_last_error(), want),
                  "8 of 10 ranks on this host under %s bytes (6.5 ranks' worth): %s (%s)", v,
                  ds_status_to_string(st), ds_last_error());
        else
            CHECK(st == DS_OK, "2 of 10 ranks on this host under %s bytes (3 ranks' worth): %s "
                  "(%s)", v, ds_status_to_string(st), ds_last_error());
        ds_clear_error();
        e->comm = real;
    }
    setenv("DS_MEM_LIMIT", "off", 1);
    ds_finalize(e); /* the model with it: the engine owns it */
}

/* A stage-2 fp32 Adam config on the cpu backend, or stage 3 with the
 * parameters on NVMe through buffers of `buffer_size` elements. */
static void small_config(ds_config *c, bool nvme_params, int64_t buffer_size) {
    REQUIRE_OK(ds_config_parse_string(
        nvme_params ? "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 3, "
                      "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\", "
                      "\"max_in_cpu\": 0}}}"
                    : "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 2}}",
        c, NULL, NULL));
    ds_config_hints h;
    ds_config_hints_init(&h);
    REQUIRE_OK(ds_config_resolve(c, &h));
    if (nvme_params) c->offload_param.buffer_size = buffer_size;
}

static void check_overflow(void) {
    ds_config c;
    small_config(&c, false, 0);
    ds_mem_report r;
    const int64_t huge = 3000000000000000000LL;
    ds_status st = ds_estimate_params(huge, 0, 1, &c, DS_BACKEND_CPU, &r);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), "3000000000000000000"),
          "3e18 parameters: %s, params %llu bytes, optim %llu (%s)", ds_status_to_string(st),
          (unsigned long long)r.bytes[DS_MEM_PARAMS][DS_PLACE_DEVICE],
          (unsigned long long)r.bytes[DS_MEM_OPTIM][DS_PLACE_DEVICE], ds_last_error());
    ds_clear_error();
    /* the most it takes: fp32 Adam holds two fp32 moments per parameter,
     * exactly twice the parameters' bytes at one rank (no padding: 2^50 is
     * a multiple of every alignment) */
    st = ds_estimate_params(DS_ESTIMATE_MAX_PARAMS, 0, 1, &c, DS_BACKEND_CPU, &r);
    CHECK(st == DS_OK && r.bytes[DS_MEM_PARAMS][DS_PLACE_DEVICE] ==
                             4 * (uint64_t)DS_ESTIMATE_MAX_PARAMS &&
              r.bytes[DS_MEM_OPTIM][DS_PLACE_DEVICE] == 2 * r.bytes[DS_MEM_PARAMS][DS_PLACE_DEVICE],
          "2^50 parameters: %s, params %llu bytes, optim %llu (%s)", ds_status_to_string(st),
          (unsigned long long)r.bytes[DS_MEM_PARAMS][DS_PLACE_DEVICE],
          (unsigned long long)r.bytes[DS_MEM_OPTIM][DS_PLACE_DEVICE], ds_last_error());
    ds_clear_error();
    /* the RAM of 1e5 ranks of it on one host is more than 64 bits hold:
     * the most a uint64 holds, not a wrapped small number */
    uint64_t host = ds_estimate_ram_ranks(&r, DS_BACKEND_CPU, 100000);
    CHECK(host == UINT64_MAX, "1e5 ranks of 2^50 parameters on a host: %llu bytes",
          (unsigned long long)host);
    /* offload_param.buffer_size near INT64_MAX: its bytes (times the
     * parameter size) wrapped; the buffers hold at most the file, each
     * rounded up to the NVMe alignment (4096 bytes), at most 8 of them */
    small_config(&c, true, INT64_MAX / 2);
    st = ds_estimate_params(1000000, 0, 1, &c, DS_BACKEND_CPU, &r);
    CHECK(st == DS_OK && r.bytes[DS_MEM_BUFFERS][DS_PLACE_HOST] > 0 &&
              r.bytes[DS_MEM_BUFFERS][DS_PLACE_HOST] <= 8 * r.bytes[DS_MEM_PARAMS][DS_PLACE_NVME] +
                                                        8 * 4096,
          "buffer_size 2^62: %s, host buffers %llu bytes for a %llu-byte file (%s)",
          ds_status_to_string(st), (unsigned long long)r.bytes[DS_MEM_BUFFERS][DS_PLACE_HOST],
          (unsigned long long)r.bytes[DS_MEM_PARAMS][DS_PLACE_NVME], ds_last_error());
    ds_clear_error();
}

static void check_fix(void) {
    const uint64_t G = (uint64_t)1 << 30;
    ds_config c;
    REQUIRE_OK(ds_config_parse_string(
        "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 3, "
        "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}, "
        "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp\"}}}",
        &c, NULL, NULL));
    ds_config_hints h;
    ds_config_hints_init(&h);
    REQUIRE_OK(ds_config_resolve(&c, &h));
    char fix[512];
    bool ok = ds_estimate_fix(NULL, 1000000000, 50000000, 1, 1, &c, DS_BACKEND_CPU, 12 * G, fix,
                              sizeof fix);
    CHECK(ok && strstr(fix, "max_in_cpu 1e7") && strstr(fix, "stage3_max_live_parameters 0"),
          "1e9 parameters on nvme under 12 GiB: %s", fix);
    /* what it names, estimated: under the limit */
    c.sub_group_size = strstr(fix, "sub_group_size 1e8") ? 100000000 : c.sub_group_size;
    c.offload_param.max_in_cpu = 10000000;
    c.stage3_max_live_parameters = 0;
    ds_mem_report r;
    CHECK(TEST_OK(ds_estimate_params(1000000000, 50000000, 1, &c, DS_BACKEND_CPU, &r)) &&
              ds_estimate_ram(&r, DS_BACKEND_CPU) <= 12 * G,
          "the fix's config needs %llu bytes, over 12 GiB",
          (unsigned long long)ds_estimate_ram(&r, DS_BACKEND_CPU));
}

int main(void) {
    check_mem_limit();
    check_cgroups();
    check_uneven_hosts();
    check_overflow();
    check_fix();
    return test_finish("test_estimate_limits");
}
