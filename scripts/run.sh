#!/usr/bin/env bash
# The project's main job (README.md): installs dependencies, builds, and runs
# the L2 runtime benchmark, which prints per-task costs on this machine.
# (Later issues move the main job to the ptod daemon.)
# Arguments are passed to the benchmark, e.g. ./scripts/run.sh --sched 1 --reps 3
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$JOBS" --target pto2_runtime_bench
exec ./build/tests/bench/pto2_runtime_bench "$@"
