#!/usr/bin/env bash
# The whole dvrfs test suite, as the README and CI run it.
#
# Installs what the tests need on a Debian machine (as root, through apt-get), then
# checks formatting and lints and runs every test. Tests that need root or loop
# devices print "SKIP: <reason>" when the capability is truly absent.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v losetup >/dev/null 2>&1 || missing+=(mount)
command -v sha256sum >/dev/null 2>&1 || missing+=(coreutils)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)  # the C API's examples
command -v c++ >/dev/null 2>&1 || missing+=(g++)          # libFuzzer (cargo fuzz)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)   # the mount's tests
command -v setfattr >/dev/null 2>&1 || missing+=(attr)
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
[ -e /usr/share/zoneinfo/Europe/Berlin ] || missing+=(tzdata)  # local times and DST (--tz)
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || missing+=(faketime)  # a host clock step under a recording
# The emulated disk's tests: fio checks it, kernel file systems run on it.
command -v fio >/dev/null 2>&1 || missing+=(fio)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v mkfs.xfs >/dev/null 2>&1 || missing+=(xfsprogs)
command -v mkfs.btrfs >/dev/null 2>&1 || missing+=(btrfs-progs)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "note: ${missing[*]} missing and cannot be installed here; the tests that need them will say SKIP"
  fi
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component"
  fi
done

# pjdfstest and fsx check the FUSE mount (crates/dvrfs-cli/tests/mount_tools.rs).
for tool in pjdfstest fsx; do
  if ! command -v "$tool" >/dev/null 2>&1 && ! [ -x "$HOME/.cargo/bin/$tool" ]; then
    echo "== cargo install $tool"
    cargo install --quiet --locked "$tool"
  fi
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace

# The coverage-guided fuzzer of damaged metadata, bounded (docs/fuzzing.md): two
# minutes from the corpus kept in fuzz/corpus/image (read-only here; new inputs go to
# a scratch directory). libFuzzer needs the nightly toolchain and cargo-fuzz.
echo "== cargo fuzz (bounded run)"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || true
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "SKIP: cargo fuzz: no nightly Rust toolchain here and none could be installed (libFuzzer needs it); the corpus was still replayed by tests/fuzz_corpus.rs"
else
  if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== cargo install cargo-fuzz"
    cargo install --quiet --locked cargo-fuzz
  fi
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  # fuzz TARGET SECONDS WHAT: a bounded run from fuzz/corpus/TARGET (read-only here).
  fuzz() {
    mkdir -p "$scratch/$1"
    if ! (cd fuzz && cargo +nightly fuzz run -s none "$1" "$scratch/$1" "corpus/$1" -- \
        -max_total_time="$2" -print_final_stats=1 \
        -artifact_prefix="$scratch/" >"$scratch/fuzz-$1.log" 2>&1); then
      tail -n 60 "$scratch/fuzz-$1.log"
      echo "cargo fuzz $1: the oracle failed (the message above names $3); keep the input as fuzz/corpus/$1/regress-* once fixed"
      exit 1
    fi
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)|DONE' "$scratch/fuzz-$1.log"
  }
  fuzz image "${FUZZ_SECONDS:-120}" "the damage"
  # The media parser (issue 25): any bytes, whole and in pieces, the same frames.
  fuzz media "${FUZZ_MEDIA_SECONDS:-30}" "the split"
  # What export and trick play write (issue 25): the fMP4 retimer, the trick-play TS.
  fuzz clip "${FUZZ_CLIP_SECONDS:-20}" "which writer and what it broke"
fi
