// Shared helpers of the engine tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <thread>

#include "eventually.h"
#include "pto/worker.h"

namespace pto_test {

inline float* f32(const pto::ContinuousTensor& t) { return reinterpret_cast<float*>(t.data); }

inline pto::ContinuousTensor alloc_f32(pto::Worker& w, uint32_t n) {
  auto r = w.alloc({n}, PTO_FLOAT32);
  REQUIRE(r.ok());
  return r.value;
}

// The vector example's function.
inline float vector_f(float a, float b) { return (a + b + 1.f) * (a + b + 2.f); }

inline void fill(const pto::ContinuousTensor& t, float base, float step) {
  for (uint64_t i = 0; i < pto_tensor_numel(&t); ++i) f32(t)[i] = base + step * static_cast<float>(i % 97);
}

inline const pto::ChildInfo* child(const std::vector<pto::ChildInfo>& cs, pto::ChildKind k, int i) {
  for (const auto& c : cs)
    if (c.kind == k && c.index == i) return &c;
  return nullptr;
}

// Gone and reaped: kill() no longer finds it (a zombie would still be found).
// A sub callable that sleeps scalars[0] ms: a task that holds its worker.
inline int sleep_ms(const pto::TaskArgsView& a, std::string&) {
  std::this_thread::sleep_for(std::chrono::milliseconds(a.scalars[0]));
  return 0;
}

inline bool process_gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Gone, or a zombie waiting for a reaper we do not control (an orphan's).
inline bool process_dead(int pid) {
  if (process_gone(pid)) return true;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const auto p = line.rfind(')');
  return p != std::string::npos && p + 2 < line.size() && line[p + 2] == 'Z';
}

}  // namespace pto_test
