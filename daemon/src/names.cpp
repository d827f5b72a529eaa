#include "names.h"

#include <fmt/format.h>

namespace ptod {

pto::Status check_name(const char* what, const std::string& name) {
  auto bad = [&](const std::string& why) {
    return pto::Status::Error(pto::kWorkerInvalidArgument, fmt::format("{}: {}", what, why));
  };
  if (name.size() > kMaxNameBytes) return bad(fmt::format("{} bytes; at most {}", name.size(), kMaxNameBytes));
  for (size_t i = 0; i < name.size();) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) return bad(fmt::format("control character 0x{:02X} at byte {}", c, i));
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > name.size()) return bad(fmt::format("not UTF-8 at byte {}", i));
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(name[i + k]) & 0xC0) != 0x80) return bad(fmt::format("not UTF-8 at byte {}", i));
    // C1 controls (U+0080..U+009F) are control characters too.
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(name[i + 1]) < 0xA0)
      return bad(fmt::format("control character at byte {}", i));
    i += n;
  }
  return pto::Status::Ok();
}

pto::Status check_tensor_name(const std::string& name) {
  if (pto::Status s = check_name("tensor name", name); !s.ok()) return s;
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return pto::Status::Error(pto::kWorkerInvalidArgument,
                              fmt::format("tensor name '{}': only digits; a number names a tensor by its id", name));
  return pto::Status::Ok();
}

}  // namespace ptod
