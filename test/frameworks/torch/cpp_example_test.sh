#!/usr/bin/env bash
# Installs tower into a temporary prefix, builds examples/torch/fit.cpp (a libtorch program) against it
# with nothing but `pkg-config --cflags --libs tower-torch`, and trains it under mpirun at 2 ranks:
# its loss must fall below 0.01 with the replicas identical.
# Usage: cpp_example_test.sh BUILD_DIR SOURCE_DIR MPIRUN
set -euo pipefail
build=$1 source=$2 mpirun=$3
dest=$(mktemp -d /tmp/tower-torch-example-XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
root=$dest$prefix
# The .pc files name the real prefix; point copies of them at the temporary one.
mkdir -p "$dest/pkgconfig"
for name in tower tower-torch; do
  pc=$(find "$root" -name "$name.pc" | head -n 1)
  [ -n "$pc" ] || fail "no $name.pc under $root"
  sed "s|^prefix=.*|prefix=$root|" "$pc" > "$dest/pkgconfig/$name.pc"
done
libdir=$(dirname "$(dirname "$(find "$root" -name tower-torch.pc | head -n 1)")")
PKG_CONFIG_PATH="$dest/pkgconfig" make -s -C "$source/examples/torch" OUT="$dest" >/dev/null ||
  fail "examples/torch/fit.cpp does not build against the installed tower-torch"
ldd_line=$(LD_LIBRARY_PATH="$libdir" ldd "$dest/fit" | grep libtower_torch)
case "$ldd_line" in *"$dest"*) ;; *) fail "the example does not load the installed libtower_torch: $ldd_line" ;; esac
out=$(LD_LIBRARY_PATH="$libdir" "$mpirun" -np 2 "$dest/fit" 300 2>&1) || fail "fit at 2 ranks failed: $out"
echo "$out" | grep '^fit:' || fail "no result line: $out"
