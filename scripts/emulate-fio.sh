#!/bin/bash
# fio, a client dvrfs did not write, on the emulated disk: the four checks of
# docs/emulate.md against the model's predictions (`dvrfs emulate --predict` once
# disk::predict lands). A sparse image of the model's full capacity (reads of holes
# cost the host nothing), `dvrfs emulate --attach`, then on the loop device:
#
#   random 4 KiB reads at queue depth 1:  fio --rw=randread --bs=4k --iodepth=1
#   the same at queue depth 32:           fio --rw=randread --bs=4k --iodepth=32
#   sequential reads at the outer edge:   fio --rw=read --bs=1M --iodepth=4 --offset=0
#   sequential reads at the inner edge:   fio --rw=read --bs=1M --iodepth=4 --offset=<capacity - 2 GiB>
#
# all with --direct=1 --ioengine=libaio --time_based, the loop device's scheduler
# `none`. Prints fio's IOPS or MB/s and the emulator's own figures for each (commands,
# busy time, deepest queue, late commands: a run with many late commands measured the
# host too).
# Run it on a quiet host with a release build (cargo build --release -p dvrfs-cli):
# every millisecond the host adds to a command at queue depth 1 is idle disk time
# that fio counts; the emulator counts it too (late commands, busy below 100%).
# Usage: scripts/emulate-fio.sh [MODEL (default avfs-250g)] [SECONDS per check (default 30)] [NCQ (default 32)]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-avfs-250g}
secs=${2:-30}
ncq=${3:-32}
dvrfs=${DVRFS:-$root/target/release/dvrfs}
[ -x "$dvrfs" ] || dvrfs=$root/target/debug/dvrfs
work=$(mktemp -d /tmp/dvrfs-emulate-fio.XXXXXX)
img=$work/disk.img
mnt=$work/mnt
mkdir "$mnt"
cleanup() {
    "$dvrfs" emulate --stop "$mnt" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# The model's capacity: the missing-image error names it (`truncate -s BYTES`).
cap=$("$dvrfs" emulate "$work/none.img" --model "$model" --mount "$mnt" 2>&1 | sed -n 's/.*truncate -s \([0-9]*\).*/\1/p' | head -1) || true
[ -n "$cap" ] || { echo "cannot learn the capacity of $model" >&2; exit 1; }
truncate -s "$cap" "$img"
dev=$("$dvrfs" emulate "$img" --model "$model" --mount "$mnt" --ncq "$ncq" --attach --log "$work/log")
echo none > "/sys/block/${dev#/dev/}/queue/scheduler"
echo "model $model, $cap bytes, ncq $ncq, $dev, ${secs}s per check"

stat() { python3 -c "import json,sys; s=json.load(open('$mnt/stats')); print(' '.join(str(s[k]) for k in sys.argv[1:]))" "$@"; }

run() { # NAME FIO-ARGS...
    local name=$1; shift
    read -r c0 b0 l0 < <(stat commands busy_ns late_commands)
    local t0=$(stat uptime_ns)
    local out
    out=$(fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio --time_based \
        --runtime="$secs" --output-format=json "$@")
    read -r c1 b1 l1 q < <(stat commands busy_ns late_commands max_queue_depth)
    local t1=$(stat uptime_ns)
    python3 - "$name" "$out" "$((c1 - c0))" "$((b1 - b0))" "$((t1 - t0))" "$((l1 - l0))" "$q" <<'PY'
import json, sys
name, out, cmds, busy, span, late, q = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:])
r = out["jobs"][0]["read"]
print(f"{name:<14} {r['iops']:9.1f} IOPS {r['bw_bytes'] / 1e6:8.2f} MB/s  "
      f"mean latency {r['lat_ns']['mean'] / 1e6:7.2f} ms  | emulator: {cmds} commands, "
      f"{100 * busy / max(span, 1):.1f}% busy, {late} late, deepest queue so far {q}")
PY
}

run rand-qd1 --rw=randread --bs=4k --iodepth=1
run rand-qd32 --rw=randread --bs=4k --iodepth=32
run seq-outer --rw=read --bs=1M --iodepth=4 --offset=0 --size=2G
run seq-inner --rw=read --bs=1M --iodepth=4 --offset=$((cap - (2 << 30))) --size=2G
"$dvrfs" emulate --stop "$mnt"
