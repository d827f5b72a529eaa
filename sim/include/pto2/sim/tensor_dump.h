// The tensor dump (CallConfig.enable_dump_tensor, pto2-run --dump-tensors):
// after each task's kernel returned, every tensor it took is written densely
// (the view's elements, row-major) as DIR/task-<id>-<kernel>-arg<i>.npy.
// A TaskObserver: it runs on the scheduler threads and slows the run.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "pto2/errors.h"
#include "pto2/runtime.h"

namespace pto2::sim {

class TensorDump : public TaskObserver {
 public:
  // name_of(kernel_id, worker_type) names a kernel in file names.
  using KernelName = std::function<std::string(int32_t kernel_id, int32_t worker_type)>;
  TensorDump(std::string dir, KernelName name_of);

  // Creates the directory; an error names it.
  Status prepare() const;
  void task_finished(uint64_t task_id, int32_t kernel_id, int32_t worker_type, const Tensor* const* tensors,
                     int32_t num_params) override;
  // The first write that failed during the run, if any; and how many files were written.
  Status status() const;
  uint64_t files() const;

 private:
  std::string dir_;
  KernelName name_of_;
  mutable std::mutex mu_;
  Status first_error_;
  uint64_t files_ = 0;
};

// The view's elements in row-major order (what a kernel sees through it).
std::vector<uint8_t> dense_copy(const Tensor& t);

}  // namespace pto2::sim
