/*
 * A DVR on one dvrfs handle shared by three threads at once: a recorder writing through
 * a stream reservation, a second recorder writing with deadline-bound asynchronous
 * writes, and a player reading an earlier recording through a playback reservation.
 * Afterwards every file is read back and checked byte for byte.
 *
 *   dvr IMAGE MEGABYTES RATE_MBIT
 *
 * Exit 0 when every byte is right and no request was late.
 */
#include <dvrfs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pattern.h"

struct job {
    struct dvrfs *fs;
    const char *path;
    uint64_t bytes;
    double rate;
    uint64_t seed; /* offset added to the pattern, so every file differs */
    int failed;
    uint64_t late;
};

static uint8_t byte_of(const struct job *j, uint64_t i) { return pattern_byte(i + j->seed); }

static void report(struct job *j, const char *what, int64_t code) {
    fprintf(stderr, "dvr: %s %s: %s (%s)\n", j->path, what, dvrfs_strerror((int)code), dvrfs_last_error());
    j->failed = 1;
}

/* Records through a write stream in MPEG-TS-sized pieces. */
static void *stream_recorder(void *arg) {
    struct job *j = arg;
    int fd = dvrfs_file_open(j->fs, j->path, DVRFS_O_CREAT, 0644);
    if (fd < 0) { report(j, "create", fd); return NULL; }
    struct dvrfs_stream_spec spec = {0};
    spec.direction = DVRFS_STREAM_WRITE;
    spec.rate_bps = j->rate;
    spec.request_bytes = 256 * 1024;
    spec.reserve_bytes = j->bytes;
    int sid = dvrfs_stream_open(j->fs, fd, &spec, NULL);
    if (sid < 0) { report(j, "stream open", sid); return NULL; }
    enum { PIECE = 188 * 350 };
    uint8_t piece[PIECE];
    for (uint64_t done = 0; done < j->bytes;) {
        size_t n = j->bytes - done < PIECE ? (size_t)(j->bytes - done) : PIECE;
        for (size_t i = 0; i < n; i++) piece[i] = byte_of(j, done + i);
        int64_t w = dvrfs_stream_write(j->fs, sid, piece, n);
        if (w < 0) { report(j, "stream write", w); return NULL; }
        done += (uint64_t)w;
    }
    struct dvrfs_stream_stats st;
    int r = dvrfs_stream_close(j->fs, sid, &st);
    if (r < 0) { report(j, "stream close", r); return NULL; }
    j->late = st.late;
    dvrfs_file_close(j->fs, fd);
    return NULL;
}

/* Records with asynchronous 256 KiB writes, each due a second after it starts. */
static void *aio_recorder(void *arg) {
    struct job *j = arg;
    int fd = dvrfs_file_open(j->fs, j->path, DVRFS_O_CREAT, 0644);
    if (fd < 0) { report(j, "create", fd); return NULL; }
    enum { CHUNK = 256 * 1024 };
    uint8_t *buf;
    if (posix_memalign((void **)&buf, DVRFS_ALIGN, CHUNK)) { j->failed = 1; return NULL; }
    for (uint64_t at = 0; at < j->bytes; at += CHUNK) {
        for (uint64_t i = 0; i < CHUNK; i++) buf[i] = byte_of(j, at + i);
        struct dvrfs_aiocb cb = {0};
        cb.aio_fildes = fd;
        cb.aio_lio_opcode = DVRFS_AIO_WRITE;
        cb.aio_offset = at;
        cb.aio_buf = buf;
        cb.aio_nbytes = CHUNK;
        cb.aio_deadline = dvrfs_now_ns() + 1000000000LL;
        int r = dvrfs_aio_start(j->fs, &cb);
        if (r < 0) { report(j, "aio start", r); break; }
        if ((r = dvrfs_aio_check(j->fs, &cb, 1)) != 1) { report(j, "aio check", r); break; }
        if (cb.aio_result != CHUNK) { report(j, "aio write", cb.aio_result); break; }
        j->late += (uint64_t)cb.aio_late;
    }
    free(buf);
    dvrfs_file_close(j->fs, fd);
    return NULL;
}

/* Plays through a read stream and checks the bytes. */
static void *player(void *arg) {
    struct job *j = arg;
    int fd = dvrfs_file_open(j->fs, j->path, 0, 0);
    if (fd < 0) { report(j, "open", fd); return NULL; }
    struct dvrfs_stream_spec spec = {0};
    spec.direction = DVRFS_STREAM_READ;
    spec.rate_bps = j->rate;
    spec.request_bytes = 256 * 1024;
    int sid = dvrfs_stream_open(j->fs, fd, &spec, NULL);
    if (sid < 0) { report(j, "stream open", sid); return NULL; }
    uint8_t piece[65536];
    uint64_t at = 0;
    for (;;) {
        int64_t n = dvrfs_stream_read(j->fs, sid, piece, sizeof piece);
        if (n < 0) { report(j, "stream read", n); return NULL; }
        if (n == 0) break;
        for (int64_t i = 0; i < n; i++)
            if (piece[i] != byte_of(j, at + (uint64_t)i)) {
                fprintf(stderr, "dvr: %s: wrong byte at %llu\n", j->path, (unsigned long long)(at + (uint64_t)i));
                j->failed = 1;
                return NULL;
            }
        at += (uint64_t)n;
    }
    if (at != j->bytes) { fprintf(stderr, "dvr: %s: played %llu bytes\n", j->path, (unsigned long long)at); j->failed = 1; }
    struct dvrfs_stream_stats st;
    dvrfs_stream_close(j->fs, sid, &st);
    j->late = st.late;
    dvrfs_file_close(j->fs, fd);
    return NULL;
}

/* Reads a whole file back with aio and checks it. */
static int check_file(struct dvrfs *fs, struct job *j) {
    int fd = dvrfs_file_open(fs, j->path, 0, 0);
    if (fd < 0) { report(j, "reopen", fd); return 1; }
    int64_t size = dvrfs_file_size(fs, fd);
    if (size != (int64_t)j->bytes) { fprintf(stderr, "dvr: %s is %lld bytes\n", j->path, (long long)size); return 1; }
    uint8_t *buf;
    if (posix_memalign((void **)&buf, DVRFS_ALIGN, 1 << 20)) return 1;
    for (uint64_t at = 0; at < j->bytes; at += 1 << 20) {
        struct dvrfs_aiocb cb = {0};
        cb.aio_fildes = fd;
        cb.aio_lio_opcode = DVRFS_AIO_READ;
        cb.aio_offset = at;
        cb.aio_buf = buf;
        cb.aio_nbytes = 1 << 20;
        if (dvrfs_aio_start(fs, &cb) < 0 || dvrfs_aio_check(fs, &cb, 1) != 1 || cb.aio_result < 0) {
            report(j, "read back", cb.aio_result);
            return 1;
        }
        for (int64_t i = 0; i < cb.aio_result; i++)
            if (buf[i] != byte_of(j, at + (uint64_t)i)) {
                fprintf(stderr, "dvr: %s: wrong byte at %llu after recording\n", j->path, (unsigned long long)(at + (uint64_t)i));
                return 1;
            }
    }
    free(buf);
    dvrfs_file_close(fs, fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dvr IMAGE MEGABYTES RATE_MBIT\n");
        return 2;
    }
    uint64_t bytes = (uint64_t)atoll(argv[2]) << 20;
    double rate = atof(argv[3]) * 1e6;
    struct dvrfs *fs = NULL;
    int r = dvrfs_open(argv[1], NULL, &fs);
    if (r < 0) { fprintf(stderr, "dvr: open: %s (%s)\n", dvrfs_strerror(r), dvrfs_last_error()); return 1; }
    /* The recording to play, made first. */
    struct job earlier = {fs, "/earlier.ts", bytes, rate * 4, 7, 0, 0};
    aio_recorder(&earlier);
    if (earlier.failed) return 1;

    struct job jobs[3] = {
        {fs, "/cam1.ts", bytes, rate, 1, 0, 0},
        {fs, "/cam2.ts", bytes, rate, 2, 0, 0},
        {fs, "/earlier.ts", bytes, rate, 7, 0, 0},
    };
    void *(*run[3])(void *) = {stream_recorder, aio_recorder, player};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, run[i], &jobs[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        printf("dvr: %s: %s, %llu late\n", jobs[i].path, jobs[i].failed ? "FAILED" : "ok", (unsigned long long)jobs[i].late);
        bad += jobs[i].failed || jobs[i].late > 0;
    }
    bad += check_file(fs, &jobs[0]) + check_file(fs, &jobs[1]);
    if ((r = dvrfs_close(fs)) < 0) { fprintf(stderr, "dvr: close: %s\n", dvrfs_strerror(r)); return 1; }
    if (!bad) printf("dvr: all recordings read back right\n");
    return bad ? 1 : 0;
}
