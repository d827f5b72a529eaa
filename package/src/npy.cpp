#include "pto/package/npy.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "pto2/orchestration_api.h"

namespace pto::package {

namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;  // numpy itself reads at most 10,000 by default
constexpr uint64_t kMaxDims = 32;

Status npy_error(const std::string& name, const std::string& why) {
  return Status::Error(kInvalidArgument, fmt::format("'{}': {}", name, why));
}

// Value of 'key' in the header dict, as written: "'<f4'", "False", "(3, 4)";
// empty when absent or malformed.
std::string dict_value(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  if (v >= header.size()) return "";
  size_t end;
  if (header[v] == '(') {
    end = header.find(')', v);
    if (end == std::string::npos) return "";
    ++end;
  } else if (header[v] == '\'') {
    end = header.find('\'', v + 1);
    if (end == std::string::npos) return "";
    ++end;
  } else {
    end = header.find_first_of(",}", v);
    if (end == std::string::npos) return "";
  }
  return header.substr(v, end - v);
}

bool parse_u64(const std::string& text, uint64_t* out) {
  size_t a = text.find_first_not_of(' '), b = text.find_last_not_of(' ');
  if (a == std::string::npos) return false;
  const char* first = text.data() + a;
  const char* last = text.data() + b + 1;
  auto [ptr, ec] = std::from_chars(first, last, *out);
  return ec == std::errc() && ptr == last;
}

}  // namespace

Status parse_npy_header(const uint8_t* data, size_t size, const std::string& name, NpyHeader* out) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0) return npy_error(name, "not a .npy file (bad magic)");
  const int major = data[6];
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = data[8] | (size_t(data[9]) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return npy_error(name, "truncated header");
    header_len = data[8] | (size_t(data[9]) << 8) | (size_t(data[10]) << 16) | (size_t(data[11]) << 24);
    prefix = 12;
  } else {
    return npy_error(name, fmt::format("unsupported .npy version {}", major));
  }
  if (header_len > kMaxHeaderBytes)
    return npy_error(name, fmt::format("a header of {} bytes (at most {} are read)", header_len, kMaxHeaderBytes));
  if (size - prefix < header_len) return npy_error(name, "truncated header");
  const std::string header(reinterpret_cast<const char*>(data) + prefix, header_len);
  for (char c : header)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') return npy_error(name, "the header is not text");
  std::string descr = dict_value(header, "descr");
  if (descr.size() < 2 || descr.front() != '\'' || descr.back() != '\'') return npy_error(name, "header has no descr");
  out->descr = descr.substr(1, descr.size() - 2);
  if (dict_value(header, "fortran_order") != "False")
    return npy_error(name, "Fortran-ordered arrays are not supported");
  const std::string shape = dict_value(header, "shape");
  if (shape.size() < 2 || shape.front() != '(') return npy_error(name, "header has no shape");
  out->shape.clear();
  uint64_t count = 1;
  const std::string items = shape.substr(1, shape.size() - 2);
  for (size_t at = 0; at <= items.size();) {
    size_t comma = items.find(',', at);
    if (comma == std::string::npos) comma = items.size();
    const std::string item = items.substr(at, comma - at);
    at = comma + 1;
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    uint64_t d = 0;
    if (!parse_u64(item, &d)) return npy_error(name, fmt::format("shape entry '{}' is not a number", item));
    if (out->shape.size() == kMaxDims) return npy_error(name, fmt::format("more than {} dimensions", kMaxDims));
    out->shape.push_back(d);
    if (__builtin_mul_overflow(count, d, &count)) return npy_error(name, fmt::format("shape {} overflows", shape));
  }
  uint64_t esz = 0;
  if (out->descr.size() < 3 || (out->descr[0] != '<' && out->descr[0] != '|') ||
      !parse_u64(out->descr.substr(2), &esz) || (esz != 1 && esz != 2 && esz != 4 && esz != 8))
    return npy_error(name, fmt::format("unsupported dtype '{}'", out->descr));
  if (__builtin_mul_overflow(count, esz, &out->data_bytes))
    return npy_error(name, fmt::format("shape {} overflows", shape));
  out->data_offset = prefix + header_len;
  return Status::Ok();
}

Status parse_npy(const uint8_t* data, size_t size, const std::string& name, NpyArray* out) {
  NpyHeader h;
  if (Status s = parse_npy_header(data, size, name, &h); !s.ok()) return s;
  if (size - h.data_offset != h.data_bytes)
    return npy_error(name, fmt::format("{} bytes of data for shape [{}] of '{}'; the file has {}", h.data_bytes,
                                       fmt::join(h.shape, ", "), h.descr, size - h.data_offset));
  out->descr = h.descr;
  out->shape = h.shape;
  out->data.assign(data + h.data_offset, data + size);
  return Status::Ok();
}

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
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::Error(kInvalidArgument, fmt::format("cannot open '{}': {}", path, errno_text(errno)));
  const std::streamoff file_size = in.tellg();
  in.seekg(0);
  // The header first (bounded), then exactly the data it announces: nothing
  // is allocated before the file is known to hold it.
  std::vector<uint8_t> head(static_cast<size_t>(std::min<std::streamoff>(file_size, 12 + kMaxHeaderBytes)));
  if (!in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size())))
    return npy_error(path, "cannot read the header");
  NpyHeader h;
  if (Status s = parse_npy_header(head.data(), head.size(), path, &h); !s.ok()) return s;
  if (uint64_t(file_size) - h.data_offset != h.data_bytes)
    return npy_error(path, fmt::format("{} bytes of data for shape [{}] of '{}'; the file has {}", h.data_bytes,
                                       fmt::join(h.shape, ", "), h.descr, uint64_t(file_size) - h.data_offset));
  out->descr = h.descr;
  out->shape = h.shape;
  out->data.resize(h.data_bytes);
  in.seekg(static_cast<std::streamoff>(h.data_offset));
  if (!in.read(reinterpret_cast<char*>(out->data.data()), static_cast<std::streamsize>(out->data.size())))
    return npy_error(path, "cannot read the data");
  return Status::Ok();
}

// The .npy's bytes into `file` (`name` for errors).
static Status write_npy_to(const std::string& file, const std::string& name, const std::string& header,
                           const void* data, uint64_t bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error(kInvalidArgument, fmt::format("cannot write '{}'", file));
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char pre[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(pre, 8);
  const char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) return Status::Error(kInvalidArgument, fmt::format("short write to '{}'", name));
  return Status::Ok();
}

Status write_npy(const std::string& path, const std::string& descr, const std::vector<uint64_t>& shape,
                 const void* data, uint64_t bytes) {
  // numpy cannot load a file without a type: refused rather than written.
  if (descr.empty()) return Status::Error(kInvalidArgument, fmt::format("'{}': no .npy type given", path));
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i)
    dims += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  // Pad with spaces so the data starts on a 64-byte boundary; end with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  // A regular file (or a new one) is written beside it and renamed over it
  // once whole: a failed or cut-short write never leaves a file that looks
  // complete. Through a symlink, beside its target; a FIFO or a device
  // (/dev/stdout) is written in place.
  std::error_code ec;
  std::string target = path;
  if (std::filesystem::is_symlink(path, ec)) {
    const std::string resolved = std::filesystem::weakly_canonical(path, ec).string();
    if (!ec && !resolved.empty()) target = resolved;
  }
  const auto kind = std::filesystem::status(target, ec).type();
  if (kind != std::filesystem::file_type::not_found && kind != std::filesystem::file_type::regular)
    return write_npy_to(path, path, header, data, bytes);
  const std::string part = target + ".part";
  if (Status s = write_npy_to(part, path, header, data, bytes); !s.ok()) {
    std::filesystem::remove(part, ec);
    return s;
  }
  std::filesystem::rename(part, target, ec);
  if (ec) {
    std::filesystem::remove(part, ec);
    return Status::Error(kInvalidArgument, fmt::format("cannot rename '{}' to '{}'", part, target));
  }
  return Status::Ok();
}

}  // namespace pto::package
