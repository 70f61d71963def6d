/* Every byte of meta.json and `latest` is checked, by every reader (one
 * rank; a small MLP checkpoint saved as tag "old" at step 1 and "t" at step
 * 2, so `latest` names t):
 *
 *   - 600 edits of t/meta.json, each refused by ds_checkpoint_verify
 *     (zero_to_fp32 --verify), ds_zero_to_fp32 into a file (convert) and into
 *     a folder (the Hugging Face export), ds_load_checkpoint (resume: the
 *     engine unchanged) and ds_checkpoint_client_state, each message naming
 *     t/meta.json and what differs (the two checksums, or that none is
 *     there); every 30th also through the zero_to_fp32 program (exit 1, one
 *     line). The edits: 300 single bytes (a random position set to another
 *     random value) and 300 structural ones made through a JSON parser and
 *     written back with the saver's formatting, the checksum member kept:
 *     renamed keys, two numbers swapped, two neighbouring entries of an
 *     array or object swapped, a tensor renamed, a shape's dimensions
 *     swapped, a number or string changed by one;
 *   - every byte of `latest` changed in turn, and `latest` pointing at the
 *     older tag with its checksum kept: refused by all of them, naming
 *     `latest`;
 *   - a meta.json written wrong and sealed again (a writer's bug, not
 *     damage): resume names the field and both values (the tensor's two
 *     names, the two shapes);
 *   - the untouched files pass every reader before and after.
 * DS_MUTATE_SEED=N replays another sequence (default 21). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_harness.h"
#include "engine/io/ckpt_seal.h"
#include "tests/unit/test_util.h"

static char out[512], ckpt[600], meta_path[700], latest_path[700], conv[700], hf[700], tool[600];
static uint64_t rng = 21;

static uint64_t rnd(void) { /* splitmix64: reproducible from the seed */
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) TEST_DIE(path);
    static char buf[1 << 20];
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *t = malloc(*n + 1);
    memcpy(t, buf, *n);
    t[*n] = '\0';
    return t;
}

static void spit(const char *path, const char *t, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(t, 1, n, f) != n || fclose(f) != 0) TEST_DIE(path);
}

/* ---- the readers ---------------------------------------------------------- */

typedef struct tally {
    int edits, refused[6];
} tally;

static bool names(const char *needle) {
    const char *m = ds_last_error();
    return strstr(m, needle) && (strstr(m, "checksum mismatch") || strstr(m, "no checksum"));
}

/* The zero_to_fp32 program on `args`: exit 1 and one line on stderr. */
static bool tool_refuses(const char *args, const char *needle) {
    char cmd[3000], err[700], line[2048] = "";
    snprintf(err, sizeof err, "%s/tool_err.txt", out);
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", tool, args, err);
    int rc = system(cmd);
    FILE *f = fopen(err, "r");
    int lines = 0;
    char more[2048];
    while (f && fgets(lines ? more : line, sizeof line, f)) lines++;
    if (f) fclose(f);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 1 && lines == 1 && strstr(line, needle);
}

/* Every reader on the checkpoint as it now is: all must refuse, naming
 * `needle` (the edited file) and the checksum. `label` says which edit. */
static void all_refuse(engine_t *e, const char *needle, const char *label, tally *t, bool tool_too) {
    t->edits++;
    ds_status st = ds_checkpoint_verify(ckpt, NULL);
    if (st != DS_OK && names(needle)) t->refused[0]++;
    else TEST_FAIL("verify accepted %s: %s \"%s\"", label, ds_status_to_string(st), ds_last_error());

    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    st = ds_zero_to_fp32(ckpt, conv, &o, NULL);
    if (st != DS_OK && names(needle) && access(conv, F_OK) != 0) t->refused[1]++;
    else TEST_FAIL("convert accepted %s: \"%s\"", label, ds_last_error());
    unlink(conv);

    st = ds_zero_to_fp32(ckpt, hf, &o, NULL);
    if (st != DS_OK && names(needle) && access(hf, F_OK) != 0) t->refused[2]++;
    else TEST_FAIL("the HF export accepted %s: \"%s\"", label, ds_last_error());

    int64_t step = ds_global_step(e);
    st = ds_load_checkpoint(e, ckpt, NULL, DS_LOAD_ALL);
    if (st != DS_OK && names(needle) && ds_global_step(e) == step) t->refused[3]++;
    else TEST_FAIL("load accepted %s: \"%s\"", label, ds_last_error());

    char *client = NULL;
    st = ds_checkpoint_client_state(ckpt, NULL, &client);
    if (st != DS_OK && names(needle)) t->refused[4]++;
    else TEST_FAIL("client_state accepted %s: \"%s\"", label, ds_last_error());
    free(client);

    if (tool_too) {
        char args[2000];
        snprintf(args, sizeof args, "--verify '%s'", ckpt);
        bool ok = tool_refuses(args, needle);
        snprintf(args, sizeof args, "'%s' '%s'", ckpt, hf);
        if (ok && tool_refuses(args, needle)) t->refused[5]++;
        else TEST_FAIL("the zero_to_fp32 program did not refuse %s with one line", label);
    }
}

static void all_accept(engine_t *e, const char *when) {
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    CHECK(ds_checkpoint_verify(ckpt, NULL) == DS_OK, "%s: verify: %s", when, ds_last_error());
    CHECK(ds_zero_to_fp32(ckpt, conv, &o, NULL) == DS_OK, "%s: convert: %s", when, ds_last_error());
    CHECK(ds_load_checkpoint(e, ckpt, NULL, DS_LOAD_ALL) == DS_OK, "%s: load: %s", when,
          ds_last_error());
    unlink(conv);
}

/* ---- structural edits through jansson ------------------------------------- */

#define DUMP_FLAGS (JSON_INDENT(1) | JSON_REAL_PRECISION(17) | JSON_PRESERVE_ORDER)

typedef struct node {
    json_t *parent; /* object or array holding it */
    const char *key; /* in an object; NULL in an array */
    size_t index;    /* in an array */
    json_t *v;
} node;

typedef struct nodes {
    node v[4096];
    int n;
} nodes;

static void collect(json_t *parent, const char *key, size_t index, json_t *v, nodes *all) {
    if (all->n < (int)(sizeof all->v / sizeof *all->v))
        all->v[all->n++] = (node){parent, key, index, v};
    const char *k;
    json_t *c;
    size_t i;
    if (json_is_object(v)) json_object_foreach(v, k, c) collect(v, k, 0, c, all);
    else if (json_is_array(v)) json_array_foreach(v, i, c) collect(v, NULL, i, c, all);
}

static void put(const node *at, json_t *value) {
    if (at->key) json_object_set_new(at->parent, at->key, value);
    else json_array_set_new(at->parent, at->index, value);
}

/* The object `o` rebuilt in order with member a renamed to `to` (to NULL:
 * members a and a + 1 swapped). */
static json_t *rebuilt(json_t *o, size_t a, const char *to) {
    json_t *r = json_object();
    const char *keys[512];
    json_t *vals[512];
    size_t n = 0;
    const char *k;
    json_t *c;
    json_object_foreach(o, k, c) if (n < 512) {
        keys[n] = k;
        vals[n++] = c;
    }
    for (size_t i = 0; i < n; i++) {
        size_t j = !to && i == a ? a + 1 : !to && i == a + 1 ? a : i;
        json_object_set(r, to && j == a ? to : keys[j], vals[j]);
    }
    return r;
}

/* Pick nodes matching `want` until one is found; NULL after many misses. */
static node *pick(nodes *all, bool (*want)(const node *)) {
    for (int tries = 0; tries < 10000; tries++) {
        node *x = &all->v[rnd() % (uint64_t)all->n];
        if (want(x)) return x;
    }
    return NULL;
}

static bool is_number(const node *x) { return x->parent && json_is_number(x->v); }
static bool is_string(const node *x) {
    return x->parent && json_is_string(x->v) && json_string_length(x->v) > 0;
}
static bool is_member(const node *x) { return x->parent && x->key; }
static bool has_pair(const node *x) {
    return (json_is_array(x->v) && json_array_size(x->v) >= 2) ||
           (json_is_object(x->v) && json_object_size(x->v) >= 2);
}
static bool is_param_name(const node *x) {
    return x->key && !strcmp(x->key, "name") && json_is_string(x->v);
}
static bool is_2d_shape(const node *x) {
    return x->key && !strcmp(x->key, "shape") && json_array_size(x->v) == 2 &&
           json_integer_value(json_array_get(x->v, 0)) != json_integer_value(json_array_get(x->v, 1));
}

static json_t *number_plus_one(json_t *v) {
    return json_is_integer(v) ? json_integer(json_integer_value(v) + 1)
                              : json_real(json_real_value(v) * 1.5 + 1.0);
}

/* One structural edit of `doc` of kind k; a label of it in `label`. Returns
 * false when the document offers nothing for that kind. */
static bool structural(json_t *doc, int k, char *label, size_t cap) {
    nodes *all = calloc(1, sizeof *all);
    collect(NULL, NULL, 0, doc, all);
    bool done = false;
    node *x;
    if (k == 0 && (x = pick(all, is_member))) { /* rename a key */
        char to[128];
        snprintf(to, sizeof to, "%s", x->key);
        to[rnd() % strlen(to)] = (char)('a' + rnd() % 26);
        if (strcmp(to, x->key) && !json_object_get(x->parent, to)) {
            size_t pos = 0;
            const char *kk;
            json_t *c;
            json_object_foreach(x->parent, kk, c) {
                if (!strcmp(kk, x->key)) break;
                pos++;
            }
            snprintf(label, cap, "key \"%s\" renamed \"%s\"", x->key, to);
            json_t *r = rebuilt(x->parent, pos, to);
            json_object_clear(x->parent); /* refilled in the new order */
            json_object_update(x->parent, r);
            json_decref(r);
            done = true;
        }
    } else if (k == 1) { /* swap two numbers */
        node *a = pick(all, is_number), *b = pick(all, is_number);
        if (a && b && !json_equal(a->v, b->v)) {
            json_t *va = json_copy(a->v), *vb = json_copy(b->v);
            snprintf(label, cap, "numbers %s and %s swapped", a->key ? a->key : "[i]",
                     b->key ? b->key : "[i]");
            put(a, vb);
            put(b, va);
            done = true;
        }
    } else if (k == 2 && (x = pick(all, has_pair))) { /* reorder neighbours */
        if (json_is_array(x->v)) {
            size_t i = rnd() % (json_array_size(x->v) - 1);
            json_t *a = json_incref(json_array_get(x->v, i)), *b = json_incref(json_array_get(x->v, i + 1));
            done = !json_equal(a, b);
            json_array_set_new(x->v, i, b);
            json_array_set_new(x->v, i + 1, a);
            snprintf(label, cap, "array %s: entries %zu and %zu swapped", x->key ? x->key : "[i]",
                     i, i + 1);
        } else {
            size_t i = rnd() % (json_object_size(x->v) - 1);
            json_t *r = rebuilt(x->v, i, NULL);
            json_object_clear(x->v);
            json_object_update(x->v, r);
            json_decref(r);
            snprintf(label, cap, "object %s: members %zu and %zu swapped",
                     x->key ? x->key : "(top)", i, i + 1);
            done = true;
        }
    } else if (k == 3 && (x = pick(all, is_param_name))) { /* rename a tensor */
        char to[256];
        snprintf(to, sizeof to, "%s", json_string_value(x->v));
        size_t at = rnd() % strlen(to);
        to[at] = to[at] == 'x' ? 'y' : 'x';
        snprintf(label, cap, "tensor %s renamed %s", json_string_value(x->v), to);
        put(x, json_string(to));
        done = true;
    } else if (k == 4 && (x = pick(all, is_2d_shape))) { /* a shape's two numbers */
        json_t *a = json_incref(json_array_get(x->v, 0)), *b = json_incref(json_array_get(x->v, 1));
        json_array_set_new(x->v, 0, b);
        json_array_set_new(x->v, 1, a);
        snprintf(label, cap, "a shape's dimensions swapped");
        done = true;
    } else if (k == 5) { /* a value changed by one */
        if (rnd() % 2 && (x = pick(all, is_number))) {
            snprintf(label, cap, "number %s changed", x->key ? x->key : "[i]");
            put(x, number_plus_one(x->v));
            done = true;
        } else if ((x = pick(all, is_string))) {
            char to[512];
            snprintf(to, sizeof to, "%s", json_string_value(x->v));
            size_t at = rnd() % strlen(to);
            to[at] = to[at] == '1' ? '2' : '1';
            snprintf(label, cap, "string %s changed", x->key ? x->key : "[i]");
            put(x, json_string(to));
            done = true;
        }
    }
    free(all);
    return done;
}

/* ---- a writer's bug: meta.json wrong and sealed again ---------------------- */

static void resealed(engine_t *e, const char *orig, size_t n, bool shape) {
    json_t *doc = json_loadb(orig, n, JSON_PRESERVE_ORDER, NULL);
    json_object_del(doc, "checksum");
    json_t *p = NULL, *params = json_object_get(doc, "params");
    size_t i;
    json_array_foreach(params, i, p) {
        json_t *sh = json_object_get(p, "shape");
        if (json_array_size(sh) == 2 &&
            json_integer_value(json_array_get(sh, 0)) != json_integer_value(json_array_get(sh, 1)))
            break;
    }
    if (!p) TEST_DIE("no 2-d parameter with distinct dimensions");
    char want[512], name[256];
    snprintf(name, sizeof name, "%s", json_string_value(json_object_get(p, "name")));
    json_t *sh = json_object_get(p, "shape");
    long long a = json_integer_value(json_array_get(sh, 0)), b = json_integer_value(json_array_get(sh, 1));
    if (shape) {
        json_array_set_new(sh, 0, json_integer(b));
        json_array_set_new(sh, 1, json_integer(a));
        snprintf(want, sizeof want, "parameter %s has shape [%lld, %lld] in the checkpoint, "
                 "[%lld, %lld] in this model", name, b, a, a, b);
    } else {
        json_object_set_new(p, "name", json_string("renamed.weight"));
        snprintf(want, sizeof want, "is named renamed.weight in the checkpoint, %s in this model",
                 name);
    }
    char *text = json_dumps(doc, DUMP_FLAGS), *sealed;
    size_t len;
    json_decref(doc);
    if (ds_ckpt_seal(DS_SEAL_JSON, text, strlen(text), &sealed, &len) != DS_OK) TEST_DIE("seal");
    free(text);
    spit(meta_path, sealed, len);
    free(sealed);
    int64_t step = ds_global_step(e);
    ds_status st = ds_load_checkpoint(e, ckpt, NULL, DS_LOAD_ALL);
    CHECK(st == DS_ERR_INVALID_ARG && strstr(ds_last_error(), want) && ds_global_step(e) == step,
          "resume of a checkpoint whose meta.json %s: %s \"%s\", want \"%s\"",
          shape ? "swapped a shape" : "renamed a tensor", ds_status_to_string(st),
          ds_last_error(), want);
    spit(meta_path, orig, n);
}

int main(void) {
    const char *seed = getenv("DS_MUTATE_SEED");
    if (seed) rng = strtoull(seed, NULL, 10);
    snprintf(out, sizeof out, "%s/tests/ckpt_mutate", DS_BINARY_DIR);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", out);
    snprintf(meta_path, sizeof meta_path, "%s/t/meta.json", ckpt);
    snprintf(latest_path, sizeof latest_path, "%s/latest", ckpt);
    snprintf(conv, sizeof conv, "%s/conv.safetensors", out);
    snprintf(hf, sizeof hf, "%s/hf_export", out);
    snprintf(tool, sizeof tool, "%s/bin/zero_to_fp32", DS_BINARY_DIR);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    if (system(cmd) != 0) TEST_DIE("work folder");
    ds_dataset *data = ck_data();
    ck_setup s;
    ck_setup_defaults(&s);
    s.stage = 1;
    engine_t *e;
    if (!data || ck_engine(&s, data, &e) != DS_OK) TEST_DIE("engine");
    if (ds_train_batch(e, NULL) != DS_OK || ds_save_checkpoint(e, ckpt, "old", "{\"a\": 1}") != DS_OK ||
        ds_train_batch(e, NULL) != DS_OK || ds_save_checkpoint(e, ckpt, "t", "{\"a\": 2}") != DS_OK)
        TEST_DIE("train and save");
    all_accept(e, "before");
    size_t n, nl;
    char *orig = slurp(meta_path, &n), *lorig = slurp(latest_path, &nl);

    /* the saver's formatting, reproduced: structural edits change only what
     * they say */
    json_t *doc0 = json_loadb(orig, n, JSON_PRESERVE_ORDER, NULL);
    char *again = doc0 ? json_dumps(doc0, DUMP_FLAGS) : NULL;
    CHECK(again && strlen(again) + 1 == n && !memcmp(again, orig, n - 1),
          "meta.json read and written back through jansson is not the same text");
    free(again);
    json_decref(doc0);

    tally meta = {0}, latest = {0};
    const char *kinds[] = {"renamed key", "swapped numbers", "reordered entries", "renamed tensor",
                           "swapped shape", "changed value"};
    const int per_kind[] = {60, 60, 60, 40, 30, 50}; /* 300 structural */
    int made[6] = {0};
    char *buf = malloc(n + 1);
    char label[512];
    for (int i = 0; i < 300; i++) { /* single bytes */
        memcpy(buf, orig, n);
        size_t at = rnd() % n;
        unsigned char b;
        do b = (unsigned char)rnd(); while (b == (unsigned char)orig[at]);
        buf[at] = (char)b;
        spit(meta_path, buf, n);
        snprintf(label, sizeof label, "byte %zu of meta.json 0x%02x -> 0x%02x", at,
                 (unsigned char)orig[at], b);
        all_refuse(e, "t/meta.json", label, &meta, meta.edits % 30 == 0);
    }
    for (int k = 0; k < 6; k++) {
        for (int tries = 0; made[k] < per_kind[k] && tries < 100 * per_kind[k]; tries++) {
            json_t *doc = json_loadb(orig, n, JSON_PRESERVE_ORDER, NULL);
            if (!structural(doc, k, label, sizeof label)) {
                json_decref(doc);
                continue;
            }
            char *text = json_dumps(doc, DUMP_FLAGS);
            json_decref(doc);
            size_t len = strlen(text);
            bool same = len + 1 == n && !memcmp(text, orig, len);
            if (!same) {
                char *file = malloc(len + 2);
                memcpy(file, text, len);
                file[len] = '\n'; /* the saver's last byte */
                spit(meta_path, file, len + 1);
                free(file);
                all_refuse(e, "t/meta.json", label, &meta, meta.edits % 30 == 0);
                made[k]++;
            }
            free(text);
        }
        CHECK(made[k] == per_kind[k], "only %d edits of kind %s", made[k], kinds[k]);
    }
    spit(meta_path, orig, n);

    /* latest: every byte, then the older tag with the checksum kept */
    char *lbuf = malloc(nl + 16);
    for (size_t at = 0; at < nl; at++) {
        memcpy(lbuf, lorig, nl);
        unsigned char b;
        do b = (unsigned char)rnd(); while (b == (unsigned char)lorig[at]);
        lbuf[at] = (char)b;
        spit(latest_path, lbuf, nl);
        snprintf(label, sizeof label, "byte %zu of latest", at);
        all_refuse(e, "ckpt/latest", label, &latest, at % 10 == 0);
    }
    const char *nl1 = memchr(lorig, '\n', nl);
    size_t rest = nl - (size_t)(nl1 - lorig);
    memcpy(lbuf, "old", 3);
    memcpy(lbuf + 3, nl1, rest);
    spit(latest_path, lbuf, 3 + rest);
    all_refuse(e, "ckpt/latest", "latest naming the older tag", &latest, true);
    spit(latest_path, lorig, nl);

    resealed(e, orig, n, true);
    resealed(e, orig, n, false);
    all_accept(e, "after");

    const char *reader[] = {"verify", "convert", "HF export", "load", "client_state", "program"};
    printf("test_ckpt_mutate: meta.json: %d edits (300 single bytes; structural:", meta.edits);
    for (int k = 0; k < 6; k++) printf(" %d %s%s", made[k], kinds[k], k < 5 ? "," : ")\n");
    for (int r = 0; r < 6; r++)
        printf("  %-12s refused %d of %d meta.json edits, %d of %d latest edits\n", reader[r],
               meta.refused[r], r < 5 ? meta.edits : (meta.edits + 29) / 30, latest.refused[r],
               r < 5 ? latest.edits : (latest.edits + 9) / 10 + 1);
    free(buf);
    free(lbuf);
    free(orig);
    free(lorig);
    ds_finalize(e);
    ds_dataset_destroy(data);
    if (test_fails() == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        if (system(cmd) != 0) return 1;
    }
    return test_finish("test_ckpt_mutate");
}
