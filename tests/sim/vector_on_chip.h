// The vector example on a simulated chip (either kind) under the PTO2
// runtime, for the chips' tests: its kernels registered, its tensors in the
// chip's memory (moved with the host API), each run checked against the
// host computation.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "pto2/runtime.h"
#include "pto2/sim/sim_chip.h"
#include "vector_example.h"

namespace pto2::sim {

class VectorOnChip {
 public:
  static constexpr uint32_t kN = 16384;

  VectorOnChip(SimChip& chip, int scheduler_threads) : chip_(chip), a_(kN), b_(kN) {
    namespace vx = pto2::vector_example;
    chip.register_kernel(vx::kAdd, WorkerType::kVector, vx::add);
    chip.register_kernel(vx::kAddScalar, WorkerType::kVector, vx::add_scalar);
    chip.register_kernel(vx::kMul, WorkerType::kVector, vx::mul);
    RuntimeConfig rc;
    rc.task_window = 1024;
    rc.heap_size = 1 << 20;
    rc.scheduler_threads = scheduler_threads;
    Status st;
    rt_ = Runtime::create(rc, chip, &st);
    REQUIRE(rt_);
    for (uint32_t i = 0; i < kN; ++i) {
      a_[i] = float(i % 31);
      b_[i] = float(i % 7) * 0.25f;
    }
    for (void** p : {&da_, &db_, &df_}) REQUIRE(chip.memory().alloc(kN * 4, p).ok());
    REQUIRE(chip.memory().copy_to_device(da_, a_.data(), kN * 4).ok());
    REQUIRE(chip.memory().copy_to_device(db_, b_.data(), kN * 4).ok());
  }
  ~VectorOnChip() {
    for (void* p : {da_, db_, df_}) (void)chip_.memory().free(p);
  }

  // One run: the elements of f that match (a + b + 1)(a + b + 2).
  uint32_t run() {
    RunResult r = rt_->run([&](PTO2Runtime* p) {
      pto2::vector_example::orchestrate(p, da_, db_, df_, kN);
      return 0;
    });
    REQUIRE(r.ok());
    std::vector<float> f(kN);
    REQUIRE(chip_.memory().copy_from_device(f.data(), df_, kN * 4).ok());
    uint32_t matched = 0;
    for (uint32_t i = 0; i < kN; ++i) matched += f[i] == (a_[i] + b_[i] + 1.f) * (a_[i] + b_[i] + 2.f);
    return matched;
  }

 private:
  SimChip& chip_;
  std::unique_ptr<Runtime> rt_;
  std::vector<float> a_, b_;
  void *da_ = nullptr, *db_ = nullptr, *df_ = nullptr;
};

}  // namespace pto2::sim
