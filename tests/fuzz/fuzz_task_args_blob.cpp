// The TaskArgs blob of a mailbox, as a child decodes it: any bytes give an
// error or a view whose tensors' sizes can be computed without overflow.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mailbox.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > pto::kMailboxBlobCapacity) return 0;
  // The blob sits 1024-byte aligned in the mailbox.
  alignas(1024) static uint8_t blob[pto::kMailboxBlobCapacity];
  std::memcpy(blob, data, size);
  pto::TaskArgsView v{};
  if (pto::decode_args(blob, size, &v).ok()) {
    uint64_t total = 0;
    for (int i = 0; i < v.tensor_count; ++i) total += pto::tensor_bytes(v.tensors[i]);
    for (int i = 0; i < v.scalar_count; ++i) total += v.scalars[i] & 1;
    (void)total;
  }
  return 0;
}
