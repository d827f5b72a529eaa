#!/usr/bin/env bash
# The project's main job (README.md): installs dependencies, builds, runs the
# seed's vector example on the simulated chip with pto2-run (golden-checked,
# with a run summary), then the L2 runtime benchmark and the L3 engine
# benchmark, which print per-task costs on this machine. (Later issues move the
# main job to the ptod daemon.)
# Arguments are passed to the benchmark, e.g. ./scripts/run.sh --sched 1 --reps 3
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$JOBS"
./build/sim/pto2-run build/examples/vector/kernels.toml -o build/pto2-run-out --summary
./build/tests/bench/pto2_runtime_bench "$@"
exec ./build/tests/bench/pto_worker_bench
