#!/bin/sh
# out_of_tree_test.sh BUILD_DIR SOURCE_DIR — libpto-dev and pto-tools as a
# user meets them: install the dev and tools components into a temporary
# prefix, build the vector example's sources out of tree with
# find_package(PTO), run them with the installed pto2-run (PASS against the
# reference), and build and run a client program with pkg-config's flags.
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
for component in dev tools; do
  cmake --install "$build" --prefix "$prefix" --component "$component" >/dev/null
done
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
# shellcheck disable=SC2086
cmake -S "$src/tests/install/out_of_tree" -B "$tmp/work" $gen -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DPTO_EXAMPLE_SOURCES="$src/examples/vector" >"$tmp/configure.log" 2>&1 \
  || { cat "$tmp/configure.log"; echo "configure against the installed PTO failed"; exit 1; }
cmake --build "$tmp/work" -j 2 >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "out-of-tree build failed"; exit 1; }
run=$(cat "$tmp/work/pto_run_path.txt")
case "$run" in "$prefix"/*) ;; *) echo "find_package(PTO) gave pto2-run $run, not the installed one"; exit 1 ;; esac
"$run" "$tmp/work/kernels.toml" -o "$tmp/out" | tee "$tmp/run.log"
grep -q "f: PASS (16384/16384 elements matched)" "$tmp/run.log" || { echo "the out-of-tree vector example did not pass"; exit 1; }
"$tmp/work/client_probe"
# pkg-config: the same program from pto.pc's flags alone.
pc_dir=$(dirname "$(find "$prefix" -name pto.pc | head -n1)")
# shellcheck disable=SC2046
c++ -std=c++20 -o "$tmp/client_probe_pc" "$src/tests/install/out_of_tree/client_probe.cpp" \
  $(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs pto)
"$tmp/client_probe_pc"
echo "out-of-tree: find_package(PTO), pto.pc and the installed pto2-run OK"
