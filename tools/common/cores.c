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

/* The hostfile's hosts in order, each line's slots (0: the line names
 * none) into slots[0..cap); the number of host lines, -1 when the file
 * cannot be read. A line is "host [slots=N] [max_slots=M] [# comment]"
 * (Open MPI's and DeepSpeed's form); only a word that starts with slots=
 * counts, not max_slots=. */
static int hostfile_hosts(const char *path, long *slots, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *save = NULL, *word = strtok_r(line, " \t\r\n", &save);
        if (!word) continue; /* blank or comment */
        long k = 0;
        while ((word = strtok_r(NULL, " \t\r\n", &save)))
            if (strncmp(word, "slots=", 6) == 0) k = strtol(word + 6, NULL, 10);
        if (n < cap) slots[n] = k > 0 ? k : 0;
        n++;
    }
    fclose(f);
    return n < cap ? n : cap;
}

enum { MAX_HOSTS = 4096 };

int er_hostfile_slots(const char *path, int max) {
    static long slots[MAX_HOSTS];
    int n = hostfile_hosts(path, slots, MAX_HOSTS);
    long total = 0;
    for (int i = 0; i < n; i++) {
        if (!slots[i]) return 0; /* Open MPI counts that host's cores */
        total += slots[i];
    }
    return n <= 0 || total > max ? 0 : (int)total;
}

int er_hostfile_busiest(const char *path, int np) {
    static long slots[MAX_HOSTS];
    int n = hostfile_hosts(path, slots, MAX_HOSTS);
    if (n <= 0) return 0;
    long total = 0;
    bool unknown = false;
    for (int i = 0; i < n; i++) {
        total += slots[i];
        unknown |= !slots[i];
    }
    if (unknown || np > total) return (np + n - 1) / n; /* spread evenly */
    long left = np, most = 0;
    for (int i = 0; i < n && left > 0; i++) { /* by slot: each host filled in turn */
        long here = slots[i] < left ? slots[i] : left;
        most = here > most ? here : most;
        left -= here;
    }
    return (int)most;
}
