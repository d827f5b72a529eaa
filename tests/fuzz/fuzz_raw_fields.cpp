// A transfer chunk's wire bytes as the daemon and the client walk them
// (pto/v1/raw_fields.h), cut into slices as gRPC may hand them over. The
// first input byte picks the slice length. Whatever the bytes: no read past
// them, each bytes field's pieces add up to the length it announced, and
// the same fields come out however the bytes are cut.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pto/v1/raw_fields.h"

namespace {
// Every event, with a bytes field's pieces joined: what the fields were,
// whatever the cut.
struct Record : pto::v1::RawFieldSink {
  std::vector<std::string> fields;
  uint64_t want = 0, got = 0;
  bool begin(uint32_t f, uint64_t total) override {
    if (got != want) __builtin_trap();  // the previous field's pieces fell short
    want = total;
    got = 0;
    fields.push_back("bytes " + std::to_string(f) + " " + std::to_string(total) + ": ");
    return true;
  }
  bool piece(uint32_t, const uint8_t* p, size_t n) override {
    got += n;
    if (got > want || n == 0 || fields.empty()) __builtin_trap();
    fields.back().append(reinterpret_cast<const char*>(p), n);
    return true;
  }
  bool scalar(uint32_t f, uint64_t v) override {
    fields.push_back("scalar " + std::to_string(f) + " " + std::to_string(v));
    return true;
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t every = data[0] % 17 + 1;
  const uint8_t* msg = data + 1;
  const size_t n = size - 1;
  std::vector<pto::v1::Piece> cut, whole;
  for (size_t i = 0; i < n; i += every) cut.push_back({msg + i, std::min(every, n - i)});
  if (n > 0) whole.push_back({msg, n});
  Record a, b;
  std::string why_a, why_b;
  const bool ok_a = pto::v1::read_fields(cut, a, &why_a);
  const bool ok_b = pto::v1::read_fields(whole, b, &why_b);
  if (ok_a != ok_b || why_a != why_b) __builtin_trap();
  if (ok_a && (a.got != a.want || a.fields != b.fields)) __builtin_trap();
  return 0;
}
