/* Scratch files and answer checks for the harnesses (fuzz_util.h). */
#include "tests/fuzz/fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static void remove_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

const char *fz_dir(void) {
    if (g_dir[0]) return g_dir;
    /* TMPDIR wins; else /dev/shm, so that a million executions do not write
     * a million files to disk */
    const char *base = getenv("TMPDIR");
    struct stat sb;
    if (!base || !base[0]) base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/ds-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create a scratch folder under %s: %s\n", base,
                strerror(errno));
        abort();
    }
    atexit(remove_dir);
    return g_dir;
}

void fz_write_to(char *path, size_t cap, const char *name, const void *data, size_t n) {
    snprintf(path, cap, "%s/%s", fz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const char *p = data;
    size_t left = n;
    while (fd >= 0 && left > 0) {
        ssize_t k = write(fd, p, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        p += k;
        left -= (size_t)k;
    }
    if (fd < 0 || left > 0 || close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
}

const char *fz_write(const char *name, const void *data, size_t n) {
    static char path[512];
    fz_write_to(path, sizeof path, name, data, n);
    return path;
}

char *fz_strdup(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void fz_begin(void) { ds_clear_error(); }

ds_status fz_check(ds_status st, const char *what) {
    if (st == DS_OK) return st;
    if ((int)st < 0 || st >= DS_STATUS_COUNT) fz_fail("%s: status %d outside ds_status", what, (int)st);
    if (!ds_last_error()[0])
        fz_fail("%s: failed with %s but left no message", what, ds_status_to_string(st));
    return st;
}

void fz_quiet_warn(void *user, const char *message) {
    (void)user;
    (void)message;
}

const char *fz_source_dir(void) { return DS_SOURCE_DIR; }

/* The next number outside strings at or after *pos (a position outside any
 * string): [*start, *end), and *pos moves past it; 0 when there is none. */
static int next_number(const uint8_t *t, size_t n, size_t *pos, size_t *start, size_t *end) {
    int in_str = 0;
    for (size_t i = *pos; i < n; i++) {
        uint8_t c = t[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + 1;
            while (j < n && t[j] && strchr("0123456789.eE+-", t[j])) j++;
            *start = i;
            *end = *pos = j;
            return 1;
        }
    }
    *pos = n;
    return 0;
}

size_t fz_edge_number(uint8_t *data, size_t size, size_t max_size, unsigned seed, size_t skip) {
    static const char *const edges[] = {
        "0", "-1", "1", "2", "3", "16", "17", "65536", "1000000000", "1000000001",
        "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296",
        "4611686018427387904", "9223372036854775807", "-9223372036854775808",
        "9223372036854775808", "18446744073709551615", "1e19", "-1e19", "1e308", "-1e308",
        "1e-320", "0.5", "-0.0", "1.0000001", "3.4028235e38", "3.5e38"};
    if (size <= skip) return 0;
    const uint8_t *text = data + skip;
    size_t n = size - skip;
    /* each scan resumes right after a number, which is outside any string */
    size_t count = 0, pos = 0, a = 0, b = 0;
    while (next_number(text, n, &pos, &a, &b)) count++;
    if (count == 0) return 0;
    size_t want = seed % count;
    pos = 0;
    for (size_t i = 0; i <= want; i++) next_number(text, n, &pos, &a, &b);
    const char *e = edges[(seed >> 12) % (sizeof edges / sizeof *edges)];
    size_t el = strlen(e), len = b - a;
    if (size - len + el > max_size) return 0;
    memmove(data + skip + a + el, data + skip + b, n - b);
    memcpy(data + skip + a, e, el);
    return size - len + el;
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

size_t fz_mutate_json(uint8_t *data, size_t size, size_t max_size, unsigned seed, size_t skip) {
    if (seed % 3 == 0) {
        size_t n = fz_edge_number(data, size, max_size, seed / 3, skip);
        if (n) return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}
