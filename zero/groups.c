/* hpZ's and MiCS's groups (zero/groups.h). */
#include "zero/groups.h"

#include <string.h>

ds_status ds_zero_groups_check(const ds_config *cfg, int world) {
    int64_t h = cfg->zero_hpz_partition_size, s = cfg->mics_shard_size;
    if (h > 1 && world % h != 0)
        return DS_ERR(DS_ERR_CONFIG,
                      "zero_optimization.zero_hpz_partition_size: %lld does not divide the world "
                      "of %d ranks (the secondary groups cut it evenly)",
                      (long long)h, world);
    if (s > 0 && world % s != 0)
        return DS_ERR(DS_ERR_CONFIG,
                      "zero_optimization.mics_shard_size: %lld does not divide the world of %d "
                      "ranks (the shard groups cut it evenly)",
                      (long long)s, world);
    return DS_OK;
}

ds_flat ds_flat_view(const ds_flat *f, int n) {
    ds_flat v = *f;
    v.world = n;
    v.part = f->padded / n;
    return v;
}

/* The shard group's hosts: per_host ranks each, consecutive, more than one
 * host (DeepSpeed's create_mics_comm_groups asserts the same). */
static ds_status hier_layout(ds_comm *world, int shard, int *per_host) {
    int hosts = world->nhosts;
    if (hosts < 1 || world->world % hosts != 0)
        return DS_ERR(DS_ERR_CONFIG,
                      "zero_optimization.mics_hierarchical_params_gather: the %d ranks run on %d "
                      "hosts, not the same number on each",
                      world->world, hosts);
    int g = world->world / hosts;
    if (shard <= g || shard % g != 0)
        return DS_ERR(DS_ERR_CONFIG,
                      "zero_optimization.mics_hierarchical_params_gather: the shard group of %d "
                      "ranks %s (%d ranks per host); there is no hierarchy to use",
                      shard, shard <= g ? "lies on one host" : "does not cover whole hosts", g);
    /* The levels below are cut as if each host held ranks [k g, (k+1) g):
     * each rank checks its own host (peer_same_host), and all agree before
     * the splits (a rank failing alone would leave the others in them).
     * Placed otherwise (mpirun --map-by node, uneven slots), the "inside a
     * host" gather would cross the link: measured, twice the bytes across. */
    ds_status mine = DS_OK;
    if (world->peer_same_host) {
        int base = world->rank / g * g, here = 0, run = 0;
        for (int q = 0; q < world->world; q++) here += world->peer_same_host[q];
        for (int q = base; q < base + g; q++) run += world->peer_same_host[q];
        if (here != g || run != g)
            mine = DS_ERR(DS_ERR_CONFIG,
                          "zero_optimization.mics_hierarchical_params_gather: rank %d's host "
                          "runs %d rank(s), %s ranks %d-%d; the hierarchy needs each host to run "
                          "%d consecutive ranks (mpirun places them host by host with its "
                          "default --map-by slot and equal slots), or set it false",
                          world->rank, here, run == g ? "among them" : "not all of",
                          base, base + g - 1, g);
    }
    ds_status worst = mine;
    DS_TRY(ds_comm_agree(world, mine, &worst));
    DS_TRY(worst);
    *per_host = g;
    return DS_OK;
}

ds_status ds_zero_groups_create(const ds_config *cfg, ds_comm *world, ds_zero_groups *g) {
    memset(g, 0, sizeof *g);
    g->hpz = 1;
    g->shard = world->world;
    g->replicas = 1;
    DS_TRY(ds_zero_groups_check(cfg, world->world));
    int r = world->rank;
    ds_status st = DS_OK;
    if (cfg->zero_hpz_partition_size > 1) {
        g->hpz = (int)cfg->zero_hpz_partition_size;
        DS_TRY_GOTO(st, ds_comm_split(world, r / g->hpz, r, &g->sec), fail);
    }
    if (cfg->mics_shard_size > 0) {
        g->shard = (int)cfg->mics_shard_size;
        g->replicas = world->world / g->shard;
        if (cfg->mics_hierarchical_params_gather)
            DS_TRY_GOTO(st, hier_layout(world, g->shard, &g->per_host), fail);
        if (g->replicas > 1) {
            DS_TRY_GOTO(st, ds_comm_split(world, r / g->shard, r, &g->part), fail);
            DS_TRY_GOTO(st, ds_comm_split(world, r % g->shard, r, &g->repl), fail);
        }
        if (g->per_host > 0) {
            /* place p of the group (p = r mod shard) sits on the group's
             * host p / per_host at position p mod per_host */
            int p = r % g->shard, base = r - p;
            DS_TRY_GOTO(st, ds_comm_split(world, base + p % g->per_host, r, &g->inter), fail);
            DS_TRY_GOTO(st, ds_comm_split(world, base + p / g->per_host, r, &g->intra), fail);
        }
    }
    return DS_OK;
fail:
    ds_zero_groups_destroy(g);
    ds_error_trace(__FILE__, __LINE__);
    return st;
}

void ds_zero_groups_destroy(ds_zero_groups *g) {
    ds_comm_destroy(g->intra);
    ds_comm_destroy(g->inter);
    ds_comm_destroy(g->repl);
    ds_comm_destroy(g->part);
    ds_comm_destroy(g->sec);
    memset(g, 0, sizeof *g);
    g->hpz = 1;
    g->replicas = 1;
}
