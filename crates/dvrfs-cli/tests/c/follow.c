/*
 * A C client of a mounted volume (tests/remote_cli.rs): opens the image, which a
 * dvrfs mount daemon holds, so every call goes through the daemon's socket.
 *
 *   follow IMAGE REF_PATH LIVE_PATH TOTAL_BYTES OUT_FILE
 *
 * 1. Deadlines reach the daemon's engine: a read of REF_PATH (a file on the disk)
 *    due 1 ms in the past must fail with -ETIME; the same read due 5 s ahead must
 *    succeed.
 * 2. Follows the recording LIVE_PATH as it grows: waits for it to exist, then reads
 *    it with asynchronous reads due 2 s after they start, as far as its size says,
 *    until TOTAL_BYTES are read; writes them to OUT_FILE.
 *
 * Waiting for the file and for it to grow is bounded (60 s in all); exit 0 when all
 * went as above, otherwise non-zero with the reason on stderr.
 */
#include <dvrfs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PIECE = 256 << 10, WAIT_STEP_MS = 10, WAIT_MAX_MS = 60000 };

static int fail(const char *what, int64_t code) {
    fprintf(stderr, "follow: %s: %s (%s)\n", what, dvrfs_strerror((int)code), dvrfs_last_error());
    return 1;
}

static void nap(void) {
    struct timespec ts = {0, WAIT_STEP_MS * 1000000L};
    nanosleep(&ts, NULL);
}

/* One asynchronous read of n bytes at off into buf, due at deadline; its result. */
static int64_t read_due(struct dvrfs *fs, int fd, uint8_t *buf, uint64_t off, uint64_t n,
                        int64_t deadline, int *late) {
    struct dvrfs_aiocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_fildes = fd;
    cb.aio_lio_opcode = DVRFS_AIO_READ;
    cb.aio_offset = off;
    cb.aio_buf = buf;
    cb.aio_nbytes = n;
    cb.aio_deadline = deadline;
    int r = dvrfs_aio_start(fs, &cb);
    if (r < 0) return r;
    r = dvrfs_aio_check(fs, &cb, 1);
    if (r < 0) return r;
    if (late) *late = cb.aio_late;
    return cb.aio_result;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: follow IMAGE REF_PATH LIVE_PATH TOTAL_BYTES OUT_FILE\n");
        return 2;
    }
    uint64_t total = strtoull(argv[4], NULL, 10);
    struct dvrfs *fs = NULL;
    int r = dvrfs_open(argv[1], NULL, &fs);
    if (r < 0) return fail("open", r);
    uint8_t *buf;
    if (posix_memalign((void **)&buf, DVRFS_ALIGN, PIECE)) return 1;

    /* 1. A deadline in the past, then one ahead. */
    int ref = dvrfs_file_open(fs, argv[2], 0, 0);
    if (ref < 0) return fail("open the reference file", ref);
    int64_t got = read_due(fs, ref, buf, 0, 65536, dvrfs_now_ns() - 1000000, NULL);
    if (got != -ETIME) {
        fprintf(stderr, "follow: a read due in the past gave %lld, not -ETIME (%s)\n",
                (long long)got, dvrfs_last_error());
        return 3;
    }
    printf("past deadline: %s\n", dvrfs_strerror((int)got));
    got = read_due(fs, ref, buf, 0, 65536, dvrfs_now_ns() + 5000000000LL, NULL);
    if (got != 65536) return fail("a read due in 5 s", got);
    printf("future deadline: %lld bytes\n", (long long)got);

    /* 2. Follow the recording. */
    FILE *out = fopen(argv[5], "wb");
    if (!out) return 1;
    int waited_ms = 0, fd = -1;
    while ((fd = dvrfs_file_open(fs, argv[3], 0, 0)) < 0) {
        if (fd != -ENOENT || waited_ms >= WAIT_MAX_MS) return fail("open the recording", fd);
        nap();
        waited_ms += WAIT_STEP_MS;
    }
    uint64_t pos = 0;
    int late = 0, reads = 0;
    while (pos < total) {
        int64_t size = dvrfs_file_size(fs, fd);
        if (size < 0) return fail("size", size);
        if ((uint64_t)size <= pos) {
            if (waited_ms >= WAIT_MAX_MS) {
                fprintf(stderr, "follow: the recording stopped at %lld bytes\n", (long long)size);
                return 4;
            }
            nap();
            waited_ms += WAIT_STEP_MS;
            continue;
        }
        uint64_t n = (uint64_t)size - pos;
        if (n > PIECE) n = PIECE;
        int was_late = 0;
        got = read_due(fs, fd, buf, pos, n, dvrfs_now_ns() + 2000000000LL, &was_late);
        if (got <= 0) return fail("a read of the recording", got);
        fwrite(buf, 1, (size_t)got, out);
        pos += (uint64_t)got;
        late += was_late;
        reads++;
    }
    fclose(out);
    printf("followed: %llu bytes in %d reads with deadlines, %d late\n", (unsigned long long)pos,
           reads, late);
    r = dvrfs_file_close(fs, fd);
    if (r < 0) return fail("close", r);
    r = dvrfs_close(fs);
    if (r < 0) return fail("close the volume", r);
    return 0;
}
