#!/usr/bin/env bash
# The long fuzz run of issue 9 (docs/fuzzing.md): two libFuzzer jobs on one corpus,
# each to RUNS executions (default 5,000,000: 10^7 in all), from the kept corpus and
# any scratch inputs of earlier runs. Prints each job's executions, the sum and any
# failure. About 2-2.5 hours on two idle cores; run nothing heavy beside it (the
# real-time tests of the suite miss deadlines under load, and the rate falls).
# Needs the nightly toolchain and cargo-fuzz (scripts/test.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
runs="${RUNS:-5000000}"
scratch="${SCRATCH:-/tmp/fuzz-long}"
mkdir -p "$scratch"
rm -f fuzz-0.log fuzz-1.log
cargo +nightly fuzz build -s none image
start=$(date +%s)
status=0
cargo +nightly fuzz run -s none image "$scratch" corpus/image -- \
  -runs="$runs" -jobs=2 -workers=2 -print_final_stats=1 >/dev/null 2>&1 || status=$?
total=0
for log in fuzz-0.log fuzz-1.log; do
  n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  echo "$log: $n executions"
  total=$((total + n))
  if grep -qE '==[0-9]+== ERROR|panicked at|deadly signal' "$log"; then
    echo "$log: FAILURE (see the log and fuzz/artifacts/image)"
    status=1
  fi
done
echo "total: $total executions in $(( ($(date +%s) - start) / 60 )) minutes, new inputs in $scratch"
echo "merge them into the kept corpus with:"
echo "  cd fuzz && cargo +nightly fuzz run -s none image corpus/image $scratch -- -merge=1"
exit "$status"
