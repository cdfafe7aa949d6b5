#!/bin/bash
# fio, a client dvrfs did not write, on the emulated disk: the four checks of
# docs/emulate.md against what the model predicts (`dvrfs emulate --predict`,
# the drive run in virtual time). A sparse image of the model's full capacity (reads
# of holes cost the host nothing), `dvrfs emulate --attach`, the loop device's
# scheduler `none`, then with fio --direct=1 --ioengine=libaio --time_based:
#
#   random 4 KiB reads at queue depth 1:  --rw=randread --bs=4k --iodepth=1    (within 5%)
#   the same at queue depth 32:           --rw=randread --bs=4k --iodepth=32   (the NCQ gain)
#   sequential reads at the outer edge:   --rw=read --bs=1M --iodepth=4 --offset=0        (within 3%)
#   sequential reads at the inner edge:   --rw=read --bs=1M --iodepth=4 --offset=<last 1%> (within 3%)
#
# Prints a table (fio, the model, the difference, the verdict) and the emulator's
# own figures for each check (busy fraction, late commands: a check with many late
# commands measured the host too). Exit status 1 if a check is out of tolerance.
# Run it on a quiet host with a release build (cargo build --release -p dvrfs-cli).
# Usage: scripts/emulate-fio.sh [MODEL (default avfs-250g)] [SECONDS per check (default 30)] [NCQ (default 32)]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-avfs-250g}
secs=${2:-30}
ncq=${3:-32}
dvrfs=${DVRFS:-$root/target/release/dvrfs}
[ -x "$dvrfs" ] || dvrfs=$root/target/debug/dvrfs
command -v fio >/dev/null || { echo "emulate-fio.sh: needs fio (apt-get install fio)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/dvrfs-emulate-fio.XXXXXX)
img=$work/disk.img
mnt=$work/mnt
mkdir "$mnt"
cleanup() {
    "$dvrfs" emulate --stop "$mnt" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$dvrfs" emulate --model "$model" --ncq "$ncq" --predict --json > "$work/predict.json"
cap=$(python3 -c "import json; print(json.load(open('$work/predict.json'))['capacity_bytes'])")
inner=$(python3 -c "import json; print(json.load(open('$work/predict.json'))['inner_offset_bytes'])")
truncate -s "$cap" "$img"
dev=$("$dvrfs" emulate "$img" --model "$model" --mount "$mnt" --ncq "$ncq" --attach --log "$work/log")
echo none > "/sys/block/${dev#/dev/}/queue/scheduler"
echo "model $model, $cap bytes, ncq $ncq, $dev, ${secs}s per check, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

snap() { cat "$mnt/stats"; }

run() { # NAME FIO-ARGS...
    local name=$1; shift
    snap > "$work/$name.before"
    fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio --time_based \
        --runtime="$secs" --output-format=json "$@" > "$work/$name.fio"
    snap > "$work/$name.after"
}

run rand-qd1 --rw=randread --bs=4k --iodepth=1 --randrepeat=0
run rand-qd32 --rw=randread --bs=4k --iodepth=32 --randrepeat=0
run seq-outer --rw=read --bs=1M --iodepth=4 --offset=0 --size=2G
run seq-inner --rw=read --bs=1M --iodepth=4 --offset="$inner" --size=2G
"$dvrfs" emulate --stop "$mnt" > "$work/stop.txt"

python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
pred = json.load(open(os.path.join(work, "predict.json")))
checks = [
    ("random 4 KiB, QD1", "rand-qd1", "iops", pred["random_4k_qd1"]["iops"], 0.05),
    ("random 4 KiB, QD32", "rand-qd32", "iops", pred["random_4k_qd32"]["iops"], 0.05),
    ("sequential 1 MiB, outer", "seq-outer", "mb", pred["sequential_outer"]["mb_per_s"], 0.03),
    ("sequential 1 MiB, inner", "seq-inner", "mb", pred["sequential_inner"]["mb_per_s"], 0.03),
]
bad = 0
print(f"| check | fio | model | difference | tolerance | emulator busy | late commands | deepest queue |")
print(f"|---|---|---|---|---|---|---|---|")
for label, name, unit, want, tol in checks:
    r = json.load(open(os.path.join(work, name + ".fio")))["jobs"][0]["read"]
    got = r["iops"] if unit == "iops" else r["bw_bytes"] / 1e6
    b = json.load(open(os.path.join(work, name + ".before")))
    a = json.load(open(os.path.join(work, name + ".after")))
    busy = (a["busy_ns"] - b["busy_ns"]) / max(1, a["uptime_ns"] - b["uptime_ns"])
    late = a["late_commands"] - b["late_commands"]
    cmds = a["commands"] - b["commands"]
    diff = got / want - 1
    ok = abs(diff) <= tol
    bad += not ok
    u = "IOPS" if unit == "iops" else "MB/s"
    print(f"| {label} | {got:.1f} {u} | {want:.1f} {u} | {100 * diff:+.1f}% | {100 * tol:.0f}% {'ok' if ok else 'OUT'} | {100 * busy:.1f}% | {late} of {cmds} | {a['max_queue_depth']} |")
qd1 = json.load(open(os.path.join(work, "rand-qd1.fio")))["jobs"][0]["read"]["iops"]
qd32 = json.load(open(os.path.join(work, "rand-qd32.fio")))["jobs"][0]["read"]["iops"]
print(f"\nNCQ gain at queue depth 32: fio {qd32 / qd1:.2f}x, model {pred['random_4k_qd32']['iops'] / pred['random_4k_qd1']['iops']:.2f}x")
print("\nemulator stop report:")
print(open(os.path.join(work, "stop.txt")).read().rstrip())
sys.exit(1 if bad else 0)
PY
