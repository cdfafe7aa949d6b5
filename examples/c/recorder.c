/*
 * A camera recorder on dvrfs: opens a stream reservation (write, at a rate, with
 * the recording's size held at admission) on a new file and feeds it MPEG-TS-sized
 * pieces, as an encoder would; the stream writes behind with deadlines.
 *
 *   recorder IMAGE PATH MEGABYTES RATE_MBIT [DEVICE_MODEL]
 *
 * Exit 0 when every byte was taken and no disk request was late.
 */
#include <dvrfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pattern.h"

static int fail(const char *what, int64_t code) {
    fprintf(stderr, "recorder: %s: %s (%s)\n", what, dvrfs_strerror((int)code), dvrfs_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: recorder IMAGE PATH MEGABYTES RATE_MBIT [DEVICE_MODEL]\n");
        return 2;
    }
    uint64_t total = (uint64_t)atoll(argv[3]) << 20;
    double rate = atof(argv[4]) * 1e6;
    struct dvrfs_options opts = {0};
    opts.device_model = argc > 5 ? argv[5] : NULL;
    struct dvrfs *fs = NULL;
    int r = dvrfs_open(argv[1], &opts, &fs);
    if (r < 0) return fail("open", r);
    int fd = dvrfs_file_open(fs, argv[2], DVRFS_O_CREAT, 0644);
    if (fd < 0) return fail("create", fd);

    struct dvrfs_stream_spec spec = {0};
    spec.direction = DVRFS_STREAM_WRITE;
    spec.rate_bps = rate;
    spec.request_bytes = 512 * 1024;
    spec.reserve_bytes = total;
    struct dvrfs_stream_info info;
    int sid = dvrfs_stream_open(fs, fd, &spec, &info);
    if (sid < 0) return fail("stream open", sid);
    printf("recorder: admitted, %u requests of buffer, %.0f ms slack, load %.0f%%\n",
           info.depth, info.slack_ns / 1e6, info.load * 100);

    enum { PIECE = 188 * 700 };
    static uint8_t piece[PIECE];
    for (uint64_t done = 0; done < total;) {
        size_t n = total - done < PIECE ? (size_t)(total - done) : PIECE;
        for (size_t i = 0; i < n; i++) piece[i] = pattern_byte(done + i);
        int64_t w = dvrfs_stream_write(fs, sid, piece, n);
        if (w < 0) return fail("stream write", w);
        done += (uint64_t)w;
    }
    struct dvrfs_stream_stats st;
    r = dvrfs_stream_close(fs, sid, &st);
    if (r < 0) return fail("stream close", r);
    if ((r = dvrfs_fsync(fs)) < 0) return fail("fsync", r);
    printf("recorder: %llu bytes, %llu requests, %llu late, %llu stalls\n",
           (unsigned long long)st.app_bytes, (unsigned long long)st.requests,
           (unsigned long long)st.late, (unsigned long long)st.stalls);
    if ((r = dvrfs_file_close(fs, fd)) < 0) return fail("close file", r);
    if ((r = dvrfs_close(fs)) < 0) return fail("close", r);
    return st.late == 0 && st.app_bytes == total ? 0 : 1;
}
