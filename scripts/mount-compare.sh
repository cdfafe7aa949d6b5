#!/bin/bash
# Throughput through `dvrfs mount` against `dvrfs bench` on the same image, on the
# plain image (the VM's disk) and on the emulated avfs-250g hard disk
# (--device-model avfs-250g on both sides), and metadata operations per second through
# the mount against ext4 on a loop device.
#
#   bench:  dvrfs bench IMG --force --workload 0r0w --best-effort greedy-write|greedy-read
#           --be-request 4M --be-depth 2 --alloc seq --fill 0%|50% --duration 9s
#           and, in fio's shape (one 1 MiB request at a time), --be-request 1M --be-depth 1
#   mount:  dvrfs mkfs IMG --alloc seq; dvrfs mount IMG MNT
#           dd if=/dev/zero of=MNT/f bs=4M count=512 conv=fsync; dd if=MNT/f of=/dev/null bs=4M
#           fio --rw=write|read --bs=1M --direct=1 --ioengine=psync --size=2G on MNT/fio
#           (1 MiB: the largest request the kernel hands a FUSE file system)
#   metadata: create (open O_CREAT + close), stat, unlink of 10,000 files in one
#           directory, through the mount and on ext4 (mkfs.ext4 on a loop device over
#           an image file in the same directory)
#
# Runs alternate so that the disk's drift hits both sides alike; caches are dropped
# before every read (needs root). Prints every run and the medians.
# Usage: scripts/mount-compare.sh [DIR (default /tmp/dvrfs-mount)] [RUNS (default 3)]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/dvrfs-mount}
runs=${2:-3}
bin=$root/target/release/dvrfs
img=$dir/bench.img
mnt=$dir/mnt

[ "$(id -u)" -eq 0 ] || { echo "mount-compare.sh: needs root" >&2; exit 1; }
command -v fio >/dev/null || { echo "mount-compare.sh: needs fio (apt-get install fio)" >&2; exit 1; }
(cd "$root" && cargo build --release -p dvrfs-cli)
mkdir -p "$dir" "$mnt"
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
unmount() {
    local pid
    pid=$(cat "$dir/pid")
    umount "$mnt"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

model=()   # set to (--device-model avfs-250g) for the emulated disk
bench_mbps() { # $1: generator, $2: fill, $3: request, $4: depth
    "$bin" bench "$img" --force --size 8G "${model[@]}" --workload 0r0w --best-effort "$1" \
        --be-request "${3:-4M}" --be-depth "${4:-2}" --alloc seq --fill "$2" --duration 9s --json |
        python3 -c 'import json, sys; print("%.0f" % (json.load(sys.stdin)["be_active_throughput_mbps"] / 8))'
}
dd_mbps() { # dd's own figure, in MB/s
    dd "$@" 2>&1 | awk '/copied/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/ && $(i+1) == "s,") s = $i; b = $1 } END { printf "%.0f\n", b / s / 1e6 }'
}
fio_mbps() {
    fio --name=m --filename="$mnt/fio" --rw="$1" --bs=1M --direct=1 --ioengine=psync \
        --size="$2" --output-format=json |
        python3 -c "import json, sys; print('%.0f' % (json.load(sys.stdin)['jobs'][0]['$1']['bw_bytes'] / 1e6))"
}

# $1: label, $2: runs, $3: dd count (4 MiB blocks), $4: fio size
compare() {
    for f in bw br b1w b1r dw dr fw fr; do : > "$dir/$f"; done
    for i in $(seq "$2"); do
        bench_mbps greedy-write 0% >> "$dir/bw"
        drop_caches
        bench_mbps greedy-read 50% >> "$dir/br"
        bench_mbps greedy-write 0% 1M 1 >> "$dir/b1w"
        drop_caches
        bench_mbps greedy-read 50% 1M 1 >> "$dir/b1r"
        rm -f "$img"
        "$bin" mkfs "$img" --size 8G --alloc seq > /dev/null
        "$bin" mount "$img" "$mnt" "${model[@]}" --log "$dir/mount.log" --pid-file "$dir/pid"
        dd_mbps if=/dev/zero of="$mnt/f" bs=4M count="$3" conv=fsync >> "$dir/dw"
        drop_caches
        dd_mbps if="$mnt/f" of=/dev/null bs=4M >> "$dir/dr"
        fio_mbps write "$4" >> "$dir/fw"
        drop_caches
        fio_mbps read "$4" >> "$dir/fr"
        unmount
        echo "$1 run $i: bench write $(tail -1 "$dir/bw") read $(tail -1 "$dir/br")," \
            "1M x 1 write $(tail -1 "$dir/b1w") read $(tail -1 "$dir/b1r");" \
            "mount dd write $(tail -1 "$dir/dw") read $(tail -1 "$dir/dr"), fio write $(tail -1 "$dir/fw") read $(tail -1 "$dir/fr") MB/s"
    done
    echo "$1, medians of $2 runs (MB/s):"
    echo "  write: bench $(m bw); mount dd $(m dw) ($(pct "$(m dw)" "$(m bw)")%), fio $(m fw) ($(pct "$(m fw)" "$(m bw)")%; $(pct "$(m fw)" "$(m b1w)")% of bench 1M x 1, $(m b1w))"
    echo "  read:  bench $(m br); mount dd $(m dr) ($(pct "$(m dr)" "$(m br)")%), fio $(m fr) ($(pct "$(m fr)" "$(m br)")%; $(pct "$(m fr)" "$(m b1r)")% of bench 1M x 1, $(m b1r))"
}
m() { median < "$dir/$1"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", 100 * a / b }'; }
compare "plain image" "$runs" 512 2G
model=(--device-model avfs-250g)
compare "emulated avfs-250g" 1 256 1G
model=()

# Metadata operations per second: 10,000 files, create / stat / unlink.
meta() {
    python3 - "$1" <<'EOF'
import os, sys, time
d = os.path.join(sys.argv[1], "meta")
os.makedirs(d, exist_ok=True)
n = 10000
names = [os.path.join(d, "f%05d" % i) for i in range(n)]
out = []
t = time.perf_counter()
for p in names:
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
out.append(n / (time.perf_counter() - t))
t = time.perf_counter()
for p in names:
    os.stat(p)
out.append(n / (time.perf_counter() - t))
t = time.perf_counter()
for p in names:
    os.unlink(p)
out.append(n / (time.perf_counter() - t))
os.rmdir(d)
print("%.0f %.0f %.0f" % tuple(out))
EOF
}
rm -f "$img"
# One inode per 4 MiB block by default (2,048 on 8 GiB): room for 10,000 files here.
"$bin" mkfs "$img" --size 8G --inodes 20000 > /dev/null
"$bin" mount "$img" "$mnt" --log "$dir/mount.log" --pid-file "$dir/pid"
drop_caches
dv=$(meta "$mnt")
unmount
ext=$dir/ext4.img
rm -f "$ext"
truncate -s 8G "$ext"
mkfs.ext4 -q -F "$ext"
loop=$(losetup --find --show "$ext")
mount "$loop" "$mnt"
drop_caches
e4=$(meta "$mnt")
umount "$mnt"
losetup -d "$loop"
rm -f "$ext"
echo "metadata ops/s (create stat unlink, 10,000 files): dvrfs mount $dv; ext4 on a loop device $e4"
