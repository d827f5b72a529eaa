// The kernels a simulated chip was given, by func_id and core type: what
// register_kernel() fills and resolve_kernel() (the reference design's
// func_id_to_addr) reads. Filled before runs start; read-only after.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "pto2/platform.h"
#include "pto2/sim/sim_chip.h"

namespace pto2::sim {

class KernelTable {
 public:
  // A second registration of the same func_id and type replaces the first.
  void add(int32_t func_id, WorkerType type, KernelEntry entry) {
    for (auto& [id, e] : by_type_[static_cast<int>(type)]) {
      if (id == func_id) {
        e = entry;
        return;
      }
    }
    by_type_[static_cast<int>(type)].emplace_back(func_id, entry);
  }
  bool resolve(int32_t func_id, WorkerType type, uint64_t* function_bin_addr) const {
    for (const auto& [id, e] : by_type_[static_cast<int>(type)]) {
      if (id == func_id) {
        *function_bin_addr = reinterpret_cast<uint64_t>(e);
        return true;
      }
    }
    return false;
  }

 private:
  std::vector<std::pair<int32_t, KernelEntry>> by_type_[kNumWorkerTypes];
};

}  // namespace pto2::sim
