/* Status codes and the last-error message.
 *
 * Every library function that can fail returns a ds_status. On failure the
 * function that first saw the problem records a human message with context
 * (the config key, the file:line of the input, the rank that did not answer)
 * through DS_ERR(); every caller on the way up forwards the status with
 * DS_TRY(), which appends its own file:line to a trace, so
 *
 *     ds_last_error()        -> "zero_optimization.stage: must be 0..3, got 4"
 *     ds_last_error_trace()  -> "config.c:212 <- engine.c:88 <- train_cls.c:301"
 *
 * The message and trace are thread-local: a communication thread's failure
 * does not overwrite the main thread's message.
 *
 * Asserts (DS_ASSERT) are kept for broken invariants inside the library, never
 * for bad input: bad input always comes back as a status. */
#ifndef DS_CORE_STATUS_H
#define DS_CORE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_status {
    DS_OK = 0,
    DS_ERR_INVALID_ARG,  /* a caller passed something unusable */
    DS_ERR_CONFIG,       /* ds_config.json: wrong key, type, range or batch rule */
    DS_ERR_DATA,         /* a data file line that cannot be read */
    DS_ERR_IO,           /* open/read/write/fsync/rename failed */
    DS_ERR_CORRUPT,      /* checksum or format mismatch in a file we wrote */
    DS_ERR_OOM,          /* an allocation failed or exceeded a budget */
    DS_ERR_BACKEND,      /* BLAS / CUDA / cuBLAS / cuRAND failure */
    DS_ERR_COMM,         /* MPI / NCCL failure or a peer that disappeared */
    DS_ERR_TIMEOUT,      /* a collective waited longer than comm_timeout */
    DS_ERR_UNSUPPORTED,  /* valid request this build or backend cannot serve */
    DS_ERR_NONFINITE,    /* NaN or inf where training needs finite numbers: loaded
                            weights, or gradients past the skips allowed */
    DS_ERR_INTERNAL,     /* a library bug: please report */
    DS_STATUS_COUNT
} ds_status;

/* "DS_ERR_CONFIG" etc.; never NULL. */
const char *ds_status_to_string(ds_status s);

/* The message of the last failure on this thread, "" if none. The pointer
 * stays valid until the next failure on this thread. */
const char *ds_last_error(void);

/* The status the last failure on this thread was recorded with (the one
 * ds_last_error describes), DS_OK if none: what a program's exit code can
 * tell apart (a config error against a lost peer). */
ds_status ds_last_status(void);

/* The file:line chain the last failure travelled through, innermost first. */
const char *ds_last_error_trace(void);

/* Forget the last error (tests use this between cases). */
void ds_clear_error(void);

/* Record a failure: formats the message, starts a new trace at file:line and
 * returns `s`, so `return DS_ERR(DS_ERR_CONFIG, "...", ...)` reads naturally. */
ds_status ds_error_set(ds_status s, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Append " <- file:line" to the trace of the current failure. */
void ds_error_trace(const char *file, int line);

/* Prefix the current message with more context ("reading shard 3: ..."). */
void ds_error_prefix(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* The last error, kept aside while cleanup code that may fail on its own
 * (removing a half-written file) runs, then put back, so the caller reports
 * the failure that mattered:
 *
 *   ds_error_saved keep;
 *   ds_error_save(&keep);
 *   remove_leftovers(...);      // its own failure is printed, not returned
 *   ds_error_restore(&keep);    // message, trace and status as they were */
typedef struct ds_error_saved {
    char msg[1024];
    char trace[1024];
    ds_status status;
} ds_error_saved;
void ds_error_save(ds_error_saved *s);
void ds_error_restore(const ds_error_saved *s);

#define DS_ERR(st, ...) ds_error_set((st), __FILE__, __LINE__, __VA_ARGS__)

#define DS_TRY(expr)                                                           \
    do {                                                                       \
        ds_status ds_try_s_ = (expr);                                          \
        if (ds_try_s_ != DS_OK) {                                              \
            ds_error_trace(__FILE__, __LINE__);                                \
            return ds_try_s_;                                                  \
        }                                                                      \
    } while (0)

/* Like DS_TRY but jumps to a cleanup label with the status in `var`. */
#define DS_TRY_GOTO(var, expr, label)                                          \
    do {                                                                       \
        (var) = (expr);                                                        \
        if ((var) != DS_OK) {                                                  \
            ds_error_trace(__FILE__, __LINE__);                                \
            goto label;                                                        \
        }                                                                      \
    } while (0)

/* Broken invariant inside the library (never bad input). Prints and traps. */
void ds_assert_fail(const char *expr, const char *file, int line);
#define DS_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) ds_assert_fail(#cond, __FILE__, __LINE__);                \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* DS_CORE_STATUS_H */
