#!/usr/bin/env bash
# Installs the dvrfs C API under PREFIX, where pkg-config and the linker find it:
#
#   PREFIX/lib/libdvrfs.so, PREFIX/lib/libdvrfs.a   the shared and static libraries
#   PREFIX/include/dvrfs.h                          the header
#   PREFIX/lib/pkgconfig/dvrfs.pc                   prefix=PREFIX
#
# Usage:
#   scripts/install-capi.sh PREFIX              build (cargo build --release -p dvrfs-capi)
#                                               and install, e.g. /usr/local (as root)
#   scripts/install-capi.sh --from DIR PREFIX   install what is already built in DIR
#                                               (a cargo profile directory: target/release)
#
# LIBDIR (default lib, relative to PREFIX) names another library directory, such as
# lib64 or lib/x86_64-linux-gnu. DESTDIR stages the files under DESTDIR/PREFIX for a
# package; dvrfs.pc still says PREFIX, where they will be. The build tree's own dvrfs.pc
# (target/release/dvrfs.pc) points into the build tree and serves builds against it.
set -euo pipefail

usage() {
  echo "usage: $0 [--from PROFILE_DIR] PREFIX" >&2
  exit 2
}

from=
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || usage; from=$2; shift 2 ;;
    -h|--help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
prefix=$1
case "$prefix" in
  /*) ;;
  *) echo "$0: PREFIX must be an absolute path (dvrfs.pc records it): $prefix" >&2; exit 2 ;;
esac
prefix=${prefix%/}
libdir=${LIBDIR:-lib}
dest=${DESTDIR:-}

if [ -z "$from" ]; then
  cd "$(dirname "$0")/.."
  cargo build --release -p dvrfs-capi --lib
  target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  from=${target_dir:-target}/release
fi
for f in libdvrfs.so libdvrfs.a include/dvrfs.h dvrfs.pc; do
  if [ ! -f "$from/$f" ]; then
    echo "$0: $from/$f is missing: build first (cargo build --release -p dvrfs-capi)" >&2
    exit 1
  fi
done

install -d "$dest$prefix/$libdir/pkgconfig" "$dest$prefix/include"
install -m 755 "$from/libdvrfs.so" "$dest$prefix/$libdir/libdvrfs.so"
install -m 644 "$from/libdvrfs.a" "$dest$prefix/$libdir/libdvrfs.a"
install -m 644 "$from/include/dvrfs.h" "$dest$prefix/include/dvrfs.h"
# The build's dvrfs.pc with the installed locations (its other lines as they are).
sed -e "s|^prefix=.*|prefix=$prefix|" \
    -e "s|^libdir=.*|libdir=\${prefix}/$libdir|" \
    -e "s|^includedir=.*|includedir=\${prefix}/include|" \
    "$from/dvrfs.pc" >"$dest$prefix/$libdir/pkgconfig/dvrfs.pc"
chmod 644 "$dest$prefix/$libdir/pkgconfig/dvrfs.pc"

echo "installed the dvrfs C API in $dest$prefix:"
echo "  $libdir/libdvrfs.so $libdir/libdvrfs.a include/dvrfs.h $libdir/pkgconfig/dvrfs.pc"
echo "build with: cc prog.c \$(pkg-config --cflags --libs dvrfs)"
echo "  (PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig if pkg-config does not search there;"
echo "   ldconfig, or LD_LIBRARY_PATH=$prefix/$libdir, if the loader does not)"
