/* fsync_order: check the ordering rule crash-consistency checkers use on the
 * system calls of a checkpoint save, recorded by
 *
 *   strace -f -qq -s 0 -y -e trace=openat,creat,write,pwrite64,fsync,fdatasync,\
 *          rename,renameat,renameat2,mkdir,mkdirat -o TRACE  <the save>
 *
 *   fsync_order ROOT TRACE            exit 0 when the rules hold, else 1 (each
 *                                     violation on its own line)
 *   fsync_order --drop-each ROOT TRACE   the rules must hold on TRACE, and
 *                                     break when any one of its fsyncs under
 *                                     ROOT (or of ROOT's parent) is left out:
 *                                     shows the check would catch a save that
 *                                     lost any one of them
 *
 * ROOT is the checkpoint folder (absolute, as the save was given it). A
 * rename whose destination is under ROOT publishes something; for each:
 *   1. a file renamed: every byte written to it was fsynced (after the last
 *      write, before the rename);
 *   2. a folder renamed: the same for every file written inside it, and every
 *      entry made inside it (a file created, a rename into it) was followed by
 *      an fsync of the folder by the process that made it, before the rename
 *      (each rank makes its own entry durable, as a shared file system
 *      needs);
 *   3. after the rename, the destination's folder is fsynced before the next
 *      publishing rename (or the end): TAG is durable before `latest` names
 *      it, meta.json before TAG.tmp becomes TAG;
 *   4. a folder created on the way to a published path (ROOT itself on the
 *      first save), and not itself renamed, has its parent fsynced before the
 *      first publication under it.
 * The trace must also show a save: a folder renamed, meta.json and latest
 * published, shard files written. Paths in the trace must be absolute. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_WRITE, EV_FSYNC, EV_RENAME, EV_MKDIR, EV_CREATE };

typedef struct event {
    int type;
    long pid;
    int line;
    char *a, *b; /* path; the rename's destination */
} event;

typedef struct trace {
    event *v;
    int n, cap;
} trace;

static void add(trace *t, int type, long pid, int line, const char *a, const char *b) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->v = realloc(t->v, (size_t)t->cap * sizeof *t->v);
        if (!t->v) exit(2);
    }
    t->v[t->n++] = (event){type, pid, line, strdup(a), b ? strdup(b) : NULL};
}

/* The k-th (0-based) quoted string of s into out. */
static bool quoted(const char *s, int k, char *out, size_t cap) {
    for (;;) {
        const char *q = strchr(s, '"');
        if (!q) return false;
        const char *e = strchr(q + 1, '"');
        if (!e) return false;
        if (k-- == 0) {
            snprintf(out, cap, "%.*s", (int)(e - q - 1), q + 1);
            return true;
        }
        s = e + 1;
    }
}

/* The path strace -y shows for the first fd argument: "17</a/b>". */
static bool fd_path(const char *args, char *out, size_t cap) {
    const char *lt = strchr(args, '<'), *gt = lt ? strchr(lt, '>') : NULL;
    if (!lt || !gt) return false;
    snprintf(out, cap, "%.*s", (int)(gt - lt - 1), lt + 1);
    return true;
}

/* One complete call "name(args) = rc..." of process pid. */
static void parse_call(trace *t, long pid, int line, const char *call) {
    /* "name(args)", padding, "= rc" and maybe " EEXIST (...)" or "<path>" */
    const char *paren = strchr(call, '('), *eq = NULL;
    for (const char *x = strstr(call, " = "); x; x = strstr(x + 1, " = ")) eq = x;
    const char *close = eq;
    while (close && close > call && close[-1] == ' ') close--;
    if (!paren || !eq || close <= call || close[-1] != ')') return;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(paren - call), call);
    long rc = strtol(eq + 3, NULL, 10);
    if (rc < 0) return; /* failed calls change nothing */
    const char *args = paren + 1;
    char p[4096], q[4096];
    if (!strcmp(name, "write") || !strcmp(name, "pwrite64")) {
        if (fd_path(args, p, sizeof p)) add(t, EV_WRITE, pid, line, p, NULL);
    } else if (!strcmp(name, "fsync") || !strcmp(name, "fdatasync")) {
        if (fd_path(args, p, sizeof p)) add(t, EV_FSYNC, pid, line, p, NULL);
    } else if (!strcmp(name, "rename") || !strcmp(name, "renameat") ||
               !strcmp(name, "renameat2")) {
        if (quoted(args, 0, p, sizeof p) && quoted(args, 1, q, sizeof q))
            add(t, EV_RENAME, pid, line, p, q);
    } else if (!strcmp(name, "mkdir") || !strcmp(name, "mkdirat")) {
        if (quoted(args, 0, p, sizeof p)) add(t, EV_MKDIR, pid, line, p, NULL);
    } else if ((!strcmp(name, "openat") && strstr(args, "O_CREAT")) || !strcmp(name, "creat")) {
        if (quoted(args, 0, p, sizeof p)) add(t, EV_CREATE, pid, line, p, NULL);
    }
}

static void read_trace(const char *path, trace *t) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    static char buf[1 << 16];
    /* calls split by another process's: "PID call <unfinished ...>", then
     * "PID <... name resumed>rest" */
    enum { MAXP = 256 };
    long pend_pid[MAXP];
    char *pend[MAXP];
    int npend = 0, line = 0;
    while (fgets(buf, sizeof buf, f)) {
        line++;
        buf[strcspn(buf, "\n")] = '\0';
        char *rest;
        long pid = strtol(buf, &rest, 10);
        while (*rest == ' ') rest++;
        char *un = strstr(rest, " <unfinished ...>");
        if (un) {
            *un = '\0';
            if (npend < MAXP) {
                pend_pid[npend] = pid;
                pend[npend++] = strdup(rest);
            }
            continue;
        }
        if (!strncmp(rest, "<... ", 5)) {
            char *r = strstr(rest, " resumed>");
            for (int k = 0; r && k < npend; k++)
                if (pend_pid[k] == pid) {
                    static char whole[1 << 17];
                    snprintf(whole, sizeof whole, "%s%s", pend[k], r + 9);
                    parse_call(t, pid, line, whole);
                    free(pend[k]);
                    pend[k] = pend[--npend];
                    pend_pid[k] = pend_pid[npend];
                    break;
                }
            continue;
        }
        parse_call(t, pid, line, rest);
    }
    for (int k = 0; k < npend; k++) free(pend[k]);
    fclose(f);
}

static bool under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && path[n] == '/';
}

static void parent(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    char *s = strrchr(out, '/');
    if (s && s != out) *s = '\0';
}

static bool is_dir_made(const trace *t, int before, const char *path) {
    for (int j = 0; j < before; j++)
        if (t->v[j].type == EV_MKDIR && !strcmp(t->v[j].a, path)) return true;
    return false;
}

/* An fsync of `path` in (from, to), by `pid` unless pid < 0; skip is left out. */
static bool synced(const trace *t, int from, int to, const char *path, long pid, int skip) {
    for (int j = from + 1; j < to; j++)
        if (j != skip && t->v[j].type == EV_FSYNC && !strcmp(t->v[j].a, path) &&
            (pid < 0 || t->v[j].pid == pid))
            return true;
    return false;
}

static int report(bool quiet, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int report(bool quiet, const char *fmt, ...) {
    if (!quiet) {
        va_list ap;
        va_start(ap, fmt);
        printf("VIOLATION: ");
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
    }
    return 1;
}

/* The rules on t with event `skip` left out (-1: none); returns violations. */
static int check(const trace *t, const char *root, int skip, bool quiet) {
    int bad = 0;
    char par[4096];
    int next_pub = t->n;
    for (int i = t->n - 1; i >= 0; i--) {
        const event *r = &t->v[i];
        if (r->type != EV_RENAME || !under(r->b, root)) continue;
        bool dir = is_dir_made(t, i, r->a);
        /* rules 1 and 2: data of every file renamed or inside the folder */
        for (int w = i - 1; w >= 0; w--) {
            const event *e = &t->v[w];
            if (e->type != EV_WRITE || !(dir ? under(e->a, r->a) : !strcmp(e->a, r->a))) continue;
            bool later_write = false; /* only the last write of each file */
            for (int k = w + 1; k < i && !later_write; k++)
                later_write = t->v[k].type == EV_WRITE && !strcmp(t->v[k].a, e->a);
            if (!later_write && !synced(t, w, i, e->a, -1, skip))
                bad += report(quiet, "%s: written (trace line %d) and not fsynced before the "
                              "rename to %s (line %d)", e->a, e->line, r->b, r->line);
        }
        /* rule 2: every entry made inside a renamed folder, synced by its maker */
        for (int c = 0; dir && c < i; c++) {
            const event *e = &t->v[c];
            const char *made = e->type == EV_RENAME ? e->b : e->a;
            if (e->type == EV_WRITE || e->type == EV_FSYNC) continue;
            parent(made, par, sizeof par);
            if (strcmp(par, r->a) != 0) continue;
            if (!synced(t, c, i, r->a, e->pid, skip))
                bad += report(quiet, "%s: made (trace line %d) and its folder not fsynced by "
                              "the same process before the rename to %s (line %d)", made, e->line,
                              r->b, r->line);
        }
        /* rule 3: the destination's folder after the rename */
        parent(r->b, par, sizeof par);
        if (!synced(t, i, next_pub, par, -1, skip))
            bad += report(quiet, "%s: its folder %s not fsynced after the rename (line %d) and "
                          "before the next publication (line %d)", r->b, par, r->line,
                          next_pub < t->n ? t->v[next_pub].line : -1);
        next_pub = i;
    }
    /* rule 4: folders made on the way, not renamed themselves */
    for (int m = 0; m < t->n; m++) {
        const event *e = &t->v[m];
        if (e->type != EV_MKDIR) continue;
        bool renamed = false;
        int first_pub = -1;
        for (int j = m + 1; j < t->n; j++) {
            if (t->v[j].type != EV_RENAME || !under(t->v[j].b, root)) continue;
            renamed |= !strcmp(t->v[j].a, e->a);
            if (first_pub < 0 && (under(t->v[j].b, e->a))) first_pub = j;
        }
        if (renamed || first_pub < 0) continue;
        parent(e->a, par, sizeof par);
        if (!synced(t, m, first_pub, par, -1, skip))
            bad += report(quiet, "%s: created (trace line %d) and its parent %s not fsynced "
                          "before the first publication under it (line %d)", e->a, e->line, par,
                          t->v[first_pub].line);
    }
    return bad;
}

/* The trace shows a whole save: shards written, meta.json, a folder and
 * latest published. */
static bool is_a_save(const trace *t, const char *root) {
    bool shard = false, meta = false, folder = false, latest = false;
    char want[4200];
    snprintf(want, sizeof want, "%s/latest", root);
    for (int i = 0; i < t->n; i++) {
        const event *e = &t->v[i];
        if (e->type == EV_WRITE && under(e->a, root) && strstr(e->a, ".dsck")) shard = true;
        if (e->type != EV_RENAME || !under(e->b, root)) continue;
        size_t n = strlen(e->b);
        meta |= n > 10 && !strcmp(e->b + n - 10, "/meta.json");
        folder |= is_dir_made(t, i, e->a);
        latest |= !strcmp(e->b, want);
    }
    if (!(shard && meta && folder && latest))
        printf("not a save: shard files written %d, meta.json published %d, a folder renamed %d, "
               "latest published %d\n", shard, meta, folder, latest);
    return shard && meta && folder && latest;
}

int main(int argc, char **argv) {
    bool drop = argc == 4 && !strcmp(argv[1], "--drop-each");
    if (argc != 3 && !drop) {
        fprintf(stderr, "usage: fsync_order [--drop-each] ROOT TRACE\n");
        return 2;
    }
    const char *root = argv[drop ? 2 : 1];
    trace t = {0};
    read_trace(argv[drop ? 3 : 2], &t);
    if (!is_a_save(&t, root)) return 1;
    int bad = check(&t, root, -1, false);
    int n_fsync = 0, caught = 0;
    char par[4096];
    parent(root, par, sizeof par);
    for (int i = 0; drop && i < t.n; i++) {
        const event *e = &t.v[i];
        if (e->type != EV_FSYNC || !(under(e->a, root) || !strcmp(e->a, root) || !strcmp(e->a, par)))
            continue;
        n_fsync++;
        if (check(&t, root, i, true) > 0) caught++;
        else printf("NOT CAUGHT: leaving out fsync(%s) by process %ld (trace line %d) breaks no "
                    "rule\n", e->a, e->pid, e->line);
    }
    if (drop)
        printf("fsync_order: %d fsyncs in the save; leaving out any one of them breaks a rule: "
               "%d of %d\n", n_fsync, caught, n_fsync);
    printf("fsync_order: %s (%d calls traced, %d violations)\n",
           bad == 0 && caught == n_fsync ? "ok" : "FAILED", t.n, bad);
    for (int i = 0; i < t.n; i++) {
        free(t.v[i].a);
        free(t.v[i].b);
    }
    free(t.v);
    return bad == 0 && caught == n_fsync ? 0 : 1;
}
