/* engine-run's side of a job it starts through mpirun: it stays mpirun's
 * parent, instead of exec'ing it, for three things mpirun does not do:
 *
 *  - Preemption. mpirun turns a SIGTERM into a kill of the whole job (the
 *    ranks get SIGTERM and, a second later, SIGKILL), and it cannot pass a
 *    SIGTERM on. So a SIGTERM reaching engine-run is relayed as SIGURG, which
 *    mpirun forwards (--mca ess_base_forward_signals) and which ranks that
 *    save on signals (ds_preempt_install) read as SIGTERM
 *    (DS_PREEMPT_RELAY): every rank saves at the next step boundary and
 *    exits 143. SIGUSR1 and SIGUSR2 (and SIGXCPU / SIGPWR when the config
 *    names them) are passed as they are; mpirun forwards those itself. If no
 *    rank said it saves on signals, or the job has not ended within the
 *    config's preempt_deadline_s (+5 s) of the relay, mpirun gets the SIGTERM
 *    after all. A SIGINT a terminal sent reached mpirun already; one sent to
 *    engine-run alone is passed on.
 *  - The join count. While the ranks start (a thousand processes on a small
 *    machine take minutes), it prints how many have started and connected,
 *    counted through a pipe each rank writes a byte to (DS_LAUNCH_FIFO; the
 *    ranks on this host only, so not with a hostfile).
 *  - The exit status: mpirun's, or 128 + the signal that killed it; after a
 *    preemption signal a failing job returns 128 + that signal.
 *  - The output (relay_output, mpirun started with --tag-output): through
 *    tools/common/output_relay.h, each rank's lines whole, an error every
 *    rank prints alike once, mpirun's failure banners as one line naming the
 *    rank.
 */
#ifndef DS_TOOLS_SUPERVISE_H
#define DS_TOOLS_SUPERVISE_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The signal a SIGTERM is relayed as, and the value of DS_PREEMPT_RELAY that
 * tells the ranks ("23:15" on Linux). */
#define ER_RELAY_SIGNAL SIGURG

/* The most descriptors a hook may add to the poll (a connection per node). */
#define ER_HOOK_FDS 1024

/* Something else to watch while the job runs: the other nodes of a job
 * started in parts (tools/common/nodes.h). */
typedef struct er_supervise_hook {
    void *arg;
    /* The descriptors to poll beside the job's (at most cap); returns how
     * many it wrote. */
    int (*fds)(void *arg, struct pollfd *out, int cap);
    /* Called after every poll (about every 100 ms): -1 to carry on, or an
     * exit status to end the job with now (mpirun gets SIGTERM and, after
     * ER_TEARDOWN_S, it and the ranks SIGKILL; the hook printed why). */
    int (*tick)(void *arg);
} er_supervise_hook;

typedef struct er_supervise_opts {
    int np;
    bool count_joins;  /* every rank runs on this host (no hostfile) */
    double deadline_s; /* zero_engine.preempt_deadline_s */
    bool relay_output; /* mpirun's stdout and stderr through output_relay.h */
    int rank_offset;   /* the job's rank of mpirun's rank 0 (engine-run --nnodes), for
                          lines that name a rank */
    const er_supervise_hook *hook; /* NULL: none */
    /* --max-restarts: a job that fails (a status other than 0 and 2, with
     * no signal to engine-run meanwhile) is started again, up to this many
     * times, DS_RESTART_COUNT telling the ranks which start it is (torchrun's
     * --max-restarts; the trainers' --resume then goes on from the last
     * checkpoint). 0: never. */
    int max_restarts;
} er_supervise_opts;

/* The value of mpirun's --mca ess_base_forward_signals for a job whose ranks
 * save on the signals save_sigs[0..n) (0: none): the relay's SIGURG, the
 * user's OMPI_MCA_ess_base_forward_signals kept in front, and SIGXCPU or
 * SIGPWR when named (mpirun passes SIGUSR1 / SIGUSR2 by default). (Raising
 * odls_base_sigkill_timeout, so that a SIGTERM mpirun gets itself left the
 * ranks time to save, is no way out: mpirun then waits that long after any
 * rank exits non-zero, a preempted one included.) */
void er_forward_signals(char *out, size_t cap, const int *save_sigs, int n);

/* One warning line on `out` for each of save_sigs[0] (the config's
 * zero_engine.save_on_signal) and save_sigs[1] (a trainer's
 * --save-on-signal) that mpirun cannot pass on: SIGINT and SIGHUP. */
void er_warn_unforwarded(FILE *out, const int save_sigs[2]);

/* Run argv (argv[0] an absolute path) as a child, supervise it as above
 * (again after a failure, as max_restarts says) and return engine-run's
 * exit status. Failures to start are printed
 * ("engine-run: ...") and return 1. */
int er_supervise(char **argv, const er_supervise_opts *o);

#endif /* DS_TOOLS_SUPERVISE_H */
