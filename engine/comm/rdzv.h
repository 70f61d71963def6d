/* The rendezvous of separately started parts of one job (torchrun-style
 * launch): the launchers of `engine-run --nnodes N --node-rank R
 * --master-addr A --master-port P`, or the processes an outside agent starts
 * with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set.
 *
 * Member 0 (node 0, or RANK 0) listens on port P (every address of its
 * machine); every other member connects to A:P and says who it is. When all
 * have arrived, member 0 hands each one line of text, the payload: the URI of
 * the ompi-server through which the MPI jobs then find each other
 * (engine/comm/join.h). Only that line travels here: tensors go over MPI
 * (and NCCL) once the jobs are joined, never over this connection.
 *
 *   ds_rdzv_desc d = {.addr = "node0", .port = 29500, .member = R,
 *                     .members = N, .nproc = 2, .timeout_s = 300, .what = "node"};
 *   ds_rdzv *r;
 *   if (R == 0) { ds_rdzv_listen(&d, &r); ...start the server...; ds_rdzv_serve(r, uri); }
 *   else        { ds_rdzv_join(&d, &r, uri, sizeof uri); }
 *   ... ds_rdzv_fd(r, m) stays open for the job's lifetime if the caller wants it ...
 *   ds_rdzv_close(r);
 *
 * Wire format (one line each way, text, at most DS_RDZV_LINE bytes):
 *   member -> 0:  "ze-rdzv 1 member=M members=N nproc=K host=HOST"
 *   0 -> member:  "go PAYLOAD"  or  "error MESSAGE"
 *
 * Failures are one sentence each, naming the members that are missing:
 *   - the port is in use on member 0's machine: at once, DS_ERR_IO;
 *   - a member never arrives: member 0 fails after timeout_s with
 *     "node(s) 2, 3 of 4 did not arrive at port P within 5 s", tells the
 *     members that did arrive the same, and they fail with it;
 *   - member 0 never answers (wrong address, not started): a member fails
 *     after timeout_s with "node 0 (the master, A:P) did not answer within
 *     5 s (last: Connection refused)";
 *   - a member number given twice, out of range, or a different member count
 *     or nproc: member 0 fails at once with a line naming both, and so does
 *     every member that had arrived. */
#ifndef DS_COMM_RDZV_H
#define DS_COMM_RDZV_H

#include <stddef.h>

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { DS_RDZV_LINE = 4096 };

typedef struct ds_rdzv_desc {
    const char *addr;   /* where member 0 listens (host name or address) */
    int port;           /* 1..65535 */
    int member;         /* this member: 0..members-1 */
    int members;        /* how many take part */
    int nproc;          /* ranks each member brings: every member must agree */
    double timeout_s;   /* the whole rendezvous; <= 0 means 300 s */
    const char *what;   /* how messages name a member: "node", "rank" */
} ds_rdzv_desc;

typedef struct ds_rdzv ds_rdzv;

/* Member 0: bind and listen on d->port (every local address, IPv6 and IPv4).
 * Members may connect from now on; they wait in the listen queue until
 * ds_rdzv_serve. Fails at once when the port is in use. */
ds_status ds_rdzv_listen(const ds_rdzv_desc *d, ds_rdzv **out);
/* Member 0: wait for every other member (until the deadline that started at
 * ds_rdzv_listen), then send each "go PAYLOAD". payload: one line, no '\n'.
 * On failure the members that arrived get the same message; r stays valid
 * (close it). */
ds_status ds_rdzv_serve(ds_rdzv *r, const char *payload);
/* Members 1..N-1: connect to d->addr:d->port (again and again until the
 * deadline: member 0 may start later), say who this is, and read the
 * payload into payload (cap bytes, NUL-terminated). */
ds_status ds_rdzv_join(const ds_rdzv_desc *d, ds_rdzv **out, char *payload, size_t cap);
/* The connection to member m (member 0: any other member; others: m = 0),
 * open after a successful serve / join; -1 otherwise. Owned by r. */
int ds_rdzv_fd(const ds_rdzv *r, int m);
/* The host name member m reported ("?" when unknown). */
const char *ds_rdzv_host(const ds_rdzv *r, int m);
/* Close every connection and the listening socket. NULL is fine. */
void ds_rdzv_close(ds_rdzv *r);

#ifdef __cplusplus
}
#endif
#endif /* DS_COMM_RDZV_H */
