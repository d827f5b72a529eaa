// What a task carries besides its callable (docs/worker.md, "TaskArgs, tags and dependencies"): TaskArgs (tensors
// with per-tensor tags, and scalars) and CallConfig (a small POD of execution
// knobs). Tags exist only here, on the user side: the Orchestrator consumes
// them at submit to derive dependencies, and they never cross a process
// boundary. What crosses is the tag-free TaskArgsView (pto/native_abi.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "pto/native_abi.h"

namespace pto {

using ContinuousTensor = PtoTensor;
using TaskArgsView = PtoTaskArgsView;

enum class TensorArgType : uint8_t {
  INPUT = 0,            // read: waits for the last overlapping writer
  OUTPUT = 1,           // written; data == 0 means "allocate from the heap ring"
  INOUT = 2,            // read and written in place
  OUTPUT_EXISTING = 3,  // written into an existing buffer (data must be set)
  NO_DEP = 4,           // passed through, no dependency tracking
};
inline constexpr TensorArgType IN = TensorArgType::INPUT;
inline constexpr TensorArgType OUT = TensorArgType::OUTPUT;
inline constexpr TensorArgType INOUT = TensorArgType::INOUT;
inline constexpr TensorArgType OUT_EXISTING = TensorArgType::OUTPUT_EXISTING;
inline constexpr TensorArgType NO_DEP = TensorArgType::NO_DEP;
const char* tag_name(TensorArgType t);

// A tensor descriptor over `data` (nullptr: to be allocated by an OUTPUT).
ContinuousTensor make_tensor(void* data, std::initializer_list<uint32_t> shape, int32_t dtype);
ContinuousTensor make_tensor(void* data, const std::vector<uint32_t>& shape, int32_t dtype);
// Bytes the descriptor covers (0 for an unknown dtype).
inline uint64_t tensor_bytes(const ContinuousTensor& t) { return pto_tensor_bytes(&t); }

class TaskArgs {
 public:
  TaskArgs& add_tensor(const ContinuousTensor& t, TensorArgType tag = TensorArgType::INPUT) {
    tensors_.push_back(t);
    tags_.push_back(tag);
    return *this;
  }
  TaskArgs& add_scalar(uint64_t v) {
    scalars_.push_back(v);
    return *this;
  }
  TaskArgs& add_scalar_f32(float v);

  int32_t tensor_count() const { return static_cast<int32_t>(tensors_.size()); }
  int32_t scalar_count() const { return static_cast<int32_t>(scalars_.size()); }
  const ContinuousTensor& tensor(int32_t i) const { return tensors_[i]; }
  ContinuousTensor& tensor(int32_t i) { return tensors_[i]; }
  uint64_t scalar(int32_t i) const { return scalars_[i]; }
  TensorArgType tag(int32_t i) const { return tags_[i]; }  // only the Orchestrator reads tags

  // A tag-free view over this object's storage (valid while it is unchanged).
  TaskArgsView view() const { return TaskArgsView{tensor_count(), scalar_count(), tensors_.data(), scalars_.data()}; }
  // Every tensor tagged INPUT (what a callee receives is already tag-free).
  static TaskArgs from_view(const TaskArgsView& v);

 private:
  std::vector<ContinuousTensor> tensors_;
  std::vector<TensorArgType> tags_;
  std::vector<uint64_t> scalars_;
};

// Execution knobs, the same POD at every level, copied by value into the
// mailbox (docs/worker.md has its byte layout).
struct CallConfig {
  int32_t block_dim = 0;         // chip clusters; 0 = the chip callable's own setting
  int32_t aicpu_thread_num = 0;  // 0 = the chip callable's own setting
  int32_t enable_profiling = 0;
  int32_t enable_dump_tensor = 0;
  int32_t enable_pmu = 0;
  int32_t reserved = 0;
  uint64_t timeout_ms = 0;  // per task; 0 = the Worker's task_timeout_ms
  char output_prefix[256] = {};
};
static_assert(sizeof(CallConfig) == 288, "CallConfig is part of the mailbox layout");

}  // namespace pto
