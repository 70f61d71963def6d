/* Shard files (engine/io/ckpt_file.h), the XXH64 checksum and the fault
 * matcher:
 *   - XXH64 equals the specification's value for "" and, at every length up
 *     to 600 and a few large ones, matches the checksum zstd stores in its
 *     frames (the low 32 bits of XXH64, seed 0): an independent
 *     implementation;
 *   - a file written in frames reads back bit for bit, whole and in ranges,
 *     with and without the shuffle filter, and a range read decompresses only
 *     the frames it overlaps;
 *   - a flipped byte in a frame, in the index or in the header, a truncated
 *     file and a wrong magic are refused with DS_ERR_CORRUPT naming the file
 *     (and the frame), while frames that are intact still read;
 *   - writer misuse (too many / too few values, a section twice) is an error. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "engine/io/ckpt_file.h"
#include "engine/io/fault.h"
#include "engine/io/hash.h"
#include "tests/unit/test_util.h"

static void test_xxh64(void) {
    CHECK(ds_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull, "XXH64(\"\") = %016llx",
          (unsigned long long)ds_xxh64("", 0, 0));
    size_t big = 3 << 20;
    unsigned char *data = malloc(big);
    size_t cap = ZSTD_compressBound(big);
    unsigned char *comp = malloc(cap);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    unsigned s = 12345;
    for (size_t i = 0; i < big; i++) {
        s = s * 1103515245u + 12345u;
        data[i] = (unsigned char)(s >> 16);
    }
    size_t lens[620];
    int nl = 0;
    for (size_t n = 0; n <= 600; n++) lens[nl++] = n;
    size_t extra[] = {1023, 4096, 65537, 1 << 20, big - 3};
    for (size_t k = 0; k < sizeof extra / sizeof *extra; k++) lens[nl++] = extra[k];
    int bad = 0;
    for (int k = 0; k < nl; k++) {
        size_t n = lens[k];
        /* the offset makes some inputs unaligned */
        const unsigned char *in = data + (k % 7);
        size_t c = ZSTD_compress2(cc, comp, cap, in, n);
        if (ZSTD_isError(c)) {
            CHECK(0, "zstd: %s", ZSTD_getErrorName(c));
            break;
        }
        uint32_t zsum;
        memcpy(&zsum, comp + c - 4, 4);
        uint32_t ours = (uint32_t)ds_xxh64(in, n, 0);
        if (zsum != ours && bad++ < 5) CHECK(0, "length %zu: zstd %08x, ours %08x", n, zsum, ours);
    }
    CHECK(bad == 0, "%d lengths disagree with zstd's XXH64", bad);
    ZSTD_freeCCtx(cc);
    free(comp);
    free(data);
}

static const char *tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/test_ckpt_file_XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir;
}

/* Weights-like values, a run of zeros (padding) and a moment-like tail. */
static float value(int sec, int64_t e) {
    if (e % 97 < 5) return 0.0f;
    return (float)sin((double)e * 0.37 + sec) * (sec == 2 ? 1e-6f : 0.05f);
}

enum { LO = 1000, N = 1234, FE = 64 };

static void write_file(const char *path, ds_ckpt_filter filter) {
    ds_ckpt_header h = {.rank = 1, .world = 3, .lo = LO, .hi = LO + N};
    ds_ckpt_write_opts o;
    ds_ckpt_write_opts_defaults(&o);
    o.filter = filter;
    o.frame_elems = FE;
    ds_ckpt_writer *w;
    ds_status st = ds_ckpt_writer_open(path, &h, &o, &w);
    CHECK(st == DS_OK, "open: %s", ds_last_error());
    if (st != DS_OK) return;
    float buf[100];
    for (uint32_t sec = 0; sec < 3; sec++) {
        CHECK(ds_ckpt_writer_begin(w, sec, LO, LO + N) == DS_OK, "begin: %s", ds_last_error());
        /* pieces of odd sizes, crossing frame edges */
        for (int64_t e = LO; e < LO + N;) {
            int n = (int)((e * 7) % 100) + 1;
            if (e + n > LO + N) n = (int)(LO + N - e);
            for (int i = 0; i < n; i++) buf[i] = value((int)sec, e + i);
            CHECK(ds_ckpt_writer_append(w, buf, (size_t)n) == DS_OK, "append: %s",
                  ds_last_error());
            e += n;
        }
        CHECK(ds_ckpt_writer_end(w) == DS_OK, "end: %s", ds_last_error());
    }
    ds_ckpt_file_info info;
    CHECK(ds_ckpt_writer_finish(w, &info) == DS_OK, "finish: %s", ds_last_error());
    CHECK(info.raw_bytes == 3u * N * 4, "raw bytes %llu", (unsigned long long)info.raw_bytes);
}

static bool same_bits(const float *a, int sec, int64_t lo, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float want = value(sec, lo + i);
        if (memcmp(&a[i], &want, 4) != 0) {
            printf("  element %lld of section %d: %.9g, want %.9g\n", (long long)(lo + i), sec,
                   a[i], want);
            return false;
        }
    }
    return true;
}

static void test_roundtrip(ds_ckpt_filter filter) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt_%d.dsck", tmpdir(), (int)filter);
    write_file(path, filter);
    ds_ckpt_reader *r;
    ds_status st = ds_ckpt_reader_open(path, &r);
    CHECK(st == DS_OK, "reader_open: %s", ds_last_error());
    if (st != DS_OK) return;
    const ds_ckpt_header *h = ds_ckpt_reader_header(r);
    CHECK(h->rank == 1 && h->world == 3 && h->lo == LO && h->hi == LO + N && h->frame_elems == FE,
          "header fields");
    float all[N];
    for (int sec = 0; sec < 3; sec++) {
        CHECK(ds_ckpt_read(r, (uint32_t)sec, LO, LO + N, all) == DS_OK, "read: %s",
              ds_last_error());
        CHECK(same_bits(all, sec, LO, N), "section %d whole (filter %d)", sec, (int)filter);
    }
    CHECK(ds_ckpt_verify_all(r) == DS_OK, "verify_all: %s", ds_last_error());
    /* A range inside one frame decodes exactly one frame; a range across
     * three frames decodes three, and the cached last frame is reused. */
    ds_ckpt_io_stats a, b;
    float part[200];
    ds_ckpt_io_stats_reset();
    CHECK(ds_ckpt_read(r, 1, LO + 70, LO + 90, part) == DS_OK, "range read");
    CHECK(same_bits(part, 1, LO + 70, 20), "range inside a frame");
    ds_ckpt_io_stats_get(&a);
    CHECK(a.frames_decoded == 1, "inside one frame: %llu frames decoded",
          (unsigned long long)a.frames_decoded);
    CHECK(ds_ckpt_read(r, 1, LO + 90, LO + 250, part) == DS_OK, "range read 2");
    CHECK(same_bits(part, 1, LO + 90, 160), "range across frames");
    ds_ckpt_io_stats_get(&b);
    /* [90, 250) touches frames 1..3 of 64 elements; frame 1 is cached */
    CHECK(b.frames_decoded - a.frames_decoded == 2, "across frames: %llu decoded, want 2",
          (unsigned long long)(b.frames_decoded - a.frames_decoded));
    CHECK(ds_ckpt_read(r, 2, LO + N - 5, LO + N, part) == DS_OK, "tail read");
    CHECK(same_bits(part, 2, LO + N - 5, 5), "tail of the last (short) frame");
    CHECK(ds_ckpt_read(r, 0, LO - 1, LO + 3, part) == DS_ERR_INVALID_ARG,
          "a range outside the section must be refused");
    CHECK(ds_ckpt_read(r, 2, LO, LO, part) == DS_OK, "empty range");
    ds_ckpt_reader_close(r);
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    fclose(b);
}

static void poke(const char *path, long off) {
    int fd = open(path, O_RDWR);
    unsigned char c;
    if (off < 0) off += lseek(fd, 0, SEEK_END);
    pread(fd, &c, 1, off);
    c ^= 0x5a;
    pwrite(fd, &c, 1, off);
    close(fd);
}

static void expect_open_fails(const char *path, const char *needle) {
    ds_ckpt_reader *r = NULL;
    ds_status st = ds_ckpt_reader_open(path, &r);
    CHECK(st == DS_ERR_CORRUPT, "%s: open gave %s, want DS_ERR_CORRUPT", path,
          ds_status_to_string(st));
    CHECK(strstr(ds_last_error(), path) && strstr(ds_last_error(), needle),
          "message \"%s\" should name %s and say \"%s\"", ds_last_error(), path, needle);
    ds_ckpt_reader_close(r);
}

static void test_corruption(void) {
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/good.dsck", tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.dsck", tmpdir());
    write_file(good, DS_CKPT_FILTER_SHUFFLE);

    /* a byte inside frame 2 of the weights */
    copy_file(good, bad);
    poke(bad, DS_CKPT_HEADER_BYTES + 1); /* frame 0 starts right after the header */
    ds_ckpt_reader *r;
    CHECK(ds_ckpt_reader_open(bad, &r) == DS_OK, "a frame error is found when reading, not at "
          "open: %s", ds_last_error());
    float buf[N];
    ds_status st = ds_ckpt_read(r, 0, LO, LO + 10, buf);
    CHECK(st == DS_ERR_CORRUPT && strstr(ds_last_error(), bad) &&
              strstr(ds_last_error(), "weights frame 0") && strstr(ds_last_error(), "checksum"),
          "flipped frame byte: %s / %s", ds_status_to_string(st), ds_last_error());
    CHECK(ds_ckpt_read(r, 0, LO + 64, LO + N, buf) == DS_OK && same_bits(buf, 0, LO + 64, N - 64),
          "intact frames still read: %s", ds_last_error());
    CHECK(ds_ckpt_verify_all(r) == DS_ERR_CORRUPT, "verify_all must find the bad frame");
    ds_ckpt_reader_close(r);

    copy_file(good, bad);
    poke(bad, -DS_CKPT_TRAILER_BYTES - 3); /* inside the index */
    expect_open_fails(bad, "index checksum");

    copy_file(good, bad);
    poke(bad, 20); /* world, inside the hashed header */
    expect_open_fails(bad, "header checksum");

    copy_file(good, bad);
    poke(bad, 0);
    expect_open_fails(bad, "magic");

    copy_file(good, bad);
    off_t size;
    {
        int fd = open(bad, O_RDWR);
        size = lseek(fd, 0, SEEK_END);
        CHECK(ftruncate(fd, size - 100) == 0, "truncate");
        close(fd);
    }
    expect_open_fails(bad, "truncated");
    {
        int fd = open(bad, O_RDWR);
        CHECK(ftruncate(fd, 10) == 0, "truncate");
        close(fd);
    }
    expect_open_fails(bad, "truncated");
}

/* Rewrite bytes [off, off + 8) of `path` with v, then seal what a reader
 * checks again: the header's checksum (bytes 0..56) and the index's (in the
 * trailer), as a writer with a bug, or someone forging a file, would. What
 * is left is the reader's structural checks alone. */
static void put64_resealed(const char *path, long off, uint64_t v) {
    int fd = open(path, O_RDWR);
    off_t size = lseek(fd, 0, SEEK_END);
    unsigned char hb[DS_CKPT_HEADER_BYTES], tr[DS_CKPT_TRAILER_BYTES];
    CHECK(pwrite(fd, &v, 8, off) == 8, "patch %s", path);
    CHECK(pread(fd, hb, sizeof hb, 0) == (ssize_t)sizeof hb &&
              pread(fd, tr, sizeof tr, size - (off_t)sizeof tr) == (ssize_t)sizeof tr,
          "read %s", path);
    uint64_t h = ds_xxh64(hb, 56, 0), ioff, ibytes;
    memcpy(hb + 56, &h, 8);
    memcpy(&ioff, tr, 8);
    memcpy(&ibytes, tr + 8, 8);
    unsigned char *ix = malloc(ibytes);
    CHECK(ix && pread(fd, ix, ibytes, (off_t)ioff) == (ssize_t)ibytes, "read the index");
    h = ds_xxh64(ix, ibytes, 0);
    memcpy(tr + 16, &h, 8);
    CHECK(pwrite(fd, hb, sizeof hb, 0) == (ssize_t)sizeof hb &&
              pwrite(fd, tr, sizeof tr, size - (off_t)sizeof tr) == (ssize_t)sizeof tr,
          "reseal %s", path);
    free(ix);
    close(fd);
}

/* Found by reading the open checks while writing tests/fuzz/fuzz_ckpt_file
 * (issue 15), which exercises the same ground: three of them could be
 * defeated by unsigned wrap-around. */
static void test_index_wraparound(void) {
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/good.dsck", tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.dsck", tmpdir());
    write_file(good, DS_CKPT_FILTER_SHUFFLE);
    struct stat st;
    CHECK(stat(good, &st) == 0, "stat %s", good);
    uint64_t ioff;
    {
        int fd = open(good, O_RDONLY);
        CHECK(pread(fd, &ioff, 8, st.st_size - DS_CKPT_TRAILER_BYTES) == 8, "trailer");
        close(fd);
    }
    /* index: 8-byte head, 3 section records of 32 bytes, then the frames
     * (offset u64 first); header: hi at byte 32 */
    long frame0 = (long)ioff + 8 + 3 * 32, sec0 = (long)ioff + 8;

    /* a trailer placing the index at 2^64 - 16 with size - 16 bytes: the
     * sum wrapped to the file size and open read at a negative offset
     * (DS_ERR_IO "Invalid argument" for a damaged file) */
    copy_file(good, bad);
    {
        int fd = open(bad, O_RDWR);
        uint64_t tr[2] = {UINT64_MAX - 15, (uint64_t)st.st_size - 16};
        CHECK(pwrite(fd, tr, sizeof tr, st.st_size - DS_CKPT_TRAILER_BYTES) == sizeof tr,
              "patch the trailer");
        close(fd);
    }
    expect_open_fails(bad, "trailer places the index");

    /* frame 0 at offset 2^64 - 2: offset + stored wrapped below the index's
     * offset and open accepted it; a read then asked pread for a negative
     * offset (DS_ERR_IO instead of naming the bad frame) */
    copy_file(good, bad);
    put64_resealed(bad, frame0, UINT64_MAX - 1);
    expect_open_fails(bad, "weights frame 0");

    /* a section claiming 2^59 more frames, in a header range wide enough to
     * pass the per-section test: the frame count times 32 wrapped to the
     * index's true size and open went on to allocate 2^64 bytes (an OOM
     * status, or an abort under AddressSanitizer) */
    copy_file(good, bad);
    put64_resealed(bad, 32, (uint64_t)LO + (1ull << 60));       /* header hi */
    put64_resealed(bad, sec0 + 16, (uint64_t)LO + (1ull << 60)); /* weights hi */
    put64_resealed(bad, sec0 + 24, 20 + (1ull << 59));           /* weights frames */
    expect_open_fails(bad, "claims");
}

static void test_misuse(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/misuse.dsck", tmpdir());
    ds_ckpt_header h = {.rank = 0, .world = 1, .lo = 0, .hi = 10};
    ds_ckpt_writer *w;
    CHECK(ds_ckpt_writer_open(path, &h, NULL, &w) == DS_OK, "open");
    float v[11] = {0};
    CHECK(ds_ckpt_writer_begin(w, 0, 0, 10) == DS_OK, "begin");
    CHECK(ds_ckpt_writer_append(w, v, 11) == DS_ERR_INVALID_ARG, "11 values into 10");
    CHECK(ds_ckpt_writer_append(w, v, 4) == DS_OK, "4 values");
    CHECK(ds_ckpt_writer_end(w) == DS_ERR_INVALID_ARG, "ending after 4 of 10");
    CHECK(ds_ckpt_writer_append(w, v, 6) == DS_OK && ds_ckpt_writer_end(w) == DS_OK, "complete");
    CHECK(ds_ckpt_writer_begin(w, 0, 0, 10) == DS_ERR_INVALID_ARG, "weights twice");
    CHECK(ds_ckpt_writer_begin(w, 1, 0, 11) == DS_ERR_INVALID_ARG, "section past the file range");
    ds_ckpt_writer_abort(w);
    CHECK(access(path, F_OK) != 0, "abort removes the file");
    ds_ckpt_write_opts o;
    ds_ckpt_write_opts_defaults(&o);
    o.frame_elems = 3;
    CHECK(ds_ckpt_writer_open(path, &h, &o, &w) == DS_ERR_INVALID_ARG, "tiny frames refused");
}

static void test_fault_matcher(void) {
    CHECK(ds_fault_matches("ckpt:after_meta", "ckpt:after_meta", 3), "no rank = every rank");
    CHECK(ds_fault_matches("ckpt:after_shard_write:rank=1", "ckpt:after_shard_write", 1), "rank 1");
    CHECK(!ds_fault_matches("ckpt:after_shard_write:rank=1", "ckpt:after_shard_write", 0),
          "not rank 0");
    CHECK(!ds_fault_matches("ckpt:after_shard", "ckpt:after_shard_write", 0), "prefix only");
    CHECK(!ds_fault_matches("ckpt:after_shard_write_x", "ckpt:after_shard_write", 0), "longer");
    CHECK(ds_fault_matches("x:y,ckpt:after_latest:rank=*", "ckpt:after_latest", 7), "list, *");
    CHECK(!ds_fault_matches("", "ckpt:after_latest", 0) && !ds_fault_matches(NULL, "a", 0),
          "empty spec");
    CHECK(ds_fault_matches("a:b:rank=1:nth=2", "a:b", 1) && ds_fault_matches("a:b:nth=2", "a:b", 5),
          "nth with and without a rank");
    CHECK(!ds_fault_matches("a:b:rank=1:nth=2", "a:b", 0), "nth: not rank 0");
    CHECK(!ds_fault_matches("a:b:nth=0", "a:b", 0) && !ds_fault_matches("a:b:nth=", "a:b", 0) &&
              !ds_fault_matches("a:b:rank=1:bad=2", "a:b", 1),
          "bad qualifiers match nothing");
    unsetenv("DS_RESTART_COUNT");
    CHECK(ds_fault_matches("a:b:rank=1:restart=0", "a:b", 1) &&
              !ds_fault_matches("a:b:restart=1", "a:b", 1),
          "restart=K against no DS_RESTART_COUNT (the first start)");
    setenv("DS_RESTART_COUNT", "1", 1);
    CHECK(!ds_fault_matches("a:b:rank=1:restart=0", "a:b", 1) &&
              ds_fault_matches("a:b:restart=1:rank=1", "a:b", 1),
          "restart=K against DS_RESTART_COUNT=1");
    unsetenv("DS_RESTART_COUNT");
    /* error:...:nth=3 fails the third call only */
    setenv(DS_FAULT_ENV, "error:t:nth_site:rank=2:nth=3", 1);
    int fails[5];
    for (int k = 0; k < 5; k++) {
        fails[k] = ds_fault_error("t:nth_site", 2) != DS_OK;
        ds_clear_error();
    }
    CHECK(ds_fault_error("t:nth_site", 1) == DS_OK, "nth: another rank never fails");
    unsetenv(DS_FAULT_ENV);
    CHECK(!fails[0] && !fails[1] && fails[2] && !fails[3] && !fails[4],
          "nth=3: the calls failed %d %d %d %d %d", fails[0], fails[1], fails[2], fails[3],
          fails[4]);
    /* two specs on one site: each call counted once, both Ns fail */
    setenv(DS_FAULT_ENV, "error:t:two:nth=2,x:y,error:t:two:nth=4", 1);
    for (int k = 0; k < 5; k++) {
        fails[k] = ds_fault_error("t:two", 0) != DS_OK;
        ds_clear_error();
    }
    unsetenv(DS_FAULT_ENV);
    CHECK(!fails[0] && fails[1] && !fails[2] && fails[3] && !fails[4],
          "nth=2 and nth=4: the calls failed %d %d %d %d %d", fails[0], fails[1], fails[2],
          fails[3], fails[4]);
}

static void cleanup(void) {
    const char *names[] = {"rt_0.dsck", "rt_1.dsck", "good.dsck", "bad.dsck", "misuse.dsck"};
    char path[512];
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir(), names[k]);
        unlink(path);
    }
    rmdir(tmpdir());
}

int main(void) {
    test_xxh64();
    test_roundtrip(DS_CKPT_FILTER_SHUFFLE);
    test_roundtrip(DS_CKPT_FILTER_NONE);
    test_corruption();
    test_index_wraparound();
    test_misuse();
    test_fault_matcher();
    cleanup();
    return test_finish("test_ckpt_file");
}
