#!/usr/bin/env python3
"""ffmpeg's segment muxer recording into a dvrfs mount under a max-size policy
(issue 26, criterion 6; docs/retention.md, "A segment muxer under max-size").

A fresh image is mounted on the emulated avfs-250g; a stream directory gets
`max-size` through the `user.dvrfs.retention` attribute; `ffmpeg -re` records a
test pattern at a constant rate with the segment muxer (one MPEG-TS file per
segment) into it. While it records, the size of every segment in the directory is
summed every 20 ms: the peak must stay within max-size plus one segment (the one
being written). Afterwards every segment left must decode, the deletions must all
be max-size's, and fsck must be clean.

  python3 scripts/segment_retention.py                      # ten minutes, 10 s segments, 100M
  python3 scripts/segment_retention.py --duration 30 --segment 2 --max-size 5M

Prints one JSON object; exit status 0 when every check holds, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from mountlib import finish, run, unmount

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text):
    t = text.strip().upper()
    unit = t[-1] if t[-1] in UNITS else ""
    return int(float(t[: len(t) - len(unit)]) * UNITS[unit])


def segments(directory):
    """{name: size} of the segments in the directory (not the chain)."""
    out = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.endswith(".ts"):
                    try:
                        out[e.name] = e.stat().st_size
                    except FileNotFoundError:
                        pass  # deleted between the listing and the stat
    except FileNotFoundError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dvrfs", default="target/release/dvrfs")
    ap.add_argument("--duration", type=int, default=600, help="seconds of recording")
    ap.add_argument("--segment", type=int, default=10, help="seconds per segment")
    ap.add_argument("--max-size", default="100M", help="the stream's max-size")
    ap.add_argument("--rate", default="4M", help="video bit rate (constant)")
    ap.add_argument("--image-size", default="2G")
    ap.add_argument("--workdir", help="keep the image and the log here")
    a = ap.parse_args()
    max_bytes = size_bytes(a.max_size)
    work = a.workdir or tempfile.mkdtemp(prefix="dvrfs-segments-")
    os.makedirs(work, exist_ok=True)
    img, mnt = os.path.join(work, "fs.img"), os.path.join(work, "mnt")
    log = os.path.join(work, "mount.log")
    os.makedirs(mnt, exist_ok=True)
    for f in (img, log):
        if os.path.exists(f):
            os.remove(f)
    r = run([a.dvrfs, "mkfs", img, "--size", a.image_size])
    if r.returncode != 0:
        sys.exit(f"mkfs: {r.stderr}")
    r = run([a.dvrfs, "mount", img, mnt, "--device-model", "avfs-250g", "--log", log])
    if r.returncode != 0:
        sys.exit(f"mount: {r.stderr}")
    report = {}
    try:
        cam = os.path.join(mnt, "cam1")
        os.mkdir(cam)
        r = run(["setfattr", "-n", "user.dvrfs.retention", "-v", f"max-size={a.max_size}", cam])
        if r.returncode != 0:
            raise SystemExit(f"setfattr: {r.stderr}")
        ffmpeg = subprocess.Popen(
            ["ffmpeg", "-hide_banner", "-nostdin", "-v", "error", "-re",
             "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25", "-t", str(a.duration),
             "-c:v", "mpeg2video", "-b:v", a.rate, "-minrate", a.rate, "-maxrate", a.rate,
             "-bufsize", "1M", "-g", "25", "-f", "segment", "-segment_time", str(a.segment),
             "-segment_format", "mpegts", "-reset_timestamps", "1",
             os.path.join(cam, "seg%06d.ts")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak, peak_at, largest, seen = 0, {}, 0, set()
        samples = 0
        stop = threading.Event()

        def sample():
            nonlocal peak, peak_at, largest, samples
            while not stop.is_set():
                s = segments(cam)
                samples += 1
                seen.update(s)
                total = sum(s.values())
                if total > peak:
                    peak, peak_at = total, s
                stop.wait(0.02)

        t = threading.Thread(target=sample)
        t.start()
        err = ffmpeg.communicate()[1]
        stop.set()
        t.join()
        left = segments(cam)
        seen.update(left)
        # A segment is as large as the largest one ever seen whole (every one but the
        # last ends at a segment boundary).
        largest = max(left.values(), default=0)
        decode = {}
        for name in sorted(left):
            d = run(["ffmpeg", "-v", "error", "-i", os.path.join(cam, name), "-f", "null", "-"])
            if d.returncode != 0 or d.stderr.strip():
                decode[name] = d.stderr.strip()[:300]
        report = {
            "duration_s": a.duration,
            "segment_s": a.segment,
            "rate": a.rate,
            "max_size_bytes": max_bytes,
            "ffmpeg_ok": ffmpeg.returncode == 0,
            "ffmpeg_errors": err.strip()[:500],
            "samples": samples,
            "peak_bytes": peak,
            "peak_segments": len(peak_at),
            "largest_segment_bytes": largest,
            "bound_bytes": max_bytes + largest,
            "segments_written": len(seen),
            "decode_errors": decode,
        }
    finally:
        unmount(a.dvrfs, img, mnt)
    ev = json.loads(run([a.dvrfs, "events", img, "--json"]).stdout or "{}")
    deleted = [e for e in ev.get("events", []) if e.get("kind") == "chunk_deleted"]
    fsck = run([a.dvrfs, "fsck", img])
    # What is left once the volume is closed (a deletion may come after ffmpeg ends:
    # its last segment grew past max-size with no next one to start a plan).
    ls = run([a.dvrfs, "ls", "-l", img, "/cam1"]).stdout.split("\n")
    left = [l.split() for l in ls if l.strip().endswith(".ts")]
    report["segments_left"] = len(left)
    report["left_bytes"] = sum(int(f[4]) for f in left)
    report["segments_deleted"] = len(deleted)
    report["deleted_causes"] = sorted({e.get("cause") for e in deleted})
    report["fsck_clean"] = fsck.returncode == 0
    report["within"] = report.get("peak_bytes", 1 << 62) <= report.get("bound_bytes", 0)
    ok = (report["within"] and report["ffmpeg_ok"] and report["fsck_clean"]
          and not report["decode_errors"] and report["deleted_causes"] in ([], ["max_size"])
          and report["segments_written"] == report["segments_left"] + report["segments_deleted"])
    finish(report, ok, work, keep=bool(a.workdir))


if __name__ == "__main__":
    main()
