#!/bin/bash
# Behaviour-unchanged check for refactors of the core: 44 short simulations (3 disks x
# 3 seeds x 4 workloads with the mixer, and the eight schedulers on avfs-250g), one JSON
# file each. Run it before and after a change and compare:
#   cargo build --release -p dvrfs-cli
#   scripts/simcheck.sh /tmp/before target/release/dvrfs    (on the old tree)
#   scripts/simcheck.sh /tmp/after  target/release/dvrfs    (on the new tree)
#   diff -r /tmp/before /tmp/after                           (nothing: identical)
# About a minute on two cores. scripts/results.py is the full form (half an hour).
set -e
out=${1:?usage: simcheck.sh OUTDIR [DVRFS_BINARY]}
bin=${2:-target/release/dvrfs}
mkdir -p "$out"
run() { # name, args...
    local name=$1; shift
    "$bin" sim "$@" --json > "$out/$name.json" 2> "$out/$name.err" || echo "rc=$?" >> "$out/$name.err"
}
for disk in avfs-250g nvr-8t laptop-5400; do
    for seed in 1 2 3; do
        for w in "4r2w" "2r2w --best-effort photos" "2r0w --best-effort delete" "8w@8M,2r@8M --fill 95%"; do
            # shellcheck disable=SC2086
            run "$disk-$seed-$(echo $w | tr ' @%,' '____')" --disk $disk --workload $w --seed $seed --duration 2m
        done
    done
done
for s in mixer avfs cfq deadline edf scan-edf cscan fifo; do
    run "sched-$s" --disk avfs-250g --workload 4r2w --scheduler $s --seed 1 --duration 2m
done
echo "wrote $(ls "$out"/*.json | wc -l) runs to $out"
