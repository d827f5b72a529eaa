#include "pto2/sim/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "pto2/orchestration_api.h"

namespace pto2::sim {

namespace {

// Value of 'key' in the header dict, as written: "'<f4'", "False", "(3, 4)".
std::string dict_value(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = v;
  if (header[v] == '(') end = header.find(')', v) + 1;
  else if (header[v] == '\'') end = header.find('\'', v + 1) + 1;
  else end = header.find_first_of(",}", v);
  return header.substr(v, end - v);
}

}  // namespace

std::string npy_descr(int32_t dtype) {
  switch (dtype) {
    case PTO2_FLOAT32: return "<f4";
    case PTO2_FLOAT64: return "<f8";
    case PTO2_FLOAT16: return "<f2";
    case PTO2_INT32: return "<i4";
    case PTO2_INT64: return "<i8";
    case PTO2_INT16: return "<i2";
    case PTO2_INT8: return "|i1";
    case PTO2_UINT8: return "|u1";
    default: return "";
  }
}

Status read_npy(const std::string& path, NpyArray* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(kInvalidArgument, fmt::format("cannot open '{}'", path));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return Status::Error(kInvalidArgument, fmt::format("'{}' is not a .npy file (bad magic)", path));
  const int major = static_cast<uint8_t>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    uint8_t b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) return Status::Error(kInvalidArgument, fmt::format("'{}': truncated header", path));
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    uint8_t b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return Status::Error(kInvalidArgument, fmt::format("'{}': truncated header", path));
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  } else {
    return Status::Error(kInvalidArgument, fmt::format("'{}': unsupported .npy version {}", path, major));
  }
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return Status::Error(kInvalidArgument, fmt::format("'{}': truncated header", path));
  std::string descr = dict_value(header, "descr");
  if (descr.size() < 2) return Status::Error(kInvalidArgument, fmt::format("'{}': header has no descr", path));
  out->descr = descr.substr(1, descr.size() - 2);
  if (dict_value(header, "fortran_order") != "False")
    return Status::Error(kInvalidArgument, fmt::format("'{}': Fortran-ordered arrays are not supported", path));
  const std::string shape = dict_value(header, "shape");
  out->shape.clear();
  std::stringstream ss(shape.size() > 2 ? shape.substr(1, shape.size() - 2) : "");
  std::string item;
  uint64_t count = 1;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    out->shape.push_back(std::stoull(item));
    count *= out->shape.back();
  }
  uint64_t esz = 0;
  if (out->descr.size() >= 3) esz = std::stoull(out->descr.substr(2));
  if (esz == 0 || (out->descr[0] != '<' && out->descr[0] != '|'))
    return Status::Error(kInvalidArgument, fmt::format("'{}': unsupported dtype '{}'", path, out->descr));
  out->data.resize(count * esz);
  if (!in.read(reinterpret_cast<char*>(out->data.data()), static_cast<std::streamsize>(out->data.size())))
    return Status::Error(kInvalidArgument,
                         fmt::format("'{}': expected {} bytes of data for shape {}", path, out->data.size(), shape));
  return Status::Ok();
}

Status write_npy(const std::string& path, const std::string& descr, const std::vector<uint64_t>& shape,
                 const void* data, uint64_t bytes) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // Pad with spaces so the data starts on a 64-byte boundary; end with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error(kInvalidArgument, fmt::format("cannot write '{}'", path));
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char pre[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(pre, 8);
  const char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) return Status::Error(kInvalidArgument, fmt::format("short write to '{}'", path));
  return Status::Ok();
}

}  // namespace pto2::sim
