/* How many ranks a machine or a hostfile holds, as Open MPI counts them. */
#ifndef DS_TOOLS_CORES_H
#define DS_TOOLS_CORES_H

/* Cores this process may use, to compare a rank count with and to share out
 * among OpenMP threads: physical cores in its affinity mask. ENGINE_RUN_CORES
 * overrides the count; -1 when that is not a positive integer. */
int er_usable_cores(void);

/* Slots a hostfile gives ("host slots=N" lines summed), or 0 when a line
 * names none or the sum passes max (Open MPI then counts the hosts' cores,
 * which engine-run cannot see). */
int er_hostfile_slots(const char *path, int max);

/* The most ranks any one host of the hostfile runs when mpirun maps np
 * ranks by slot (its default): each host filled to its slots in turn;
 * spread evenly where a host names no slots or np passes their sum. 0 when
 * the file cannot be read or names no host. */
int er_hostfile_busiest(const char *path, int np);

#endif /* DS_TOOLS_CORES_H */
