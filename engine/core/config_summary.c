/* ds_config_summary: a resolved config in a few lines (what the engine
 * prints at start-up): the batch rule with its numbers, the optimizer and
 * schedule that will run, every value filled from "auto", a hint or a
 * trainer default with where it came from, and the keys whose values differ
 * from DeepSpeed's defaults (found by comparing the config's JSON with the
 * JSON of DeepSpeed's defaults leaf by leaf, so no key can be forgotten). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/config_internal.h"

/* Items joined by ", " under a label, wrapped before WRAP columns with an
 * indent, so that a long list stays readable in a terminal (the engine puts
 * "[zero-engine] " in front of each line: 106 columns in all). */
#define WRAP 92

typedef struct sb {
    char *buf;
    size_t len, cap;
    size_t line_start; /* offset of the current line */
    int oom;
} sb;

static void sb_add(sb *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_add(sb *s, const char *fmt, ...) {
    if (s->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            s->oom = 1;
            return;
        }
        if ((size_t)n < s->cap - s->len) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = s->cap * 2 + (size_t)n;
        char *b = realloc(s->buf, cap);
        if (!b) {
            s->oom = 1;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
}

static void sb_newline(sb *s) {
    sb_add(s, "\n");
    s->line_start = s->len;
}

/* A list of items under a label, first fit: each line takes the items that
 * still fit in their order, so the lines fill up and an item never splits. */
typedef struct list {
    char **items;
    int n, cap;
} list;

static void list_add(sb *s, list *l, const char *item) {
    if (s->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **grown = realloc(l->items, (size_t)cap * sizeof *grown);
        if (!grown) {
            s->oom = 1;
            return;
        }
        l->items = grown;
        l->cap = cap;
    }
    size_t len = strlen(item) + 1;
    char *copy = malloc(len);
    if (!copy) {
        s->oom = 1;
        return;
    }
    memcpy(copy, item, len);
    l->items[l->n++] = copy;
}

/* Writes the list (nothing when empty) and frees it. */
static void list_emit(sb *s, list *l, const char *label) {
    if (l->n > 0) {
        bool *done = calloc((size_t)l->n, sizeof *done);
        if (!done) s->oom = 1;
        sb_add(s, "%s:", label);
        for (int left = l->n; done && left > 0;) {
            bool first = true;
            for (int i = 0; i < l->n; i++) {
                if (done[i]) continue;
                size_t col = s->len - s->line_start;
                /* ", " before the item and "," after it must fit too */
                if (!first && col + 3 + strlen(l->items[i]) > WRAP) continue;
                sb_add(s, "%s%s", first ? " " : ", ", l->items[i]);
                done[i] = true;
                left--;
                first = false;
            }
            if (left > 0) {
                sb_add(s, ",");
                sb_newline(s);
                sb_add(s, "   ");
            }
        }
        free(done);
        sb_newline(s);
    }
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    *l = (list){0};
}

/* ------------------------------------------------------------- names -- */

static const char *const k_key_names[DS_KEY_COUNT] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "gradient_clipping", "optimizer.type", "optimizer.params.lr", "optimizer.params.betas",
    "optimizer.params.eps", "optimizer.params.weight_decay", "scheduler.type",
    "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps", "fp16.enabled",
    "bf16.enabled", "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
};

const char *ds_config_key_name(ds_config_key k) {
    return (int)k >= 0 && (int)k < DS_KEY_COUNT ? k_key_names[k] : "?";
}

const char *ds_config_source_name(ds_config_source s) {
    switch (s) {
    case DS_SRC_DEFAULT: return "DeepSpeed default";
    case DS_SRC_CONFIG: return "config";
    case DS_SRC_HINT: return "hint";
    case DS_SRC_HINT_DEFAULT: return "trainer default";
    case DS_SRC_COMPUTED: return "auto";
    }
    return "?";
}

/* A key path without the parts that only repeat the section
 * ("optimizer.params.lr" -> "lr", "zero_optimization.x" -> "x"). */
static const char *short_name(const char *path) {
    static const char *const drop[] = {"optimizer.params.", "scheduler.params.",
                                       "zero_optimization."};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) {
        size_t n = strlen(drop[i]);
        if (strncmp(path, drop[i], n) == 0) return path + n;
    }
    if (!strcmp(path, "optimizer.type")) return "optimizer";
    if (!strcmp(path, "scheduler.type")) return "scheduler";
    return path;
}

static void real_text(double x, char *buf, size_t cap) { cfg_fmt_real(x, buf, cap); }

/* The value of a tracked key as the print shows it. */
static void key_value(const ds_config *c, ds_config_key k, char *buf, size_t cap) {
    char a[40], b[40];
    switch (k) {
    case DS_KEY_TRAIN_BATCH_SIZE: snprintf(buf, cap, "%lld", (long long)c->train_batch_size); return;
    case DS_KEY_MICRO_BATCH:
        snprintf(buf, cap, "%lld", (long long)c->train_micro_batch_size_per_gpu);
        return;
    case DS_KEY_GRAD_ACCUM:
        snprintf(buf, cap, "%lld", (long long)c->gradient_accumulation_steps);
        return;
    case DS_KEY_GRADIENT_CLIPPING: real_text(c->gradient_clipping, buf, cap); return;
    case DS_KEY_OPTIMIZER: snprintf(buf, cap, "%s", ds_optim_type_name(c->optimizer)); return;
    case DS_KEY_LR: real_text(c->lr, buf, cap); return;
    case DS_KEY_BETAS:
        real_text(c->betas[0], a, sizeof a);
        real_text(c->betas[1], b, sizeof b);
        snprintf(buf, cap, "[%s, %s]", a, b);
        return;
    case DS_KEY_EPS: real_text(c->eps, buf, cap); return;
    case DS_KEY_WEIGHT_DECAY: real_text(c->weight_decay, buf, cap); return;
    case DS_KEY_SCHEDULER: snprintf(buf, cap, "%s", ds_sched_type_name(c->scheduler)); return;
    case DS_KEY_WARMUP_MIN_LR: real_text(c->warmup_min_lr, buf, cap); return;
    case DS_KEY_WARMUP_MAX_LR: real_text(c->warmup_max_lr, buf, cap); return;
    case DS_KEY_WARMUP_NUM_STEPS: snprintf(buf, cap, "%lld", (long long)c->warmup_num_steps); return;
    case DS_KEY_TOTAL_NUM_STEPS: snprintf(buf, cap, "%lld", (long long)c->total_num_steps); return;
    case DS_KEY_FP16: snprintf(buf, cap, "%s", c->fp16_enabled ? "true" : "false"); return;
    case DS_KEY_BF16: snprintf(buf, cap, "%s", c->bf16_enabled ? "true" : "false"); return;
    case DS_KEY_REDUCE_BUCKET_SIZE: snprintf(buf, cap, "%lld", (long long)c->reduce_bucket_size); return;
    case DS_KEY_PREFETCH_BUCKET_SIZE:
        snprintf(buf, cap, "%lld", (long long)c->stage3_prefetch_bucket_size);
        return;
    case DS_KEY_PERSISTENCE_THRESHOLD:
        snprintf(buf, cap, "%lld", (long long)c->stage3_param_persistence_threshold);
        return;
    case DS_KEY_COUNT: break;
    }
    snprintf(buf, cap, "?");
}

/* ------------------------------------------------------- what runs -- */

/* "" for a value the file wrote, else " (--batch)", " (--batch default)",
 * " (auto)" for "auto" the batch rule resolved, " (derived)" for a key the
 * file left out: the batch line says where its terms came from. */
static const char *batch_tag(const ds_config *c, ds_config_key k, char *buf, size_t cap) {
    const ds_config_origin *o = &c->origin[k];
    bool written_auto = k == DS_KEY_TRAIN_BATCH_SIZE ? c->train_batch_size_auto
                        : k == DS_KEY_MICRO_BATCH    ? c->micro_batch_auto
                                                     : c->grad_accum_auto;
    switch (o->source) {
    case DS_SRC_HINT: snprintf(buf, cap, " (%s)", o->from); break;
    case DS_SRC_HINT_DEFAULT: snprintf(buf, cap, " (%s default)", o->from); break;
    case DS_SRC_COMPUTED: snprintf(buf, cap, written_auto ? " (auto)" : " (derived)"); break;
    default: buf[0] = '\0'; break;
    }
    return buf;
}

static void what_runs(sb *s, const ds_config *c) {
    char t[160], m[160], g[160];
    sb_add(s, "batch: train_batch_size %lld%s = micro %lld%s x accumulation %lld%s x world %d "
              "(from %s)",
           (long long)c->train_batch_size, batch_tag(c, DS_KEY_TRAIN_BATCH_SIZE, t, sizeof t),
           (long long)c->train_micro_batch_size_per_gpu,
           batch_tag(c, DS_KEY_MICRO_BATCH, m, sizeof m),
           (long long)c->gradient_accumulation_steps, batch_tag(c, DS_KEY_GRAD_ACCUM, g, sizeof g),
           c->world_size, c->world_source);
    sb_newline(s);

    char lr[40], b0[40], b1[40], eps[40], wd[40], clip[40];
    real_text(c->lr, lr, sizeof lr);
    real_text(c->weight_decay, wd, sizeof wd);
    real_text(c->gradient_clipping, clip, sizeof clip);
    if (c->optimizer == DS_OPTIM_SGD) {
        char m[40], d[40];
        real_text(c->momentum, m, sizeof m);
        real_text(c->dampening, d, sizeof d);
        sb_add(s, "optimizer: SGD lr %s, momentum %s, dampening %s, weight_decay %s%s", lr, m, d,
               wd, c->nesterov ? ", nesterov" : "");
    } else {
        real_text(c->betas[0], b0, sizeof b0);
        real_text(c->betas[1], b1, sizeof b1);
        real_text(c->eps, eps, sizeof eps);
        sb_add(s, "optimizer: %s lr %s, betas [%s, %s], eps %s, weight_decay %s%s",
               c->onebit == DS_ONEBIT_ADAM       ? "OneBitAdam"
               : c->onebit == DS_ONEBIT_ZERO_ONE ? "ZeroOneAdam"
               : c->optimizer == DS_OPTIM_ADAMW  ? "AdamW"
                                                 : "Adam (L2 weight decay)",
               lr, b0, b1, eps, wd, c->bias_correction ? "" : ", no bias correction");
        if (c->onebit == DS_ONEBIT_ADAM)
            sb_add(s, ", 1-bit compressed momentum after freeze_step %lld",
                   (long long)c->freeze_step);
        if (c->onebit == DS_ONEBIT_ZERO_ONE)
            sb_add(s, ", var_freeze_step %lld, var_update_scaler %lld, local_step_scaler %lld, "
                      "local_step_clipper %lld",
                   (long long)c->var_freeze_step, (long long)c->var_update_scaler,
                   (long long)c->local_step_scaler, (long long)c->local_step_clipper);
    }
    if (c->gradient_clipping > 0)
        sb_add(s, "; gradient_clipping %s", clip);
    else
        sb_add(s, "; no gradient clipping");
    sb_newline(s);

    char lo[40], hi[40];
    real_text(c->warmup_min_lr, lo, sizeof lo);
    real_text(c->warmup_max_lr, hi, sizeof hi);
    const char *wt = ds_warmup_type_name(c->warmup_type);
    long long W = (long long)c->warmup_num_steps, T = (long long)c->total_num_steps;
    if (c->sched_hf && c->scheduler != DS_SCHED_NONE) {
        /* the trainer's: HF's LambdaLR, step s at lambda(s) (sched.h) */
        static const char *const shape[] = {
            [DS_SCHED_WARMUP_LR] = "constant_with_warmup",
            [DS_SCHED_WARMUP_DECAY_LR] = "linear",
            [DS_SCHED_WARMUP_COSINE_LR] = "cosine",
        };
        sb_add(s, "scheduler: HF's %s (the Trainer's LambdaLR): ", shape[c->scheduler]);
        if (W > 0) sb_add(s, "warmup 0 -> %s over %lld steps, then ", lr, W);
        else sb_add(s, "no warmup, ");
        if (c->scheduler == DS_SCHED_WARMUP_LR) sb_add(s, "constant");
        else sb_add(s, "%s decay to 0 at step %lld",
                    c->scheduler == DS_SCHED_WARMUP_DECAY_LR ? "linear" : "cosine", T);
        sb_newline(s);
        return;
    }
    /* DeepSpeed's schedules warm up over max(2, W) steps */
    const char *least = W < 2 ? " (DeepSpeed's least)" : "";
    if (W < 2) W = 2;
    switch (c->scheduler) {
    case DS_SCHED_NONE: sb_add(s, "scheduler: none, constant lr %s", lr); break;
    case DS_SCHED_WARMUP_LR:
        sb_add(s, "scheduler: WarmupLR, %s warmup %s -> %s over %lld steps%s, then constant", wt,
               lo, hi, W, least);
        break;
    case DS_SCHED_WARMUP_DECAY_LR:
        sb_add(s, "scheduler: WarmupDecayLR, %s warmup %s -> %s over %lld steps%s, then linear "
                  "decay to %s at step %lld", wt, lo, hi, W, least, lo, T);
        break;
    case DS_SCHED_WARMUP_COSINE_LR: {
        char r0[40], r1[40];
        real_text(c->lr * c->warmup_min_ratio, r0, sizeof r0);
        real_text(c->lr * c->cos_min_ratio, r1, sizeof r1);
        sb_add(s, "scheduler: WarmupCosineLR, %s warmup %s -> %s over %lld steps%s, then cosine "
                  "to %s at step %lld", wt, r0, lr, W, least, r1, T);
        break;
    }
    }
    sb_newline(s);
}

/* ------------------------------------------------ where values came from -- */

/* One line per kind of origin, items "key value (from)"; keys with the same
 * value from the same place share one item ("lr, warmup_max_lr 5e-05
 * (--lr)"). */
static void origins(sb *s, const ds_config *c, ds_config_source want, const char *label) {
    struct {
        char names[160], value[96], from[300];
        bool precision;
    } items[DS_KEY_COUNT];
    int n = 0;
    for (int k = 0; k < DS_KEY_COUNT; k++) {
        const ds_config_origin *o = &c->origin[k];
        if (!o->used || o->source != want) continue;
        /* the batch line shows these with their sources */
        if (k == DS_KEY_TRAIN_BATCH_SIZE || k == DS_KEY_MICRO_BATCH || k == DS_KEY_GRAD_ACCUM)
            continue;
        /* DeepSpeed's defaults only where "auto" or a missing section led
         * there; a key simply left out is in the last line if anything. */
        if (want == DS_SRC_DEFAULT && !o->was_auto && !o->from[0]) continue;
        char v[96];
        key_value(c, (ds_config_key)k, v, sizeof v);
        /* one item for keys with the same value from the same place, and for
         * fp16 / bf16 together */
        bool precision = k == DS_KEY_FP16 || k == DS_KEY_BF16;
        int i = 0;
        while (i < n && !(strcmp(items[i].value, v) == 0 &&
                          ((o->from[0] && strstr(items[i].from, o->from)) ||
                           (precision && items[i].precision))))
            i++;
        const char *name = short_name(k_key_names[k]);
        if (i < n) {
            size_t len = strlen(items[i].names);
            snprintf(items[i].names + len, sizeof items[i].names - len, ", %s", name);
            if (o->from[0] && !strstr(items[i].from, o->from)) {
                len = strlen(items[i].from);
                snprintf(items[i].from + len, sizeof items[i].from - len, "%s%s",
                         len ? ", " : "", o->from);
            }
            continue;
        }
        snprintf(items[n].names, sizeof items[n].names, "%s", name);
        snprintf(items[n].value, sizeof items[n].value, "%s", v);
        snprintf(items[n].from, sizeof items[n].from, "%s", o->from);
        items[n++].precision = precision;
    }
    list l = {0};
    for (int i = 0; i < n; i++) {
        char item[600];
        if (items[i].from[0])
            snprintf(item, sizeof item, "%.159s %.95s (%.299s)", items[i].names, items[i].value,
                     items[i].from);
        else
            snprintf(item, sizeof item, "%.159s %.95s", items[i].names, items[i].value);
        list_add(s, &l, item);
    }
    list_emit(s, &l, label);
}

/* ----------------------------------------- differences from DeepSpeed -- */

/* DeepSpeed's defaults for a config shaped like c: the same batch (it has
 * no default), optimizer and scheduler type (their params are compared with
 * that type's defaults), and the stage-dependent overlap_comm default. */
static void defaults_like(const ds_config *c, ds_config *d) {
    ds_config_defaults(d);
    d->world_size = c->world_size;
    d->train_batch_size = c->train_batch_size;
    d->train_micro_batch_size_per_gpu = c->train_micro_batch_size_per_gpu;
    d->gradient_accumulation_steps = c->gradient_accumulation_steps;
    d->optimizer = c->optimizer;
    d->adam_w_mode = c->adam_w_mode;
    d->scheduler = c->scheduler;
    if (c->scheduler == DS_SCHED_WARMUP_LR) d->warmup_max_lr = c->lr; /* warmup_max_lr=None */
    d->total_num_steps = c->total_num_steps; /* required: no default */
    d->overlap_comm = c->zero_stage == 3;
    /* zero_engine.gemm_input_dtype "auto" as resolved for c's precision */
    snprintf(d->gemm_input_dtype, sizeof d->gemm_input_dtype, "%s",
             c->bf16_enabled ? "bf16" : "fp32");
    /* zero_engine.comm "auto" as resolved for c's backend and world */
    snprintf(d->comm, sizeof d->comm, "%s", ds_config_comm_auto(c));
}

#define DIFF_LABEL "other keys off DeepSpeed's defaults (default in brackets)"

/* A JSON value, large round integers as DeepSpeed's configs write them
 * (200000000 -> 2e8). */
static void compact_value(const json_t *v, char *buf, size_t cap) {
    if (json_is_integer(v)) {
        long long x = (long long)json_integer_value(v);
        int e = 0;
        long long m = x;
        while (m != 0 && m % 10 == 0) {
            m /= 10;
            e++;
        }
        if (e >= 6 && m > -10 && m < 10) {
            snprintf(buf, cap, "%llde%d", m, e);
            return;
        }
    }
    cfg_fmt_value(v, buf, cap);
}

/* Keys the lines above show already: the batch, the optimizer and the
 * schedule with all their parameters. */
static bool shown_above(const char *path) {
    static const char *const shown[] = {"optimizer", "scheduler", "gradient_clipping"};
    for (size_t i = 0; i < sizeof shown / sizeof *shown; i++) {
        size_t n = strlen(shown[i]);
        if (!strncmp(path, shown[i], n) && (path[n] == '\0' || path[n] == '.')) return true;
    }
    return false;
}

static void diff_leaves(sb *s, json_t *a, json_t *b, const char *prefix, list *l) {
    const char *key;
    json_t *av;
    json_object_foreach(a, key, av) {
        char path[CFG_PATH_CAP];
        cfg_join(path, prefix, key);
        if (shown_above(path)) continue;
        json_t *bv = b ? json_object_get(b, key) : NULL;
        if (json_is_object(av)) {
            diff_leaves(s, av, json_is_object(bv) ? bv : NULL, path, l);
            continue;
        }
        if (bv && json_equal(av, bv)) continue;
        /* item holds the whole path and both values: nothing is cut */
        char va[96], vb[96], item[CFG_PATH_CAP + sizeof va + sizeof vb + 8];
        compact_value(av, va, sizeof va);
        if (bv) {
            compact_value(bv, vb, sizeof vb);
            snprintf(item, sizeof item, "%s %s (%s)", short_name(path), va, vb);
        } else {
            snprintf(item, sizeof item, "%s %s", short_name(path), va);
        }
        list_add(s, l, item);
    }
}

static void differences(sb *s, const ds_config *c) {
    ds_config d;
    defaults_like(c, &d);
    char *ja = ds_config_to_json(c), *jb = ds_config_to_json(&d);
    json_t *a = ja ? json_loads(ja, 0, NULL) : NULL, *b = jb ? json_loads(jb, 0, NULL) : NULL;
    free(ja);
    free(jb);
    if (!a || !b) {
        s->oom = 1;
    } else {
        list l = {0};
        diff_leaves(s, a, b, "", &l);
        if (l.n == 0) sb_add(s, "%s: none\n", DIFF_LABEL);
        list_emit(s, &l, DIFF_LABEL); /* frees the list; writes nothing when empty */
    }
    json_decref(a);
    json_decref(b);
}

char *ds_config_summary(const ds_config *c) {
    sb s = {.cap = 2048};
    s.buf = malloc(s.cap);
    if (!s.buf) return NULL;
    s.buf[0] = '\0';
    what_runs(&s, c);
    origins(&s, c, DS_SRC_HINT, "from the trainer");
    origins(&s, c, DS_SRC_HINT_DEFAULT, "trainer defaults");
    origins(&s, c, DS_SRC_COMPUTED, "computed");
    origins(&s, c, DS_SRC_DEFAULT, "DeepSpeed defaults");
    differences(&s, c);
    if (s.oom) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}
