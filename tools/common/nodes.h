/* engine-run --nnodes N --node-rank R --master-addr A --master-port P
 * --nproc-per-node K: one launcher per node, torchrun-style, one job.
 *
 * The launchers meet at A:P (engine/comm/rdzv.h): node 0's listens there and
 * starts Open MPI's ompi-server; when all N have arrived it hands each the
 * server's URI. Each launcher then starts its node's K ranks with
 *   mpirun -np K --ompi-server URI ... (DS_JOIN_NODE_RANK=R, DS_JOIN_NNODES=N)
 * and the ranks join into one job of N * K ranks, ordered by node then local
 * rank (engine/comm/join.h). The rendezvous carries only that URI; tensors
 * travel over MPI.
 *
 * The connections stay open while the job runs, so that one node's end is
 * every node's: a node whose ranks fail (or whose launcher disappears) makes
 * node 0 stop every other node's ranks, as mpirun does within one node. A
 * node whose ranks were preempted (they exited 128 + SIGTERM, SIGUSR1, ...)
 * gives the others zero_engine.preempt_deadline_s + 5 s to finish their own
 * save first. After a job that went well, node 0 waits (the rendezvous
 * timeout at most) for the others to report theirs, and returns the worst
 * status; every launcher prints one line naming the node that failed. A
 * node whose ranks died of SIGPIPE (they wrote to a rank that was already
 * gone) is not named while another node reports a failure within 3 s: the
 * job is named after the cause, not the echo.
 *
 * Errors print one line "engine-run: node R: ..." on stderr. */
#ifndef DS_TOOLS_NODES_H
#define DS_TOOLS_NODES_H

#include <stddef.h>

#include "tools/common/supervise.h"

typedef struct er_nodes_opts {
    int nnodes, node_rank, nproc;
    const char *master_addr;
    int master_port;
    double timeout_s;        /* the rendezvous, and node 0's wait for the others' end */
    double preempt_grace_s;  /* zero_engine.preempt_deadline_s + 5 */
} er_nodes_opts;

typedef struct er_nodes er_nodes;

/* Meet the other launchers; on success *out holds the connections and uri
 * the ompi-server's address. On failure the one line is printed and NULL
 * returned. */
er_nodes *er_nodes_meet(const er_nodes_opts *o, char *uri, size_t cap);
/* The supervise hook that watches the other nodes while the job runs. */
er_supervise_hook er_nodes_hook(er_nodes *n);
/* This node's job ended with status `code` (er_supervise's): tell the
 * others, wait as described above, and return the launcher's exit status. */
int er_nodes_finish(er_nodes *n, int code);
/* Close the connections and stop the ompi-server (node 0). NULL is fine. */
void er_nodes_close(er_nodes *n);

#endif /* DS_TOOLS_NODES_H */
