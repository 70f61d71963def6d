/* How many ranks a machine or a hostfile holds, as Open MPI counts them
 * (engine-run's oversubscription check and OpenMP thread share). */
#include "tools/common/cores.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Cores this process may use, to compare --np with and to share out among
 * OpenMP threads. Open MPI gives a host as many slots as it has physical cores
 * (hardware threads of one core are one slot), so we count cores the same way
 * or mpirun would refuse an N we judged to fit. CPUs outside our affinity mask
 * (taskset, cgroup cpusets) are not ours and do not count. */
int er_usable_cores(void) {
    const char *forced = getenv("ENGINE_RUN_CORES");
    if (forced) {
        char *end = NULL;
        errno = 0;
        long k = strtol(forced, &end, 10);
        return !*forced || errno || *end || k < 1 || k > INT_MAX ? -1 : (int)k;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int fallback = online > 0 ? (int)online : 1;

    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return fallback;
    int n_cpus = CPU_COUNT(&set);
    if (n_cpus < 1) return fallback;

    /* (package, core) pairs seen so far; a core appears once per hw thread. */
    static long seen[CPU_SETSIZE][2];
    int n_seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        long id[2];
        const char *leaf[2] = {"physical_package_id", "core_id"};
        for (int k = 0; k < 2; k++) {
            char path[128];
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, leaf[k]);
            FILE *f = fopen(path, "r");
            /* No topology (some containers, non-Linux /sys): every CPU is a core. */
            if (!f) return n_cpus;
            int ok = fscanf(f, "%ld", &id[k]) == 1;
            fclose(f);
            if (!ok) return n_cpus;
        }
        int dup = 0;
        for (int i = 0; i < n_seen && !dup; i++) dup = seen[i][0] == id[0] && seen[i][1] == id[1];
        if (!dup) {
            seen[n_seen][0] = id[0];
            seen[n_seen][1] = id[1];
            n_seen++;
        }
    }
    return n_seen > 0 ? n_seen : n_cpus;
}

/* Slots a hostfile gives ("host slots=N" lines summed), or 0 when a line
 * names none (Open MPI then counts the host's cores, which we cannot see). */
int er_hostfile_slots(const char *path, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    long total = 0;
    bool unknown = false;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char host[512];
        if (sscanf(line, "%511s", host) != 1) continue; /* blank or comment */
        const char *s = strstr(line, "slots=");
        long n = s ? strtol(s + 6, NULL, 10) : 0;
        if (n <= 0) unknown = true;
        total += n;
    }
    fclose(f);
    return unknown || total > max ? 0 : (int)total;
}
