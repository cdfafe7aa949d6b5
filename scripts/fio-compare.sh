#!/bin/bash
# `dvrfs bench` streaming against `fio` on the same image file, side by side: the same
# request size (4 MiB), O_DIRECT, the device at queue depth 1 for both, runs
# alternating so that the disk's drift hits both sides alike. Prints every run, the
# medians, the CPU time per GB moved (user + system time of the whole process over
# the bytes it moved) and the per-request latency at one request at a time (p50, p99).
#
#   fio:   fio --rw=write|read --bs=4M --direct=1 --ioengine=psync --iodepth=1
#          --offset=<dvrfs data region> --size=<the bytes dvrfs wrote, or the file it
#          read> --io_size=<the bytes dvrfs moved> on IMG
#   dvrfs: dvrfs bench IMG --force --workload 0r0w --best-effort greedy-write|greedy-read
#          --be-request 4M --be-depth 2 --alloc seq --fill 0%|50%
#
# bench keeps two requests of the generator in flight in the runtime (the device
# still gets one command at a time): the second is what the dispatcher hands the
# device the moment the first completes, as fio's next pwrite is. Reads are also run
# with one request at a time (--be-depth 1, fio's psync shape exactly), which is also
# where the per-request latency comes from. Both sides read
# and write data that was really written first (the image is filled with dd), so no
# side reads holes, and fio moves the same bytes of the image as the dvrfs run just
# before it (from the start of the data region, where the sequential allocator puts
# the file written and the recording read): on this VM the speed of the virtual disk
# depends on where in the image file the bytes are, by up to 2x. Caches are dropped before every read
# (needs root).
# Usage: scripts/fio-compare.sh [DIR (default /tmp/dvrfs-fio)] [RUNS (default 5)]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/dvrfs-fio}
runs=${2:-5}
bin=$root/target/release/dvrfs
img=$dir/bench.img
size_gib=12

[ "$(id -u)" -eq 0 ] || { echo "fio-compare.sh: needs root to drop caches" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio-compare.sh: needs fio (apt-get install fio)" >&2; exit 1; }
(cd "$root" && cargo build --release -p dvrfs-cli)
mkdir -p "$dir"
rm -f "$img"
dd if=/dev/zero of="$img" bs=4M count=$((size_gib * 256)) oflag=direct status=none

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# CPU seconds (user + sys) of a command, into $dir/cpu; its stdout into $dir/out.
cpu_of() {
    /usr/bin/time -f "%U %S" -o "$dir/time" "$@" > "$dir/out" 2> "$dir/err" || {
        cat "$dir/err" >&2
        return 1
    }
    awk '{ print $1 + $2 }' "$dir/time" > "$dir/cpu"
}

# fio: MB/s, CPU s per GB, clat p50 and p99 in ms. $2: the extent (bytes from the
# data region's start), $3: the bytes to move (wrapping within the extent); $4 "huge":
# fio's buffer on transparent huge pages too, as dvrfs's are (the kernel's THP mode is
# set to `always` for the run and put back).
fio_run() {
    local rw=$1 extent=$(( $2 / 4194304 * 4194304 )) moved=$(( $3 / 4194304 * 4194304 ))
    local thp=/sys/kernel/mm/transparent_hugepage/enabled was="" align=()
    if [ "${4:-}" = huge ]; then
        was=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp")
        echo always > "$thp"
        align=(--iomem_align=2m)
    fi
    cpu_of fio --name=cmp --filename="$img" --rw="$rw" --bs=4M --direct=1 \
        --ioengine=psync --iodepth=1 --offset="$data" --size="$extent" \
        --io_size="$moved" "${align[@]}" --output-format=json
    [ -z "$was" ] || echo "$was" > "$thp"
    python3 - "$dir/out" "$(cat "$dir/cpu")" "$rw" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0][sys.argv[3]]
gb = j["io_bytes"] / 1e9
clat = j["clat_ns"]["percentile"]
print("%.0f %.3f %.2f %.2f" % (j["bw_bytes"] / 1e6, float(sys.argv[2]) / gb,
      clat["50.000000"] / 1e6, clat["99.000000"] / 1e6))
EOF
}

# dvrfs bench: MB/s over the generator's active time, CPU s per GB, latency p50/p99.
bench_run() {
    local gen=$1 fill=$2 depth=${3:-2}
    cpu_of "$bin" bench "$img" --force --workload 0r0w --best-effort "$gen" \
        --be-request 4M --be-depth "$depth" --alloc seq --fill "$fill" --duration 9s --json
    python3 - "$dir/out" "$(cat "$dir/cpu")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
mbps = r["be_active_throughput_mbps"] / 8
gb = mbps * r["be_active_s"] / 1e3
print("%.0f %.3f %.2f %.2f %d" % (mbps, float(sys.argv[2]) / gb,
      r["be_latency_ms"]["p50"], r["be_latency_ms"]["p99"], gb * 1e9))
EOF
}
# The size of the recording greedy-read reads (the first one of the fill).
first_recording() {
    "$bin" stat "$img" /rec/fill00000.ts --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["size_bytes"])'
}

for f in fio_w fioh_w dvrfs_w fio_r fioh_r dvrfs_r dvrfs_l; do : > "$dir/$f"; done
data=""
for i in $(seq "$runs"); do
    bench_run greedy-write 0% >> "$dir/dvrfs_w"
    [ -n "$data" ] || data=$("$bin" info "$img" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["regions"]["data"]["offset"])')
    wrote=$(tail -1 "$dir/dvrfs_w" | cut -d' ' -f5)
    fio_run write "$wrote" "$wrote" >> "$dir/fio_w"
    fio_run write "$wrote" "$wrote" huge >> "$dir/fioh_w"
    drop_caches
    bench_run greedy-read 50% >> "$dir/dvrfs_r"
    read=$(tail -1 "$dir/dvrfs_r" | cut -d' ' -f5)
    drop_caches
    fio_run read "$(first_recording)" "$read" >> "$dir/fio_r"
    drop_caches
    fio_run read "$(first_recording)" "$read" huge >> "$dir/fioh_r"
    drop_caches
    # One request at a time, as fio's: the latency the runtime adds per request.
    bench_run greedy-read 50% 1 >> "$dir/dvrfs_l"
    echo "run $i: write fio $(tail -1 "$dir/fio_w" | cut -d' ' -f1) (huge pages $(tail -1 "$dir/fioh_w" | cut -d' ' -f1)) dvrfs $(tail -1 "$dir/dvrfs_w" | cut -d' ' -f1)," \
        "read fio $(tail -1 "$dir/fio_r" | cut -d' ' -f1) (huge pages $(tail -1 "$dir/fioh_r" | cut -d' ' -f1)) dvrfs $(tail -1 "$dir/dvrfs_r" | cut -d' ' -f1) MB/s"
done
col() { cut -d' ' -f"$2" "$dir/$1" | median; }
echo
echo "medians of $runs runs (MB/s; CPU s per GB; per-request latency p50 / p99 ms):"
for side in w r; do
    name=$([ $side = w ] && echo write || echo read)
    fm=$(col fio_$side 1); dm=$(col dvrfs_$side 1)
    hm=$(col fioh_$side 1)
    echo "$name: fio $fm MB/s, dvrfs $dm MB/s ($(awk -v a="$dm" -v b="$fm" 'BEGIN { printf "%.0f", 100 * a / b }')%);" \
        "fio on huge pages $hm MB/s ($(awk -v a="$dm" -v b="$hm" 'BEGIN { printf "%.0f", 100 * a / b }')%)"
    echo "  CPU per GB: fio $(col fio_$side 2) s, dvrfs $(col dvrfs_$side 2) s"
done
lm=$(col dvrfs_l 1); fm=$(col fio_r 1); hm=$(col fioh_r 1)
echo "read, one request at a time (fio's psync shape): dvrfs $lm MB/s ($(awk -v a="$lm" -v b="$fm" 'BEGIN { printf "%.0f", 100 * a / b }')% of fio," \
    "$(awk -v a="$lm" -v b="$hm" 'BEGIN { printf "%.0f", 100 * a / b }')% of fio on huge pages)"
echo "per-request latency, one 4 MiB read at a time (p50 / p99 ms): fio $(col fio_r 3) / $(col fio_r 4), dvrfs $(col dvrfs_l 3) / $(col dvrfs_l 4)"
echo "  (dvrfs's: from start to check of each operation, through the runtime; fio's: clat)"
