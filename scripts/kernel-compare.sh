#!/bin/bash
# The kernel comparison (docs/kernel-compare.md, issue 24): runs the experiments on the
# emulated disk, then regenerates the document and its charts from the data.
#
#   sudo scripts/kernel-compare.sh [run options]      e.g. --quick, --disk avfs-250g,
#                                                    --stacks ext4-bfq,dvrfs --experiments cdf
#
# Resumable: a finished run (its report.json) is never rerun, so the comparison can be
# interrupted at any time and continued in another session. The options are those of
# `python3 scripts/kernel_compare.py run` (see its header); `render` reads the same --data.
# Needs root and a release build (cargo build --release -p dvrfs-cli) or DVRFS_BIN.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[i]}" = --data ] && data=(--data "${args[i + 1]}")
done
python3 "$root/scripts/kernel_compare.py" run "$@"
python3 "$root/scripts/kernel_compare.py" render "${data[@]}"
