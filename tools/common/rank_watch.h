/* Which rank of an mpirun job on this host ended first, as engine-run sees
 * it (supervise.h). mpirun says so in a banner, but Open MPI 4.1's mpirun
 * sometimes fails to print it while the job is torn down ("ORTE_ERROR_LOG:
 * ... show_help.c"); engine-run then names the rank itself.
 *
 * The ranks are mpirun's children on this host: found in
 * /proc/<mpirun>/task/<tid>/children and told apart by their
 * OMPI_COMM_WORLD_RANK, then watched through pidfds (Linux 5.3+; without
 * them, by looking in /proc at each poll), so the first one to end is known
 * to the millisecond. A rank can end before a scan reads its number: a
 * child seen before that is watched unnamed, and named by elimination if it
 * ends so; one never seen below a rank found is deduced from mpirun
 * starting its ranks in rank order; where several could have been, no rank
 * is named. One case stays open: a rank above every rank found that starts
 * and ends between two scans (engine-run scans every 10 ms until it has
 * found them all) is not seen at all, and the first rank seen to end is
 * named instead; mpirun's banner, when it comes, names the right one.
 * Ranks on other hosts are not seen: with a hostfile engine-run relies on
 * mpirun's banners. */
#ifndef DS_TOOLS_RANK_WATCH_H
#define DS_TOOLS_RANK_WATCH_H

#include <poll.h>
#include <stdbool.h>
#include <sys/types.h>

/* Jobs of more ranks than this are not watched (a pidfd each, in the poll). */
#define ER_WATCH_MAX 256

typedef struct er_ranks er_ranks;

/* Watch the np ranks mpirun (pid `launcher`) starts here; NULL when np is
 * above ER_WATCH_MAX or memory is short. */
er_ranks *er_ranks_create(pid_t launcher, int np);
void er_ranks_destroy(er_ranks *w);
/* Look for ranks not found yet (cheap once all are); true when every rank
 * has been found (or w is NULL: nothing to look for). */
bool er_ranks_scan(er_ranks *w);
/* The pidfds of the ranks (and unnamed children) still running, for poll
 * (POLLIN when one ends); returns how many were written to out (at most
 * cap). */
int er_ranks_fds(const er_ranks *w, struct pollfd *out, int cap);
/* After poll returned: note the ranks that ended, in order. */
void er_ranks_check(er_ranks *w);
/* The rank that ended first, or -1 (none yet, or not known which). */
int er_ranks_first_gone(const er_ranks *w);
/* Its wait status (waitpid's), or -1 when mpirun reaped it before it was
 * seen: known when mpirun does not reap, which is when it matters. */
int er_ranks_first_status(const er_ranks *w);
/* Send sig to every rank found and still running, and to mpirun's other
 * children still running. */
void er_ranks_kill(const er_ranks *w, int sig);

#endif /* DS_TOOLS_RANK_WATCH_H */
