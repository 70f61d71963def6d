/* The NVMe tier: files, buffer sets, the sub-group pipeline, range I/O. */
#include "offload/nvme_swap.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/io/fault.h"
#include "offload/nvme_dir.h"

#define MAX_T 3    /* master + two moments */
#define MAX_SETS 3 /* updating, reading ahead, writing behind */
#define ALIGN_ELEMS ((int64_t)(DS_NVME_ALIGN / sizeof(float)))

typedef struct set {
    float *buf[MAX_T];
    ds_aio_req rd[MAX_T], wr[MAX_T];
    ds_aio_ticket rt, wt;
    int64_t g;           /* the sub-group being read into / held, -1 none */
    bool reading, writing;
} set;

typedef struct nvme_tier {
    ds_tier base; /* first: the tier functions get a ds_tier * */
    ds_backend *be;
    const char *what;
    int rank;
    ds_nvme_dir dir;
    char nvme_path[256];
    int fd[MAX_T];
    ds_aio *aio;
    int nsets;
    set sets[MAX_SETS];
    int64_t sg, ngroups, padded; /* elements per sub-group, sub-groups, file elements */
    bool pipe_read, pipe_write;
    uint64_t buf_bytes;          /* per buffer */
    bool accounted;
    bool lost;
    char lost_msg[768];
} nvme_tier;

static const char *const k_file[MAX_T] = {"master.swp", "moment0.swp", "moment1.swp"};

/* snprintf that cuts long paths short in a message instead of failing the
 * build's -Wformat-truncation (the paths come from the user). */
static void textf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void textf(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}
static nvme_tier *NT(ds_tier *t) { return (nvme_tier *)t; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

uint64_t ds_nvme_swap_bytes(int64_t n, int n_tensors) {
    return (uint64_t)round_up(n, ALIGN_ELEMS) * sizeof(float) * (uint64_t)n_tensors;
}

/* ------------------------------------------------------------ failure -- */

static void wait_all(nvme_tier *t) {
    for (int s = 0; s < t->nsets; s++) {
        if (t->sets[s].reading) ds_aio_wait(t->aio, &t->sets[s].rt);
        if (t->sets[s].writing) ds_aio_wait(t->aio, &t->sets[s].wt);
        t->sets[s].reading = t->sets[s].writing = false;
    }
}

static void close_files(nvme_tier *t) {
    for (int k = 0; k < MAX_T; k++) {
        if (t->fd[k] >= 0) close(t->fd[k]);
        t->fd[k] = -1;
    }
}

/* An I/O failed: the files no longer hold one consistent state, so they
 * go now (nothing is left behind even if the caller never finalizes), and
 * every later call says so. */
static ds_status lose(nvme_tier *t, const ds_aio_ticket *tk, int64_t g, const char *doing) {
    wait_all(t);
    int k = 0;
    for (int i = 0; i < t->base.n_tensors; i++)
        if (t->fd[i] == tk->err_fd) k = i;
    int64_t fr = ds_nvme_free_bytes(t->nvme_path);
    textf(t->lost_msg, sizeof t->lost_msg,
             "NVMe swap on rank %d: %s sub-group %lld of the optimizer state (%s in %s, offset "
             "%llu): %s; %lld bytes free on %s; the swap files were removed",
             t->rank, doing, (long long)g, k_file[k], t->dir.path,
             (unsigned long long)tk->err_off, strerror(tk->err), (long long)fr, t->nvme_path);
    close_files(t);
    ds_nvme_dir_remove(&t->dir);
    t->lost = true;
    return DS_ERR(DS_ERR_IO, "%s", t->lost_msg);
}

static ds_status check_alive(nvme_tier *t) {
    if (t->lost)
        return DS_ERR(DS_ERR_IO,
                      "the optimizer state on NVMe was lost (%s); load the last checkpoint "
                      "(ds_load_checkpoint with the optimizer state) to make the swap files "
                      "anew", t->lost_msg);
    return DS_OK;
}

static ds_status open_files(nvme_tier *t) {
    DS_TRY(ds_nvme_dir_open(t->what, t->nvme_path, t->rank, &t->dir));
    uint64_t file_bytes = (uint64_t)t->padded * sizeof(float);
    for (int k = 0; k < t->base.n_tensors; k++)
        DS_TRY(ds_nvme_dir_file(&t->dir, k_file[k], file_bytes, &t->fd[k]));
    return DS_OK;
}

/* ----------------------------------------------------------- transfers -- */

static int64_t group_elems(const nvme_tier *t, int64_t g) {
    int64_t b = g * t->sg;
    return t->padded - b < t->sg ? t->padded - b : t->sg;
}

static void fill_reqs(nvme_tier *t, set *s, ds_aio_req *r, int64_t a, int64_t z, bool write,
                      int k0, int k1) {
    for (int k = k0; k < k1; k++)
        r[k - k0] = (ds_aio_req){.fd = t->fd[k], .buf = s->buf[k],
                                 .bytes = (uint64_t)(z - a) * sizeof(float),
                                 .off = (uint64_t)a * sizeof(float), .write = write};
}

static ds_status wait_write(nvme_tier *t, set *s) {
    if (!s->writing) return DS_OK;
    double t0 = now_s();
    bool ok = ds_aio_wait(t->aio, &s->wt);
    t->base.stats.write_wait_s += now_s() - t0;
    s->writing = false;
    if (!ok) return lose(t, &s->wt, s->g, "writing");
    return DS_OK;
}

static ds_status wait_read(nvme_tier *t, set *s) {
    if (!s->reading) return DS_OK;
    double t0 = now_s();
    bool ok = ds_aio_wait(t->aio, &s->rt);
    t->base.stats.read_wait_s += now_s() - t0;
    s->reading = false;
    if (!ok) return lose(t, &s->rt, s->g, "reading");
    return DS_OK;
}

/* Start reading sub-group g (every tensor) into its set, once the set's
 * previous write-back has landed. */
static ds_status issue_read(nvme_tier *t, int64_t g) {
    set *s = &t->sets[g % t->nsets];
    DS_TRY(wait_write(t, s));
    s->g = g;
    int64_t a = g * t->sg, z = a + group_elems(t, g);
    fill_reqs(t, s, s->rd, a, z, false, 0, t->base.n_tensors);
    ds_aio_ticket_init(&s->rt);
    ds_aio_submit(t->aio, s->rd, t->base.n_tensors, &s->rt);
    s->reading = true;
    t->base.stats.read_bytes += (uint64_t)(z - a) * sizeof(float) * (uint64_t)t->base.n_tensors;
    return DS_OK;
}

static ds_status issue_write(nvme_tier *t, int64_t g) {
    set *s = &t->sets[g % t->nsets];
    int64_t a = g * t->sg, z = a + group_elems(t, g);
    fill_reqs(t, s, s->wr, a, z, true, 0, t->base.n_tensors);
    if (ds_fault_error("nvme:swap_write", t->rank) != DS_OK) {
        ds_clear_error(); /* a disk that filled: the write itself reports ENOSPC */
        for (int k = 0; k < t->base.n_tensors; k++) s->wr[k].inject_errno = ENOSPC;
    }
    ds_aio_ticket_init(&s->wt);
    ds_aio_submit(t->aio, s->wr, t->base.n_tensors, &s->wt);
    s->writing = true;
    t->base.stats.write_bytes += (uint64_t)(z - a) * sizeof(float) * (uint64_t)t->base.n_tensors;
    return DS_OK;
}

/* ---------------------------------------------------------- tier ops -- */

static ds_status op_begin(ds_tier *tt, int64_t b, int64_t e, float **state) {
    nvme_tier *t = NT(tt);
    (void)e;
    DS_TRY(check_alive(t));
    int64_t g = b / t->sg;
    set *s = &t->sets[g % t->nsets];
    if (!(s->g == g && s->reading)) DS_TRY(issue_read(t, g)); /* not read ahead */
    DS_TRY(wait_read(t, s));
    if (t->pipe_read && g + 1 < t->ngroups) DS_TRY(issue_read(t, g + 1));
    for (int k = 0; k < t->base.n_tensors; k++) state[k] = s->buf[k];
    return DS_OK;
}

static ds_status op_end(ds_tier *tt, int64_t b, int64_t e, bool dirty) {
    nvme_tier *t = NT(tt);
    (void)e;
    DS_TRY(check_alive(t));
    if (!dirty) return DS_OK; /* the file holds these values already */
    int64_t g = b / t->sg;
    set *s = &t->sets[g % t->nsets];
    DS_TRY(issue_write(t, g));
    ds_fault_point("nvme:mid_step", t->rank); /* tests: a crash with writes in flight */
    if (!t->pipe_write) DS_TRY(wait_write(t, s));
    return DS_OK;
}

static ds_status op_finish(ds_tier *tt) {
    nvme_tier *t = NT(tt);
    DS_TRY(check_alive(t));
    for (int i = 0; i < t->nsets; i++) {
        DS_TRY(wait_read(t, &t->sets[i]));
        DS_TRY(wait_write(t, &t->sets[i]));
    }
    return DS_OK;
}

/* One synchronous transfer of tensor k's elements [a, z) (block-aligned)
 * through set 0's buffer k, outside a step (op_io, op_fill). A failed write
 * leaves the files inconsistent: they go (lose). A failed read changed
 * nothing, so it fails alone: a checkpoint's save that read the state can
 * be tried again, where losing the files would have cost the work since the
 * last checkpoint. */
static ds_status sync_xfer(nvme_tier *t, int k, int64_t a, int64_t z, bool write) {
    set *s = &t->sets[0];
    ds_aio_req r;
    fill_reqs(t, s, &r, a, z, write, k, k + 1);
    if (!write && ds_fault_error("nvme:io_read", t->rank) != DS_OK) {
        ds_clear_error(); /* tests: a read that fails, reported by the read itself */
        r.inject_errno = EIO;
    }
    ds_aio_ticket tk;
    ds_aio_ticket_init(&tk);
    ds_aio_submit(t->aio, &r, 1, &tk);
    if (!ds_aio_wait(t->aio, &tk) && write) return lose(t, &tk, a / t->sg, "writing");
    if (tk.err) /* outside a step a failed read changed nothing: the files stay */
        return DS_ERR(DS_ERR_IO, "NVMe swap on rank %d: reading sub-group %lld of the optimizer "
                      "state (%s in %s, offset %llu): %s; the swap files are kept (a read "
                      "changes nothing): the call may be tried again", t->rank,
                      (long long)(a / t->sg), k_file[k], t->dir.path,
                      (unsigned long long)tk.err_off, strerror(tk.err));
    if (write) t->base.stats.write_bytes += (uint64_t)(z - a) * sizeof(float);
    else t->base.stats.read_bytes += (uint64_t)(z - a) * sizeof(float);
    return DS_OK;
}

static ds_status op_io(ds_tier *tt, int k, int64_t lo, int64_t hi, float *host, bool write) {
    nvme_tier *t = NT(tt);
    DS_TRY(op_finish(tt)); /* set 0 is ours */
    float *buf = t->sets[0].buf[k];
    /* Whole blocks around [lo, hi), at most a sub-group at a time; a write
     * reads first only where it covers part of a block. */
    for (int64_t a = lo / ALIGN_ELEMS * ALIGN_ELEMS; a < hi;) {
        int64_t z = round_up(hi, ALIGN_ELEMS);
        if (z - a > t->sg) z = a + t->sg;
        int64_t b = a > lo ? a : lo, e = z < hi ? z : hi; /* the caller's part */
        if (!write || b > a || e < z) DS_TRY(sync_xfer(t, k, a, z, false));
        if (write) memcpy(buf + (b - a), host + (b - lo), (size_t)(e - b) * sizeof(float));
        else memcpy(host + (b - lo), buf + (b - a), (size_t)(e - b) * sizeof(float));
        if (write) DS_TRY(sync_xfer(t, k, a, z, true));
        t->sets[0].g = -1; /* the buffer no longer holds a sub-group of every tensor */
        a = z;
    }
    return DS_OK;
}

static ds_status op_fill(ds_tier *tt, int k, ds_tier_fill_fn fn, void *ctx) {
    nvme_tier *t = NT(tt);
    DS_TRY(op_finish(tt));
    float *buf = t->sets[0].buf[k];
    for (int64_t a = 0; a < t->padded; a += t->sg) {
        int64_t z = a + group_elems(t, a / t->sg);
        int64_t e = z < t->base.n ? z : t->base.n;
        memset(buf, 0, (size_t)(z - a) * sizeof(float)); /* the padding past n */
        if (a < e) DS_TRY(fn(ctx, a, e, buf));
        DS_TRY(sync_xfer(t, k, a, z, true));
    }
    t->sets[0].g = -1;
    return DS_OK;
}

/* A new folder and new files, empty; the buffers and the I/O threads stay
 * (lose() waited for every transfer). A disk still too full fails as at
 * start-up, naming the bytes, and the tier stays lost. */
static ds_status op_revive(ds_tier *tt) {
    nvme_tier *t = NT(tt);
    if (!t->lost) return DS_OK;
    ds_status st = open_files(t);
    if (st != DS_OK) {
        close_files(t);
        ds_nvme_dir_remove(&t->dir);
        ds_error_prefix("NVMe swap on rank %d: making the swap files anew after their loss",
                        t->rank);
        return st;
    }
    for (int s = 0; s < t->nsets; s++) t->sets[s].g = -1;
    t->lost = false;
    return DS_OK;
}

static void op_destroy(ds_tier *tt) {
    nvme_tier *t = NT(tt);
    if (!t) return;
    if (t->aio) wait_all(t);
    ds_aio_destroy(t->aio);
    close_files(t);
    ds_nvme_dir_remove(&t->dir);
    for (int s = 0; s < t->nsets; s++)
        for (int k = 0; k < t->base.n_tensors; k++)
            ds_backend_free(t->be, DS_MEM_BUFFERS, DS_PLACE_HOST, t->sets[s].buf[k],
                            t->buf_bytes);
    if (t->accounted) {
        uint64_t f = (uint64_t)t->base.n * sizeof(float);
        ds_mem_add(t->be->mem, DS_MEM_MASTER, DS_PLACE_NVME, -(int64_t)f);
        ds_mem_add(t->be->mem, DS_MEM_OPTIM, DS_PLACE_NVME,
                   -(int64_t)(f * (uint64_t)(t->base.n_tensors - 1)));
    }
    free(t);
}

static const ds_tier_ops k_nvme_ops = {
    .name = "nvme",
    .begin = op_begin,
    .end = op_end,
    .finish = op_finish,
    .io = op_io,
    .fill = op_fill,
    .revive = op_revive,
    .destroy = op_destroy,
};

/* ------------------------------------------------------------- create -- */

static ds_status zeros(void *ctx, int64_t b, int64_t e, float *dst) {
    (void)ctx;
    memset(dst, 0, (size_t)(e - b) * sizeof(float));
    return DS_OK;
}

static ds_status build(nvme_tier *t, const ds_nvme_swap_desc *d) {
    const ds_offload_config *o = d->off;
    int need = t->nsets * t->base.n_tensors;
    if (o->buffer_count < need)
        return DS_ERR(DS_ERR_CONFIG,
                      "%s.buffer_count: %d buffers of a sub-group each, but the swap of the "
                      "master weights and %d moment(s) keeps %d sub-group(s) in memory at once "
                      "(one updated%s%s), %d buffers; give buffer_count >= %d or turn pipelining "
                      "off", d->what, o->buffer_count, t->base.n_tensors - 1, t->nsets,
                      o->pipeline_read ? ", one read ahead" : "",
                      o->pipeline_write ? ", one written behind" : "", need, need);
    DS_TRY(open_files(t));
    uint64_t f = (uint64_t)t->base.n * sizeof(float); /* the state; files add < 4 KiB padding */
    ds_mem_add(t->be->mem, DS_MEM_MASTER, DS_PLACE_NVME, (int64_t)f);
    ds_mem_add(t->be->mem, DS_MEM_OPTIM, DS_PLACE_NVME,
               (int64_t)(f * (uint64_t)(t->base.n_tensors - 1)));
    t->accounted = true;
    for (int s = 0; s < t->nsets; s++) {
        t->sets[s].g = -1;
        for (int k = 0; k < t->base.n_tensors; k++) {
            void *p;
            DS_TRY(ds_backend_alloc(t->be, DS_MEM_BUFFERS, DS_PLACE_HOST, t->buf_bytes, &p));
            t->sets[s].buf[k] = p;
            if ((uintptr_t)p % DS_NVME_ALIGN != 0)
                return DS_ERR(DS_ERR_INTERNAL,
                              "NVMe swap: a %s buffer at %p is not %d-byte aligned, which direct "
                              "I/O needs", t->be->kind == DS_BACKEND_CPU ? "host" : "pinned", p,
                              DS_NVME_ALIGN);
        }
    }
    ds_aio_desc ad = {.block_size = d->aio->block_size, .queue_depth = d->aio->queue_depth,
                      .thread_count = d->aio->thread_count, .engine = d->engine};
    DS_TRY(ds_aio_create(&ad, &t->aio));
    if (!o->fast_init) /* every block written once: a disk that cannot take it fails now */
        for (int k = 1; k < t->base.n_tensors; k++) DS_TRY(op_fill(&t->base, k, zeros, NULL));
    return DS_OK;
}

ds_status ds_nvme_swap_create(const ds_nvme_swap_desc *d, ds_tier **out) {
    *out = NULL;
    if (d->n_tensors < 1 || d->n_tensors > MAX_T || d->n < 1 || d->sub_group_size < 1)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "ds_nvme_swap_create: n %lld, n_tensors %d, sub_group_size %lld",
                      (long long)d->n, d->n_tensors, (long long)d->sub_group_size);
    nvme_tier *t = calloc(1, sizeof *t);
    if (!t) return DS_ERR(DS_ERR_OOM, "NVMe swap: out of host memory");
    t->base = (ds_tier){.ops = &k_nvme_ops, .n = d->n, .n_tensors = d->n_tensors};
    t->be = d->buf_be;
    t->what = d->what;
    t->rank = d->rank;
    snprintf(t->nvme_path, sizeof t->nvme_path, "%s", d->off->nvme_path);
    for (int k = 0; k < MAX_T; k++) t->fd[k] = -1;
    t->dir.lock_fd = -1;
    t->padded = round_up(d->n, ALIGN_ELEMS);
    /* sub_group_size elements, whole 4 KiB blocks, at most the partition */
    t->sg = round_up(d->sub_group_size < t->padded ? d->sub_group_size : t->padded, ALIGN_ELEMS);
    t->ngroups = (t->padded + t->sg - 1) / t->sg;
    t->base.piece = t->sg;
    t->pipe_read = d->off->pipeline_read;
    t->pipe_write = d->off->pipeline_write;
    t->nsets = 1 + (t->pipe_read ? 1 : 0) + (t->pipe_write ? 1 : 0);
    t->buf_bytes = (uint64_t)t->sg * sizeof(float);
    ds_status st = build(t, d);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        op_destroy(&t->base);
        return st;
    }
    *out = &t->base;
    return DS_OK;
}

const char *ds_nvme_swap_engine(const ds_tier *t) {
    return ds_aio_engine_name(((const nvme_tier *)t)->aio);
}
