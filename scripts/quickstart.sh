#!/bin/sh
# dvrfs quickstart: build the CLI, make a 1 GiB image, store a 64 MiB file, read it
# back, compare checksums, check the file system and show its layout.
#
# Needs only the Rust toolchain and coreutils. Run from anywhere inside the checkout;
# everything it creates lives under ./target/quickstart.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=target/quickstart
img=$work/quickstart.img
src=$work/random-64m.bin
back=$work/random-64m.back
bin=target/release/dvrfs

step() {
    printf '\n==> %s\n' "$*"
}

step "Building dvrfs (release)"
cargo build --release -p dvrfs-cli

step "Preparing $work"
mkdir -p "$work"
rm -f "$img" "$src" "$back"

step "Creating a 1 GiB image with 4 MiB blocks: dvrfs mkfs $img --size 1G"
"$bin" mkfs "$img" --size 1G

step "Generating a 64 MiB random file: $src"
head -c 67108864 /dev/urandom > "$src"

step "Storing it: dvrfs put $img $src /clips/random-64m.bin"
"$bin" mkdir "$img" /clips
"$bin" put "$img" "$src" /clips/random-64m.bin

step "Listing: dvrfs ls -l $img /clips"
"$bin" ls -l "$img" /clips

step "Reading it back: dvrfs get $img /clips/random-64m.bin $back"
"$bin" get "$img" /clips/random-64m.bin "$back"

step "Comparing SHA-256"
a=$(sha256sum < "$src" | cut -d' ' -f1)
b=$(sha256sum < "$back" | cut -d' ' -f1)
echo "original:  $a"
echo "read back: $b"
if [ "$a" != "$b" ]; then
    echo "quickstart: FAILED, the file read back differs from the original" >&2
    exit 1
fi
echo "identical"

step "Checking: dvrfs fsck $img"
"$bin" fsck "$img"

step "Layout and usage: dvrfs info $img"
"$bin" info "$img"

step "Done. Try: $bin --help"
