/* The rendezvous of separately started parts of one job (see rdzv.h): plain
 * TCP sockets, one line each way, every wait bounded by one deadline. */
#include "engine/comm/rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* One connection attempt waits at most this long, so that a member whose
 * first try went to a black hole (an address that drops packets) tries again
 * well before the deadline. */
#define RDZV_CONNECT_TRY_S 2.0
/* Between two refused connections: member 0 may not listen yet. */
#define RDZV_RETRY_S 0.2
/* A member that arrived waits for member 0's verdict until timeout_s after
 * it connected, and this much more: member 0 was listening by then, so its
 * own deadline (the one whose message names the members that are missing,
 * which a member cannot know) comes before. */
#define RDZV_VERDICT_GRACE_S 3.0

typedef struct pending {
    int fd;
    size_t len;
    char buf[DS_RDZV_LINE];
} pending;

struct ds_rdzv {
    char what[16];
    char addr[256];
    int port, member, members, nproc;
    double timeout_s, deadline;
    int lfd;          /* member 0: the listening socket */
    int *fd;          /* member 0: fd[m] for m >= 1; other members: fd[0] */
    char (*host)[64]; /* the host each member reported */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ms_left(double deadline, double cap_s) {
    double left = deadline - now_s();
    if (left > cap_s) left = cap_s;
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static ds_status check_desc(const ds_rdzv_desc *d) {
    if (!d || !d->addr || !*d->addr)
        return DS_ERR(DS_ERR_INVALID_ARG, "rendezvous: no master address");
    if (d->port < 1 || d->port > 65535)
        return DS_ERR(DS_ERR_INVALID_ARG, "rendezvous: master port %d is not in 1..65535", d->port);
    if (d->members < 1 || d->member < 0 || d->member >= d->members)
        return DS_ERR(DS_ERR_INVALID_ARG, "rendezvous: member %d is not in 0..%d", d->member,
                      d->members - 1);
    if (d->nproc < 1) return DS_ERR(DS_ERR_INVALID_ARG, "rendezvous: nproc %d < 1", d->nproc);
    return DS_OK;
}

static ds_status make(const ds_rdzv_desc *d, ds_rdzv **out) {
    *out = NULL;
    DS_TRY(check_desc(d));
    ds_rdzv *r = calloc(1, sizeof *r);
    if (r) r->fd = malloc((size_t)d->members * sizeof *r->fd);
    if (r) r->host = calloc((size_t)d->members, sizeof *r->host);
    if (!r || !r->fd || !r->host) {
        ds_rdzv_close(r);
        return DS_ERR(DS_ERR_OOM, "rendezvous: out of memory for %d members", d->members);
    }
    snprintf(r->what, sizeof r->what, "%s", d->what && *d->what ? d->what : "member");
    snprintf(r->addr, sizeof r->addr, "%s", d->addr);
    r->port = d->port;
    r->member = d->member;
    r->members = d->members;
    r->nproc = d->nproc;
    r->timeout_s = d->timeout_s > 0 ? d->timeout_s : 300.0;
    r->deadline = now_s() + r->timeout_s;
    r->lfd = -1;
    for (int m = 0; m < d->members; m++) {
        r->fd[m] = -1;
        snprintf(r->host[m], sizeof r->host[m], "?");
    }
    char self[64] = "?";
    if (gethostname(self, sizeof self) != 0) snprintf(self, sizeof self, "?");
    self[sizeof self - 1] = '\0';
    snprintf(r->host[d->member], sizeof r->host[0], "%s", self);
    *out = r;
    return DS_OK;
}

void ds_rdzv_close(ds_rdzv *r) {
    if (!r) return;
    close_fd(&r->lfd);
    if (r->fd)
        for (int m = 0; m < r->members; m++) close_fd(&r->fd[m]);
    free(r->fd);
    free(r->host);
    free(r);
}

int ds_rdzv_fd(const ds_rdzv *r, int m) {
    return r && m >= 0 && m < r->members ? r->fd[m] : -1;
}

const char *ds_rdzv_host(const ds_rdzv *r, int m) {
    return r && m >= 0 && m < r->members ? r->host[m] : "?";
}

/* A short line to a connected socket; failures are the peer's to notice. */
static void send_line(int fd, const char *head, const char *text) {
    char line[DS_RDZV_LINE];
    int n = snprintf(line, sizeof line, "%s%s\n", head, text);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) { /* cut, but still one line */
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    size_t off = 0;
    while (off < (size_t)n) {
        ssize_t w = send(fd, line + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        off += (size_t)w;
    }
}

/* ---- member 0 ------------------------------------------------------------ */

ds_status ds_rdzv_listen(const ds_rdzv_desc *d, ds_rdzv **out) {
    ds_rdzv *r;
    DS_TRY(make(d, &r));
    /* Every address of this machine: the name others use for it (a
     * Kubernetes service, a host name with several interfaces) need not be
     * one of its own addresses. IPv6 with IPv4 mapped; IPv4 alone where the
     * kernel has no IPv6. */
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1, zero = 0;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    socklen_t len;
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        s6->sin6_port = htons((uint16_t)d->port);
        len = sizeof *s6;
    } else {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_port = htons((uint16_t)d->port);
        len = sizeof *s4;
    }
    if (fd < 0) {
        int e = errno;
        ds_rdzv_close(r);
        return DS_ERR(DS_ERR_IO, "rendezvous: cannot make a socket: %s", strerror(e));
    }
    /* a port a finished job left in TIME_WAIT is free; one that something
     * listens on is not (Linux refuses that bind even so) */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        ds_rdzv_close(r);
        if (e == EADDRINUSE)
            return DS_ERR(DS_ERR_IO,
                          "master port %d is in use on this machine (another job's master, or "
                          "another program): choose another port",
                          d->port);
        return DS_ERR(DS_ERR_IO, "cannot listen on master port %d: %s", d->port, strerror(e));
    }
    r->lfd = fd;
    *out = r;
    return DS_OK;
}

/* "node 2", "nodes 2, 3 and 5": the members not arrived yet (at most 16 named). */
static void missing_list(const ds_rdzv *r, char *buf, size_t cap) {
    int n = 0;
    for (int m = 1; m < r->members; m++) n += r->fd[m] < 0;
    size_t len = (size_t)snprintf(buf, cap, "%s%s ", r->what, n > 1 ? "s" : "");
    int shown = 0;
    for (int m = 1; m < r->members && len < cap; m++) {
        if (r->fd[m] >= 0) continue;
        if (shown == 16) {
            len += (size_t)snprintf(buf + len, cap - len, " and %d more", n - shown);
            break;
        }
        const char *sep = shown == 0 ? "" : shown == n - 1 ? " and " : ", ";
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", sep, m);
        shown++;
    }
}

/* Fail the rendezvous: every member that arrived (and `extra`, one that
 * just spoke) learns why, then the status is recorded. */
static ds_status fail_all(ds_rdzv *r, int extra, ds_status st, const char *msg) {
    for (int m = 1; m < r->members; m++)
        if (r->fd[m] >= 0) send_line(r->fd[m], "error ", msg);
    if (extra >= 0) send_line(extra, "error ", msg);
    return DS_ERR(st, "%s", msg);
}

/* A hello line from a member; returns false for something that is not one
 * (a stray connection: dropped without an answer). */
static bool parse_hello(const char *line, int *member, int *members, int *nproc, char *host,
                        size_t cap) {
    int used = 0;
    char h[64] = "?";
    if (sscanf(line, "ze-rdzv 1 member=%d members=%d nproc=%d host=%63s%n", member, members,
               nproc, h, &used) != 4)
        return false;
    snprintf(host, cap, "%s", h);
    return true;
}

/* Check a member's hello against the others: false, with msg saying why,
 * fails the whole rendezvous. */
static bool hello_ok(ds_rdzv *r, int m, int members, int nproc, const char *host, char *msg,
                     size_t cap) {
    const char *w = r->what;
    if (members != r->members) {
        snprintf(msg, cap, "%s %d (host %s) says there are %d %ss, %s 0 says %d: start every %s "
                 "with the same count", w, m, host, members, w, w, r->members, w);
        return false;
    }
    if (m < 1 || m >= r->members) {
        snprintf(msg, cap, "%s %d (host %s) is out of range: %ss are 0..%d", w, m, host, w,
                 r->members - 1);
        return false;
    }
    if (r->fd[m] >= 0) {
        snprintf(msg, cap, "%s %d was given twice (hosts %s and %s): give each %s its own "
                 "number", w, m, r->host[m], host, w);
        return false;
    }
    if (nproc != r->nproc) {
        snprintf(msg, cap, "%s %d (host %s) starts %d rank(s), %s 0 starts %d: give every %s "
                 "the same count", w, m, host, nproc, w, r->nproc, w);
        return false;
    }
    return true;
}

ds_status ds_rdzv_serve(ds_rdzv *r, const char *payload) {
    if (!r || r->member != 0 || r->lfd < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_rdzv_serve: not a listening member 0");
    if (strchr(payload, '\n'))
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_rdzv_serve: the payload holds a newline");
    int cap = 2 * r->members + 16, n = 0, arrived = 1;
    pending *p = calloc((size_t)cap, sizeof *p);
    struct pollfd *pf = calloc((size_t)cap + 1, sizeof *pf);
    if (!p || !pf) {
        free(p);
        free(pf);
        return DS_ERR(DS_ERR_OOM, "rendezvous: out of memory");
    }
    char msg[1024];
    ds_status st = DS_OK;
    while (arrived < r->members) {
        if (now_s() >= r->deadline) {
            char who[512];
            missing_list(r, who, sizeof who);
            snprintf(msg, sizeof msg, "%s of %d did not arrive at port %d within %.0f s", who,
                     r->members, r->port, r->timeout_s);
            st = fail_all(r, -1, DS_ERR_TIMEOUT, msg);
            goto out;
        }
        pf[0] = (struct pollfd){.fd = n < cap ? r->lfd : -1, .events = POLLIN};
        for (int k = 0; k < n; k++) pf[k + 1] = (struct pollfd){.fd = p[k].fd, .events = POLLIN};
        if (poll(pf, (nfds_t)n + 1, ms_left(r->deadline, 1.0)) < 0 && errno != EINTR) {
            st = DS_ERR(DS_ERR_IO, "rendezvous: poll: %s", strerror(errno));
            goto out;
        }
        if (pf[0].revents & POLLIN) {
            int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) p[n++] = (pending){.fd = fd};
        }
        for (int k = 0; k < n; k++) {
            if (!pf[k + 1].revents) continue;
            ssize_t got = recv(p[k].fd, p[k].buf + p[k].len, sizeof p[k].buf - 1 - p[k].len, 0);
            if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            char *nl = NULL;
            if (got > 0) {
                p[k].len += (size_t)got;
                p[k].buf[p[k].len] = '\0';
                nl = strchr(p[k].buf, '\n');
            }
            if (!nl && got > 0 && p[k].len < sizeof p[k].buf - 1) continue;
            int member = -1, members = 0, nproc = 0;
            char host[64];
            if (nl) *nl = '\0';
            bool hello = nl && parse_hello(p[k].buf, &member, &members, &nproc, host, sizeof host);
            int fd = p[k].fd;
            p[k--] = p[--n]; /* taken off the pending list either way */
            if (!hello) { /* closed, too long, or not ours: forget it */
                close(fd);
                continue;
            }
            if (!hello_ok(r, member, members, nproc, host, msg, sizeof msg)) {
                st = fail_all(r, fd, DS_ERR_INVALID_ARG, msg);
                close(fd);
                goto out;
            }
            r->fd[member] = fd;
            snprintf(r->host[member], sizeof r->host[member], "%s", host);
            arrived++;
        }
    }
    for (int m = 1; m < r->members; m++) send_line(r->fd[m], "go ", payload);
out:
    for (int k = 0; k < n; k++) close(p[k].fd);
    free(p);
    free(pf);
    close_fd(&r->lfd); /* every member arrived, or none will be let in */
    return st;
}

/* ---- members 1..N-1 --------------------------------------------------------- */

/* One connection attempt to any of addr's addresses; the socket or -1 with
 * the reason in why. */
static int try_connect(const ds_rdzv *r, char *why, size_t cap) {
    char port[16];
    snprintf(port, sizeof port, "%d", r->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(r->addr, port, &hints, &list);
    if (gai != 0) { /* a cluster's DNS may learn a new pod's name late: retried */
        snprintf(why, cap, "cannot resolve '%.100s': %s", r->addr, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) {
            snprintf(why, cap, "socket: %s", strerror(errno));
            continue;
        }
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t len = sizeof err;
            if (poll(&pf, 1, ms_left(r->deadline, RDZV_CONNECT_TRY_S)) != 1)
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            rc = err ? -1 : 0;
            errno = err;
        }
        if (rc != 0) {
            snprintf(why, cap, "%s", strerror(errno));
            close_fd(&fd);
        }
    }
    freeaddrinfo(list);
    return fd;
}

/* Read one line from fd until the deadline: 1 got it, 0 closed, -1 timed out. */
static int read_line(int fd, double deadline, char *buf, size_t cap) {
    size_t len = 0;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = ms_left(deadline, 1.0);
        if (left == 0) return -1;
        if (poll(&pf, 1, left) <= 0) continue;
        ssize_t got = recv(fd, buf + len, cap - 1 - len, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return 0;
        len += (size_t)got;
        buf[len] = '\0';
        char *nl = strchr(buf, '\n');
        if (nl) {
            *nl = '\0';
            return 1;
        }
        if (len >= cap - 1) return 0;
    }
}

ds_status ds_rdzv_join(const ds_rdzv_desc *d, ds_rdzv **out, char *payload, size_t cap) {
    ds_rdzv *r;
    DS_TRY(make(d, &r));
    if (d->member == 0) {
        ds_rdzv_close(r);
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_rdzv_join: member 0 serves, it does not join");
    }
    char why[512] = "no attempt";
    int fd = -1;
    while (fd < 0 && now_s() < r->deadline) {
        fd = try_connect(r, why, sizeof why);
        if (fd < 0) {
            int ms = ms_left(r->deadline, RDZV_RETRY_S);
            if (ms > 0) poll(NULL, 0, ms);
        }
    }
    ds_status st;
    if (fd < 0) {
        st = DS_ERR(DS_ERR_TIMEOUT,
                    "%s 0 (the master, %s:%d) did not answer within %.0f s (last: %s): is it "
                    "started, with this address and port?",
                    r->what, r->addr, r->port, r->timeout_s, why);
        goto fail;
    }
    r->fd[0] = fd;
    char hello[256];
    snprintf(hello, sizeof hello, "member=%d members=%d nproc=%d host=%s", r->member,
             r->members, r->nproc, r->host[r->member]);
    send_line(fd, "ze-rdzv 1 ", hello);
    char line[DS_RDZV_LINE];
    int got = read_line(fd, now_s() + r->timeout_s + RDZV_VERDICT_GRACE_S, line, sizeof line);
    if (got < 0) {
        st = DS_ERR(DS_ERR_TIMEOUT,
                    "%s 0 (the master, %s:%d) took this %s in but gave no answer within %.0f s",
                    r->what, r->addr, r->port, r->what, r->timeout_s + RDZV_VERDICT_GRACE_S);
        goto fail;
    }
    if (got == 0) {
        st = DS_ERR(DS_ERR_COMM,
                    "%s 0 (the master, %s:%d) closed the connection without an answer (it ended, "
                    "or what listens there is not a zero-engine master)",
                    r->what, r->addr, r->port);
        goto fail;
    }
    if (strncmp(line, "error ", 6) == 0) {
        st = DS_ERR(DS_ERR_COMM, "%s", line + 6);
        goto fail;
    }
    if (strncmp(line, "go ", 3) != 0) {
        st = DS_ERR(DS_ERR_COMM, "%s:%d answered '%.80s', not as a zero-engine master does",
                    r->addr, r->port, line);
        goto fail;
    }
    if (strlen(line + 3) >= cap) {
        st = DS_ERR(DS_ERR_COMM, "rendezvous: payload of %zu bytes, room for %zu",
                    strlen(line + 3), cap - 1);
        goto fail;
    }
    snprintf(payload, cap, "%s", line + 3);
    *out = r;
    return DS_OK;
fail:
    ds_rdzv_close(r);
    *out = NULL;
    return st;
}
