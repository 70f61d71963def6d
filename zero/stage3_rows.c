/* gather_rows at stage 3: a module whose table the forward reads by rows
 * (ds_param_desc.rows_read_by: an embedding's lookup) gathers, for a
 * training micro-batch, the dense ranges of its span around the table and
 * only the table's rows the micro-batch names (zero/param_rows.h's exchange,
 * into the gather slot instead of a replica). BERT-mini's word table is 62%
 * of its parameters and the first module of the forward, whose gather has
 * nothing before it to hide behind: across a slow link that is most of
 * what plain stage 3's forward waits for. The rows a rank did not bring hold
 * NaN in the slot, so a module that reads another row gets a non-finite loss,
 * never a stale value; the module's backward reads the same slot (the same
 * micro-batch). An evaluation or a prediction (no batch posted: the tables
 * whole, through the same exchange, so every rank makes the same
 * collectives) and the next micro-batch gather afresh (stage3.c's
 * begin_forward drops such a slot). */
#include "engine/backend/backend.h"
#include "zero/param_rows.h"
#include "zero/stage3_impl.h"
#include "zero/zero_util.h"

ds_status ds_s3_rows_create(stage3 *s, const ds_zero_desc *d) {
    const ds_config *c = d->cfg;
    /* off under MiCS from the config, not from the groups it made: one
     * shard group as wide as the world makes none, and the memory estimate
     * (estimate.c), which sees only the config, must decide alike */
    if (!c->gather_rows || s->qwz || s->x.sec || c->mics_shard_size > 0 || s->x.hbuf || s->ps ||
        s->comm->world < 2)
        return DS_OK;
    DS_TRY(ds_param_rows_create(s->be, s->comm, s->worker, s->flat, NULL, s->pt, &s->rows));
    return DS_OK;
}

/* The dense ranges of module m's span around its tables, in flat order: how
 * many (at most cap), or cap + 1 when there are more. */
static int dense_ranges(const stage3 *s, int m, int64_t (*out)[2], int cap) {
    const ds_flat_module *fm = &s->flat->modules[m];
    int64_t tables[8][2];
    int nt = ds_param_rows_ranges(s->rows, tables, 8), n = 0;
    int64_t at = fm->begin;
    for (int i = 0; i <= nt; i++) { /* the tables, then the span's end */
        int64_t t0 = i < nt ? tables[i][0] : fm->end, t1 = i < nt ? tables[i][1] : fm->end;
        if (i < nt && (t1 <= fm->begin || t0 >= fm->end)) continue; /* another module's */
        if (at < t0) {
            if (n == cap) return cap + 1;
            out[n][0] = at;
            out[n][1] = t0;
            n++;
        }
        at = t1;
    }
    return n;
}

/* The same answer on every rank (the model's layout alone): a rank whose
 * batch was refused posts none and asks for the tables whole, which the
 * exchange's counts tell every rank, so all make the same collectives. */
bool ds_s3_rows_applies(const stage3 *s, int m) {
    int64_t r[S3_XJOBS][2];
    return s->rows && !s->persistent[m] && ds_param_rows_in_module(s->rows, m) &&
           dense_ranges(s, m, r, S3_XJOBS) <= S3_XJOBS;
}

static ds_status rows_job(void *arg) {
    slot *sl = arg;
    stage3 *s = sl->owner;
    DS_TRY(ds_param_rows_window(s->rows, sl->module, sl->buf, sl->begin, sl->begin + sl->len,
                                s->params));
    return DS_OK;
}

ds_status ds_s3_rows_start(stage3 *s, slot *sl, int m) {
    const ds_flat_module *fm = &s->flat->modules[m];
    size_t es = ds_dtype_size(s->pt);
    sl->module = m;
    sl->from_sec = sl->fill_sec = false;
    sl->read_err = DS_OK;
    sl->n_xjobs = 0;
    sl->begin = fm->begin;
    sl->len = fm->end - fm->begin;
    /* the tables outside this rank's partition NaN, then its piece of the span */
    DS_TRY(ds_param_rows_nan(s->rows, m, sl->buf, fm->begin));
    int64_t a = fm->begin > s->sh.lo ? fm->begin : s->sh.lo;
    int64_t b = fm->end < s->sh.lo + s->sh.part ? fm->end : s->sh.lo + s->sh.part;
    if (a < b)
        DS_TRY(s->be->ops->memcpy(s->be, ds_at(sl->buf, s->pt, a - fm->begin),
                                  ds_at(s->params, s->pt, a - s->sh.lo), (size_t)(b - a) * es,
                                  DS_COPY_D2D, NULL));
    int64_t r[S3_XJOBS][2];
    int n = dense_ranges(s, m, r, S3_XJOBS);
    for (int k = 0; k < n; k++) { /* each range's blocks sit in place: buf is its flat layout */
        ds_comm_job *j = &sl->xjobs[k];
        *j = (ds_comm_job){.kind = DS_JOB_ALL_GATHERV, .comm = s->comm, .counts = sl->xcounts[k],
                           .buf = ds_at(sl->buf, s->pt, r[k][0] - fm->begin), .t = s->pt};
        ds_zero_counts(s->flat, r[k][0], r[k][1], j->counts);
        ds_zero_describe_range(s->flat, r[k][0], r[k][1], "parameter gather", j->what,
                               sizeof j->what);
        DS_TRY(ds_comm_job_submit(s->worker, j));
        sl->n_xjobs = k + 1;
    }
    sl->job = (ds_comm_job){.kind = DS_JOB_FN, .fn = rows_job, .arg = sl};
    ds_zero_describe_range(s->flat, fm->begin, fm->end, "parameter gather by rows", sl->job.what,
                           sizeof sl->job.what);
    DS_TRY(ds_comm_job_submit(s->worker, &sl->job));
    sl->by_rows = true;
    sl->valid = true;
    sl->pending = true;
    return DS_OK;
}
