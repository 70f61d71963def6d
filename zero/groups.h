/* The rank groups stage 3 gathers and shards in: ZeRO++ hpZ and MiCS as
 * group choices over the communicator's sub-communicators (comm.h,
 * ds_comm_split), not new collectives.
 *
 *   hpZ   zero_hpz_partition_size H > 1: besides the world partition, each
 *         rank keeps a secondary piece of the parameters, the flat space cut
 *         into H parts over the ranks [g H, (g+1) H) of its group (a host's,
 *         when H is the ranks per host). Forward gathers from the world
 *         partition and fills the secondary copy from what it gathered;
 *         backward gathers from the secondary copy, inside the group.
 *   MiCS  mics_shard_size S > 0: parameters, gradients and optimizer state
 *         are partitioned over the shard group, the ranks [g S, (g+1) S),
 *         and replicated across the world / S groups; gradients are
 *         reduce-scattered inside the group and all-reduced across groups
 *         (the replica group: the ranks of the same place in every shard
 *         group). mics_hierarchical_params_gather: a gather first across
 *         hosts (the ranks of the shard group at the same place on each of
 *         its hosts), then inside each host.
 *
 * Group members are consecutive ranks, as in DeepSpeed (launchers number a
 * host's ranks consecutively); the traffic counters show where each ring's
 * bytes really went. */
#ifndef DS_ZERO_GROUPS_H
#define DS_ZERO_GROUPS_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/core/config.h"
#include "zero/flat.h"

typedef struct ds_zero_groups {
    int hpz;              /* secondary group size; 1: no hpZ */
    int shard;            /* MiCS shard group size; the world without MiCS */
    int replicas;         /* world / shard */
    ds_comm *sec;         /* hpZ: the secondary group, else NULL */
    ds_comm *part;        /* MiCS: the shard group, else NULL (the world partitions) */
    ds_comm *repl;        /* MiCS with replicas > 1: the replica group, else NULL */
    ds_comm *inter;       /* hierarchical gather: this place on every host of the group */
    ds_comm *intra;       /* hierarchical gather: the group's ranks on this host */
    int per_host;         /* hierarchical gather: the group's ranks per host */
} ds_zero_groups;

/* The group sizes against a world of `world` ranks, as DeepSpeed checks
 * them: each size divides the world. Errors name the key
 * (DS_ERR_CONFIG). */
ds_status ds_zero_groups_check(const ds_config *cfg, int world);

/* Check, then split `world` into the groups cfg asks for (collective over
 * world; nothing for plain stage 3). mics_hierarchical_params_gather also
 * needs the shard group to span more than one host with the same number of
 * ranks on each (DeepSpeed asserts the same), checked against the hosts the
 * communicator found. On failure g holds nothing. */
ds_status ds_zero_groups_create(const ds_config *cfg, ds_comm *world, ds_zero_groups *g);
void ds_zero_groups_destroy(ds_zero_groups *g);

/* The flat space partitioned over n ranks instead (n divides f->world, so
 * f->padded cuts evenly): a copy of f sharing its tables, with world n and
 * part padded / n. */
ds_flat ds_flat_view(const ds_flat *f, int n);

#endif /* DS_ZERO_GROUPS_H */
