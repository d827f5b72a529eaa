// Shared fixtures for the runtime tests: a HostThreadPlatform with a few
// real kernels (elementwise fp32 math, an order-sensitive int64 mixer) and an
// execution log that records when each task started and ended, so graph tests
// can check ordering constraints against the dependencies they expect.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "pto2/host_thread_platform.h"
#include "pto2/runtime.h"

namespace pto2::test {

enum KernelId : int32_t {
  kAdd = 0,        // out = in0 + in1            (fp32, VECTOR)
  kAddScalar = 1,  // out = in0 + bitcast(s)     (fp32, VECTOR)
  kMul = 2,        // out = in0 * in1            (fp32, VECTOR)
  kMatAcc = 3,     // c += a @ b                 (fp32, CUBE), c INOUT
  kMix = 4,        // v = v * 31 + u[i % |u|] + tag  (int64), order-sensitive
  kRecord = 5,     // records start/end of task `tag` only (any params)
  kMixCube = 6,    // kMix on CUBE cores
  kFill = 7,       // out[i] = s                 (int64, VECTOR): args out, s
  kSlowCopy = 8,   // sleeps args[2] us, then out = in (int64, VECTOR): args in, out, us
};

// Kernel param conventions (args index): see test_support.cpp.
struct ExecLog {
  explicit ExecLog(size_t n) : start(n), end(n) {}
  std::vector<std::atomic<uint64_t>> start, end;  // 1-based logical clock, 0 = never ran
};

// Installs the kernels above on a platform; the log (may be null) receives
// start/end stamps of tasks whose last scalar is their tag (kRecord, kMix*).
void register_test_kernels(HostThreadPlatform& platform);
void set_exec_log(ExecLog* log);
uint64_t exec_clock();

// Platform + runtime in one object for tests.
struct Chip {
  Chip(RuntimeConfig config, int executor_threads, int cube = 4, int vector = 8);
  HostThreadPlatform platform;
  std::unique_ptr<Runtime> runtime;
  Status create_status;
};

RuntimeConfig small_config(int scheduler_threads = 2);

// One step of the order-sensitive mixer kMix computes: v * 31 + u + tag,
// wrapping (unsigned arithmetic; a signed overflow would be undefined).
inline int64_t mix_step(int64_t v, int64_t u, int64_t tag) {
  return static_cast<int64_t>(static_cast<uint64_t>(v) * 31u + static_cast<uint64_t>(u) + static_cast<uint64_t>(tag));
}

inline uint64_t f32_bits(float f) {
  uint32_t u;
  static_assert(sizeof(u) == sizeof(f));
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace pto2::test
