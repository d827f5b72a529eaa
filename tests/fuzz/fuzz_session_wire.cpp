// A session frame as both ends now read it (daemon/src/session_wire.h):
// bytes cut into slices as gRPC may hand them over, decoded with the large
// control's or reply's data left in pieces. Differential against protobuf:
// whatever decode_frame accepts, protobuf parses to the same frame once the
// pieces are put back as the data. The first input byte picks the slice
// length and whether a large data field follows the fuzzed bytes (so the
// raw path, for frames of 64 KiB and more, is reached within libFuzzer's
// input sizes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "session_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::string wire(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode & 0x80) {  // a control (or reply) with 64 KiB of data after the fuzzed bytes
    const bool reply = mode & 0x40;
    const std::string big(ptod::kPayloadMinBytes, 'p');
    const std::string inner = pto::v1::bytes_field_header(reply ? 8 : 9, big.size()) + big;
    wire += pto::v1::bytes_field_header(reply ? 13 : 12, inner.size()) + inner;
  }
  const size_t every = 1 + size_t(mode & 0x3f) * 67;
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < wire.size(); i += every)
    slices.emplace_back(wire.data() + i, std::min(every, wire.size() - i));
  const grpc::ByteBuffer bb(slices.data(), slices.size());
  pto::v1::Frame got;
  ptod::Payload chunk;
  std::string why;
  if (!ptod::decode_frame(bb, &got, &chunk, &why)) {
    if (why.empty()) __builtin_trap();  // a refusal always says why
    return 0;
  }
  pto::v1::Frame want;
  if (!want.ParseFromString(wire)) __builtin_trap();
  if (!chunk.empty()) {
    std::string joined(chunk.size, '\0');
    chunk.copy_to(joined.data());
    if (got.has_control())
      got.mutable_control()->set_data(joined);
    else if (got.has_control_reply())
      got.mutable_control_reply()->set_data(joined);
    else
      __builtin_trap();  // data, but no body to hold it
  }
  if (got.SerializeAsString() != want.SerializeAsString()) __builtin_trap();
  return 0;
}
