/* engine-run: start the ranks of a program built on zero-engine.
 *
 *   engine-run [--np N] [--hostfile F] [--launcher auto|mpirun|srun|none]
 *              [--dry-run] --config FILE APP [ARGS...]
 *   engine-run --nnodes N --node-rank R --master-addr A [--master-port P]
 *              [--nproc-per-node K] [--rdzv-timeout S] --config FILE APP ...
 *                                   (once per node, torchrun-style: nodes.h)
 *
 * The launcher decides once, from its options and the environment, how the N
 * ranks come to exist: APP itself runs in place (exec: this process is
 * already a rank, or N = 1), srun is exec'd, or mpirun starts as engine-run's
 * child, which engine-run supervises (tools/common/supervise.h: SIGTERM
 * relayed to every rank as a preemption, the join count while ranks start,
 * the exit status). The full rules are in tools/common/er_help.c (engine-run --help);
 * what the ranks find in their environment is tools/common/er_env.h's.
 *
 * Errors are one line on stderr, "engine-run: <what>", and exit status 2 for
 * a malformed command line or 1 for anything else (missing file, missing
 * mpirun, exec failure). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/comm/comm.h"
#include "engine/comm/rdzv.h"
#include "engine/core/config.h"
#include "tools/common/cores.h"
#include "tools/common/er_env.h"
#include "tools/common/er_help.h"
#include "tools/common/er_report.h"
#include "tools/common/nodes.h"
#include "tools/common/supervise.h"

enum { EXIT_USAGE = 2, EXIT_RUNTIME = 1 };

/* The most ranks one command line may ask for: far above any machine count
 * this launcher will meet, low enough that N * anything fits in an int. */
enum { MAX_RANKS = 1 << 20 };
/* More ranks than this per core start so slowly (a thousand processes on two
 * cores take minutes to connect) that it is refused without --oversubscribe. */
enum { MAX_RANKS_PER_CORE = 8 };

typedef enum launcher_kind { L_AUTO, L_MPIRUN, L_SRUN, L_NONE } launcher_kind;

typedef struct options {
    int np;          /* ranks asked for; 1 when --np is absent */
    int np_given;    /* --np appeared on the command line */
    const char *hostfile;
    launcher_kind launcher;
    int dry_run;
    int oversubscribe; /* --oversubscribe: beyond MAX_RANKS_PER_CORE too */
    int raw_output;    /* --raw-output: mpirun's output untouched */
    const char *config;
    const char *app;
    char **app_args; /* ARGS after APP, passed on untouched */
    int n_app_args;
    /* torchrun-style, one launcher per node (tools/common/nodes.h) */
    int nnodes;          /* 0: --nnodes not given */
    int node_rank;       /* -1: not given */
    const char *master_addr;
    int master_port;     /* 0: not given */
    int nproc_per_node;  /* 0: not given (1) */
    double rdzv_timeout; /* 0: the config's zero_engine.comm_timeout_s */
    int max_restarts;    /* --max-restarts: a failed job started again (supervise.h) */
} options;

/* A growable argv (NULL-terminated at all times) for the command we exec. */
typedef struct argv_buf {
    char **v;
    int n, cap;
} argv_buf;

static void fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fail(int code, const char *fmt, ...) {
    va_list ap;
    fputs("engine-run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static void argv_push(argv_buf *a, const char *s) {
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? a->cap * 2 : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) fail(EXIT_RUNTIME, "out of memory building the command line");
        a->v = v;
        a->cap = cap;
    }
    char *copy = strdup(s);
    if (!copy) fail(EXIT_RUNTIME, "out of memory building the command line");
    a->v[a->n++] = copy;
    a->v[a->n] = NULL;
}

static void argv_free(argv_buf *a) {
    for (int k = 0; k < a->n; k++) free(a->v[k]);
    free(a->v);
    *a = (argv_buf){0};
}

static void argv_pushf(argv_buf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void argv_pushf(argv_buf *a, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    argv_push(a, buf);
}

/* Strict positive integer in [1, MAX_RANKS]; 0 if `s` is anything else. */
static int parse_count(const char *s) {
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > MAX_RANKS) return 0;
    return (int)v;
}

/* er_env_set (er_env.h: --dry-run shows it), or the one-line failure. */
static void set_env(const char *name, const char *value) {
    if (!er_env_set(name, value)) fail(EXIT_RUNTIME, "setenv %s: %s", name, strerror(errno));
}

/* OMP_NUM_THREADS=value unless the user already chose a value. */
static void default_omp_threads(int value) {
    if (!er_env_default_omp_threads(value))
        fail(EXIT_RUNTIME, "setenv OMP_NUM_THREADS: %s", strerror(errno));
}

/* Cores this process may use (tools/common/cores.h); ENGINE_RUN_CORES
 * overrides, and a bad value there is a usage error. */
static int usable_cores(void) {
    int k = er_usable_cores();
    if (k < 0)
        fail(EXIT_USAGE, "ENGINE_RUN_CORES: expected a positive integer, got '%s'",
             getenv("ENGINE_RUN_CORES"));
    return k;
}

/* The directory holding this executable, where bundled programs live. */
static void self_dir(char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) fail(EXIT_RUNTIME, "cannot read /proc/self/exe to find the bundled programs: %s", strerror(errno));
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == exe) slash[1] = '\0';
    else if (slash) *slash = '\0';
    snprintf(out, cap, "%s", exe);
}

/* "a, b, c" of the executables in `dir` other than engine-run, to tell a user
 * who mistyped APP what the choices are. */
static void list_bundled(const char *dir, char *out, size_t cap) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    char names[32][NAME_MAX + 1];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 32) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "engine-run") == 0) continue;
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0) continue;
        snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    /* readdir order is arbitrary: sort for a stable message (few names). */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[NAME_MAX + 1];
            memcpy(t, names[j], sizeof t);
            memcpy(names[j], names[j - 1], sizeof t);
            memcpy(names[j - 1], t, sizeof t);
        }
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + len, cap - len, "%s%s", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
    }
}

/* APP as an absolute path to an executable regular file, or a one-line error
 * that names APP and where it was looked for. */
static void resolve_app(const char *app, char *out, size_t cap) {
    char candidate[PATH_MAX];
    int bundled = strchr(app, '/') == NULL;
    char dir[PATH_MAX];
    if (bundled) {
        self_dir(dir, sizeof dir);
        if (snprintf(candidate, sizeof candidate, "%s/%s", dir, app) >= (int)sizeof candidate)
            fail(EXIT_USAGE, "program name too long: '%s'", app);
    } else {
        snprintf(candidate, sizeof candidate, "%s", app);
    }
    struct stat st;
    if (stat(candidate, &st) != 0) {
        if (bundled) {
            char names[1024];
            list_bundled(dir, names, sizeof names);
            fail(EXIT_RUNTIME,
                 "no program '%s' next to engine-run in %s (bundled there: %s); "
                 "give a path containing '/' for any other executable",
                 app, dir, names[0] ? names : "none");
        }
        fail(EXIT_RUNTIME, "program '%s' not found: %s", app, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) fail(EXIT_RUNTIME, "program '%s' is a directory", candidate);
    if (!S_ISREG(st.st_mode) || access(candidate, X_OK) != 0)
        fail(EXIT_RUNTIME, "program '%s' is not an executable file", candidate);
    if (!realpath(candidate, out)) fail(EXIT_RUNTIME, "program '%s': %s", candidate, strerror(errno));
    (void)cap;
}

/* An input file (config, hostfile) as an absolute path, or a one-line error
 * naming the path as given and, when relative, the directory it was taken in. */
static void resolve_input(const char *what, const char *path, char *out) {
    struct stat st;
    const char *why = NULL;
    if (stat(path, &st) != 0) why = errno == ENOENT ? "not found" : strerror(errno);
    else if (S_ISDIR(st.st_mode)) why = "is a directory, not a file";
    else if (access(path, R_OK) != 0) why = "is not readable";
    if (why) {
        if (path[0] != '/') {
            char cwd[PATH_MAX];
            if (getcwd(cwd, sizeof cwd))
                fail(EXIT_RUNTIME, "%s '%s' %s (relative to %s)", what, path, why, cwd);
        }
        fail(EXIT_RUNTIME, "%s '%s' %s", what, path, why);
    }
    if (!realpath(path, out)) fail(EXIT_RUNTIME, "%s '%s': %s", what, path, strerror(errno));
}

/* `prog` found on PATH, as an absolute path in `out`; 0 if absent. */
static int find_on_path(const char *prog, char *out, size_t cap) {
    const char *path = getenv("PATH");
    if (!path || !*path) return 0;
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        /* An empty PATH entry means the current directory (POSIX). */
        int w = len ? snprintf(out, cap, "%.*s/%s", (int)len, p, prog) : snprintf(out, cap, "./%s", prog);
        struct stat st;
        if (w > 0 && (size_t)w < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return 1;
        if (!colon) break;
        p = colon + 1;
    }
    return 0;
}

static const char *launcher_name(launcher_kind k) {
    switch (k) {
    case L_AUTO: return "auto";
    case L_MPIRUN: return "mpirun";
    case L_SRUN: return "srun";
    case L_NONE: return "none";
    }
    return "?";
}

/* Take the value of option `name` from argv[*i] ("--x V" or "--x=V"). */
static const char *option_value(int argc, char **argv, int *i, const char *name) {
    size_t len = strlen(name);
    const char *arg = argv[*i];
    if (arg[len] == '=') return arg + len + 1;
    if (*i + 1 >= argc) fail(EXIT_USAGE, "%s needs a value (see engine-run --help)", name);
    return argv[++*i];
}

/* Does argv[i] spell option `name`, alone or as "name=value"? */
static int is_option(const char *arg, const char *name) {
    size_t len = strlen(name);
    return strncmp(arg, name, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
}

/* A whole number in [lo, hi] for option `name`, or a usage error. */
static int option_int(const char *name, const char *v, int lo, int hi) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || errno || *end || x < lo || x > hi)
        fail(EXIT_USAGE, "%s: expected a whole number from %d to %d, got '%s'", name, lo, hi, v);
    return (int)x;
}

/* The torchrun-style options (and their torchrun spellings with '_'). */
static bool parse_node_option(int argc, char **argv, int *i, options *o) {
    static const char *k_names[][2] = {{"--nnodes", "--nnodes"},
                                       {"--node-rank", "--node_rank"},
                                       {"--master-addr", "--master_addr"},
                                       {"--master-port", "--master_port"},
                                       {"--nproc-per-node", "--nproc_per_node"},
                                       {"--rdzv-timeout", "--rdzv_timeout"}};
    int which = -1;
    const char *spelled = NULL;
    for (int k = 0; k < 6 && which < 0; k++)
        for (int s = 0; s < 2 && which < 0; s++)
            if (is_option(argv[*i], k_names[k][s])) {
                which = k;
                spelled = k_names[k][s];
            }
    if (which < 0) return false;
    const char *name = k_names[which][0];
    const char *v = option_value(argc, argv, i, spelled);
    switch (which) {
    case 0: o->nnodes = option_int(name, v, 1, ER_HOOK_FDS); break;
    case 1: o->node_rank = option_int(name, v, 0, ER_HOOK_FDS); break;
    case 2:
        if (!*v) fail(EXIT_USAGE, "--master-addr: empty address");
        o->master_addr = v;
        break;
    case 3: o->master_port = option_int(name, v, 1, 65535); break;
    case 4: o->nproc_per_node = option_int(name, v, 1, MAX_RANKS); break;
    default: {
        char *end = NULL;
        o->rdzv_timeout = strtod(v, &end);
        if (!*v || *end || !(o->rdzv_timeout > 0) || o->rdzv_timeout > 1e7)
            fail(EXIT_USAGE, "--rdzv-timeout: expected seconds > 0, got '%s'", v);
    }
    }
    return true;
}

/* The torchrun-style options together: defaults from the environment, then
 * the rules (a node rank in range, an address, no --np beside them). */
static void check_node_options(options *o) {
    if (!o->nnodes) {
        if (o->node_rank >= 0 || o->master_addr || o->master_port || o->nproc_per_node ||
            o->rdzv_timeout > 0)
            fail(EXIT_USAGE, "--node-rank, --master-addr, --master-port, --nproc-per-node and "
                 "--rdzv-timeout go with --nnodes N (one launcher per node)");
        return;
    }
    if (o->np_given)
        fail(EXIT_USAGE, "--np %d with --nnodes %d: give one (--nnodes N --nproc-per-node K "
             "starts N * K ranks)", o->np, o->nnodes);
    if (o->hostfile)
        fail(EXIT_USAGE, "--hostfile with --nnodes: each node's launcher starts the ranks of its "
             "own node; drop --hostfile");
    if (!o->nproc_per_node) o->nproc_per_node = 1;
    if (o->node_rank < 0 && er_env_get("NODE_RANK"))
        o->node_rank = option_int("NODE_RANK", er_env_get("NODE_RANK"), 0, ER_HOOK_FDS);
    if (!o->master_addr) o->master_addr = er_env_get("MASTER_ADDR");
    if (!o->master_port)
        o->master_port = er_env_get("MASTER_PORT")
                             ? option_int("MASTER_PORT", er_env_get("MASTER_PORT"), 1, 65535)
                             : 29500;
    if (o->nnodes == 1 && o->node_rank < 0) o->node_rank = 0;
    if (o->node_rank < 0)
        fail(EXIT_USAGE, "--nnodes %d needs --node-rank R (0..%d), this node's number",
             o->nnodes, o->nnodes - 1);
    if (o->node_rank >= o->nnodes)
        fail(EXIT_USAGE, "--node-rank %d is out of range: --nnodes %d numbers the nodes 0..%d",
             o->node_rank, o->nnodes, o->nnodes - 1);
    if (o->nnodes > 1 && !o->master_addr)
        fail(EXIT_USAGE, "--nnodes %d needs --master-addr A (node 0's host name or address) "
             "or MASTER_ADDR", o->nnodes);
    if ((long)o->nnodes * o->nproc_per_node > MAX_RANKS)
        fail(EXIT_USAGE, "--nnodes %d x --nproc-per-node %d is more than %d ranks", o->nnodes,
             o->nproc_per_node, MAX_RANKS);
    o->np = o->nproc_per_node; /* this node's share: what its mpirun starts */
}

static void parse_args(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->np = 1;
    o->node_rank = -1;
    o->launcher = L_AUTO;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            er_usage(stdout);
            exit(0);
        } else if (strcmp(a, "--report") == 0) { /* ds_report: what this install can use */
            exit(er_report(stdout));
        } else if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (is_option(a, "--np")) {
            const char *v = option_value(argc, argv, &i, "--np");
            o->np = parse_count(v);
            if (!o->np) fail(EXIT_USAGE, "--np: expected a whole number of ranks from 1 to %d, got '%s'", MAX_RANKS, v);
            o->np_given = 1;
        } else if (is_option(a, "--hostfile")) {
            o->hostfile = option_value(argc, argv, &i, "--hostfile");
        } else if (is_option(a, "--launcher")) {
            const char *v = option_value(argc, argv, &i, "--launcher");
            if (strcmp(v, "auto") == 0) o->launcher = L_AUTO;
            else if (strcmp(v, "mpirun") == 0) o->launcher = L_MPIRUN;
            else if (strcmp(v, "srun") == 0) o->launcher = L_SRUN;
            else if (strcmp(v, "none") == 0) o->launcher = L_NONE;
            else fail(EXIT_USAGE, "--launcher: expected auto, mpirun, srun or none, got '%s'", v);
        } else if (is_option(a, "--max-restarts") || is_option(a, "--max_restarts")) {
            const char *name = a[5] == '_' ? "--max_restarts" : "--max-restarts";
            o->max_restarts = option_int(name, option_value(argc, argv, &i, name), 0, 100);
        } else if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = 1;
        } else if (strcmp(a, "--oversubscribe") == 0) {
            o->oversubscribe = 1;
        } else if (strcmp(a, "--raw-output") == 0) {
            o->raw_output = 1;
        } else if (is_option(a, "--config")) {
            o->config = option_value(argc, argv, &i, "--config");
            if (!*o->config) fail(EXIT_USAGE, "--config: empty file name");
        } else if (parse_node_option(argc, argv, &i, o)) {
            continue;
        } else if (a[0] == '-' && a[1] != '\0') {
            fail(EXIT_USAGE, "unknown option '%s' (options go before APP; see engine-run --help)", a);
        } else {
            break;
        }
    }
    if (i >= argc) fail(EXIT_USAGE, "no APP given (usage: engine-run [options] --config FILE APP [ARGS...])");
    o->app = argv[i];
    if (!*o->app) fail(EXIT_USAGE, "APP is an empty string");
    o->app_args = argv + i + 1;
    o->n_app_args = argc - i - 1;
    int config_in_args = 0;
    for (int k = 0; k < o->n_app_args; k++) config_in_args |= is_option(o->app_args[k], "--config");
    if (!o->config && config_in_args)
        fail(EXIT_USAGE, "--config FILE goes before APP '%s' (it was found among APP's arguments)", o->app);
    if (!o->config) fail(EXIT_USAGE, "--config FILE is required (before APP)");
    if (config_in_args)
        fail(EXIT_USAGE, "--config given twice: before APP and among APP's arguments; keep the first");
    check_node_options(o);
}

/* Where this process sits: already a rank of some launcher, or not. The
 * library's ds_rank_discover decides, so engine-run and the ranks it starts
 * (or is one of) read the environment the same way and reject the same
 * half-set launchers. RANK/WORLD_SIZE alone (torchrun-style) start nothing
 * here: the ranks still need an MPI launcher to talk to each other. */
typedef struct launch_env {
    ds_rank_info ranks; /* source DS_RANKS_MPI / _SLURM: inside that launcher's job */
    int in_slurm_alloc; /* SLURM_JOB_ID set */
} launch_env;

static void read_env(launch_env *e) {
    if (ds_rank_discover(&e->ranks) != DS_OK) fail(EXIT_RUNTIME, "%s", ds_last_error());
    e->in_slurm_alloc = er_env_get("SLURM_JOB_ID") != NULL;
}

static int inside_mpi(const launch_env *e) { return e->ranks.source == DS_RANKS_MPI; }
static int inside_srun(const launch_env *e) { return e->ranks.source == DS_RANKS_SLURM; }

typedef enum plan_kind { P_IN_PLACE, P_MPIRUN, P_SRUN } plan_kind;

static plan_kind choose(const options *o, const launch_env *e) {
    if (o->nnodes && (inside_mpi(e) || inside_srun(e)))
        fail(EXIT_USAGE, "--nnodes inside a job %s already started (%s=%d): this process is one "
             "of its ranks; start engine-run --nnodes on each node instead",
             inside_srun(e) ? "srun" : "mpirun", e->ranks.world_var, e->ranks.world);
    if (o->nnodes > 1) {
        if (o->launcher == L_SRUN || o->launcher == L_NONE)
            fail(EXIT_USAGE, "--launcher %s with --nnodes: each node starts its ranks with "
                 "mpirun", launcher_name(o->launcher));
        return P_MPIRUN; /* also for one rank: its mpirun joins the others' */
    }
    if (inside_mpi(e) || inside_srun(e)) {
        const char *var = e->ranks.world_var;
        const char *who = inside_srun(e)                 ? "srun"
                          : strcmp(var, "PMI_SIZE") == 0 ? "the MPI launcher"
                                                         : "mpirun";
        int world = e->ranks.world;
        if (o->launcher == L_MPIRUN || o->launcher == L_SRUN)
            fail(EXIT_USAGE,
                 "--launcher %s inside a job %s already started (%s=%d): this process is one of "
                 "its ranks; use --launcher auto or none",
                 launcher_name(o->launcher), who, var, world);
        if (o->np_given && o->np != world)
            fail(EXIT_USAGE, "--np %d but %s started %d ranks (%s=%d); drop --np or make them match",
                 o->np, who, world, var, world);
        return P_IN_PLACE;
    }
    switch (o->launcher) {
    case L_NONE:
        if (o->np > 1)
            fail(EXIT_USAGE, "--np %d with --launcher none: nothing would start the other ranks", o->np);
        return P_IN_PLACE;
    case L_MPIRUN: return P_MPIRUN;
    case L_SRUN: return P_SRUN;
    case L_AUTO: break;
    }
    if (o->np == 1 && !o->max_restarts) return P_IN_PLACE; /* a restart needs a parent */
    return e->in_slurm_alloc ? P_SRUN : P_MPIRUN;
}

/* More ranks than cores: one warning with both numbers; more than
 * MAX_RANKS_PER_CORE a core: refused without --oversubscribe. Returns
 * whether mpirun needs --oversubscribe. */
static bool check_oversubscription(const options *o, int cores, const char *whose,
                                   const char *unit) {
    if (cores <= 0 || o->np <= cores) return o->oversubscribe;
    if ((long)o->np > (long)MAX_RANKS_PER_CORE * cores && !o->oversubscribe)
        fail(EXIT_USAGE, "--np %d is %.1f ranks per core on %s %d %s; more than %d per core "
             "start so slowly (minutes) that engine-run refuses them: give --oversubscribe to "
             "start them anyway, or fewer ranks", o->np, (double)o->np / cores, whose, cores,
             unit, MAX_RANKS_PER_CORE);
    fprintf(stderr, "engine-run: warning: %d ranks on %s %d %s: the ranks share them, one "
            "OpenMP thread each\n", o->np, whose, cores, unit);
    return true;
}

/* --mca ess_base_forward_signals: the relay's SIGURG and the save signals
 * mpirun does not pass on by default (supervise.h). */
static void push_signal_mca(argv_buf *cmd, const int *save_sigs, int n) {
    char fwd[256];
    er_forward_signals(fwd, sizeof fwd, save_sigs, n);
    argv_push(cmd, "--mca");
    argv_push(cmd, "ess_base_forward_signals");
    argv_push(cmd, fwd);
}

/* Its warnings are APP's to print (rank 0 does): said twice otherwise. */
static void quiet_warn(void *user, const char *message) {
    (void)user;
    (void)message;
}

/* What engine-run takes from the config: the preemption deadline and signal.
 * A config it cannot read is APP's to report: the defaults stay. */
static void read_config(const char *path, ds_config *c) {
    if (ds_config_parse_file(path, c, quiet_warn, NULL) != DS_OK) ds_config_defaults(c);
}

/* The bundled trainers' --save-on-signal NAME (or =NAME) among APP's
 * arguments: a signal the ranks save on besides the config's, which mpirun
 * must then pass on too. 0 when absent or not a name APP will accept (APP
 * reports that). */
static int app_save_signal(const options *o) {
    static const char flag[] = "--save-on-signal";
    for (int k = 0; k < o->n_app_args; k++) {
        const char *a = o->app_args[k];
        if (strcmp(a, flag) == 0 && k + 1 < o->n_app_args)
            return ds_signal_from_name(o->app_args[k + 1]);
        if (strncmp(a, flag, sizeof flag - 1) == 0 && a[sizeof flag - 1] == '=')
            return ds_signal_from_name(a + sizeof flag);
    }
    return 0;
}

/* -x NAME for each variable remote ranks need (er_env.h). */
static void push_forwarded(void *cmd, const char *name) {
    argv_push(cmd, "-x");
    argv_push(cmd, name);
}

static void push_app(argv_buf *cmd, const char *app_abs, const char *config_abs, const options *o) {
    argv_push(cmd, app_abs);
    argv_push(cmd, "--config");
    argv_push(cmd, config_abs);
    for (int k = 0; k < o->n_app_args; k++) argv_push(cmd, o->app_args[k]);
}

/* Print `s` so that a POSIX shell reads it back as one word. */
static void print_quoted(FILE *out, const char *s) {
    int plain = *s != '\0';
    for (const char *c = s; *c && plain; c++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+@%-", *c) != NULL;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('\'', out);
    for (const char *c = s; *c; c++) {
        if (*c == '\'') fputs("'\\''", out);
        else fputc(*c, out);
    }
    fputc('\'', out);
}

static void print_command(FILE *out, const argv_buf *cmd) {
    er_env_print_notes(out);
    for (int k = 0; k < cmd->n; k++) {
        if (k) fputc(' ', out);
        print_quoted(out, cmd->v[k]);
    }
    fputc('\n', out);
}

int main(int argc, char **argv) {
    options o;
    parse_args(argc, argv, &o);
    /* a reader that goes away (engine-run ... | head) must not end the job:
     * the relay drops what it cannot write (start_child restores SIGPIPE for
     * mpirun, which inherits an ignored signal across exec) */
    signal(SIGPIPE, SIG_IGN);
    /* a hostfile without --np: every slot it names, as DeepSpeed's launcher */
    if (o.hostfile && !o.np_given && o.nnodes <= 1) {
        int slots = er_hostfile_slots(o.hostfile, MAX_RANKS);
        if (slots <= 0)
            fail(EXIT_USAGE, "--hostfile %s without --np: the ranks are the hostfile's slots, but "
                 "a host names no slots=N, they pass %d, or the file cannot be read; give --np",
                 o.hostfile, MAX_RANKS);
        o.np = slots;
        o.np_given = 1;
    }
    launch_env e;
    read_env(&e);
    plan_kind plan = choose(&o, &e);

    if (o.max_restarts && (plan != P_MPIRUN || o.nnodes > 1))
        fail(EXIT_USAGE, "--max-restarts: engine-run starts a failed job again only where it "
             "runs the whole job through mpirun, but this run %s",
             o.nnodes > 1 ? "is one node's part (--nnodes: restart the job from its scheduler)"
             : plan == P_SRUN ? "uses srun (Slurm's --requeue restarts a job)"
                              : "runs APP in place (--launcher none, or a rank of a job "
                                "already started)");
    if (o.max_restarts) set_env("DS_RESTART_COUNT", "0"); /* mpirun -x passes it on */
    if (o.hostfile && plan != P_MPIRUN)
        fail(EXIT_USAGE, "--hostfile is for mpirun, but this run %s",
             plan == P_SRUN ? "uses srun (the Slurm allocation decides the hosts)"
                            : "starts no launcher (APP runs in place)");

    char config_abs[PATH_MAX], app_abs[PATH_MAX], hostfile_abs[PATH_MAX];
    resolve_input("config file", o.config, config_abs);
    resolve_app(o.app, app_abs, sizeof app_abs);
    if (o.hostfile) resolve_input("hostfile", o.hostfile, hostfile_abs);

    argv_buf cmd = {0};
    char launcher_path[PATH_MAX];
    ds_config cfg;
    read_config(config_abs, &cfg);
    /* the signals the ranks save on: the config's and the trainer flag's */
    const int save_sigs[2] = {cfg.save_on_signal, app_save_signal(&o)};
    /* OpenBLAS chooses its kernels when a rank loads it: a fallback older
     * than this CPU is replaced here, before it is too late (er_env.h); said
     * once, where every rank of a job runs engine-run */
    const char *blas_err = er_env_blas_core(e.ranks.rank == 0 ? stderr : NULL);
    if (blas_err) fail(EXIT_RUNTIME, "%s", blas_err);
    /* one node of several: its ranks learn where they sit in the job */
    if (o.nnodes > 1) {
        char num[16];
        snprintf(num, sizeof num, "%d", o.node_rank);
        set_env("DS_JOIN_NODE_RANK", num);
        snprintf(num, sizeof num, "%d", o.nnodes);
        set_env("DS_JOIN_NNODES", num);
    }
    er_nodes *nodes = NULL;
    char uri[DS_RDZV_LINE] = "URI-FROM-NODE-0";
    if (plan == P_MPIRUN) {
        if (!find_on_path("mpirun", launcher_path, sizeof launcher_path))
            fail(EXIT_RUNTIME,
                 "mpirun not found on PATH, needed to start %d ranks; install Open MPI "
                 "(Debian package openmpi-bin) or use --np 1",
                 o.np);
        /* everything this node can check is checked: meet the other nodes */
        if (o.nnodes > 1 && !o.dry_run) {
            er_nodes_opts no = {
                .nnodes = o.nnodes, .node_rank = o.node_rank, .nproc = o.nproc_per_node,
                .master_addr = o.master_addr, .master_port = o.master_port,
                .timeout_s = o.rdzv_timeout > 0 ? o.rdzv_timeout : cfg.comm_timeout_s,
                .preempt_grace_s = cfg.preempt_deadline_s + 5.0};
            nodes = er_nodes_meet(&no, uri, sizeof uri);
            if (!nodes) return EXIT_RUNTIME;
        }
        /* the ranks this host runs share its cores: with a hostfile, the
         * most any host runs (the hosts assumed alike: this one is measured) */
        int cores = usable_cores();
        int here = o.hostfile ? er_hostfile_busiest(hostfile_abs, o.np) : o.np;
        default_omp_threads(cores / (here > 0 ? here : o.np));
        bool over = o.hostfile ? check_oversubscription(&o, er_hostfile_slots(hostfile_abs, MAX_RANKS),
                                                        "the hostfile's", "slots")
                               : check_oversubscription(&o, cores, "this machine's", "cores");
        /* The trainers' progress (tools/common/progress.h) is a status line
         * on a terminal, plain lines in a log. mpirun gives its ranks a
         * pseudo-terminal whatever engine-run's stdout is, so they learn it
         * from here (DS_ variables travel to the ranks); a value the user
         * set stays. */
        if (!getenv("DS_PROGRESS_TTY")) {
            const char *tty = isatty(STDOUT_FILENO) ? "1" : "0";
            set_env("DS_PROGRESS_TTY", tty);
        }
        /* the ranks read a relayed SIGURG as the SIGTERM engine-run got */
        char relay[32];
        snprintf(relay, sizeof relay, "%d:%d", ER_RELAY_SIGNAL, SIGTERM);
        set_env("DS_PREEMPT_RELAY", relay);
        argv_push(&cmd, launcher_path);
        argv_push(&cmd, "-np");
        argv_pushf(&cmd, "%d", o.np);
        if (o.hostfile) {
            argv_push(&cmd, "--hostfile");
            argv_push(&cmd, hostfile_abs);
        }
        if (geteuid() == 0) argv_push(&cmd, "--allow-run-as-root");
        if (over) argv_push(&cmd, "--oversubscribe");
        /* Open MPI would pin each rank to one core, and its OpenMP threads
         * with it; the ranks' threads are sized by OMP_NUM_THREADS instead. */
        argv_push(&cmd, "--bind-to");
        argv_push(&cmd, "none");
        /* every line says its rank, so the relay can show each error once
         * and each rank's lines whole (supervise.h) */
        if (!o.raw_output) argv_push(&cmd, "--tag-output");
        push_signal_mca(&cmd, save_sigs, 2);
        if (o.hostfile) { /* DeepSpeed's .deepspeed_env, for the hosts' ranks */
            const char *env_err = er_env_load_file(stderr);
            if (env_err) fail(EXIT_USAGE, "%s", env_err);
        }
        er_env_each_forwarded(push_forwarded, &cmd);
        if (o.nnodes > 1) { /* where the nodes' jobs find each other */
            argv_push(&cmd, "--ompi-server");
            argv_push(&cmd, uri);
        }
    } else if (plan == P_SRUN) {
        if (!find_on_path("srun", launcher_path, sizeof launcher_path))
            fail(EXIT_RUNTIME,
                 "srun not found on PATH, needed to start %d ranks under Slurm (SLURM_JOB_ID=%s); "
                 "install Slurm's client (Debian package slurm-client) or use --launcher mpirun",
                 o.np, er_env_get("SLURM_JOB_ID") ? er_env_get("SLURM_JOB_ID") : "unset");
        const char *cpt = er_env_get("SLURM_CPUS_PER_TASK");
        if (cpt && parse_count(cpt)) default_omp_threads(parse_count(cpt));
        argv_push(&cmd, launcher_path);
        argv_push(&cmd, "-n");
        argv_pushf(&cmd, "%d", o.np);
        argv_push(&cmd, "--kill-on-bad-exit=1");
    } else if (inside_mpi(&e)) {
        const char *local = er_env_get("OMPI_COMM_WORLD_LOCAL_SIZE");
        if (local && parse_count(local)) default_omp_threads(usable_cores() / parse_count(local));
    } else if (inside_srun(&e)) {
        const char *cpt = er_env_get("SLURM_CPUS_PER_TASK");
        if (cpt && parse_count(cpt)) default_omp_threads(parse_count(cpt));
    } else if (e.ranks.source == DS_RANKS_ENV && e.ranks.local_world > 1) {
        /* started by an outside agent, one rank a process: share the node */
        default_omp_threads(usable_cores() / e.ranks.local_world);
    }
    push_app(&cmd, app_abs, config_abs, &o);

    if (o.dry_run) {
        print_command(stdout, &cmd);
        argv_free(&cmd);
        return fflush(stdout) == 0 ? 0 : EXIT_RUNTIME;
    }
    if (plan != P_IN_PLACE) {
        /* one write: the launchers of other nodes may share this terminal */
        char *line = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&line, &len);
        if (mem) {
            fputs("engine-run: ", mem);
            print_command(mem, &cmd);
            fclose(mem);
            fputs(line, stderr);
            free(line);
        }
    }
    if (plan == P_MPIRUN) {
        er_warn_unforwarded(stderr, save_sigs);
        er_supervise_hook hook = nodes ? er_nodes_hook(nodes) : (er_supervise_hook){0};
        er_supervise_opts so = {.np = o.np, .count_joins = o.hostfile == NULL,
                                .deadline_s = cfg.preempt_deadline_s,
                                .relay_output = !o.raw_output,
                                .rank_offset = o.nnodes > 1 ? o.node_rank * o.np : 0,
                                .hook = nodes ? &hook : NULL,
                                .max_restarts = o.max_restarts};
        int rc = er_supervise(cmd.v, &so);
        argv_free(&cmd);
        if (nodes) rc = er_nodes_finish(nodes, rc);
        er_nodes_close(nodes);
        return rc;
    }
    fflush(stdout);
    fflush(stderr);
    execv(cmd.v[0], cmd.v);
    fail(EXIT_RUNTIME, "cannot run '%s': %s", cmd.v[0], strerror(errno));
}
