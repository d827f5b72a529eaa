#!/usr/bin/env bash
# The project's test command (README.md; .ci/run calls exactly this).
# Installs dependencies; builds into build/ (Release, what users build) and
# runs clang-tidy over the product's sources there (scripts/tidy.sh); builds
# build-tsan/ and build-asan/ and runs the concurrency tests (runtime,
# simulator, the engine's forked-process tests) under ThreadSanitizer and the
# whole suite under AddressSanitizer + UBSan; runs each libFuzzer target for
# 20 s (scripts/fuzz.sh, built in build-asan/); and last the whole suite on the
# normal build (so the closing CTest summary is the normal build's). Every
# build treats warnings as errors (PTO_WERROR). Exits non-zero on any failure.
#
# The two sanitized trees are unity builds (CMAKE_UNITY_BUILD: a target's
# sources compiled a batch at a time, so the gRPC, protobuf and asio headers
# are parsed once a batch, not once a file): on 2 vCPUs from scratch the ASan
# tree builds in ~410 s instead of ~535, the TSan tree in ~150 instead of
# ~270. The normal build stays one object per source: it is what users build,
# clang-tidy reads its compile database, and it is the build that proves each
# source includes what it uses.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says when it starts (seconds since this script began): the
# whole run must stay well inside CI's budget.
phase() { echo "== $1 (at ${SECONDS}s)"; }

./scripts/install-deps.sh

JOBS=${JOBS:-$(nproc)}

phase "normal build (Release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTO_WERROR=ON
cmake --build build -j "$JOBS"

phase "clang-tidy (product sources, checks in .clang-tidy)"
./scripts/tidy.sh build

phase "ThreadSanitizer build (concurrency tests)"
# clang: see cmake/Sanitizers.cmake (GCC's runtime cannot start threads after a multi-threaded fork).
CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTO_TSAN=ON -DPTO_BUILD_BENCH=OFF -DPTO_WERROR=ON \
  -DCMAKE_UNITY_BUILD=ON
cmake --build build-tsan -j "$JOBS"
# TSan's shadow memory needs a fixed layout; newer kernels' mmap
# randomisation breaks it, so the sanitized tests run with ASLR off. The
# engine forks replacement children and runners from a process that has
# threads, and those start threads of their own (a heartbeat): TSan allows it
# with die_after_fork=0.
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 die_after_fork=0" setarch "$(uname -m)" -R \
   ctest --output-on-failure -j "$JOBS" -L concurrency)

phase "AddressSanitizer + UndefinedBehaviorSanitizer build (whole suite)"
# clang 19: older ASan runtimes leave a child forked from a multi-threaded
# process with its allocator locked (cmake/Sanitizers.cmake). The fuzz
# targets are built in the same tree (PTO_FUZZ: coverage on the decoders'
# folders only, tests/fuzz/coverage.allowlist): one sanitized build, not two.
CC=clang-19 CXX=clang++-19 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTO_ASAN=ON -DPTO_FUZZ=ON -DPTO_BUILD_BENCH=OFF -DPTO_WERROR=ON \
  -DCMAKE_UNITY_BUILD=ON
cmake --build build-asan -j "$JOBS"
(cd build-asan && ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer setarch "$(uname -m)" -R \
   ctest --output-on-failure -j "$JOBS")

phase "fuzz targets: every decoder of outside bytes, 20 s each"
FUZZ_BUILD=build-asan ./scripts/fuzz.sh 20

phase "full suite (normal build)"
(cd build && ctest --output-on-failure -j "$JOBS")
phase "done"
