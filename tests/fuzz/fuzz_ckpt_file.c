/* Checkpoint shard files (engine/io/ckpt_file_read.c): header, trailer,
 * frame index and the zstd frames, read the way a load, zero_to_fp32 and
 * --verify read them.
 *
 * The header, the index and every frame carry an XXH64 that a fuzzer
 * cannot forge, so with bit 0 of the flags byte set the harness recomputes
 * them where the input's own layout says they are (as a writer would have),
 * letting the bytes reach the index and frame parsers; clear, the input is
 * read as it is (the checksum checks and their messages).
 *
 * Input: one flags byte, then the file. A file that opens is read through:
 * ds_ckpt_read_header, every section verified (ds_ckpt_verify_all), read
 * whole, and read again in two pieces around an inner element (the frame
 * cache). The reader checked the index at open, so on a regular file that
 * opened a read may fail only for what the index cannot vouch for: a frame
 * whose bytes do not match their hash or do not decompress (DS_ERR_CORRUPT);
 * any other failure means open let a bad index through. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/io/ckpt_file.h"
#include "engine/io/hash.h"
#include "tests/fuzz/fuzz_util.h"

static uint64_t get64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* Recompute the checksums of b[0..n) in place (ckpt_file.h's layout). */
static void fix_checksums(uint8_t *b, size_t n) {
    if (n >= DS_CKPT_HEADER_BYTES) put64(b + 56, ds_xxh64(b, 56, 0));
    if (n < DS_CKPT_HEADER_BYTES + DS_CKPT_TRAILER_BYTES + 8) return;
    uint8_t *tr = b + n - DS_CKPT_TRAILER_BYTES;
    uint64_t ioff = get64(tr), ibytes = get64(tr + 8);
    if (ioff > n || ibytes > n - ioff || ibytes < 8) return;
    uint8_t *ix = b + ioff;
    uint64_t ns = get32(ix);
    if (ns > DS_CKPT_SECTION_COUNT || 8 + ns * 32 > ibytes) return;
    uint64_t frames = 0;
    for (uint64_t k = 0; k < ns; k++) {
        uint64_t f = get64(ix + 8 + k * 32 + 24);
        if (f > ibytes / 32) return;
        frames += f;
    }
    uint8_t *fr = ix + 8 + ns * 32;
    for (uint64_t j = 0; j < frames && (uint64_t)(fr - ix) + 32 <= ibytes; j++, fr += 32) {
        uint64_t off = get64(fr), stored = get32(fr + 8);
        if (off <= n && stored <= n - off) put64(fr + 24, ds_xxh64(b + off, stored, 0));
    }
    put64(tr + 16, ds_xxh64(ix, ibytes, 0));
}

/* A read of a file that opened: OK, or CORRUPT for a frame's own bytes. */
static void expect_ok_or_corrupt(ds_status st, const char *what) {
    fz_check(st, what);
    if (st != DS_OK && st != DS_ERR_CORRUPT)
        fz_fail("%s failed with %s on a file that opened: %s", what, ds_status_to_string(st),
                ds_last_error());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t *b = malloc(size);
    if (!b) abort();
    memcpy(b, data + 1, size - 1);
    if (data[0] & 1) fix_checksums(b, size - 1);
    const char *path = fz_write("shard-00000-of-00001.dsck", b, size - 1);
    free(b);

    ds_ckpt_header h;
    fz_begin();
    ds_status hst = fz_check(ds_ckpt_read_header(path, &h), "ds_ckpt_read_header");
    ds_ckpt_reader *r = NULL;
    fz_begin();
    if (fz_check(ds_ckpt_reader_open(path, &r), "ds_ckpt_reader_open") != DS_OK) return 0;
    if (hst != DS_OK) fz_fail("the file opens but its header alone does not read");
    const ds_ckpt_header *rh = ds_ckpt_reader_header(r);
    if (rh->lo != h.lo || rh->hi != h.hi || rh->rank != h.rank || rh->world != h.world)
        fz_fail("ds_ckpt_read_header and the reader disagree on the header");
    ds_ckpt_file_info info;
    ds_ckpt_reader_info(r, &info);
    if (info.file_bytes != size - 1) fz_fail("info: %llu bytes, the file has %zu",
                                             (unsigned long long)info.file_bytes, size - 1);
    fz_begin();
    expect_ok_or_corrupt(ds_ckpt_verify_all(r), "ds_ckpt_verify_all");
    for (uint32_t id = 0; id < DS_CKPT_SECTION_COUNT; id++) {
        int64_t lo, hi;
        if (!ds_ckpt_reader_section(r, id, &lo, &hi)) continue;
        /* a rank's own state is not in the flat space: [0, n) whatever the
         * header's range (ckpt_file.h) */
        bool own = id == DS_CKPT_RANK_STATE;
        if (own ? lo != 0 || lo > hi : lo < h.lo || hi > h.hi || lo > hi)
            fz_fail("section %u [%lld, %lld) outside the %s", id, (long long)lo, (long long)hi,
                    own ? "rank state's [0, n)" : "header's range");
        if (ds_ckpt_reader_section_stored(r, id) > info.file_bytes)
            fz_fail("section %u stores more bytes than the file has", id);
        /* every frame holds at least one element and at most the frame size,
         * and its stored bytes are in the file: a section this long in a file
         * this short was let through */
        if (hi - lo > (int64_t)DS_CKPT_FRAME_ELEMS_MAX * (int64_t)(size / 32 + 1))
            fz_fail("section %u of %lld elements in a file of %zu bytes", id,
                    (long long)(hi - lo), size - 1);
        if (hi - lo > (1 << 22)) continue; /* real but too large to read here */
        float *v = malloc(((size_t)(hi - lo) + 1) * sizeof *v);
        if (!v) abort();
        fz_begin();
        expect_ok_or_corrupt(ds_ckpt_read(r, id, lo, hi, v), "ds_ckpt_read");
        int64_t mid = lo + (hi - lo) / 3;
        fz_begin();
        expect_ok_or_corrupt(ds_ckpt_read(r, id, mid, hi, v), "ds_ckpt_read");
        fz_begin();
        expect_ok_or_corrupt(ds_ckpt_read(r, id, lo, mid, v), "ds_ckpt_read");
        fz_begin();
        if (ds_ckpt_read(r, id, lo, hi + 1, v) == DS_OK)
            fz_fail("section %u: a read past its end succeeded", id);
        free(v);
    }
    ds_ckpt_reader_drop_buffers(r);
    ds_ckpt_reader_close(r);
    return 0;
}
