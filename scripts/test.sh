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
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)   # the mount's tests
command -v setfattr >/dev/null 2>&1 || missing+=(attr)
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
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

# pjdfstest and fsx check the FUSE mount (crates/dvrfs-cli/tests/mount_cli.rs).
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
