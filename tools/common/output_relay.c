/* engine-run's relay of an mpirun job's output (see output_relay.h). */
#include "tools/common/output_relay.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A partial line (no newline yet) waits this long for the rest before it is
 * printed as it is: long enough for a rank's next write, short enough that
 * a prompt or progress text does not seem lost. */
#define ER_RELAY_PARTIAL_S 0.5
/* Lines of a rank's that wait for their newline at once (ranks that wrote
 * half a line); one more prints the oldest as it is. */
#define N_PARTIAL 64
/* Distinct stderr lines remembered for "another rank printed this already". */
#define N_RECENT 32
/* A banner longer than this is not one of mpirun's: passed on as it is. */
#define BANNER_MAX 16384
/* The longest tag, "[4294967295,4294967295]<stderr>:", plus slack. */
#define TAG_MAX 40

typedef struct partial {
    bool used;
    int rank, err; /* the source: rank -1 is mpirun itself */
    char *buf;
    size_t len, cap;
    double since;
} partial;

typedef struct recent {
    char *text;
    uint8_t *ranks; /* bitmap of the ranks that printed it since it was printed */
    unsigned long long used;
} recent;

/* One input pipe: bytes not yet attributed, and whose text comes now. */
typedef struct input {
    char pend[TAG_MAX * 2];
    size_t npend;
    bool line_start; /* next byte begins a line of the current source */
    int rank, err;   /* current source: a rank's stream, or rank -1 mpirun itself */
} input;

struct er_relay {
    int np, out_fd, err_fd;
    input in[2];
    partial part[N_PARTIAL];
    recent rec[N_RECENT];
    unsigned long long clock;
    /* mpirun's own untagged text: the current line and a banner block */
    char *own;
    size_t own_len, own_cap;
    char *banner;
    size_t banner_len;
    bool in_banner, banner_overflow;
    bool named; /* a banner named the rank that ended the job */
    /* the rank whose library said it ends the job with MPI_Abort, and the
     * status ("[zero-engine] rank R ends the job with MPI_Abort (status S)"),
     * -1 none: mpirun's banner may name a rank it killed instead */
    int abort_rank, abort_code;
    int first_err_rank; /* the first rank that wrote to stderr, -1 none yet */
    int rank_offset; /* added to the ranks mpirun's banners name (its own numbering) */
    double now;
};

static void write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* nowhere to write: drop, as a closed terminal would */
        s += w;
        n -= (size_t)w;
    }
}

static void say(er_relay *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(er_relay *r, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    write_all(r->err_fd, buf, (size_t)n);
}

er_relay *er_relay_create(int np, int out_fd, int err_fd) {
    er_relay *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->np = np > 0 ? np : 1;
    r->out_fd = out_fd;
    r->err_fd = err_fd;
    r->first_err_rank = -1;
    r->abort_rank = -1;
    for (int k = 0; k < 2; k++) r->in[k] = (input){.line_start = true, .rank = -1, .err = 1};
    return r;
}

void er_relay_destroy(er_relay *r) {
    if (!r) return;
    for (int k = 0; k < N_PARTIAL; k++) free(r->part[k].buf);
    for (int k = 0; k < N_RECENT; k++) {
        free(r->rec[k].text);
        free(r->rec[k].ranks);
    }
    free(r->own);
    free(r->banner);
    free(r);
}

/* ---- a rank's stderr line: once, whichever ranks print it ---- */

/* The library tells ranks that did not fail who did: where rank R says
 * "X: <msg>", the others say "X: rank R failed with DS_ERR_IO: <msg>"
 * (ds_comm_agree). Both are the same error: compared without that part. */
static size_t same_error_key(const char *line, size_t n, char *key, size_t cap) {
    static const char mark[] = " failed with DS_ERR_";
    const char *at = memmem(line, n, mark, sizeof mark - 1);
    const char *rank = at;
    while (rank && rank > line && rank[-1] >= '0' && rank[-1] <= '9') rank--;
    const char *colon = at ? memchr(at, ':', n - (size_t)(at - line)) : NULL;
    if (!at || rank == at || rank - line < 5 || memcmp(rank - 5, "rank ", 5) != 0 || !colon ||
        colon + 2 > line + n || colon[1] != ' ') {
        size_t k = n < cap ? n : cap;
        memcpy(key, line, k);
        return k;
    }
    size_t head = (size_t)(rank - 5 - line), tail = n - (size_t)(colon + 2 - line);
    if (head + tail > cap) return 0;
    memcpy(key, line, head);
    memcpy(key + head, colon + 2, tail);
    return head + tail;
}

/* The library's line before it aborts the job (engine/comm/mpi_boot.c). */
static void note_abort_line(er_relay *r, const char *line, size_t n) {
    static const char k[] = "[zero-engine] rank ";
    char buf[160];
    if (r->abort_rank >= 0 || n < sizeof k) return; /* the first one ended it */
    size_t m = n < sizeof buf - 1 ? n : sizeof buf - 1;
    memcpy(buf, line, m);
    buf[m] = '\0';
    const char *p = strstr(buf, k);
    int rank, code;
    if (p && sscanf(p, "[zero-engine] rank %d ends the job with MPI_Abort (status %d)", &rank,
                    &code) == 2) {
        r->abort_rank = rank;
        r->abort_code = code;
    }
}

static void rank_err_line(er_relay *r, int rank, const char *whole, size_t whole_n) {
    if (r->first_err_rank < 0 && rank >= 0 && rank < r->np) r->first_err_rank = rank;
    note_abort_line(r, whole, whole_n);
    char keybuf[4096];
    size_t n = same_error_key(whole, whole_n, keybuf, sizeof keybuf);
    const char *line = keybuf;
    if (n == 0 || whole_n > sizeof keybuf) { /* too long to remember: as it is */
        write_all(r->err_fd, whole, whole_n);
        return;
    }
    size_t bytes = ((size_t)r->np + 7) / 8;
    bool known = rank >= 0 && rank < r->np;
    recent *hit = NULL, *lru = &r->rec[0];
    for (int k = 0; k < N_RECENT; k++) {
        recent *e = &r->rec[k];
        if (e->text && strlen(e->text) == n && memcmp(e->text, line, n) == 0) hit = e;
        if (!e->text || (lru->text && e->used < lru->used)) lru = e;
    }
    if (hit && known && !(hit->ranks[rank / 8] & (1u << (rank % 8)))) {
        hit->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8)); /* another rank's copy */
        hit->used = ++r->clock;
        return;
    }
    write_all(r->err_fd, whole, whole_n);
    if (!known) return;
    if (!hit) { /* remember it in place of the least recently printed */
        char *text = malloc(n + 1);
        uint8_t *ranks = calloc(bytes, 1);
        if (!text || !ranks) {
            free(text);
            free(ranks);
            return;
        }
        memcpy(text, line, n);
        text[n] = '\0';
        free(lru->text);
        free(lru->ranks);
        *lru = (recent){.text = text, .ranks = ranks};
        hit = lru;
    } else { /* the same rank again: a new occurrence, counted from here */
        memset(hit->ranks, 0, bytes);
    }
    hit->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8));
    hit->used = ++r->clock;
}

/* ---- mpirun's banners ---- */

static bool dashes(const char *s, size_t n) {
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    if (n < 20) return false;
    for (size_t k = 0; k < n; k++)
        if (s[k] != '-') return false;
    return true;
}

static const char *sig_name(int s) {
    switch (s) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return NULL;
    }
}

/* One line for a banner mpirun prints when a job fails, or false when it
 * is not one of those (it is then printed whole). */
static bool condense(er_relay *r, const char *b) {
    const char *p;
    int rank, code, sig;
    char node[256] = "";
    long pid = 0;
    if ((p = strstr(b, "MPI_ABORT was invoked on rank ")) &&
        sscanf(p, "MPI_ABORT was invoked on rank %d in communicator %*s with errorcode %d",
               &rank, &code) == 2) {
        say(r, "engine-run: rank %d ended the job with MPI_Abort (status %d) after the error "
            "above; mpirun stopped the other ranks\n", rank, code);
        r->named = true;
        return true;
    }
    if (strstr(b, "Primary job") && strstr(b, "terminated normally, but"))
        return true; /* "... returned a non-zero exit code": the next banner says which */
    if ((p = strstr(b, "mpirun noticed that process rank ")) &&
        sscanf(p, "mpirun noticed that process rank %d with PID %ld on node %255s exited on "
               "signal %d", &rank, &pid, node, &sig) == 4) {
        const char *name = sig_name(sig);
        char pidtext[32] = "";
        if (pid > 0) snprintf(pidtext, sizeof pidtext, ", pid %ld", pid);
        say(r, "engine-run: rank %d (on %s%s) was killed by signal %d%s%s%s; mpirun stopped "
            "the other ranks\n", rank + r->rank_offset, node, pidtext, sig, name ? " (" : "",
            name ? name : "",
            name ? ")" : "");
        r->named = true;
        return true;
    }
    if ((p = strstr(b, "mpirun detected that one or more processes exited with non-zero "
                       "status"))) {
        const char *name = strstr(p, "Process name: [[");
        const char *ec = strstr(p, "Exit code:");
        int job;
        if (r->abort_rank >= 0) { /* the library said which rank ends it */
            say(r, "engine-run: rank %d ended the job with MPI_Abort (status %d) after the "
                "error above; mpirun stopped the other ranks\n", r->abort_rank, r->abort_code);
            r->named = true;
            return true;
        }
        if (name && ec && sscanf(name, "Process name: [[%d,%*d],%d]", &job, &rank) == 2 &&
            sscanf(ec, "Exit code: %d", &code) == 1) {
            say(r, "engine-run: rank %d exited with status %d; mpirun stopped the other ranks\n",
                rank + r->rank_offset, code);
            r->named = true;
            return true;
        }
    }
    if ((p = strstr(b, "mpirun has exited due to process rank ")) &&
        sscanf(p, "mpirun has exited due to process rank %d with PID %ld on node %255s", &rank,
               &pid, node) == 3) {
        if (pid > 0)
            say(r, "engine-run: rank %d (on %s) exited without finishing MPI (no MPI_Finalize); "
                "mpirun stopped the other ranks\n", rank + r->rank_offset, node);
        else /* mpirun never learnt the pid: Open MPI 4's own race at a rank's exit
              * (open-mpi/ompi#7833), seen after programs that had finished */
            say(r, "engine-run: rank %d (on %s) ended without MPI_Finalize as mpirun saw it, "
                "pid 0: mpirun lost track of it (Open MPI's race at exit, open-mpi/ompi#7833, "
                "also after a program that finished); mpirun stopped the other ranks\n",
                rank + r->rank_offset, node);
        r->named = true;
        return true;
    }
    return false;
}

static void banner_line(er_relay *r, const char *line, size_t n) {
    if (!r->in_banner) {
        if (dashes(line, n)) {
            r->in_banner = true;
            r->banner_len = 0;
            r->banner_overflow = false;
            if (!r->banner && !(r->banner = malloc(BANNER_MAX + 1))) r->banner_overflow = true;
            if (!r->banner_overflow) {
                memcpy(r->banner, line, n);
                r->banner_len = n;
            } else {
                write_all(r->err_fd, line, n);
            }
            return;
        }
        /* Open MPI 4.1's mpirun sometimes fails to print its banner while a
         * job is being aborted ("ORTE_ERROR_LOG: Data unpack would read past
         * end of buffer in file .../show_help.c"): a message about its own
         * message, nothing the user can act on. */
        if (memmem(line, n, "ORTE_ERROR_LOG", 14) && memmem(line, n, "show_help.c", 11)) return;
        write_all(r->err_fd, line, n); /* a one-line message of mpirun's */
        return;
    }
    if (r->banner_overflow) {
        write_all(r->err_fd, line, n);
        if (dashes(line, n)) r->in_banner = false;
        return;
    }
    if (r->banner_len + n > BANNER_MAX) { /* not a banner of mpirun's: as it is */
        write_all(r->err_fd, r->banner, r->banner_len);
        write_all(r->err_fd, line, n);
        r->banner_overflow = true;
        if (dashes(line, n)) r->in_banner = false;
        return;
    }
    memcpy(r->banner + r->banner_len, line, n);
    r->banner_len += n;
    if (!dashes(line, n)) return;
    r->in_banner = false;
    r->banner[r->banner_len] = '\0';
    if (!condense(r, r->banner)) write_all(r->err_fd, r->banner, r->banner_len);
    r->banner_len = 0;
}

int er_relay_named_rank(const er_relay *r) { return r->named; }

int er_relay_abort_rank(const er_relay *r, int *status) {
    if (status) *status = r->abort_code;
    return r->abort_rank;
}

int er_relay_first_error_rank(const er_relay *r) {
    return r->first_err_rank < 0 ? -1 : r->first_err_rank + r->rank_offset;
}

void er_relay_set_rank_offset(er_relay *r, int offset) { r->rank_offset = offset; }

/* ---- lines by source ---- */

static void emit(er_relay *r, int rank, int err, const char *line, size_t n) {
    if (rank < 0) banner_line(r, line, n);
    else if (!err) write_all(r->out_fd, line, n);
    else rank_err_line(r, rank, line, n);
}

static partial *find_partial(er_relay *r, int rank, int err, bool make) {
    partial *free_slot = NULL;
    for (int k = 0; k < N_PARTIAL; k++) {
        partial *p = &r->part[k];
        if (p->used && p->rank == rank && p->err == err) return p;
        if (!p->used) free_slot = p;
    }
    if (!make) return NULL;
    if (!free_slot) { /* all in use: the one waiting longest goes out as it is */
        free_slot = &r->part[0];
        for (int k = 1; k < N_PARTIAL; k++)
            if (r->part[k].since < free_slot->since) free_slot = &r->part[k];
        emit(r, free_slot->rank, free_slot->err, free_slot->buf, free_slot->len);
    }
    free_slot->used = true;
    free_slot->rank = rank;
    free_slot->err = err;
    free_slot->len = 0;
    free_slot->since = r->now;
    return free_slot;
}

/* Text for a source; whole lines go out, the rest waits. */
static void text(er_relay *r, int rank, int err, const char *s, size_t n) {
    while (n) {
        const char *nl = memchr(s, '\n', n);
        size_t k = nl ? (size_t)(nl - s) + 1 : n;
        partial *p = find_partial(r, rank, err, !nl);
        if (!p) {
            emit(r, rank, err, s, k);
        } else {
            if (p->len + k > p->cap) {
                size_t cap = p->cap ? p->cap : 256;
                while (cap < p->len + k) cap *= 2;
                char *b = realloc(p->buf, cap);
                if (!b) { /* out of memory: what is held, then this, as they are */
                    emit(r, rank, err, p->buf, p->len);
                    p->len = 0;
                    emit(r, rank, err, s, k);
                    if (nl) p->used = false;
                    s += k;
                    n -= k;
                    continue;
                }
                p->buf = b;
                p->cap = cap;
            }
            memcpy(p->buf + p->len, s, k);
            p->len += k;
            if (nl) {
                emit(r, rank, err, p->buf, p->len);
                p->used = false;
            }
        }
        s += k;
        n -= k;
    }
}

/* A tag "[J,R]<stdout>:" or "<stderr>:" at s: its length (rank, stream
 * set), 0 when s holds none, -1 when s ends before it could tell. */
static int parse_tag(const char *s, size_t n, int *rank, int *err) {
    size_t k = 0;
    if (k >= n) return -1;
    if (s[k++] != '[') return 0;
    for (int part = 0; part < 2; part++) {
        size_t d0 = k;
        long v = 0;
        while (k < n && s[k] >= '0' && s[k] <= '9' && k - d0 < 11) v = v * 10 + (s[k++] - '0');
        if (k >= n) return -1;
        if (k == d0 || s[k] != (part == 0 ? ',' : ']')) return 0;
        k++;
        if (part == 1) *rank = v > INT32_MAX ? -1 : (int)v;
    }
    static const char *const kinds[2] = {"<stdout>:", "<stderr>:"};
    for (int e = 0; e < 2; e++) {
        size_t m = strlen(kinds[e]);
        size_t have = n - k < m ? n - k : m;
        if (memcmp(s + k, kinds[e], have) != 0) continue;
        if (have < m) return -1;
        *err = e;
        return (int)(k + m);
    }
    return 0;
}

static void feed_input(er_relay *r, input *in, const char *buf, size_t n) {
    /* what the last read left undecided (the start of a tag?), then this */
    char work[sizeof in->pend + 4096];
    for (;;) {
        size_t take = sizeof work - in->npend;
        if (take > n) take = n;
        memcpy(work, in->pend, in->npend);
        memcpy(work + in->npend, buf, take);
        size_t len = in->npend + take, i = 0, from = 0;
        in->npend = 0;
        buf += take;
        n -= take;
        while (i < len) {
            /* a tag may start a line, or follow a rank's partial write */
            if (work[i] == '[' && (in->line_start || in->rank >= 0)) {
                int rank = -1, err = 0, t = parse_tag(work + i, len - i, &rank, &err);
                if (t < 0) { /* cut short by the read: decide with the next bytes */
                    text(r, in->rank, in->err, work + from, i - from);
                    in->npend = len - i;
                    memcpy(in->pend, work + i, in->npend);
                    from = i = len;
                    break;
                }
                if (t > 0) {
                    text(r, in->rank, in->err, work + from, i - from);
                    in->rank = rank;
                    in->err = err;
                    in->line_start = false;
                    i += (size_t)t;
                    from = i;
                    continue;
                }
            }
            if (in->line_start) { /* a line without a tag: mpirun's own */
                text(r, in->rank, in->err, work + from, i - from);
                from = i;
                in->rank = -1;
                in->err = 1;
            }
            in->line_start = work[i] == '\n';
            i++;
        }
        text(r, in->rank, in->err, work + from, len - from);
        if (!n) return;
    }
}

void er_relay_feed(er_relay *r, int from_stderr, const char *buf, size_t n) {
    feed_input(r, &r->in[from_stderr ? 1 : 0], buf, n);
}

void er_relay_tick(er_relay *r, double now) {
    r->now = now;
    for (int k = 0; k < N_PARTIAL; k++) {
        partial *p = &r->part[k];
        if (!p->used || now - p->since < ER_RELAY_PARTIAL_S) continue;
        emit(r, p->rank, p->err, p->buf, p->len);
        p->used = false;
    }
}

void er_relay_finish(er_relay *r) {
    for (int k = 0; k < 2; k++) {
        input *in = &r->in[k];
        if (in->npend) text(r, in->rank, in->err, in->pend, in->npend);
        in->npend = 0;
    }
    for (int k = 0; k < N_PARTIAL; k++) {
        partial *p = &r->part[k];
        if (!p->used) continue;
        emit(r, p->rank, p->err, p->buf, p->len);
        write_all(p->rank >= 0 && !p->err ? r->out_fd : r->err_fd, "\n", 1);
        p->used = false;
    }
    if (r->in_banner && !r->banner_overflow && r->banner_len)
        write_all(r->err_fd, r->banner, r->banner_len);
    r->in_banner = false;
}
