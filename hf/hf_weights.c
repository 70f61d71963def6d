/* Hugging Face safetensors checkpoints onto a model's parameters by name.
 *
 * A checkpoint tensor maps onto the model parameter of its name, else of its
 * name with a base-model prefix added ("bert.", "transformer.": checkpoints
 * of BertModel and GPT2Model lack them), else onto the owner of a tied
 * parameter it is an alias of ("lm_head.weight" -> transformer.wte.weight),
 * used only when the checkpoint lacks the owner's own tensor. Non-persistent
 * buffers older checkpoints carry (position_ids, GPT-2's attn.bias causal
 * mask and attn.masked_bias) are counted and skipped. */
#include "hf/hf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/io/safetensors.h"

/* Base-model prefixes a checkpoint may lack, tried in order. */
static const char *const k_prefixes[] = {"bert.", "transformer."};
#define N_PREFIXES ((int)(sizeof k_prefixes / sizeof k_prefixes[0]))

typedef struct ckpt_tensor {
    int file;
    const ds_st_tensor *t;
    int param; /* index into the model's parameters, -1 if none */
} ckpt_tensor;

typedef struct loader {
    const char *path;     /* what messages name: the caller's path, then the file found in it */
    char found[4096 + 64]; /* the file open_checkpoint found in a folder */
    ds_st_file **files;
    int n_files;
    ckpt_tensor *ck;
    int n_ck;
    const ds_param_desc **params; /* model parameters in module order */
    int n_params;
    struct named {
        const char *name;
        int idx; /* into params */
    } *by_name;                   /* sorted by name */
    int *src; /* per parameter: index into ck, or -1 */
    int *alias_src; /* per parameter: a checkpoint tensor named as a tie alias of it, or -1 */
    struct alias {
        const char *name; /* "lm_head.weight" */
        int idx;          /* the tied parameter (into params) */
    } *aliases;           /* the model's tie aliases */
    int n_aliases;
} loader;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* Index (module order) of the parameter named `name`, -1 if none. */
static int find_param(const loader *L, const char *name) {
    int lo = 0, hi = L->n_params - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, L->by_name[mid].name);
        if (c == 0) return L->by_name[mid].idx;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static ds_status report_add(char ***list, int *n, const char *s) {
    char **grown = realloc(*list, sizeof(char *) * (size_t)(*n + 1));
    if (!grown) return DS_ERR(DS_ERR_OOM, "load report");
    *list = grown;
    grown[*n] = dup_or_null(s);
    if (!grown[*n]) return DS_ERR(DS_ERR_OOM, "load report");
    (*n)++;
    return DS_OK;
}

void ds_hf_load_report_free(ds_hf_load_report *rep) {
    if (!rep) return;
    for (int i = 0; i < rep->n_missing; i++) free(rep->missing[i]);
    for (int i = 0; i < rep->n_unexpected; i++) free(rep->unexpected[i]);
    for (int i = 0; i < rep->n_mismatched; i++) free(rep->mismatched[i]);
    free(rep->missing);
    free(rep->unexpected);
    free(rep->mismatched);
    free(rep->source);
    memset(rep, 0, sizeof *rep);
}

static void print_list(FILE *fp, const char *title, char **names, int n) {
    if (n == 0) return;
    fprintf(fp, "  %s (%d):\n", title, n);
    for (int i = 0; i < n; i++) fprintf(fp, "    %s\n", names[i]);
}

void ds_hf_load_report_print(const ds_hf_load_report *rep, FILE *fp) {
    fprintf(fp, "hf weights: loaded %d parameters from %d file%s", rep->n_loaded, rep->n_files,
            rep->n_files == 1 ? "" : "s");
    if (rep->prefix_added) fprintf(fp, " (checkpoint names without \"%s\")", rep->prefix);
    fputc('\n', fp);
    print_list(fp, "newly initialised, not in the checkpoint", rep->missing, rep->n_missing);
    print_list(fp, "unused checkpoint tensors", rep->unexpected, rep->n_unexpected);
    print_list(fp, "mis-shaped", rep->mismatched, rep->n_mismatched);
    if (rep->n_ignored_buffers > 0)
        fprintf(fp, "  ignored %d buffer%s (position_ids, attn.bias, attn.masked_bias: not "
                "parameters)\n", rep->n_ignored_buffers, rep->n_ignored_buffers == 1 ? "" : "s");
    if (rep->n_ignored_aliases > 0)
        fprintf(fp, "  ignored %d tied alias%s (e.g. lm_head.weight): the checkpoint also holds "
                "the tied parameter itself\n", rep->n_ignored_aliases,
                rep->n_ignored_aliases == 1 ? "" : "es");
}

static void loader_free(loader *L) {
    for (int i = 0; i < L->n_files; i++) ds_st_close(L->files[i]);
    free(L->files);
    free(L->ck);
    free(L->params);
    free(L->by_name);
    free(L->src);
    free(L->alias_src);
    free(L->aliases);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static ds_status open_file(loader *L, const char *file) {
    ds_st_file **grown = realloc(L->files, sizeof *grown * (size_t)(L->n_files + 1));
    if (!grown) return DS_ERR(DS_ERR_OOM, "%s: file table", L->path);
    L->files = grown;
    DS_TRY(ds_st_open(file, &L->files[L->n_files]));
    L->n_files++;
    return DS_OK;
}

/* Open the index's shards and check each entry is in the file it names. */
static ds_status open_sharded(loader *L, const char *index_path) {
    ds_st_index ix;
    DS_TRY(ds_st_index_read(index_path, &ix));
    char dir[4096];
    const char *slash = strrchr(index_path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - index_path), index_path);
    else snprintf(dir, sizeof dir, ".");
    ds_status st = DS_OK;
    char file[4096 + 256];
    for (int i = 0; i < ix.n_files && st == DS_OK; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, ix.file_list[i]);
        st = open_file(L, file);
    }
    for (int i = 0; i < ix.n && st == DS_OK; i++) {
        int f = 0;
        while (strcmp(ix.file_list[f], ix.files[i]) != 0) f++;
        if (!ds_st_find(L->files[f], ix.names[i]))
            st = DS_ERR(DS_ERR_CORRUPT, "%s: names tensor '%s' in %s, which does not hold it",
                        index_path, ix.names[i], ix.files[i]);
    }
    ds_st_index_free(&ix);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

static ds_status open_checkpoint(loader *L) {
    if (is_dir(L->path)) {
        /* transformers' order: the single file first, then the index; from
         * here on messages name the file found, not the folder */
        const char *dir = L->path;
        snprintf(L->found, sizeof L->found, "%s/model.safetensors", dir);
        if (is_file(L->found)) {
            L->path = L->found;
            return open_file(L, L->found);
        }
        snprintf(L->found, sizeof L->found, "%s/model.safetensors.index.json", dir);
        if (is_file(L->found)) {
            L->path = L->found;
            return open_sharded(L, L->found);
        }
        snprintf(L->found, sizeof L->found, "%s/pytorch_model.bin", dir);
        if (is_file(L->found))
            return DS_ERR(DS_ERR_UNSUPPORTED, "%s: holds only pytorch_model.bin (a Python pickle); "
                          "convert it to model.safetensors first (transformers: "
                          "save_pretrained(dir, safe_serialization=True))", dir);
        return DS_ERR(DS_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (ends_with(L->path, ".json")) return open_sharded(L, L->path);
    return open_file(L, L->path);
}

/* A checkpoint name as the model would spell it, into out: LayerNorm
 * gamma/beta renamed as transformers does. */
static void normalise(const char *name, char *out, size_t cap) {
    size_t n = strlen(name);
    if (ends_with(name, "LayerNorm.gamma"))
        snprintf(out, cap, "%.*sweight", (int)(n - 5), name);
    else if (ends_with(name, "LayerNorm.beta"))
        snprintf(out, cap, "%.*sbias", (int)(n - 4), name);
    else
        snprintf(out, cap, "%s", name);
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static bool same_shape(const ds_st_tensor *t, const ds_param_desc *d) {
    if (t->ndim != d->ndim) return false;
    for (int i = 0; i < d->ndim; i++)
        if (t->shape[i] != d->shape[i]) return false;
    return true;
}

/* Buffers transformers keeps in older checkpoints that are not parameters:
 * BERT's position_ids, GPT-2's causal mask attn.bias and attn.masked_bias
 * (transformers itself skips them on load). */
static bool is_buffer(const char *name) {
    return ends_with(name, ".position_ids") || ends_with(name, ".attn.bias") ||
           ends_with(name, ".attn.masked_bias") || !strcmp(name, "attn.bias") ||
           !strcmp(name, "attn.masked_bias");
}

/* Index of the parameter that the tie alias `name` stands for, -1 if none. */
static int find_alias(const loader *L, const char *name) {
    for (int i = 0; i < L->n_aliases; i++)
        if (!strcmp(L->aliases[i].name, name)) return L->aliases[i].idx;
    return -1;
}

/* Collects problems for the DS_ERR_DATA message. */
typedef struct problems {
    char text[1024];
    size_t len;
} problems;

/* Checkpoint tensor c now feeds parameter idx: check its shape (a mismatch
 * is reported, the load fails after every tensor is seen) and dtype. */
static ds_status assign(loader *L, ds_hf_load_report *rep, int ck_index, int idx,
                        problems *pr) {
    ckpt_tensor *c = &L->ck[ck_index];
    const ds_param_desc *d = L->params[idx];
    if (L->src[idx] >= 0) {
        const ckpt_tensor *o = &L->ck[L->src[idx]];
        return DS_ERR(DS_ERR_DATA, "%s: tensors '%s' (%s) and '%s' (%s) both map onto "
                      "parameter %s", L->path, o->t->name, ds_st_path(L->files[o->file]),
                      c->t->name, ds_st_path(L->files[c->file]), d->name);
    }
    L->src[idx] = ck_index;
    c->param = idx;
    if (!same_shape(c->t, d)) {
        char a[160], b[160], line[DS_MAX_NAME + 400];
        shape_str(c->t->ndim, c->t->shape, a, sizeof a);
        shape_str(d->ndim, d->shape, b, sizeof b);
        snprintf(line, sizeof line, "%s: checkpoint %s vs model %s", c->t->name, a, b);
        DS_TRY(report_add(&rep->mismatched, &rep->n_mismatched, line));
        if (pr->len < sizeof pr->text - 1)
            pr->len += (size_t)snprintf(pr->text + pr->len, sizeof pr->text - pr->len, "%s%s",
                                        pr->len ? "; " : "", line);
    } else if (!ds_st_dtype_is_float(c->t->dtype)) {
        return DS_ERR(DS_ERR_DATA, "%s: tensor '%s' is %s; parameter %s needs a float dtype",
                      ds_st_path(L->files[c->file]), c->t->name, ds_st_dtype_name(c->t->dtype),
                      d->name);
    }
    return DS_OK;
}

/* Match every checkpoint tensor to a parameter and fill the report. */
static ds_status match(loader *L, ds_hf_load_report *rep) {
    int total = 0;
    for (int f = 0; f < L->n_files; f++) total += ds_st_count(L->files[f]);
    L->ck = calloc((size_t)(total ? total : 1), sizeof *L->ck);
    if (!L->ck) return DS_ERR(DS_ERR_OOM, "%s: %d tensors", L->path, total);
    char name[DS_MAX_NAME + 16], full[DS_MAX_NAME + 32];
    problems pr = {.len = 0};
    pr.text[0] = '\0';
    for (int f = 0; f < L->n_files; f++)
        for (int i = 0; i < ds_st_count(L->files[f]); i++) {
            ckpt_tensor *c = &L->ck[L->n_ck++];
            c->file = f;
            c->t = ds_st_tensor_at(L->files[f], i);
            c->param = -1;
            normalise(c->t->name, name, sizeof name);
            int p = find_param(L, name);
            for (int k = 0; p < 0 && k < N_PREFIXES; k++) {
                snprintf(full, sizeof full, "%s%s", k_prefixes[k], name);
                p = find_param(L, full);
                if (p >= 0) {
                    rep->prefix_added = true;
                    snprintf(rep->prefix, sizeof rep->prefix, "%s", k_prefixes[k]);
                }
            }
            if (p >= 0) {
                DS_TRY(assign(L, rep, L->n_ck - 1, p, &pr));
                continue;
            }
            int a = find_alias(L, name);
            if (a >= 0) { /* resolved below, once every tensor's own name is known */
                if (L->alias_src[a] >= 0)
                    return DS_ERR(DS_ERR_DATA, "%s: tensors '%s' and '%s' are both aliases of "
                                  "the tied parameter %s", L->path,
                                  L->ck[L->alias_src[a]].t->name, c->t->name,
                                  L->params[a]->name);
                L->alias_src[a] = L->n_ck - 1;
            } else if (is_buffer(c->t->name)) {
                rep->n_ignored_buffers++;
            } else {
                DS_TRY(report_add(&rep->unexpected, &rep->n_unexpected, c->t->name));
            }
        }
    /* a tie alias ("lm_head.weight") loads the tied parameter only when the
     * checkpoint lacks the owner's own name: both are one tensor */
    for (int i = 0; i < L->n_params; i++) {
        if (L->alias_src[i] < 0) continue;
        if (L->src[i] >= 0) rep->n_ignored_aliases++;
        else DS_TRY(assign(L, rep, L->alias_src[i], i, &pr));
    }
    for (int i = 0; i < L->n_params; i++)
        if (L->src[i] < 0) DS_TRY(report_add(&rep->missing, &rep->n_missing, L->params[i]->name));
    if (rep->n_mismatched > 0)
        return DS_ERR(DS_ERR_DATA, "%s: %d mis-shaped tensor%s: %s", L->path, rep->n_mismatched,
                      rep->n_mismatched == 1 ? "" : "s", pr.text);
    return DS_OK;
}

static ds_status install(loader *L, ds_hf_set_fn set, void *user, ds_hf_load_report *rep) {
    uint64_t most = 0;
    for (int i = 0; i < L->n_params; i++)
        if (L->src[i] >= 0 && L->ck[L->src[i]].t->numel > most) most = L->ck[L->src[i]].t->numel;
    float *buf = malloc(sizeof(float) * (size_t)(most ? most : 1));
    if (!buf) return DS_ERR(DS_ERR_OOM, "%s: buffer of %" PRIu64 " floats", L->path, most);
    ds_status st = DS_OK;
    for (int i = 0; i < L->n_params && st == DS_OK; i++) {
        if (L->src[i] < 0) continue;
        const ckpt_tensor *c = &L->ck[L->src[i]];
        st = ds_st_read_f32(L->files[c->file], c->t, 0, c->t->numel, buf);
        if (st == DS_OK) st = set(user, L->params[i]->name, buf, (size_t)c->t->numel);
        if (st == DS_OK) rep->n_loaded++;
        else ds_error_prefix("loading %s from %s", L->params[i]->name, L->path);
    }
    free(buf);
    if (st != DS_OK) ds_error_trace(__FILE__, __LINE__);
    return st;
}

ds_status ds_hf_load_weights(const ds_model *m, const char *path, ds_hf_set_fn set, void *user,
                             ds_hf_load_report *rep) {
    memset(rep, 0, sizeof *rep);
    if (!m || !path || !set) return DS_ERR(DS_ERR_INVALID_ARG, "ds_hf_load_weights: NULL argument");
    loader L;
    memset(&L, 0, sizeof L);
    L.path = path;
    for (int i = 0; i < m->n_modules; i++) L.n_params += m->modules[i]->n_params;
    size_t np = (size_t)(L.n_params ? L.n_params : 1);
    L.params = calloc(np, sizeof *L.params);
    L.by_name = calloc(np, sizeof *L.by_name);
    L.src = malloc(np * sizeof *L.src);
    L.alias_src = malloc(np * sizeof *L.alias_src);
    int n_ties = 0;
    for (int i = 0; i < m->n_modules; i++) n_ties += m->modules[i]->n_tied;
    L.aliases = calloc((size_t)(n_ties ? n_ties : 1), sizeof *L.aliases);
    ds_status st = DS_OK;
    if (!L.params || !L.by_name || !L.src || !L.alias_src || !L.aliases) {
        st = DS_ERR(DS_ERR_OOM, "%s: tables for %d parameters", path, L.n_params);
        goto done;
    }
    int k = 0;
    for (int i = 0; i < m->n_modules; i++)
        for (int p = 0; p < m->modules[i]->n_params; p++) {
            L.params[k] = &m->modules[i]->params[p];
            L.by_name[k].name = L.params[k]->name;
            L.by_name[k].idx = k;
            L.src[k] = -1;
            L.alias_src[k] = -1;
            k++;
        }
    qsort(L.by_name, (size_t)L.n_params, sizeof *L.by_name, cmp_named);
    for (int i = 1; i < L.n_params; i++)
        if (strcmp(L.by_name[i - 1].name, L.by_name[i].name) == 0) {
            st = DS_ERR(DS_ERR_INVALID_ARG, "model parameter %s appears twice", L.by_name[i].name);
            goto done;
        }
    for (int i = 0; i < m->n_modules; i++)
        for (int t = 0; t < m->modules[i]->n_tied; t++) {
            const ds_param_tie *tie = &m->modules[i]->tied[t];
            int idx = find_param(&L, tie->target);
            if (tie->name[0] && idx >= 0) {
                L.aliases[L.n_aliases].name = tie->name;
                L.aliases[L.n_aliases].idx = idx;
                L.n_aliases++;
            }
        }
    DS_TRY_GOTO(st, open_checkpoint(&L), done);
    rep->n_files = L.n_files;
    rep->source = strdup(L.path);
    if (!rep->source) {
        st = DS_ERR(DS_ERR_OOM, "%s: load report", L.path);
        goto done;
    }
    DS_TRY_GOTO(st, match(&L, rep), done);
    DS_TRY_GOTO(st, install(&L, set, user, rep), done);
done:
    loader_free(&L);
    if (st != DS_OK && st != DS_ERR_DATA) ds_hf_load_report_free(rep);
    return st;
}
