/* ds_checkpoint_clean / ds_checkpoint_prune: the checkpoint folder around
 * the saves (engine.h): what a save that did not finish left, whether every
 * rank sees the folder, keeping the newest N. Rank 0 acts, every rank
 * learns the outcome (ds_engine_ckpt_agree). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/io/ckpt_dir.h"
#include "engine/io/ckpt_shared.h"

static ds_status agree(engine_t *e, ds_status local) { return ds_engine_ckpt_agree(e, local); }

static void report_stale(void *user, const char *path) {
    (void)user;
    size_t n = strlen(path);
    bool aside = n < 4 || (strcmp(path + n - 4, ".tmp") != 0 && strcmp(path + n - 4, ".old") != 0);
    if (aside) /* a tag a replacing save had set aside (ckpt_dir.h) */
        fprintf(stderr, "[zero-engine] put %s back, set aside by a save that replaced it and "
                "did not finish\n", path);
    else
        fprintf(stderr, "[zero-engine] removed %s, left by a save that did not finish\n", path);
}

/* Every rank sees DIR as rank 0 does (engine/io/ckpt_shared.h), checked at
 * start-up so that a job whose hosts do not share the folder stops before
 * it trains (and before a --resume on which ranks would disagree about
 * whether DIR/latest exists). Collective; rank 0 holds DIR's lock. */
static ds_status check_shared(engine_t *e, const char *dir) {
    int rank = e->comm->rank;
    if (e->comm->world == 1) return DS_OK;
    ds_ckpt_marker m = {{0}};
    ds_status st = rank == 0 ? ds_ckpt_marker_write(dir, &m) : DS_OK;
    DS_TRY(agree(e, st));
    DS_TRY(ds_comm_host_broadcast(e->comm, &m, sizeof m, 0));
    st = rank == 0 ? DS_OK : ds_ckpt_marker_check(dir, &m, rank);
    st = agree(e, st);
    /* every rank has read it (or failed to): rank 0 removes it either way */
    ds_status rm = rank == 0 ? ds_ckpt_marker_remove(dir) : DS_OK;
    if (st == DS_OK) st = agree(e, rm);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_checkpoint_clean(engine_t *e, const char *dir) {
    if (!dir || !*dir) return DS_ERR(DS_ERR_INVALID_ARG, "ds_checkpoint_clean: no folder given");
    ds_status st = DS_OK;
    /* The lock first: what looks stale may be another job's save in flight. */
    if (e->comm->rank == 0) st = ds_ckpt_lock_dir(dir);
    if (st == DS_OK && e->comm->rank == 0) st = ds_ckpt_remove_stale(dir, report_stale, NULL);
    DS_TRY(agree(e, st));
    DS_TRY(check_shared(e, dir));
    return DS_OK;
}

typedef struct prune_note {
    bool quiet;
    int keep;
} prune_note;

static void report_pruned(void *user, const char *path) {
    const prune_note *p = user;
    if (!p->quiet)
        fprintf(stderr, "[zero-engine] removed checkpoint %s (keeping the newest %d and the one "
                "latest names)\n", path, p->keep);
}

ds_status ds_checkpoint_prune(engine_t *e, const char *dir, int keep) {
    if (!dir || !*dir) return DS_ERR(DS_ERR_INVALID_ARG, "ds_checkpoint_prune: no folder given");
    if (keep < 1)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_checkpoint_prune: keep must be at least 1, got %d",
                      keep);
    ds_status st = DS_OK;
    if (e->comm->rank == 0) {
        prune_note note = {.quiet = e->quiet, .keep = keep};
        st = ds_ckpt_lock_dir(dir); /* held since the save: no other job writes here */
        if (st == DS_OK) st = ds_ckpt_prune(dir, keep, report_pruned, &note);
    }
    DS_TRY(agree(e, st));
    return DS_OK;
}
