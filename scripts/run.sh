#!/usr/bin/env bash
# The project's main job (README.md): installs dependencies, builds, then
# starts ptod on an embedded default — a temporary state directory and unix
# socket, no root, no systemd — runs the paged-attention example through
# ptoctl (generated inputs uploaded, one job, outputs downloaded and checked
# against the reference), prints where the trace is, shows the worker tree and
# stops the daemon (SIGTERM: drain, exit 0). With --bench it also runs the
# runtime, engine, daemon and remote-session benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTO_WERROR=ON
cmake --build build -j "$JOBS"

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/ptod-main.XXXXXX")
PTOD_PID=""
stop_daemon() {
  if [ -n "$PTOD_PID" ] && kill -0 "$PTOD_PID" 2>/dev/null; then
    kill -TERM "$PTOD_PID"
    wait "$PTOD_PID" || true
  fi
}
trap 'stop_daemon' EXIT

echo "== starting ptod (state in $RUN_DIR)"
./build/daemon/ptod --state-dir "$RUN_DIR/state" --socket "$RUN_DIR/ptod.sock" --metrics 127.0.0.1:0 \
  --ready-file "$RUN_DIR/ready" >"$RUN_DIR/ptod.log" 2>&1 &
PTOD_PID=$!
for _ in $(seq 1 3000); do
  [ -f "$RUN_DIR/ready" ] && break
  kill -0 "$PTOD_PID" 2>/dev/null || { cat "$RUN_DIR/ptod.log"; exit 1; }
  sleep 0.01
done
[ -f "$RUN_DIR/ready" ] || { cat "$RUN_DIR/ptod.log"; echo "ptod did not start"; exit 1; }
export PTOD_ADDRESS="unix:$RUN_DIR/ptod.sock"

echo "== paged attention through ptoctl"
./build/client/ptoctl run-example build/examples/paged_attention/kernels.toml --trace
echo "== workers"
./build/client/ptoctl workers

echo "== stopping ptod"
kill -TERM "$PTOD_PID"
wait "$PTOD_PID"
echo "ptod exited $? after draining; its log: $RUN_DIR/ptod.log"
PTOD_PID=""

if [ "${1:-}" = "--bench" ]; then
  ./build/tests/bench/pto2_runtime_bench
  ./build/tests/bench/pto_worker_bench
  ./build/tests/bench/ptod_bench
  ./build/tests/bench/pto_remote_bench
fi
