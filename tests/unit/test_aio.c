/* offload/aio.h, both engines (the io_uring one where this build and kernel
 * have it): requests cut into pieces by block_size across threads land
 * byte for byte, several requests under one ticket and two tickets at once
 * complete independently, a short file read reports EIO, and an injected
 * errno fails its ticket with the file offset of the first failed piece.
 *
 *   test_aio DIR   (DIR on a file system with O_DIRECT) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "offload/aio.h"
#include "tests/unit/test_util.h"

#define MIB (1u << 20)

static void run(const char *dir, ds_aio_engine engine, const char *name) {
    ds_aio *a;
    ds_aio_desc d = {.block_size = 3 * 4096, .queue_depth = 3, .thread_count = 2,
                     .engine = engine};
    if (ds_aio_create(&d, &a) != DS_OK) {
        CHECK(engine == DS_AIO_URING, "%s: %s", name, ds_last_error());
        printf("  %s: not available here (%s)\n", name, ds_last_error());
        return;
    }
    CHECK(!strcmp(ds_aio_engine_name(a), engine == DS_AIO_URING ? "io_uring" : "pool"),
          "%s: engine %s", name, ds_aio_engine_name(a));
    char path[1024];
    snprintf(path, sizeof path, "%s/test_aio_%s.bin", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
    CHECK(fd >= 0, "%s: open %s: %s", path, name, strerror(errno));
    if (fd < 0) return;
    unlink(path);
    unsigned char *w, *r;
    if (posix_memalign((void **)&w, 4096, 2 * MIB) || posix_memalign((void **)&r, 4096, 2 * MIB))
        TEST_DIE("out of memory");
    for (size_t i = 0; i < 2 * MIB; i++) w[i] = (unsigned char)(i * 7 + i / 4096);
    /* two requests (1 MiB + 1 MiB - 4 KiB: not a multiple of the block) under one ticket */
    ds_aio_req wr[2] = {{.fd = fd, .buf = w, .bytes = MIB, .off = 0, .write = true},
                        {.fd = fd, .buf = w + MIB, .bytes = MIB - 4096, .off = MIB, .write = true}};
    ds_aio_ticket t;
    ds_aio_ticket_init(&t);
    ds_aio_submit(a, wr, 2, &t);
    CHECK(ds_aio_wait(a, &t) && t.err == 0, "%s: write: %s", name, strerror(t.err));
    /* read back under two tickets at once, the second half first */
    memset(r, 0, 2 * MIB);
    ds_aio_req rd[2] = {{.fd = fd, .buf = r + MIB, .bytes = MIB - 4096, .off = MIB},
                        {.fd = fd, .buf = r, .bytes = MIB, .off = 0}};
    ds_aio_ticket t1, t2;
    ds_aio_ticket_init(&t1);
    ds_aio_ticket_init(&t2);
    ds_aio_submit(a, &rd[0], 1, &t1);
    ds_aio_submit(a, &rd[1], 1, &t2);
    CHECK(ds_aio_wait(a, &t2) && ds_aio_wait(a, &t1), "%s: read", name);
    CHECK(memcmp(r, w, 2 * MIB - 4096) == 0, "%s: the data read back differs", name);
    /* past the end of the file: no progress is EIO */
    ds_aio_req past = {.fd = fd, .buf = r, .bytes = 8192, .off = 4 * MIB};
    ds_aio_ticket_init(&t);
    ds_aio_submit(a, &past, 1, &t);
    CHECK(!ds_aio_wait(a, &t) && t.err == EIO && t.err_off == 4 * MIB,
          "%s: read past the end: err %d at %llu", name, t.err, (unsigned long long)t.err_off);
    /* an injected full disk fails its ticket, naming the first piece */
    ds_aio_req full = {.fd = fd, .buf = w, .bytes = 65536, .off = 8192, .write = true,
                       .inject_errno = ENOSPC};
    ds_aio_ticket_init(&t);
    ds_aio_submit(a, &full, 1, &t);
    CHECK(!ds_aio_wait(a, &t) && t.err == ENOSPC && t.err_write && t.err_fd == fd &&
              t.err_off >= 8192 && t.err_off < 8192 + 65536,
          "%s: injected ENOSPC: err %d write %d off %llu", name, t.err, t.err_write,
          (unsigned long long)t.err_off);
    /* nothing pending: returns at once */
    ds_aio_ticket_init(&t);
    CHECK(ds_aio_wait(a, &t), "%s: an empty ticket", name);
    close(fd);
    free(w);
    free(r);
    ds_aio_destroy(a);
    printf("  %s: ok\n", name);
}

int main(int argc, char **argv) {
    if (argc < 2) TEST_DIE("usage: test_aio DIR");
    run(argv[1], DS_AIO_POOL, "pool");
    run(argv[1], DS_AIO_URING, "uring");
    return test_finish("test_aio");
}
