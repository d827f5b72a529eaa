// NumPy .npy files (format 1.0/2.0, little-endian, C order): what pto2-run
// reads inputs and goldens from and writes outputs to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pto2/errors.h"

namespace pto::package {

struct NpyArray {
  std::string descr;  // numpy dtype string, e.g. "<f4"
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian elements, C order
};

// Every reader checks before it allocates: the header is at most 64 KiB of
// text, the shape's numbers parse and their product does not overflow, the
// dtype is little-endian or byte-sized with 1, 2, 4 or 8 bytes, and the data
// is exactly what the shape announces. Errors name the input and the rule.
struct NpyHeader {
  std::string descr;
  std::vector<uint64_t> shape;
  uint64_t data_offset = 0;  // where the elements start
  uint64_t data_bytes = 0;   // shape x element size
};
Status parse_npy_header(const uint8_t* data, size_t size, const std::string& name, NpyHeader* out);
// A whole .npy held in memory (name is what errors call it).
Status parse_npy(const uint8_t* data, size_t size, const std::string& name, NpyArray* out);
Status read_npy(const std::string& path, NpyArray* out);
Status write_npy(const std::string& path, const std::string& descr, const std::vector<uint64_t>& shape,
                 const void* data, uint64_t bytes);

// numpy descr for a PTO2DataType ("<f4" for PTO2_FLOAT32, ...), empty if none.
std::string npy_descr(int32_t dtype);

}  // namespace pto::package
