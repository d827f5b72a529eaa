#!/usr/bin/env bash
# clang-tidy over the product's sources with the checks in .clang-tidy
# (bugprone, concurrency, function size). Needs a configured build directory
# for compile_commands.json (default build/). Fails on any finding; a finding
# that is deliberate carries a NOLINT with its reason at the line.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=${JOBS:-$(nproc)}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run-clang-tidy -p "$BUILD" -j "$JOBS" -quiet \
  '(runtime|sim|worker|daemon|client|base|package|python|proto)/(src|tools)/.*\.cpp$' >"$log" 2>&1 || true
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '(warning|error): ' | sort -u || true)
if [ -n "$findings" ]; then
  echo "$findings"
  echo "tidy: $(echo "$findings" | wc -l) finding(s)" >&2
  exit 1
fi
echo "tidy: clean ($(grep -c '"file"' "$BUILD/compile_commands.json") translation units in the build, product sources checked)"
