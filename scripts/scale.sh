#!/usr/bin/env bash
# What opening a volume costs as it grows (issue 9, scale): `info`, `stat` of one
# file and `fsck` on an empty 8 TiB volume (without and with data checksums), on
# an 8 TiB volume half full of recordings, and on 100 GiB volumes (131,072 inodes)
# holding 10,000 and 100,000 files (made through `dvrfs mount`, 1,000 files per
# directory). Prints the median wall time of 5 runs of each command, page cache warm (the figure is the
# metadata work, not the disk). Needs root and FUSE for the populated volumes.
#
#   scripts/scale.sh            # all three volumes
#   SCALE_DIR=/mnt/big scripts/scale.sh
#   DVRFS=/other/build/dvrfs scripts/scale.sh   # another build (before/after)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DVRFS:-}" ]; then
    cargo build --release -q -p dvrfs-cli
fi
B=${DVRFS:-$PWD/target/release/dvrfs}
W=${SCALE_DIR:-/tmp/dvrfs-scale}
mkdir -p "$W"

# Median wall time in ms of 5 runs of the command.
median_ms() {
    local t=()
    for _ in 1 2 3 4 5; do
        local s e
        s=$(date +%s%N)
        "$@" >/dev/null
        e=$(date +%s%N)
        t+=($(((e - s) / 1000000)))
    done
    printf '%s\n' "${t[@]}" | sort -n | sed -n 3p
}

# populate IMG N: N empty files, 1,000 per directory, through the mount.
populate() {
    local img=$1 n=$2 mnt="$W/mnt"
    mkdir -p "$mnt"
    "$B" mount "$img" "$mnt"
    python3 - "$mnt" "$n" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range(n // 1000):
    p = os.path.join(root, f"d{d:03}")
    os.mkdir(p)
    for f in range(1000):
        open(os.path.join(p, f"seg{f:04}.ts"), "w").close()
EOF
    umount "$mnt"
    while fuser "$img" >/dev/null 2>&1; do sleep 0.1; done
}

report() {
    local img=$1 label=$2 path=$3
    printf '%-28s info %6s ms   stat %6s ms   fsck %6s ms\n' "$label" \
        "$(median_ms "$B" info "$img")" \
        "$(median_ms "$B" stat "$img" "$path")" \
        "$(median_ms "$B" fsck "$img")"
}

rm -f "$W/empty-8t.img"
"$B" mkfs "$W/empty-8t.img" --size 8T --checksum-granule off >/dev/null
report "$W/empty-8t.img" "empty, 8 TiB, no checksums" /
rm -f "$W/empty-8t.img"
"$B" mkfs "$W/empty-8t.img" --size 8T >/dev/null
report "$W/empty-8t.img" "empty, 8 TiB, checksums" /
# About a thousand recordings (metadata only: bench's volume preparation allocates
# the blocks without writing them, so the image stays small).
rm -f "$W/filled-8t.img"
"$B" bench "$W/filled-8t.img" --size 8T --workload 1r --fill 50% --duration 2s \
    --queue-depth 4 >/dev/null 2>&1
report "$W/filled-8t.img" "$("$B" info "$W/filled-8t.img" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["files"])') recordings, 8 TiB" /
for n in 10000 100000; do
    img="$W/files-$n.img"
    rm -f "$img"
    "$B" mkfs "$img" --size 100G --inodes 131072 >/dev/null
    populate "$img" "$n"
    report "$img" "$n files, 100 GiB" /d000/seg0000.ts
done
