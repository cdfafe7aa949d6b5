/*
 * A player on dvrfs: reads a recording back with deadline-aware asynchronous I/O
 * (four 1 MiB requests in flight, each due two seconds after it is started), checks
 * every byte, then plays the start again through a stream reservation at a rate.
 * Finally it checks that bad calls fail cleanly: a misaligned buffer, a NULL
 * pointer, an unknown file, a handle after close.
 *
 *   player IMAGE PATH RATE_MBIT
 *
 * Exit 0 when every byte is right, nothing was late and every bad call was refused.
 */
#include <dvrfs.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pattern.h"

enum { DEPTH = 4, CHUNK = 1 << 20 };

static int fail(const char *what, int64_t code) {
    fprintf(stderr, "player: %s: %s (%s)\n", what, dvrfs_strerror((int)code), dvrfs_last_error());
    return 1;
}

static int check_bytes(const uint8_t *b, uint64_t at, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(at + (uint64_t)i)) {
            fprintf(stderr, "player: wrong byte at %llu\n", (unsigned long long)(at + (uint64_t)i));
            return 1;
        }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: player IMAGE PATH RATE_MBIT\n");
        return 2;
    }
    struct dvrfs_options opts = {0};
    opts.read_only = 1;
    struct dvrfs *fs = NULL;
    int r = dvrfs_open(argv[1], &opts, &fs);
    if (r < 0) return fail("open", r);
    int fd = dvrfs_file_open(fs, argv[2], 0, 0);
    if (fd < 0) return fail("open file", fd);
    int64_t size = dvrfs_file_size(fs, fd);
    if (size < 0) return fail("size", size);

    /* Asynchronous reads with deadlines, DEPTH in flight, in file order. */
    struct dvrfs_aiocb cbs[DEPTH];
    uint8_t *bufs[DEPTH];
    for (int i = 0; i < DEPTH; i++) {
        if (posix_memalign((void **)&bufs[i], DVRFS_ALIGN, CHUNK)) return 1;
    }
    uint64_t next = 0, checked = 0;
    int running = 0, late = 0, head = 0;
    while (checked < (uint64_t)size) {
        while (running < DEPTH && next < (uint64_t)size) {
            struct dvrfs_aiocb *cb = &cbs[(head + running) % DEPTH];
            memset(cb, 0, sizeof *cb);
            cb->aio_fildes = fd;
            cb->aio_lio_opcode = DVRFS_AIO_READ;
            cb->aio_offset = next;
            cb->aio_buf = bufs[(head + running) % DEPTH];
            cb->aio_nbytes = CHUNK;
            cb->aio_deadline = dvrfs_now_ns() + 2000000000LL;
            if ((r = dvrfs_aio_start(fs, cb)) < 0) return fail("aio start", r);
            next += CHUNK;
            running++;
        }
        const struct dvrfs_aiocb *wait_for[1] = {&cbs[head]};
        if ((r = dvrfs_aio_poll(fs, wait_for, 1, -1)) < 0) return fail("aio poll", r);
        if ((r = dvrfs_aio_check(fs, &cbs[head], 1)) != 1) return fail("aio check", r);
        if (cbs[head].aio_result < 0) return fail("aio read", cbs[head].aio_result);
        late += cbs[head].aio_late;
        if (check_bytes(cbs[head].aio_buf, cbs[head].aio_offset, cbs[head].aio_result)) return 1;
        checked += (uint64_t)cbs[head].aio_result;
        head = (head + 1) % DEPTH;
        running--;
    }
    printf("player: %llu bytes read back with aio, %d late\n", (unsigned long long)checked, late);

    /* The first 2 MiB again, through a playback stream at the rate. */
    struct dvrfs_stream_spec spec = {0};
    spec.direction = DVRFS_STREAM_READ;
    spec.rate_bps = atof(argv[3]) * 1e6;
    spec.request_bytes = 256 * 1024;
    int sid = dvrfs_stream_open(fs, fd, &spec, NULL);
    if (sid < 0) return fail("stream open", sid);
    static uint8_t piece[100000]; /* any alignment will do for streams */
    uint64_t played = 0, want = size < (2 << 20) ? (uint64_t)size : (2 << 20);
    while (played < want) {
        size_t ask = sizeof piece - 1;
        if (ask > want - played) ask = (size_t)(want - played);
        int64_t n = dvrfs_stream_read(fs, sid, piece + 1, ask);
        if (n < 0) return fail("stream read", n);
        if (n == 0) break;
        if (check_bytes(piece + 1, played, n)) return 1;
        played += (uint64_t)n;
    }
    struct dvrfs_stream_stats st;
    if ((r = dvrfs_stream_close(fs, sid, &st)) < 0) return fail("stream close", r);
    printf("player: %llu bytes played, %llu requests, %llu late\n", (unsigned long long)played,
           (unsigned long long)st.requests, (unsigned long long)st.late);

    /* Cancel: a request withdrawn before it reaches the device completes with
     * -ECANCELED; one already there (-EBUSY) completes normally. Several at once, so
     * that the later ones are still queued behind the first. */
    int cancelled = 0, finished = 0;
    for (int i = 0; i < DEPTH; i++) {
        struct dvrfs_aiocb *c = &cbs[i];
        memset(c, 0, sizeof *c);
        c->aio_fildes = fd;
        c->aio_lio_opcode = DVRFS_AIO_READ;
        c->aio_offset = (uint64_t)i * CHUNK;
        c->aio_buf = bufs[i];
        c->aio_nbytes = CHUNK;
        if ((r = dvrfs_aio_start(fs, c)) < 0) return fail("aio start", r);
    }
    for (int i = DEPTH - 1; i >= 0; i--) {
        int c = dvrfs_aio_cancel(fs, &cbs[i]);
        if (dvrfs_aio_check(fs, &cbs[i], 1) != 1) return fail("aio check after cancel", -EINVAL);
        if (c == 0 && cbs[i].aio_result == -ECANCELED) cancelled++;
        else if (c == -EBUSY && cbs[i].aio_result >= 0) finished++;
        else {
            fprintf(stderr, "player: cancel returned %d, the request %lld\n", c, (long long)cbs[i].aio_result);
            return 1;
        }
    }
    printf("player: cancel: %d withdrawn, %d already on the device\n", cancelled, finished);

    /* Bad calls: errors, never a crash. */
    int bad = 0;
    struct dvrfs_aiocb cb = {0};
    cb.aio_fildes = fd;
    cb.aio_lio_opcode = DVRFS_AIO_READ;
    cb.aio_buf = bufs[0] + 1; /* misaligned */
    cb.aio_nbytes = 4096;
    bad += dvrfs_aio_start(fs, &cb) != -EINVAL;
    bad += dvrfs_aio_start(fs, NULL) != -EFAULT;
    cb.aio_buf = bufs[0];
    cb.aio_fildes = 999;
    bad += dvrfs_aio_start(fs, &cb) != -EBADF;
    bad += dvrfs_aio_check(fs, &cb, 0) != -EINVAL; /* never started */
    bad += dvrfs_file_open(fs, "/no/such/file", 0, 0) != -ENOENT;
    bad += dvrfs_stream_read(fs, 12345, piece, 10) >= 0;
    if ((r = dvrfs_close(fs)) < 0) return fail("close", r);
    bad += dvrfs_file_size(fs, fd) != -EBADF; /* use after close */
    bad += dvrfs_close(fs) != -EBADF;
    bad += dvrfs_close(NULL) != -EFAULT;
    if (bad) {
        fprintf(stderr, "player: %d bad calls were not refused as documented\n", bad);
        return 1;
    }
    printf("player: bad calls refused\n");
    for (int i = 0; i < DEPTH; i++) free(bufs[i]);
    return late == 0 && st.late == 0 && checked == (uint64_t)size && played == want ? 0 : 1;
}
