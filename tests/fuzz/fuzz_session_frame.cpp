// A remote session frame as either end reads it: the protobuf decoder, the
// order checks and, for TASK frames, every tensor's checks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "session_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pto::v1::Frame f;
  if (!f.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)ptod::check_frame_order(f, 0x1234, 2);
  if (f.has_task()) {
    for (const auto& t : f.task().tasks())
      for (const auto& rt : t.tensors()) {
        std::vector<uint32_t> shape;
        uint64_t bytes = 0;
        if (ptod::check_remote_tensor(rt, &shape, &bytes).empty() && bytes > ptod::kMaxRemoteTensorBytes)
          __builtin_trap();
      }
  }
  return 0;
}
