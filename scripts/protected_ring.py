#!/usr/bin/env python3
"""A protected minute in a time-shift ring (issue 26, criterion 5; docs/retention.md,
"Protected clips").

A fresh image is mounted on the emulated avfs-250g; `ffmpeg -re` feeds a live test
pattern (MPEG-2 in MPEG-TS at 40 Mbit/s) into `dvrfs record --ring 2m` through the
mount's daemon. While the ring still holds it, a minute of the recording is
protected (`dvrfs protect`, through the daemon, beside the recording). After the
recording, once three ring lengths have passed since the protected chunks' end,
the script checks that they are all still there, that the minute exports and
decodes, that the rest of the ring kept its length, and that no request was late;
then `unprotect` lets the ring delete them, and fsck must be clean.

  python3 scripts/protected_ring.py                     # 2-minute ring, 8 minutes
  python3 scripts/protected_ring.py --ring 10s --duration 60 --protect-at 20

Prints one JSON object; exit status 0 when every check holds, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from mountlib import finish, run, unmount
from datetime import datetime, timedelta, timezone


def name_utc(name):
    """The UTC a chunk's name says (`YYYYMMDDTHHMMSS.mmmZ.ts`)."""
    return datetime.strptime(name[:19], "%Y%m%dT%H%M%S.%f").replace(tzinfo=timezone.utc)


def parse_utc(text):
    """An RFC 3339 UTC time as dvrfs writes it (`...Z`, any fraction digits)."""
    base, _, frac = text.rstrip("Z").partition(".")
    t = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    return t + timedelta(microseconds=int((frac + "000000")[:6]))


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def chunks(directory):
    try:
        return sorted(n for n in os.listdir(directory) if n.endswith(".ts"))
    except FileNotFoundError:
        return []


def seconds(text):
    units = {"s": 1, "m": 60, "h": 3600}
    return int(text[:-1]) * units[text[-1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dvrfs", default="target/release/dvrfs")
    ap.add_argument("--ring", default="2m")
    ap.add_argument("--duration", type=int, default=480, help="seconds of recording")
    ap.add_argument("--protect-at", type=int, default=100,
                    help="seconds into the recording when the minute is protected")
    ap.add_argument("--image-size", default="8G")
    ap.add_argument("--workdir", help="keep the image and the logs here")
    a = ap.parse_args()
    ring = seconds(a.ring)
    # The minute protected: from a quarter of the ring after the first chunk's start.
    clip_from, clip_len = ring // 4, min(60, ring // 2)
    work = a.workdir or tempfile.mkdtemp(prefix="dvrfs-protect-")
    os.makedirs(work, exist_ok=True)
    img, mnt = os.path.join(work, "fs.img"), os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    if os.path.exists(img):
        os.remove(img)
    if run([a.dvrfs, "mkfs", img, "--size", a.image_size]).returncode != 0:
        sys.exit("mkfs failed")
    r = run([a.dvrfs, "mount", img, mnt, "--device-model", "avfs-250g",
             "--log", os.path.join(work, "mount.log")])
    if r.returncode != 0:
        sys.exit(f"mount: {r.stderr}")
    report = {"ring_s": ring, "duration_s": a.duration}
    cam = os.path.join(mnt, "cam")
    try:
        ffmpeg = subprocess.Popen(
            ["ffmpeg", "-hide_banner", "-nostdin", "-v", "error", "-re",
             "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25", "-t", str(a.duration),
             "-c:v", "mpeg2video", "-b:v", "38M", "-minrate", "38M", "-maxrate", "38M",
             "-bufsize", "8M", "-g", "25", "-f", "mpegts", "-muxrate", "40M", "-"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rec = subprocess.Popen(
            [a.dvrfs, "record", img, "/cam", "--ring", a.ring, "--rate", "42M", "--json"],
            stdin=ffmpeg.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ffmpeg.stdout.close()
        started = time.monotonic()
        while time.monotonic() - started < a.protect_at:
            time.sleep(0.5)
        first = chunks(cam)[0]
        t0 = name_utc(first)
        lo, hi = t0 + timedelta(seconds=clip_from), t0 + timedelta(seconds=clip_from + clip_len)
        p = run([a.dvrfs, "protect", img, "/cam", "--from", rfc3339(lo), "--to", rfc3339(hi),
                 "--note", "criterion 5", "--json"])
        if p.returncode != 0:
            raise SystemExit(f"protect: {p.stderr}")
        prot = json.loads(p.stdout)
        report["protected"] = {k: prot[k] for k in
                               ("id", "from", "to", "chunks", "bytes", "covers_from", "covers_to")}
        out, err = rec.communicate()
        ffmpeg.wait()
        recj = json.loads(out) if out.strip() else {}
        report["record_ok"] = rec.returncode == 0
        # (Its stderr is progress lines; only a failure's is kept.)
        report["record_errors"] = err.strip()[-400:] if rec.returncode else ""
        report["deadline_misses"] = recj.get("deadline_misses")
        report["rt_requests"] = recj.get("rt_requests")
        report["min_margin_ms"] = recj.get("min_margin_ms")
        report["stalls"] = recj.get("stalls")
        report["recorded_bytes"] = recj.get("bytes")
        # Three ring lengths past the protected chunks' end (their last keyframe).
        start, end = parse_utc(prot["covers_from"]), parse_utc(prot["covers_to"])
        due = end + timedelta(seconds=3 * ring + 1)
        while datetime.now(timezone.utc) < due:
            time.sleep(0.5)
        now = datetime.now(timezone.utc)
        left = chunks(cam)
        # The protected chunks: named from the first covered chunk's start (its
        # first keyframe, a moment after its name) to the last's.
        slack = timedelta(seconds=1)
        inside = [n for n in left if start - slack <= name_utc(n) <= end]
        report["checked_s_after_protected_end"] = round((now - end).total_seconds(), 1)
        report["protected_chunks_left"] = len(inside)
        unprotected = [n for n in left if n not in inside]
        report["ring_chunks_left"] = len(unprotected)
        report["ring_span_s"] = round((now - name_utc(unprotected[0])).total_seconds(), 1) if unprotected else 0
        clip = os.path.join(work, "clip.ts")
        x = run([a.dvrfs, "export", img, "/cam", "--from", rfc3339(lo), "--to", rfc3339(hi),
                 "--output", clip, "--force"])
        report["export_ok"] = x.returncode == 0
        report["export_errors"] = x.stderr.strip()[-300:] if x.returncode else ""
        probe = run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                     "-of", "csv=p=0", clip])
        report["clip_duration_s"] = float(probe.stdout.strip() or 0)
        dec = run(["ffmpeg", "-v", "error", "-i", clip, "-f", "null", "-"])
        report["clip_decode_errors"] = dec.stderr.strip()[:300]
        u = run([a.dvrfs, "unprotect", img, "--id", str(prot["id"])])
        report["unprotect_ok"] = u.returncode == 0
        gone_by = time.monotonic() + 30
        while time.monotonic() < gone_by and any(n in chunks(cam) for n in inside):
            time.sleep(0.2)
        report["protected_chunks_left_after_unprotect"] = sum(n in chunks(cam) for n in inside)
    finally:
        unmount(a.dvrfs, img, mnt)
    report["fsck_clean"] = run([a.dvrfs, "fsck", img]).returncode == 0
    ok = (report.get("record_ok") and report.get("deadline_misses") == 0
          and report.get("protected_chunks_left") == report["protected"]["chunks"]
          and report.get("checked_s_after_protected_end", 0) >= 3 * ring
          and report.get("export_ok") and not report.get("clip_decode_errors")
          and report.get("ring_span_s", 0) <= ring + ring / 12 + 2
          and report.get("unprotect_ok")
          and report.get("protected_chunks_left_after_unprotect") == 0
          and report["fsck_clean"])
    finish(report, ok, work, keep=bool(a.workdir))


if __name__ == "__main__":
    main()
