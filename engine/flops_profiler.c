/* The flops profiler (engine/flops_profiler.h): counting GEMMs during the
 * profiled step, and DeepSpeed's print of the result. */
#include "engine/flops_profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* ---- counting ---------------------------------------------------------------
 * While a step is profiled, the engine's backend runs with its gemm slot
 * tapped (ds_backend_tap_gemm): each call adds 2*m*n*k*batch to the
 * engine's counter (e->prof.gemm_flops). Modules call ctx->be->ops->gemm,
 * so every module's GEMMs, a user's included, pass here; the GEMMs run on
 * the training thread only. */
static void count_flops(void *ctx, const ds_gemm_call *c) {
    *(double *)ctx += 2.0 * (double)c->m * (double)c->n * (double)c->k * (double)c->batch;
}

void ds_engine_prof_init(engine_t *e) {
    ds_prof_state *p = &e->prof;
    free(p->mods);
    memset(p, 0, sizeof *p);
    p->enabled = e->cfg.flops_profiler.enabled;
    if (!p->enabled) return;
    p->async_be = e->be->kind == DS_BACKEND_CUDA ? e->be : NULL;
    p->n = e->model->n_modules;
    p->mods = calloc((size_t)p->n, sizeof *p->mods);
    if (!p->mods) { /* a profile is not worth failing the run for: say so once */
        if (e->comm->rank == 0) fprintf(stderr, "[zero-engine] flops_profiler: out of memory, off\n");
        p->enabled = false;
    }
}

void ds_engine_prof_free(engine_t *e) {
    if (e->prof.active) ds_backend_untap_gemm(e->be); /* finalized mid-step */
    free(e->prof.mods);
    e->prof.mods = NULL;
}

void ds_engine_prof_forward(engine_t *e) {
    ds_prof_state *p = &e->prof;
    if (!p->enabled || p->active || p->done) return;
    /* DeepSpeed's moment: the forward after profile_step steps completed
     * (its engine compares global_steps, the steps done), so the default 1
     * profiles the second step, not the cold first one */
    int64_t after = p->retry_after ? p->retry_after : e->cfg.flops_profiler.profile_step;
    if (e->global_step != after) return;
    if (ds_backend_tap_gemm(e->be, count_flops, &e->prof.gemm_flops) != DS_OK) { /* say so once */
        if (e->comm->rank == 0)
            fprintf(stderr, "[zero-engine] flops_profiler: %s; off\n", ds_last_error());
        ds_clear_error();
        p->enabled = false;
        return;
    }
    memset(p->mods, 0, (size_t)p->n * sizeof *p->mods);
    p->active = true;
    p->step = e->global_step + 1;
    p->t_iter0 = ds_wc_now();
    p->samples0 = e->samples;
    e->wc.profiling = true;
    memset(e->wc.prof_acc, 0, sizeof e->wc.prof_acc);
}

/* ---- the print ---------------------------------------------------------- */

/* "12.35 G": DeepSpeed's number_to_string with its units */
static void num(char *buf, size_t cap, double v, const char *unit) {
    const char *pre[] = {"", " K", " M", " G", " T", " P"};
    int i = 0;
    while (v >= 1000.0 && i < 5) {
        v /= 1000.0;
        i++;
    }
    snprintf(buf, cap, "%.2f%s%s%s", v, pre[i], i == 0 && unit[0] ? " " : "", unit);
}

static void ms(char *buf, size_t cap, double s) { snprintf(buf, cap, "%.3f ms", s * 1e3); }

static int64_t module_params(const ds_module *m) {
    int64_t n = 0;
    for (int j = 0; j < m->n_params; j++) n += ds_param_numel(&m->params[j]);
    return n;
}

/* Components of a dotted name: "bert.encoder.layer.0" has 4. */
static int name_depth(const char *name) {
    int d = 1;
    for (const char *s = name; *s; s++) d += *s == '.';
    return d;
}

/* The first `depth` + 1 components of `name` into buf. */
static void name_prefix(const char *name, int depth, char *buf, size_t cap) {
    int dots = 0;
    size_t i = 0;
    for (; name[i]; i++)
        if (name[i] == '.' && dots++ == depth) break;
    snprintf(buf, cap, "%.*s", (int)i, name);
}

typedef struct agg {
    char name[DS_MAX_NAME];
    double params, flops, lat;
} agg;

static int by_params(const void *a, const void *b) {
    double x = ((const agg *)a)->params, y = ((const agg *)b)->params;
    return (x < y) - (x > y);
}
static int by_flops(const void *a, const void *b) {
    double x = ((const agg *)a)->flops, y = ((const agg *)b)->flops;
    return (x < y) - (x > y);
}
static int by_lat(const void *a, const void *b) {
    double x = ((const agg *)a)->lat, y = ((const agg *)b)->lat;
    return (x < y) - (x > y);
}

static void print_top(FILE *f, agg *g, int n, int top, int (*cmp)(const void *, const void *),
                      const char *what, int field) {
    qsort(g, (size_t)n, sizeof *g, cmp);
    fprintf(f, "    %-11s - {", what);
    for (int i = 0; i < n && i < top; i++) {
        char v[32];
        if (field == 0) num(v, sizeof v, g[i].params, "");
        else if (field == 1) num(v, sizeof v, g[i].flops, "");
        else ms(v, sizeof v, g[i].lat);
        fprintf(f, "%s'%s': '%s'", i ? ", " : "", g[i].name, v);
    }
    fprintf(f, "}\n");
}

/* Per depth, the names' sums: parameters, forward FLOPs, forward latency
 * (DeepSpeed ranks by forward latency and MACs; here FLOPs = 2 MACs). */
static void print_aggregated(FILE *f, const engine_t *e, const ds_prof_state *p) {
    const ds_model *m = e->model;
    int maxd = 0;
    for (int i = 0; i < p->n; i++)
        if (name_depth(m->modules[i]->name) > maxd) maxd = name_depth(m->modules[i]->name);
    int64_t want = e->cfg.flops_profiler.module_depth;
    int last = want < 0 || want >= maxd ? maxd - 1 : (int)want;
    int top = (int)e->cfg.flops_profiler.top_modules;
    agg *g = calloc((size_t)p->n, sizeof *g);
    if (!g) return;
    fprintf(f, "\n----------------------------- Aggregated Profile per rank "
               "-----------------------------\n");
    fprintf(f, "Top %d modules in terms of params, fwd flops or fwd latency at different model "
               "depths:\n", top);
    for (int d = 0; d <= last; d++) {
        int n = 0;
        for (int i = 0; i < p->n; i++) {
            const ds_module *mod = m->modules[i];
            if (name_depth(mod->name) <= d && d > 0) continue; /* ends above this depth */
            char key[DS_MAX_NAME];
            name_prefix(mod->name, d, key, sizeof key);
            int k = 0;
            while (k < n && strcmp(g[k].name, key) != 0) k++;
            if (k == n) {
                memset(&g[n], 0, sizeof g[n]);
                snprintf(g[n].name, sizeof g[n].name, "%s", key);
                n++;
            }
            g[k].params += (double)module_params(mod);
            g[k].flops += p->mods[i].fwd_flops;
            g[k].lat += p->mods[i].fwd_s;
        }
        fprintf(f, "depth %d:\n", d);
        print_top(f, g, n, top, by_params, "params", 0);
        print_top(f, g, n, top, by_flops, "fwd flops", 1);
        print_top(f, g, n, top, by_lat, "fwd latency", 2);
    }
    free(g);
}

static void print_detailed(FILE *f, const engine_t *e, const ds_prof_state *p, double total_params) {
    const ds_model *m = e->model;
    fprintf(f, "\n------------------------------ Detailed Profile per rank "
               "------------------------------\n");
    fprintf(f, "Each module: params (share of the model), fwd and bwd flops, fwd and bwd latency, "
               "achieved FLOPS ((fwd + bwd flops) / (fwd + bwd latency)), share of the iteration "
               "latency\n\n");
    fprintf(f, "%-36s %-14s %11s %6s %11s %11s %11s %11s %13s %6s\n", "module", "type", "params",
            "%", "fwd flops", "bwd flops", "fwd lat", "bwd lat", "FLOPS", "% iter");
    double tf = 0, tb = 0, tfs = 0, tbs = 0;
    for (int i = 0; i < p->n; i++) {
        const ds_module *mod = m->modules[i];
        const ds_prof_module *x = &p->mods[i];
        int64_t np = module_params(mod);
        char a[32], b[32], c[32], d1[32], d2[32], r[32];
        num(a, sizeof a, (double)np, "");
        num(b, sizeof b, x->fwd_flops, "");
        num(c, sizeof c, x->bwd_flops, "");
        ms(d1, sizeof d1, x->fwd_s);
        ms(d2, sizeof d2, x->bwd_s);
        double lat = x->fwd_s + x->bwd_s;
        num(r, sizeof r, lat > 0 ? (x->fwd_flops + x->bwd_flops) / lat : 0, "FLOPS");
        fprintf(f, "%-36.36s %-14.14s %11s %5.1f%% %11s %11s %11s %11s %13s %5.1f%%\n", mod->name,
                mod->ops->type, a, total_params > 0 ? 100.0 * (double)np / total_params : 0.0, b,
                c, d1, d2, r, p->iter_s > 0 ? 100.0 * lat / p->iter_s : 0.0);
        tf += x->fwd_flops;
        tb += x->bwd_flops;
        tfs += x->fwd_s;
        tbs += x->bwd_s;
    }
    char a[32], b[32], c[32], d1[32], d2[32], r[32];
    num(a, sizeof a, total_params, "");
    num(b, sizeof b, tf, "");
    num(c, sizeof c, tb, "");
    ms(d1, sizeof d1, tfs);
    ms(d2, sizeof d2, tbs);
    num(r, sizeof r, tfs + tbs > 0 ? (tf + tb) / (tfs + tbs) : 0, "FLOPS");
    fprintf(f, "%-36s %-14s %11s %5.1f%% %11s %11s %11s %11s %13s %5.1f%%\n", "total (modules)",
            "", a, 100.0, b, c, d1, d2, r, p->iter_s > 0 ? 100.0 * (tfs + tbs) / p->iter_s : 0.0);
}

static void print_profile(FILE *f, const engine_t *e, const ds_prof_state *p) {
    ds_flops_profile s;
    bool ready;
    ds_flops_profile_get(e, &s, &ready);
    char v[64];
    fprintf(f, "\n-------------------------- zero-engine Flops Profiler "
               "--------------------------\n");
    fprintf(f, "Profile Summary at step %lld:\n", (long long)s.step);
    fprintf(f, "Notations: flops: floating-point operations of the GEMMs (2 per multiply-add); "
               "FLOPS: flops per second;\nfwd / bwd latency: ds_forward / ds_backward over the "
               "step's micro-batches; step: the optimizer step; iter: all three\n\n");
#define LINE(label, ...)                                                                           \
    do {                                                                                           \
        fprintf(f, "%-60s", label);                                                                \
        fprintf(f, __VA_ARGS__);                                                                   \
        fputc('\n', f);                                                                            \
    } while (0)
    LINE("world size:", "%d", e->comm->world);
    LINE("data parallel size:", "%d", e->comm->world);
    LINE("batch size per rank (the step's rows):", "%lld", (long long)s.batch_per_rank);
    num(v, sizeof v, (double)s.params, "");
    LINE("params of model (ZeRO shards their storage, not compute):", "%s", v);
    num(v, sizeof v, s.fwd_flops, "");
    LINE("fwd flops per rank:", "%s", v);
    num(v, sizeof v, s.bwd_flops, "");
    LINE("bwd flops per rank (counted, not 2 x fwd):", "%s", v);
    ms(v, sizeof v, s.fwd_s);
    LINE("fwd latency:", "%s", v);
    ms(v, sizeof v, s.bwd_s);
    LINE("bwd latency:", "%s", v);
    num(v, sizeof v, s.fwd_s > 0 ? s.fwd_flops / s.fwd_s : 0, "FLOPS");
    LINE("fwd FLOPS per rank = fwd flops / fwd latency:", "%s", v);
    num(v, sizeof v, s.bwd_s > 0 ? s.bwd_flops / s.bwd_s : 0, "FLOPS");
    LINE("bwd FLOPS per rank = bwd flops / bwd latency:", "%s", v);
    num(v, sizeof v, s.fwd_s + s.bwd_s > 0 ? (s.fwd_flops + s.bwd_flops) / (s.fwd_s + s.bwd_s) : 0,
        "FLOPS");
    LINE("fwd+bwd FLOPS per rank = (fwd + bwd flops) / (fwd + bwd latency):", "%s", v);
    ms(v, sizeof v, s.step_s);
    LINE("step latency:", "%s", v);
    ms(v, sizeof v, s.iter_s);
    LINE("iter latency:", "%s", v);
    num(v, sizeof v, s.iter_s > 0 ? (s.fwd_flops + s.bwd_flops) / s.iter_s : 0, "FLOPS");
    LINE("FLOPS per rank = (fwd + bwd flops) / iter latency:", "%s", v);
    LINE("samples/second (all ranks):", "%.2f",
         s.iter_s > 0 ? (double)s.batch_per_rank * e->comm->world / s.iter_s : 0.0);
#undef LINE
    print_aggregated(f, e, p);
    if (e->cfg.flops_profiler.detailed) print_detailed(f, e, p, (double)s.params);
    fprintf(f, "------------------------------------------------------------------------------\n");
}

void ds_engine_prof_drop(engine_t *e) {
    ds_prof_state *p = &e->prof;
    if (!p->active) return;
    ds_backend_untap_gemm(e->be);
    e->wc.profiling = false;
    p->active = false;
    p->retry_after = e->global_step; /* the dropped step's number: the next one is profiled */
    if (e->comm->rank == 0)
        fprintf(stderr, "[zero-engine] flops_profiler: step %lld was dropped (a micro-batch "
                "failed); profiling step %lld instead\n", (long long)e->global_step,
                (long long)e->global_step + 1);
}

void ds_engine_prof_step_end(engine_t *e) {
    ds_prof_state *p = &e->prof;
    if (!p->active || e->global_step != p->step) return;
    p->iter_s = ds_wc_now() - p->t_iter0;
    p->fwd_s = e->wc.prof_acc[DS_WC_FWD];
    /* DeepSpeed reduces gradients inside its backward: its backward latency
     * holds what the step's reduction waited for */
    p->bwd_s = e->wc.prof_acc[DS_WC_BWD] + e->wc.prof_acc[DS_WC_ALLREDUCE];
    p->step_s = e->wc.prof_acc[DS_WC_STEP];
    /* the rows the step took: an epoch's last step may hold fewer
     * micro-batches than the accumulation (ds_train_batch), the last of
     * them short */
    p->batch_per_rank = (e->samples - p->samples0) / e->comm->world;
    ds_backend_untap_gemm(e->be);
    e->wc.profiling = false;
    p->active = false;
    p->done = true;
    if (e->comm->rank != 0) return;
    const char *path = e->cfg.flops_profiler.output_file;
    FILE *f = path[0] ? fopen(path, "w") : stdout;
    if (!f) { /* the run goes on: the profile is what is lost */
        fprintf(stderr, "[zero-engine] flops_profiler: cannot write output_file %s: %s\n", path,
                strerror(errno));
        return;
    }
    print_profile(f, e, p);
    if (f != stdout) {
        if (fclose(f) != 0)
            fprintf(stderr, "[zero-engine] flops_profiler: writing %s failed\n", path);
    } else {
        fflush(stdout);
    }
}

ds_status ds_flops_profile_get(const engine_t *e, ds_flops_profile *out, bool *ready) {
    if (!e || !out || !ready) return DS_ERR(DS_ERR_INVALID_ARG, "ds_flops_profile_get: NULL argument");
    *ready = false;
    const ds_prof_state *p = &e->prof;
    if (!p->enabled)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_flops_profile_get: flops_profiler is not enabled");
    memset(out, 0, sizeof *out);
    *ready = p->done;
    out->step = p->step;
    out->n_modules = p->n;
    out->batch_per_rank = p->done ? p->batch_per_rank
                                  : e->cfg.train_micro_batch_size_per_gpu *
                                        e->cfg.gradient_accumulation_steps;
    out->params = ds_model_num_params(e->model);
    for (int i = 0; i < p->n; i++) {
        out->fwd_flops += p->mods[i].fwd_flops;
        out->bwd_flops += p->mods[i].bwd_flops;
    }
    out->fwd_s = p->fwd_s;
    out->bwd_s = p->bwd_s;
    out->step_s = p->step_s;
    out->iter_s = p->iter_s;
    return DS_OK;
}

ds_status ds_flops_profile_module(const engine_t *e, int i, ds_flops_module_profile *out) {
    const ds_prof_state *p = &e->prof;
    if (!p->enabled || !p->done)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_flops_profile_module: no profile taken (flops_profiler "
                      "%s)", p->enabled ? "has not reached profile_step" : "is not enabled");
    if (i < 0 || i >= p->n)
        return DS_ERR(DS_ERR_INVALID_ARG, "ds_flops_profile_module: module %d of %d", i, p->n);
    const ds_module *m = e->model->modules[i];
    *out = (ds_flops_module_profile){.name = m->name, .type = m->ops->type,
                                     .params = module_params(m), .fwd_flops = p->mods[i].fwd_flops,
                                     .bwd_flops = p->mods[i].bwd_flops, .fwd_s = p->mods[i].fwd_s,
                                     .bwd_s = p->mods[i].bwd_s};
    return DS_OK;
}
