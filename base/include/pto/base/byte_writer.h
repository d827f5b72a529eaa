// Little-endian encoding of integers, strings (u32 length + bytes) and
// digests into a byte vector: the canonical descriptors that digests are
// computed over (docs/worker.md, "Descriptor bytes").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pto/base/sha256.h"

namespace pto {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void i32(int32_t v) { le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { le(v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void digest(const Digest& d) { out_->insert(out_->end(), d.begin(), d.end()); }
  void bytes(const std::vector<uint8_t>& b) { out_->insert(out_->end(), b.begin(), b.end()); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>* out_;
};

}  // namespace pto
