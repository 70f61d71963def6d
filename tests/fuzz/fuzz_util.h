/* Shared by the libFuzzer harnesses of tests/fuzz (see README.md there).
 *
 * Every reader under test takes a path, so a harness writes the input into a
 * file of its own scratch folder (on /dev/shm when there is one: no disk
 * traffic per execution) and hands the reader that path, the way a user's
 * file reaches it:
 *
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
 *         const char *path = fz_write("config.json", data, size);
 *         ds_config c;
 *         fz_check(ds_config_parse_file(path, &c, fz_quiet_warn, NULL), "config");
 *         return 0;
 *     }
 *
 * What counts as a finding: anything the sanitizers report (ASan, UBSan with
 * -fno-sanitize-recover, LeakSanitizer), a DS_ASSERT trap, a hang past
 * libFuzzer's -timeout, and the checks the harnesses make themselves through
 * fz_fail(): a failing status without a message (the project promises every
 * failure names its cause), a status outside the enum, and the round trips
 * each harness documents. */
#ifndef DS_TESTS_FUZZ_UTIL_H
#define DS_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

#if defined(__GNUC__)
#define FZ_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FZ_PRINTF(f, a)
#endif

/* The scratch folder (created on first use, removed at exit). */
const char *fz_dir(void);

/* Write data[0..n) to fz_dir()/name (replacing it) and return that path
 * (static storage, valid until the next call with another name). Aborts when
 * the file cannot be written: the harness, not the reader, failed. */
const char *fz_write(const char *name, const void *data, size_t n);

/* As fz_write, into a path the caller keeps (cap bytes). */
void fz_write_to(char *path, size_t cap, const char *name, const void *data, size_t n);

/* A NUL-terminated copy of data[0..n) (malloc'd; free it). */
char *fz_strdup(const uint8_t *data, size_t n);

/* Checks of a reader's answer: DS_OK, or a status of the enum with a
 * non-empty last-error message. `what` names the call in the report.
 * Returns st. The last error is cleared first by fz_begin(). */
ds_status fz_check(ds_status st, const char *what);
void fz_begin(void);

/* A finding of the harness itself: prints "fuzz: " and the message, then
 * aborts, which libFuzzer reports as a crash and saves the input. */
void fz_fail(const char *fmt, ...) FZ_PRINTF(1, 2) __attribute__((noreturn));

/* A libFuzzer custom mutator for JSON-like inputs, where mutating digits
 * rarely builds the numbers that break a reader (2^63 - 1, 2^31, 1e308):
 * one mutation in three replaces a number outside strings in
 * data[skip..size) (which one, and by what, from `seed`) with an edge value
 * (the limits of int, int64 and double, their neighbours, 0, -1); the
 * others are libFuzzer's own (LLVMFuzzerMutate). Returns the new size.
 * A harness opts in by defining
 *
 *     size_t LLVMFuzzerCustomMutator(uint8_t *d, size_t n, size_t max, unsigned seed) {
 *         return fz_mutate_json(d, n, max, seed, 1);   // 1: skip the flags byte
 *     }
 *
 * fz_edge_number is the replacement alone (0 when data holds no number
 * there or the result would exceed max_size). */
size_t fz_mutate_json(uint8_t *data, size_t size, size_t max_size, unsigned seed, size_t skip);
size_t fz_edge_number(uint8_t *data, size_t size, size_t max_size, unsigned seed, size_t skip);

/* A ds_config_warn_fn that drops warnings (they would flood the log). */
void fz_quiet_warn(void *user, const char *message);

/* The library's source tree (for fixed inputs such as the MiniLM vocab). */
const char *fz_source_dir(void);

#endif /* DS_TESTS_FUZZ_UTIL_H */
