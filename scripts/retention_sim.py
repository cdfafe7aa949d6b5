#!/usr/bin/env python3
"""Retention's figures in virtual time (issue 26), as docs/retention.md quotes them.

    python3 scripts/retention_sim.py [--quick]

Runs `dvrfs sim` (DVRFS_BIN, else target/release/dvrfs) and prints Markdown:
1. a full recorder (8w@8M,2r@8M on avfs-250g, 95% full, 24 h) with high=95%,low=90%,
   seeds 1-10, and the same without retention;
2. max-size=25G per stream with one stream at 16 Mbit/s (24 h);
3. what deleting costs per GB freed, in disk time and journal bytes: a run whose
   max-age deletes the whole history in its first minute against the same run
   without retention, on avfs-250g and nvr-8t.
--quick: 2-hour runs, seeds 1-2 (what the test suite asserts).
"""
import json
import os
import subprocess
import sys

BIN = os.environ.get("DVRFS_BIN", "target/release/dvrfs")
QUICK = "--quick" in sys.argv[1:]
DURATION = "2h" if QUICK else "24h"
SEEDS = "1-2" if QUICK else "1-10"


def sim(*args):
    cmd = [BIN, "sim", *args, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 3):
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr}")
    return json.loads(out.stdout), "dvrfs sim " + " ".join(args)


def gb(b):
    return b / 1e9


def full_recorder():
    base = ["--disk", "avfs-250g", "--workload", "8w@8M,2r@8M", "--fill", "95%", "--duration", DURATION]
    r, cmd = sim(*base, "--retention", "high=95%,low=90%", "--seeds", SEEDS)
    print(f"`{cmd}`\n")
    print("| seed | misses | recordings stopped | use at most | deleted | chunks per commit at most |")
    print("|---|---|---|---|---|---|")
    for s in r["runs_by_seed"]:
        print(f"| {s['seed']} | {s['deadline_misses']} | {s['recordings_stopped']} | {s['usage_max_pct']:.3f}% "
              f"| {gb(s['retention_deleted_bytes']):.0f} GB | {s['retention_commit_max_chunks']} |")
    print(f"\nWorst seed's figures: {r['retention_deleted_chunks']} chunks deleted in "
          f"{r['retention_commits']} commits, the largest commit {r['retention_commit_max_kib']:.0f} KiB of journal; "
          f"{r['retention_shortfall_s']:.0f} s above high with nothing to delete; minimum margin "
          f"{r['margin_ms']['min']:.0f} ms.\n")
    w, cmd = sim(*base, "--seed", "1")
    print(f"Without retention (`{cmd}`): {w['recordings_stopped']} recordings stopped, "
          f"{w['misses']['no_space']} requests not issued (disk full).\n")


def max_size():
    r, cmd = sim("--disk", "avfs-250g", "--workload", "7w@8M,1w@16M,2r@8M", "--fill", "95%",
                 "--duration", DURATION, "--retention", "max-size=25G")
    print(f"`{cmd}`: {r['deadline_misses']} misses, {r['recordings_stopped']} recordings stopped, "
          f"{gb(r['retention_deleted_bytes']):.0f} GB deleted. Streams at the end (25G = {gb(25 << 30):.2f} GB):\n")
    print("| stream | bytes | chunks |")
    print("|---|---|---|")
    for s in r["retention_streams"]:
        print(f"| {s['path']} | {gb(s['bytes']):.2f} GB | {s['chunks']} |")
    print()


def cost():
    print("| disk | deleted | chunks | extra disk time | per GB freed | extra journal | per GB freed | largest commit |")
    print("|---|---|---|---|---|---|---|---|")
    cmds = []
    for disk in ("avfs-250g", "nvr-8t"):
        base = ["--disk", disk, "--workload", "2r@8M", "--fill", "95%", "--duration", "10m"]
        w, c1 = sim(*base, "--retention", "max-age=1m")
        wo, c2 = sim(*base)
        cmds += [c1, c2]
        busy = (w["utilization"] - wo["utilization"]) * w["duration_s"]
        journal = (w["journal_mbytes"] - wo["journal_mbytes"]) * 1e6
        freed = gb(w["retention_deleted_bytes"])
        print(f"| {disk} | {freed:.0f} GB | {w['retention_deleted_chunks']} | {busy * 1000:.0f} ms "
              f"| {busy * 1000 / freed:.2f} ms | {journal / 1e6:.2f} MB | {journal / 1024 / freed:.1f} KiB "
              f"| {w['retention_commit_max_kib']:.0f} KiB |")
    print("\n" + "\n".join(f"`{c}`" for c in cmds) + "\n")


if __name__ == "__main__":
    print("### A full recorder\n")
    full_recorder()
    print("### max-size\n")
    max_size()
    print("### What deleting costs\n")
    cost()
