#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz; clang 19, ASan + UBSan) and runs
# each for SECONDS (default 20) on a scratch copy of its seed corpus, as many
# at once as there are CPUs (JOBS). Exits non-zero on any crash, sanitizer
# report, leak, timeout or out-of-memory; the input that caused it is kept in
# FUZZ_BUILD/findings/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# FUZZ_BUILD (default build-fuzz/, configured here) may name a tree configured
# with -DPTO_FUZZ=ON already: scripts/test.sh passes its ASan build.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
shift || true
JOBS=${JOBS:-$(nproc)}

FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}

if [ "$FUZZ_BUILD" = build-fuzz ]; then
  CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTO_FUZZ=ON \
    -DPTO_BUILD_TESTS=OFF -DPTO_BUILD_BENCH=OFF >/dev/null
elif ! grep -q '^PTO_FUZZ:BOOL=ON' "$FUZZ_BUILD/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz: $FUZZ_BUILD is not a build configured with -DPTO_FUZZ=ON" >&2
  exit 2
fi
cmake --build "$FUZZ_BUILD" -j "$JOBS" --target fuzz_targets

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for t in tests/fuzz/corpus/*/; do targets+=("$(basename "$t")"); done
fi
mkdir -p "$FUZZ_BUILD"/findings
# One target per CPU at a time (each libFuzzer process is single-threaded):
# the same fuzzing time per target in a fraction of the wall time.
# Writes the target's exit status to findings/T.status (none: it did not run).
fuzz_one() {
  local t=$1 work log rc=0
  work=$(mktemp -d)
  log="$FUZZ_BUILD"/findings/$t.log
  : >"$log"
  cp tests/fuzz/corpus/"$t"/* "$work"/ &&
    "$FUZZ_BUILD"/tests/fuzz/"$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -artifact_prefix="$FUZZ_BUILD"/findings/"$t"- -print_final_stats=1 "$work" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$FUZZ_BUILD"/findings/"$t".status
  rm -rf "$work"
}
rm -f "$FUZZ_BUILD"/findings/*.status
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # an interrupted run leaves no fuzzer behind
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  log="$FUZZ_BUILD"/findings/$t.log
  if [ "$(cat "$FUZZ_BUILD"/findings/"$t".status 2>/dev/null)" = 0 ]; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz $t: ${SECONDS_EACH} s, $runs executions, no crash"
  else
    echo "fuzz $t: FAILED (see $log)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 || true
    status=1
  fi
done
exit $status
