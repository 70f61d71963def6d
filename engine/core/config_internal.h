/* Internal to the config reader (engine/core/config*.c); not a public header.
 *
 * The reader is table-driven: each JSON object (the top level, a section, a
 * section's "params") has a table of cfg_key rows naming the key, where its
 * value goes (an offset from a base pointer: the ds_config, or one of its
 * ds_offload_config), its type and range, and whether "auto" is allowed.
 * cfg_walk() visits the object's keys in file order, so the first bad key in
 * the file is the one reported. */
#ifndef DS_CORE_CONFIG_INTERNAL_H
#define DS_CORE_CONFIG_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "engine/core/config.h"

typedef struct cfg_ctx {
    const char *file;       /* the file name, "" for a string */
    ds_config_warn_fn warn; /* NULL: stderr */
    void *user;
    ds_config *cfg;         /* the config being filled */
} cfg_ctx;

#define CFG_PATH_CAP 192    /* longest key path we print, with room to spare */

typedef enum cfg_kind {
    CFG_I64,   /* int64_t; integral reals accepted */
    CFG_INT,   /* int; bounds must fit an int */
    CFG_REAL,  /* double; integers accepted */
    CFG_BOOL,  /* bool; only true/false */
    CFG_FN,    /* custom handler */
} cfg_kind;

enum {
    CFG_AUTO = 1u << 0,       /* "auto" accepted: sets the bool at auto_off */
    CFG_LO_OPEN = 1u << 1,    /* value must be > lo (else >= lo) */
    CFG_HI_OPEN = 1u << 2,    /* value must be < hi (else <= hi) */
    CFG_NO_HI = 1u << 3,      /* no upper bound */
    CFG_NULL_UNSET = 1u << 4, /* null means "not given" (the default stays) */
};

#define CFG_NO_OFF ((size_t)-1)

typedef ds_status (*cfg_fn)(const cfg_ctx *ctx, json_t *v, const char *path, void *base);

typedef struct cfg_key {
    const char *name;
    cfg_kind kind;
    size_t off;       /* field at base+off; for CFG_FN an id: keys sharing it are aliases */
    double lo, hi;
    unsigned flags;
    size_t auto_off;  /* bool set to true on "auto" (CFG_AUTO) */
    size_t set_off;   /* bool set to true when a value was given, or CFG_NO_OFF */
    cfg_fn fn;        /* CFG_FN */
} cfg_key;

/* Record a DS_ERR with the file name in front ("f.json: msg") when the
 * config came from a file. Returns `st`. */
ds_status cfg_fail_at(const char *file_name, ds_status st, const char *src, int line,
                      const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
#define CFG_FAIL(ctx, st, ...) cfg_fail_at((ctx)->file, (st), __FILE__, __LINE__, __VA_ARGS__)

/* Pass a warning to the user's callback (or stderr), file name in front. */
void cfg_warn(const cfg_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A JSON value as it should appear after "got ": 4, 1.5, "abc", true,
 * null, {...}, [1, 2]; long strings and containers are cut short. */
void cfg_fmt_value(const json_t *v, char *buf, size_t cap);

/* A double with the fewest significant digits that read back exactly. */
void cfg_fmt_real(double x, char *buf, size_t cap);

/* path = prefix "." key (or key alone when prefix is ""). */
void cfg_join(char *out, const char *prefix, const char *key);

/* True for the JSON string "auto". */
int cfg_is_auto(const json_t *v);

/* Checked readers; on failure they record "path: must be ..., got V". */
ds_status cfg_read_i64(const cfg_ctx *ctx, const json_t *v, const char *path, const cfg_key *k,
                       int64_t *out);
ds_status cfg_read_real(const cfg_ctx *ctx, const json_t *v, const char *path, const cfg_key *k,
                        double *out);
ds_status cfg_read_bool(const cfg_ctx *ctx, const json_t *v, const char *path, bool *out);
ds_status cfg_need_object(const cfg_ctx *ctx, const json_t *v, const char *path);

/* A string value matched case-insensitively against names[0..n); returns
 * the index in *idx. `what` lists the valid names for the message. */
ds_status cfg_read_enum(const cfg_ctx *ctx, const json_t *v, const char *path,
                        const char *const *names, int n, const char *what, int *idx);

/* Visit every key of `obj` (an object): known keys are read into base
 * through `keys`; a key in `unimplemented` (NULL-terminated, may be NULL) is
 * DS_ERR_UNSUPPORTED; any other key is a warning when `top_level`, else
 * DS_ERR_CONFIG "path: unknown key". Two keys that are aliases of one
 * setting (same kind and off) in one object are an error. */
ds_status cfg_walk(const cfg_ctx *ctx, json_t *obj, const char *prefix, const cfg_key *keys,
                   size_t nkeys, void *base, const char *const *unimplemented, int top_level);

/* Sections (config_sections.c): the top-level key table. */
extern const cfg_key cfg_top_keys[];
extern const size_t cfg_top_nkeys;
extern const char *const cfg_top_unimplemented[];
/* "tensorboard" and "csv_monitor" (config_monitor.c): `path` names which. */
ds_status cfg_read_monitor(const cfg_ctx *ctx, json_t *v, const char *path, void *base);
/* "flops_profiler" (config_flops.c). */
ds_status cfg_read_flops_profiler(const cfg_ctx *ctx, json_t *v, const char *path, void *base);

/* ---- resolution: config_resolve.c (entry, hints, batch rule, cross
 * checks) and config_fill.c (optimizer, scheduler, precision, sizes) ---- */

/* Resolve failures carry the file name like parse failures do. */
#define RFAIL(c, st, ...) cfg_fail_at((c)->path, (st), __FILE__, __LINE__, __VA_ARGS__)

/* The caller's name for a hint ("--lr"), else "hints.lr". */
const char *cfg_hint_name(const ds_config_hints *h, ds_hint_id id);
/* The user chose it (not marked is_default): checked against the file. */
bool cfg_hint_chosen(const ds_config_hints *h, ds_hint_id id);
/* DS_SRC_HINT or DS_SRC_HINT_DEFAULT. */
ds_config_source cfg_hint_source(const ds_config_hints *h, ds_hint_id id);

/* Record key k's origin (marks it used; keeps was_auto). */
void cfg_origin(ds_config *c, ds_config_key k, ds_config_source s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* total_num_steps from hints.epochs over hints.train_rows at the resolved
 * batch keys; -1 when not given. `from` (may be NULL) gets the account. */
int64_t cfg_steps_from_epochs(const ds_config *c, const ds_config_hints *h, char *from,
                              size_t cap);

ds_status cfg_resolve_optimizer(ds_config *c, const ds_config_hints *h);
ds_status cfg_resolve_precision(ds_config *c, const ds_config_hints *h);
void cfg_resolve_sizes(ds_config *c, const ds_config_hints *h);
/* after the batch rule: the run's length needs the resolved batch keys */
ds_status cfg_resolve_scheduler(ds_config *c, const ds_config_hints *h);

#endif /* DS_CORE_CONFIG_INTERNAL_H */
