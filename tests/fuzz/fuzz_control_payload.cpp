// A mailbox CONTROL_REQUEST payload (CTRL_REGISTER), as a child decodes it.
#include <cstddef>
#include <cstdint>

#include "mailbox.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pto::ControlDescriptor d;
  if (pto::decode_control(data, size, &d).ok()) {
    // What decodes encodes back to the same bytes.
    const auto again = pto::encode_control(d);
    if (again.size() > size) __builtin_trap();
  }
  return 0;
}
