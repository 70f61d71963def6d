/* engine-run --nnodes: the launchers of one job's nodes (see nodes.h).
 *
 * After the rendezvous, the connections carry three kinds of line:
 *   node k -> 0:  "end RC"              k's ranks ended with status RC
 *   0 -> node k:  "stop RC NODE GRACE"  NODE's ranks ended with RC: stop
 *                                       yours GRACE seconds from now (0: at
 *                                       once) unless they end first */
#include "tools/common/nodes.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm/join.h"
#include "engine/comm/rdzv.h"

typedef struct peer {
    int fd;       /* -1: closed */
    char buf[256];
    size_t len;
    int end_code; /* what it reported ("end RC"); -1 before */
} peer;

struct er_nodes {
    er_nodes_opts o;
    ds_rdzv *r;
    ds_ompi_server server;
    peer *peers;      /* node 0: one per node (its own unused); others: [0] */
    int stop_code;    /* the stop decided (-1: none) */
    double stop_at;   /* when this node's ranks are stopped */
    bool stopped;     /* the hook returned stop_code */
    int held_node;    /* node 0: a node whose failure was secondary(), held
                         until held_until for the cause (-1: none) */
    double held_until;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void send_line(int fd, const char *fmt, ...) {
    if (fd < 0) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof line) return;
    /* a peer that is gone is found out by reading: nothing to do here */
    (void)!send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Read what is there; 1 with a line in `line`, 0 nothing yet, -1 closed. */
static int read_line(peer *p, char *line, size_t cap) {
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->len);
        if (nl) {
            size_t n = (size_t)(nl - p->buf);
            snprintf(line, cap, "%.*s", (int)n, p->buf);
            memmove(p->buf, nl + 1, p->len - n - 1);
            p->len -= n + 1;
            return 1;
        }
        if (p->fd < 0) return -1;
        if (p->len == sizeof p->buf) return -1; /* no line is that long */
        ssize_t got = recv(p->fd, p->buf + p->len, sizeof p->buf - p->len, MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (got <= 0) {
            p->fd = -1; /* closed by the rendezvous, which owns it */
            return -1;
        }
        p->len += (size_t)got;
    }
}

/* Ranks that exited 128 + a signal a scheduler sends to preempt a job saved
 * (or are saving) a checkpoint: the other nodes get time to finish theirs. */
static bool preempted(int code) {
    int sig = code - 128;
    return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGUSR1 ||
           sig == SIGUSR2 || sig == SIGXCPU || sig == SIGPWR;
}

/* A rank killed by SIGPIPE wrote to a peer rank that was already gone (Open
 * MPI's TCP transport between the nodes writes without MSG_NOSIGNAL): the
 * effect of another node's failure, seldom the cause. Its node waits up to
 * SETTLE_S for the cause to be reported before naming itself: a rank
 * SIGKILLed on node 1 is otherwise sometimes reported by node 0 as its own
 * rank's SIGPIPE, when node 0's rank wrote before node 1's mpirun noticed. */
#define SETTLE_S 3.0
static bool secondary(int code) { return code == 128 + SIGPIPE; }

er_nodes *er_nodes_meet(const er_nodes_opts *o, char *uri, size_t cap) {
    er_nodes *n = calloc(1, sizeof *n);
    if (n) n->peers = calloc((size_t)o->nnodes, sizeof *n->peers);
    if (!n || !n->peers) {
        fprintf(stderr, "engine-run: node %d: out of memory\n", o->node_rank);
        if (n) free(n->peers);
        free(n);
        return NULL;
    }
    n->o = *o;
    n->stop_code = -1;
    n->held_node = -1;
    for (int k = 0; k < o->nnodes; k++) n->peers[k] = (peer){.fd = -1, .end_code = -1};
    ds_rdzv_desc d = {.addr = o->master_addr, .port = o->master_port, .member = o->node_rank,
                      .members = o->nnodes, .nproc = o->nproc, .timeout_s = o->timeout_s,
                      .what = "node"};
    ds_status st;
    if (o->node_rank == 0) {
        st = ds_rdzv_listen(&d, &n->r);
        if (st == DS_OK) st = ds_ompi_server_start(o->timeout_s, &n->server);
        if (st == DS_OK) st = ds_rdzv_serve(n->r, n->server.uri);
        if (st == DS_OK) snprintf(uri, cap, "%s", n->server.uri);
    } else {
        st = ds_rdzv_join(&d, &n->r, uri, cap);
    }
    if (st != DS_OK) {
        fprintf(stderr, "engine-run: node %d: %s\n", o->node_rank, ds_last_error());
        er_nodes_close(n);
        return NULL;
    }
    for (int k = 0; k < o->nnodes; k++) n->peers[k].fd = ds_rdzv_fd(n->r, k);
    return n;
}

/* Decide to stop this node's ranks (once): at `at`, with exit status code. */
static void decide_stop(er_nodes *n, int code, double at) {
    if (n->stop_code >= 0) return;
    n->stop_code = code;
    n->stop_at = at;
}

/* Node 0: every other node not ended yet learns that `node` ended with code. */
static void tell_stop(er_nodes *n, int code, int node) {
    double grace = preempted(code) ? n->o.preempt_grace_s : 0.0;
    for (int k = 1; k < n->o.nnodes; k++)
        if (k != node && n->peers[k].end_code < 0)
            send_line(n->peers[k].fd, "stop %d %d %.0f\n", code, node, grace);
}

/* Node 0: what node k said (or that it went); returns its status when it
 * ended badly, -1 otherwise. */
static int master_read(er_nodes *n, int k) {
    char line[256];
    int got;
    while ((got = read_line(&n->peers[k], line, sizeof line)) > 0) {
        int code;
        if (sscanf(line, "end %d", &code) == 1 && n->peers[k].end_code < 0) {
            n->peers[k].end_code = code;
            if (code != 0) return code;
        }
    }
    if (got < 0 && n->peers[k].end_code < 0) {
        n->peers[k].end_code = 1;
        fprintf(stderr, "engine-run: node 0: lost node %d's launcher (host %s) before its ranks "
                "ended\n", k, ds_rdzv_host(n->r, k));
        return 1;
    }
    return -1;
}

static int hook_fds(void *arg, struct pollfd *out, int cap) {
    er_nodes *n = arg;
    int w = 0;
    for (int k = 0; k < n->o.nnodes && w < cap; k++)
        if (n->peers[k].fd >= 0) out[w++] = (struct pollfd){.fd = n->peers[k].fd, .events = POLLIN};
    return w;
}

static int hook_tick(void *arg) {
    er_nodes *n = arg;
    double t = now_s();
    if (n->o.node_rank == 0) {
        for (int k = 1; k < n->o.nnodes; k++) {
            int code = master_read(n, k);
            if (code < 0 || n->stop_code >= 0) continue;
            if (secondary(code)) {
                if (n->held_node < 0) { /* decided below once the window passes */
                    n->held_node = k;
                    n->held_until = t + SETTLE_S;
                }
                continue;
            }
            n->held_node = -1;
            double grace = preempted(code) ? n->o.preempt_grace_s : 0.0;
            fprintf(stderr, "engine-run: node 0: node %d's ranks ended with status %d: stopping "
                    "the job's other nodes%s\n", k, code,
                    grace > 0 ? " once they have had time to save" : "");
            tell_stop(n, code, k);
            decide_stop(n, code, t + grace);
        }
        if (n->held_node > 0 && n->stop_code < 0 && t >= n->held_until) {
            int k = n->held_node, code = n->peers[k].end_code;
            fprintf(stderr, "engine-run: node 0: node %d's ranks ended with status %d: stopping "
                    "the job's other nodes\n", k, code);
            tell_stop(n, code, k);
            decide_stop(n, code, t);
        }
    } else if (n->stop_code < 0) {
        char line[256];
        int got, code, node;
        double grace;
        while ((got = read_line(&n->peers[0], line, sizeof line)) > 0)
            if (sscanf(line, "stop %d %d %lf", &code, &node, &grace) == 3) {
                fprintf(stderr, "engine-run: node %d: node %d's ranks ended with status %d: "
                        "stopping this node's ranks%s\n", n->o.node_rank, node, code,
                        grace > 0 ? " unless they end within the preemption deadline" : "");
                decide_stop(n, code, t + grace);
                break;
            }
        if (got < 0 && n->stop_code < 0) {
            fprintf(stderr, "engine-run: node %d: lost node 0's launcher (%s:%d): stopping this "
                    "node's ranks\n", n->o.node_rank, n->o.master_addr, n->o.master_port);
            decide_stop(n, 1, t);
        }
    }
    if (n->stop_code >= 0 && !n->stopped && t >= n->stop_at) {
        n->stopped = true;
        return n->stop_code;
    }
    return -1;
}

er_supervise_hook er_nodes_hook(er_nodes *n) {
    return (er_supervise_hook){.arg = n, .fds = hook_fds, .tick = hook_tick};
}

/* "node 2", "nodes 2 and 3": the nodes that have not reported their end. */
static void not_ended(const er_nodes *n, char *buf, size_t cap) {
    int count = 0, shown = 0;
    for (int k = 1; k < n->o.nnodes; k++) count += n->peers[k].end_code < 0;
    size_t len = (size_t)snprintf(buf, cap, "node%s ", count > 1 ? "s" : "");
    for (int k = 1; k < n->o.nnodes && len < cap; k++) {
        if (n->peers[k].end_code >= 0) continue;
        const char *sep = shown == 0 ? "" : shown == count - 1 ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", sep, k);
        shown++;
    }
}

/* Node 0, whose ranks failed secondarily: the first other node to report a
 * failure that is not secondary within SETTLE_S (a secondary one when no
 * other comes), or 0 when none does. */
static int first_cause(er_nodes *n) {
    double until = now_s() + SETTLE_S;
    int fallback = n->held_node > 0 ? n->held_node : 0;
    for (;;) {
        for (int k = 1; k < n->o.nnodes; k++) {
            master_read(n, k);
            int c = n->peers[k].end_code;
            if (c > 0 && !secondary(c)) return k;
            if (c > 0 && !fallback) fallback = k;
        }
        if (now_s() >= until) return fallback;
        struct pollfd p[ER_HOOK_FDS];
        int np = hook_fds(n, p, ER_HOOK_FDS);
        poll(p, (nfds_t)np, 100);
    }
}

int er_nodes_finish(er_nodes *n, int code) {
    if (n->o.node_rank != 0) {
        send_line(n->peers[0].fd, "end %d\n", code);
    }
    /* stopped for another node: its status; its ranks failed, but these
     * ended on their own (a preemption's grace): their own, unless 0 */
    if (n->stop_code >= 0) return n->stopped || code == 0 ? n->stop_code : code;
    if (n->o.node_rank != 0) return code;
    if (code != 0) {
        int cause = secondary(code) ? first_cause(n) : 0;
        if (cause > 0) { /* another node's failure made this one's ranks fail */
            fprintf(stderr, "engine-run: node 0: node %d's ranks ended with status %d: stopping "
                    "the job's other nodes\n", cause, n->peers[cause].end_code);
            tell_stop(n, n->peers[cause].end_code, cause);
            return n->peers[cause].end_code;
        }
        tell_stop(n, code, 0);
        return code;
    }
    /* This node's ranks ended well: the others' should end about now too
     * (one job, one last collective); wait for them to say so. */
    double deadline = now_s() + (n->o.timeout_s > 0 ? n->o.timeout_s : 300.0);
    int worst = 0;
    for (;;) {
        int left = 0;
        for (int k = 1; k < n->o.nnodes; k++) {
            int c = master_read(n, k);
            if (c > 0 && worst == 0) {
                worst = c;
                fprintf(stderr, "engine-run: node 0: node %d's ranks ended with status %d\n", k,
                        c);
            }
            left += n->peers[k].end_code < 0;
        }
        if (!left) return worst;
        if (now_s() > deadline) {
            char who[256];
            not_ended(n, who, sizeof who);
            fprintf(stderr, "engine-run: node 0: %s did not report the end of their ranks within "
                    "%.0f s of node 0's: stopping them\n", who, n->o.timeout_s);
            tell_stop(n, 1, 0);
            return 1;
        }
        struct pollfd p[ER_HOOK_FDS];
        int np = hook_fds(n, p, ER_HOOK_FDS);
        poll(p, (nfds_t)np, 100);
    }
}

void er_nodes_close(er_nodes *n) {
    if (!n) return;
    ds_rdzv_close(n->r); /* owns the peers' descriptors */
    ds_ompi_server_stop(&n->server);
    free(n->peers);
    free(n);
}
