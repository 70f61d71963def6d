/* Shard-file reader: validates header, trailer and index at open, then reads
 * element ranges by decompressing only the frames they touch (format in
 * ckpt_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "engine/io/ckpt_file_internal.h"
#include "engine/io/hash.h"

struct ds_ckpt_reader {
    int fd;
    char *path;
    ds_ckpt_header h;
    ds_ckpt_file_info info;
    ck_section sec[DS_CKPT_SECTION_COUNT];
    int n_sec;
    ck_frame *frames;
    uint32_t max_stored;
    /* frame buffers, allocated on first use */
    ZSTD_DCtx *dctx;
    unsigned char *comp, *raw, *shuf;
    int cached_sec;      /* section index of the frame in raw, or -1 */
    uint64_t cached_frame;
};

static _Atomic uint64_t g_bytes_read, g_frames_decoded, g_raw_decoded, g_frames_verified;

void ds_ckpt_count_read(uint64_t bytes) { atomic_fetch_add(&g_bytes_read, bytes); }

void ds_ckpt_io_stats_get(ds_ckpt_io_stats *out) {
    out->bytes_read = atomic_load(&g_bytes_read);
    out->frames_decoded = atomic_load(&g_frames_decoded);
    out->raw_decoded = atomic_load(&g_raw_decoded);
    out->frames_verified = atomic_load(&g_frames_verified);
}

void ds_ckpt_io_stats_reset(void) {
    atomic_store(&g_bytes_read, 0);
    atomic_store(&g_frames_decoded, 0);
    atomic_store(&g_raw_decoded, 0);
    atomic_store(&g_frames_verified, 0);
}

ds_status ds_ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    char *p = buf;
    size_t want = n;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return DS_ERR(DS_ERR_IO, "%s: read of %zu bytes at offset %llu failed: %s", path,
                          want, (unsigned long long)off, strerror(errno));
        }
        if (k == 0)
            return DS_ERR(DS_ERR_CORRUPT, "%s: file ends at %llu, %zu more bytes expected "
                          "(truncated?)", path, (unsigned long long)off, n);
        p += k;
        off += (uint64_t)k;
        n -= (size_t)k;
    }
    ds_ckpt_count_read(want);
    return DS_OK;
}

static ds_status corrupt(const ds_ckpt_reader *r, const char *what) {
    return DS_ERR(DS_ERR_CORRUPT, "%s: %s", r->path, what);
}

/* Parse and check the index bytes ix[0..n) against the file. */
static ds_status parse_index(ds_ckpt_reader *r, const unsigned char *ix, uint64_t n,
                             uint64_t index_off) {
    char msg[256];
    if (n < CKPT_INDEX_HEAD) return corrupt(r, "index shorter than its head");
    uint32_t ns = ck_get32(ix);
    if (ns > DS_CKPT_SECTION_COUNT) {
        snprintf(msg, sizeof msg, "index names %u sections, at most %d exist", ns,
                 DS_CKPT_SECTION_COUNT);
        return corrupt(r, msg);
    }
    if (n < CKPT_INDEX_HEAD + (uint64_t)ns * CKPT_SECTION_REC) return corrupt(r, "index cut short");
    uint64_t total = 0;
    const unsigned char *p = ix + CKPT_INDEX_HEAD;
    for (uint32_t k = 0; k < ns; k++, p += CKPT_SECTION_REC) {
        ck_section *s = &r->sec[k];
        *s = (ck_section){.id = ck_get32(p), .filter = ck_get32(p + 4),
                          .lo = (int64_t)ck_get64(p + 8), .hi = (int64_t)ck_get64(p + 16),
                          .n_frames = ck_get64(p + 24)};
        if (s->id >= DS_CKPT_SECTION_COUNT || s->filter > DS_CKPT_FILTER_SHUFFLE ||
            (s->id == DS_CKPT_RANK_STATE ? s->lo != 0
                                         : s->lo < r->h.lo || s->hi > r->h.hi) ||
            s->lo > s->hi ||
            s->n_frames > (uint64_t)(s->hi - s->lo)) {
            snprintf(msg, sizeof msg, "index entry %u (section id %u, filter %u, [%lld, %lld), "
                     "%llu frames) does not fit the header's range [%lld, %lld)", k, s->id,
                     s->filter, (long long)s->lo, (long long)s->hi,
                     (unsigned long long)s->n_frames, (long long)r->h.lo, (long long)r->h.hi);
            return corrupt(r, msg);
        }
        /* Each frame takes CKPT_FRAME_REC index bytes: a count beyond what
         * the index holds is refused here, before the counts are summed and
         * multiplied (2^59 frames would wrap the size check below to a
         * match, and the allocation of the frame table to a huge one). */
        if (s->n_frames > (n - CKPT_INDEX_HEAD) / CKPT_FRAME_REC) {
            snprintf(msg, sizeof msg, "index entry %u claims %llu frames, more than the index's "
                     "%llu bytes hold", k, (unsigned long long)s->n_frames, (unsigned long long)n);
            return corrupt(r, msg);
        }
        for (uint32_t j = 0; j < k; j++)
            if (r->sec[j].id == s->id) return corrupt(r, "a section appears twice in the index");
        total += s->n_frames;
    }
    r->n_sec = (int)ns;
    if (n != CKPT_INDEX_HEAD + (uint64_t)ns * CKPT_SECTION_REC + total * CKPT_FRAME_REC)
        return corrupt(r, "index size does not match its frame count");
    r->frames = calloc(total ? total : 1, sizeof *r->frames);
    if (!r->frames) return DS_ERR(DS_ERR_OOM, "%s: out of host memory for the index", r->path);
    uint64_t end_prev = DS_CKPT_HEADER_BYTES;
    size_t bound = ZSTD_compressBound((size_t)r->h.frame_elems * 4);
    ck_frame *f = r->frames;
    for (int k = 0; k < r->n_sec; k++) {
        ck_section *s = &r->sec[k];
        s->frames = f;
        int64_t next = s->lo;
        for (uint64_t j = 0; j < s->n_frames; j++, f++, p += CKPT_FRAME_REC) {
            *f = (ck_frame){.offset = ck_get64(p), .stored = ck_get32(p + 8),
                            .elems = ck_get32(p + 12), .first = (int64_t)ck_get64(p + 16),
                            .hash = ck_get64(p + 24)};
            /* offset + stored is not formed: near 2^64 it would wrap below
             * index_off and let a frame "inside" the file be read at a
             * negative file offset */
            if (f->offset < end_prev || f->stored > index_off ||
                f->offset > index_off - f->stored || f->stored == 0 ||
                f->stored > bound || f->elems == 0 || f->elems > r->h.frame_elems ||
                f->first != next) {
                snprintf(msg, sizeof msg, "section %s frame %llu (offset %llu, %u bytes, "
                         "elements %lld + %u) is out of place", ds_ckpt_section_name(s->id),
                         (unsigned long long)j, (unsigned long long)f->offset, f->stored,
                         (long long)f->first, f->elems);
                return corrupt(r, msg);
            }
            end_prev = f->offset + f->stored;
            next += f->elems;
            if (f->stored > r->max_stored) r->max_stored = f->stored;
        }
        if (next != s->hi) {
            snprintf(msg, sizeof msg, "section %s frames end at element %lld, the section at %lld",
                     ds_ckpt_section_name(s->id), (long long)next, (long long)s->hi);
            return corrupt(r, msg);
        }
        r->info.raw_bytes += (uint64_t)(s->hi - s->lo) * 4;
    }
    return DS_OK;
}

/* Header bytes hb of r->path into r->h, checked. */
static ds_status parse_header(ds_ckpt_reader *r, const unsigned char *hb) {
    char msg[128];
    if (memcmp(hb, CKPT_MAGIC, 8) != 0) return corrupt(r, "not a zero-engine shard file (magic)");
    uint32_t version = ck_get32(hb + 8);
    if (version != DS_CKPT_FILE_VERSION) {
        snprintf(msg, sizeof msg, "format version %u, this build reads %d", version,
                 DS_CKPT_FILE_VERSION);
        return corrupt(r, msg);
    }
    if (ck_get64(hb + 56) != ds_xxh64(hb, 56, 0)) return corrupt(r, "header checksum mismatch");
    r->h = (ds_ckpt_header){.rank = ck_get32(hb + 16), .world = ck_get32(hb + 20),
                            .lo = (int64_t)ck_get64(hb + 24), .hi = (int64_t)ck_get64(hb + 32),
                            .frame_elems = ck_get32(hb + 40)};
    if (ck_get32(hb + 12) != DS_CKPT_HEADER_BYTES || r->h.lo < 0 || r->h.lo > r->h.hi ||
        r->h.frame_elems < DS_CKPT_FRAME_ELEMS_MIN || r->h.frame_elems > DS_CKPT_FRAME_ELEMS_MAX ||
        r->h.world == 0 || r->h.rank >= r->h.world)
        return corrupt(r, "header fields out of range");
    return DS_OK;
}

ds_status ds_ckpt_read_header(const char *path, ds_ckpt_header *out) {
    ds_ckpt_reader r = {.path = (char *)path};
    unsigned char hb[DS_CKPT_HEADER_BYTES];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ds_status st = ds_ckpt_pread_all(fd, hb, sizeof hb, 0, path);
    close(fd);
    DS_TRY(st);
    DS_TRY(parse_header(&r, hb));
    *out = r.h;
    return DS_OK;
}

static ds_status open_checked(ds_ckpt_reader *r) {
    struct stat stt;
    if (fstat(r->fd, &stt) != 0)
        return DS_ERR(DS_ERR_IO, "%s: stat failed: %s", r->path, strerror(errno));
    uint64_t size = (uint64_t)stt.st_size;
    r->info.file_bytes = size;
    char msg[256];
    if (size < DS_CKPT_HEADER_BYTES + DS_CKPT_TRAILER_BYTES + CKPT_INDEX_HEAD) {
        snprintf(msg, sizeof msg, "%llu bytes: truncated (a shard file has at least %d)",
                 (unsigned long long)size,
                 DS_CKPT_HEADER_BYTES + DS_CKPT_TRAILER_BYTES + CKPT_INDEX_HEAD);
        return corrupt(r, msg);
    }
    unsigned char hb[DS_CKPT_HEADER_BYTES], tr[DS_CKPT_TRAILER_BYTES];
    DS_TRY(ds_ckpt_pread_all(r->fd, hb, sizeof hb, 0, r->path));
    DS_TRY(parse_header(r, hb));
    DS_TRY(ds_ckpt_pread_all(r->fd, tr, sizeof tr, size - sizeof tr, r->path));
    if (memcmp(tr + 24, CKPT_END_MAGIC, 8) != 0) {
        snprintf(msg, sizeof msg, "no trailer at the end of its %llu bytes: truncated, or the "
                 "writer never finished", (unsigned long long)size);
        return corrupt(r, msg);
    }
    uint64_t ioff = ck_get64(tr), ibytes = ck_get64(tr + 8);
    /* no sum of the two: a huge offset would wrap it back to the file size */
    if (ioff < DS_CKPT_HEADER_BYTES || ioff > size - sizeof tr ||
        ibytes != size - sizeof tr - ioff) {
        snprintf(msg, sizeof msg, "trailer places the index at %llu + %llu in a file of %llu "
                 "bytes", (unsigned long long)ioff, (unsigned long long)ibytes,
                 (unsigned long long)size);
        return corrupt(r, msg);
    }
    unsigned char *ix = malloc(ibytes ? ibytes : 1);
    if (!ix) return DS_ERR(DS_ERR_OOM, "%s: out of host memory for a %llu-byte index", r->path,
                           (unsigned long long)ibytes);
    ds_status st = ds_ckpt_pread_all(r->fd, ix, ibytes, ioff, r->path);
    if (st == DS_OK && ds_xxh64(ix, ibytes, 0) != ck_get64(tr + 16))
        st = corrupt(r, "index checksum mismatch");
    r->info.index_hash = ck_get64(tr + 16);
    if (st == DS_OK) st = parse_index(r, ix, ibytes, ioff);
    free(ix);
    DS_TRY(st);
    return DS_OK;
}

ds_status ds_ckpt_reader_open(const char *path, ds_ckpt_reader **out) {
    *out = NULL;
    ds_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return DS_ERR(DS_ERR_OOM, "%s: out of host memory", path);
    r->cached_sec = -1;
    r->path = strdup(path);
    r->fd = r->path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (!r->path || r->fd < 0) {
        ds_status st = r->path ? DS_ERR(DS_ERR_IO, "%s: cannot open: %s", path, strerror(errno))
                               : DS_ERR(DS_ERR_OOM, "%s: out of host memory", path);
        ds_ckpt_reader_close(r);
        return st;
    }
    ds_status st = open_checked(r);
    if (st != DS_OK) {
        ds_error_trace(__FILE__, __LINE__);
        ds_ckpt_reader_close(r);
        return st;
    }
    *out = r;
    return DS_OK;
}

void ds_ckpt_reader_drop_buffers(ds_ckpt_reader *r) {
    ZSTD_freeDCtx(r->dctx);
    free(r->comp);
    free(r->raw);
    free(r->shuf);
    r->dctx = NULL;
    r->comp = r->raw = r->shuf = NULL;
    r->cached_sec = -1;
}

void ds_ckpt_reader_close(ds_ckpt_reader *r) {
    if (!r) return;
    ds_ckpt_reader_drop_buffers(r);
    if (r->fd >= 0) close(r->fd);
    free(r->frames);
    free(r->path);
    free(r);
}

const char *ds_ckpt_reader_path(const ds_ckpt_reader *r) { return r->path; }
const ds_ckpt_header *ds_ckpt_reader_header(const ds_ckpt_reader *r) { return &r->h; }
void ds_ckpt_reader_info(const ds_ckpt_reader *r, ds_ckpt_file_info *out) { *out = r->info; }

static int find_section(const ds_ckpt_reader *r, uint32_t id) {
    for (int k = 0; k < r->n_sec; k++)
        if (r->sec[k].id == id) return k;
    return -1;
}

bool ds_ckpt_reader_section(const ds_ckpt_reader *r, uint32_t id, int64_t *lo, int64_t *hi) {
    int k = find_section(r, id);
    if (k < 0) return false;
    if (lo) *lo = r->sec[k].lo;
    if (hi) *hi = r->sec[k].hi;
    return true;
}

uint64_t ds_ckpt_reader_section_stored(const ds_ckpt_reader *r, uint32_t id) {
    int k = find_section(r, id);
    uint64_t sum = 0;
    for (uint64_t j = 0; k >= 0 && j < r->sec[k].n_frames; j++) sum += r->sec[k].frames[j].stored;
    return sum;
}

/* Section index for [lo, hi) of id, or an error naming the problem. */
static ds_status range_section(const ds_ckpt_reader *r, uint32_t id, int64_t lo, int64_t hi,
                               int *out) {
    int k = find_section(r, id);
    if (k < 0)
        return DS_ERR(DS_ERR_INVALID_ARG, "%s: has no %s section", r->path,
                      ds_ckpt_section_name(id));
    const ck_section *s = &r->sec[k];
    if (lo > hi || lo < s->lo || hi > s->hi)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "%s: elements [%lld, %lld) outside section %s [%lld, %lld)", r->path, (long long)lo, (long long)hi, ds_ckpt_section_name(id),
                      (long long)s->lo, (long long)s->hi);
    *out = k;
    return DS_OK;
}

/* First frame of s holding element e (frames are contiguous and ordered). */
static uint64_t frame_at(const ck_section *s, int64_t e) {
    uint64_t a = 0, b = s->n_frames;
    while (b - a > 1) {
        uint64_t m = a + (b - a) / 2;
        if (s->frames[m].first <= e) a = m;
        else b = m;
    }
    return a;
}

static ds_status ensure_buffers(ds_ckpt_reader *r) {
    if (r->raw) return DS_OK;
    size_t fb = (size_t)r->h.frame_elems * 4;
    r->dctx = ZSTD_createDCtx();
    r->comp = malloc(r->max_stored ? r->max_stored : 1);
    r->raw = malloc(fb);
    r->shuf = malloc(fb);
    if (!r->dctx || !r->comp || !r->raw || !r->shuf) {
        ds_ckpt_reader_drop_buffers(r);
        return DS_ERR(DS_ERR_OOM, "%s: out of host memory for frame buffers (%zu bytes)", r->path,
                      2 * fb + r->max_stored);
    }
    return DS_OK;
}

/* Read frame j of section k's stored bytes into r->comp and check its hash. */
static ds_status load_stored(ds_ckpt_reader *r, int k, uint64_t j) {
    const ck_section *s = &r->sec[k];
    const ck_frame *f = &s->frames[j];
    DS_TRY(ds_ckpt_pread_all(r->fd, r->comp, f->stored, f->offset, r->path));
    if (ds_xxh64(r->comp, f->stored, 0) != f->hash)
        return DS_ERR(DS_ERR_CORRUPT, "%s: section %s frame %llu (elements %lld..%lld, %u bytes "
                      "at offset %llu): checksum mismatch", r->path, ds_ckpt_section_name(s->id),
                      (unsigned long long)j, (long long)f->first,
                      (long long)(f->first + f->elems), f->stored,
                      (unsigned long long)f->offset);
    return DS_OK;
}

static ds_status decode_frame(ds_ckpt_reader *r, int k, uint64_t j) {
    if (r->cached_sec == k && r->cached_frame == j) return DS_OK;
    DS_TRY(ensure_buffers(r));
    r->cached_sec = -1;
    DS_TRY(load_stored(r, k, j));
    const ck_section *s = &r->sec[k];
    const ck_frame *f = &s->frames[j];
    size_t nb = (size_t)f->elems * 4;
    unsigned char *dst = s->filter == DS_CKPT_FILTER_SHUFFLE ? r->shuf : r->raw;
    size_t got = ZSTD_decompressDCtx(r->dctx, dst, nb, r->comp, f->stored);
    if (ZSTD_isError(got) || got != nb)
        return DS_ERR(DS_ERR_CORRUPT, "%s: section %s frame %llu (offset %llu) does not "
                      "decompress to its %zu bytes: %s", r->path, ds_ckpt_section_name(s->id),
                      (unsigned long long)j, (unsigned long long)f->offset, nb,
                      ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
    if (s->filter == DS_CKPT_FILTER_SHUFFLE) ck_unshuffle(r->shuf, r->raw, f->elems);
    atomic_fetch_add(&g_frames_decoded, 1);
    atomic_fetch_add(&g_raw_decoded, nb);
    r->cached_sec = k;
    r->cached_frame = j;
    return DS_OK;
}

ds_status ds_ckpt_read(ds_ckpt_reader *r, uint32_t id, int64_t lo, int64_t hi, float *dst) {
    int k;
    DS_TRY(range_section(r, id, lo, hi, &k));
    const ck_section *s = &r->sec[k];
    if (lo == hi) return DS_OK;
    for (uint64_t j = frame_at(s, lo); lo < hi; j++) {
        const ck_frame *f = &s->frames[j];
        DS_TRY(decode_frame(r, k, j));
        int64_t end = f->first + f->elems < hi ? f->first + f->elems : hi;
        memcpy(dst, r->raw + (size_t)(lo - f->first) * 4, (size_t)(end - lo) * 4);
        dst += end - lo;
        lo = end;
    }
    return DS_OK;
}

ds_status ds_ckpt_verify_range(ds_ckpt_reader *r, uint32_t id, int64_t lo, int64_t hi) {
    int k;
    DS_TRY(range_section(r, id, lo, hi, &k));
    const ck_section *s = &r->sec[k];
    if (lo == hi) return DS_OK;
    DS_TRY(ensure_buffers(r)); /* only comp is used: a cached decoded frame stays valid */
    for (uint64_t j = frame_at(s, lo); j < s->n_frames && s->frames[j].first < hi; j++) {
        DS_TRY(load_stored(r, k, j));
        atomic_fetch_add(&g_frames_verified, 1);
    }
    return DS_OK;
}

ds_status ds_ckpt_verify_all(ds_ckpt_reader *r) {
    for (int k = 0; k < r->n_sec; k++)
        DS_TRY(ds_ckpt_verify_range(r, r->sec[k].id, r->sec[k].lo, r->sec[k].hi));
    return DS_OK;
}
