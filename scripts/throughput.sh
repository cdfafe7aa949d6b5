#!/bin/sh
# Compares `dvrfs put` / `dvrfs get` of a 1 GiB file with raw O_DIRECT dd on the same
# file system, and prints each run and the median in MB/s (decimal, as dd reports).
#
#   write: dd if=/dev/zero of=DIR/dd.bin bs=4M count=256 oflag=direct
#          dvrfs put DIR/fs.img DIR/src.bin /big      (source in the page cache)
#   read:  dd if=DIR/dd.bin of=/dev/null bs=4M iflag=direct
#          dvrfs get DIR/fs.img /big /dev/null
#
# Caches are dropped before every read (needs root). Every write goes to a fresh file
# or a fresh image, so both sides pay for block allocation in the host file system.
# Usage: scripts/throughput.sh [DIR (default /tmp/dvrfs-throughput)] [RUNS (default 5)]
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/dvrfs-throughput}
runs=${2:-5}
bin=$root/target/release/dvrfs
bytes=1073741824

[ "$(id -u)" -eq 0 ] || { echo "throughput.sh: needs root to drop caches" >&2; exit 1; }
(cd "$root" && cargo build --release -p dvrfs-cli)
mkdir -p "$dir"
head -c $bytes /dev/urandom > "$dir/src.bin"

now_ns() { date +%s%N; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Runs "$@" and prints MB/s for $bytes bytes over its wall-clock time.
timed() {
    t0=$(now_ns)
    "$@" > /dev/null 2>&1
    t1=$(now_ns)
    awk -v b=$bytes -v ns=$((t1 - t0)) 'BEGIN { printf "%.0f\n", b * 1000 / ns }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

: > "$dir/dd_w"; : > "$dir/put"; : > "$dir/dd_r"; : > "$dir/get"
for i in $(seq "$runs"); do
    rm -f "$dir/dd.bin" "$dir/fs.img"; sync
    w=$(timed dd if=/dev/zero of="$dir/dd.bin" bs=4M count=256 oflag=direct)
    "$bin" mkfs "$dir/fs.img" --size 2G > /dev/null
    cat "$dir/src.bin" > /dev/null
    sync
    p=$(timed "$bin" put "$dir/fs.img" "$dir/src.bin" /big)
    drop_caches
    r=$(timed dd if="$dir/dd.bin" of=/dev/null bs=4M iflag=direct)
    drop_caches
    g=$(timed "$bin" get "$dir/fs.img" /big /dev/null)
    echo "run $i: dd write $w, put $p, dd read $r, get $g MB/s"
    echo "$w" >> "$dir/dd_w"; echo "$p" >> "$dir/put"; echo "$r" >> "$dir/dd_r"; echo "$g" >> "$dir/get"
done
dw=$(median < "$dir/dd_w"); pm=$(median < "$dir/put"); dr=$(median < "$dir/dd_r"); gm=$(median < "$dir/get")
echo "median: dd write $dw MB/s, put $pm MB/s ($((100 * pm / dw))%); dd read $dr MB/s, get $gm MB/s ($((100 * gm / dr))%)"
rm -f "$dir/dd.bin" "$dir/fs.img" "$dir/src.bin" "$dir/dd_w" "$dir/put" "$dir/dd_r" "$dir/get"
