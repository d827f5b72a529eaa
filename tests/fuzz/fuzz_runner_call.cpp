// A runner channel message as the engine decodes it: a CALL (the runner is
// user code, so every byte is outside input), and the runner's LOADED / DONE
// outcome and a JOB.
#include <cstddef>
#include <cstdint>

#include "runner_channel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pto::RunnerCall c;
  if (pto::decode_call(data, size, &c).ok()) {
    const auto again = pto::encode_call(c);
    if (again.size() > size) __builtin_trap();  // what decodes re-encodes within its bytes
  }
  int64_t code = 0;
  std::string message;
  (void)pto::decode_outcome(data, size, &code, &message);
  pto::RunnerJob job;
  (void)pto::decode_job(data, size, &job);
  return 0;
}
