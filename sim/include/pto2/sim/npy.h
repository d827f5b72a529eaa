// NumPy .npy files (format 1.0/2.0, little-endian, C order): what pto2-run
// reads inputs and goldens from and writes outputs to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pto2/errors.h"

namespace pto2::sim {

struct NpyArray {
  std::string descr;             // numpy dtype string, e.g. "<f4"
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;     // raw little-endian elements, C order
};

Status read_npy(const std::string& path, NpyArray* out);
Status write_npy(const std::string& path, const std::string& descr, const std::vector<uint64_t>& shape,
                 const void* data, uint64_t bytes);

// numpy descr for a PTO2DataType ("<f4" for PTO2_FLOAT32, ...), empty if none.
std::string npy_descr(int32_t dtype);

}  // namespace pto2::sim
