#include "pto/package/toml_input.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace pto::package {
namespace {

Status bad(const std::string& name, size_t line, const std::string& rule) {
  return Status::Error(kInvalidConfig, fmt::format("{}: line {}: {}", name, line, rule));
}

// Length of the UTF-8 sequence at text[i] (1..4), or 0 when it is not a
// valid, shortest-form encoding of a scalar value.
size_t utf8_length(const std::string& text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

Status check_toml_text(const std::string& text, const std::string& name) {
  if (text.size() > kMaxTomlBytes)
    return Status::Error(kInvalidConfig,
                         fmt::format("{}: {} bytes; a config may have at most {}", name, text.size(), kMaxTomlBytes));
  enum { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral } state = kCode;
  size_t line = 1;
  auto at = [&](size_t i, const char* s) { return text.compare(i, std::strlen(s), s) == 0; };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8_length(text, i);
      if (n == 0) return bad(name, line, fmt::format("byte 0x{:02X} is not valid UTF-8", c));
      if (state == kCode)
        return bad(name, line,
                   "a non-ASCII character outside a string or comment (TOML keys, numbers and "
                   "punctuation are ASCII)");
      i += n;
      continue;
    }
    if (c == '\n') {
      if (state == kBasic || state == kLiteral) return bad(name, line, "a string does not end before the line does");
      if (state == kComment) state = kCode;
      ++line;
      ++i;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7F)
      return bad(name, line, fmt::format("control character 0x{:02X}", c));
    switch (state) {
      case kCode:
        if (c == '#')
          state = kComment;
        else if (at(i, "\"\"\""))
          state = kMultiBasic, i += 2;
        else if (at(i, "'''"))
          state = kMultiLiteral, i += 2;
        else if (c == '"')
          state = kBasic;
        else if (c == '\'')
          state = kLiteral;
        break;
      case kComment: break;
      case kBasic:
        if (c == '\\')
          ++i;  // the escaped character (a newline is caught next round)
        else if (c == '"')
          state = kCode;
        break;
      case kLiteral:
        if (c == '\'') state = kCode;
        break;
      case kMultiBasic:
        if (c == '\\')
          ++i;
        else if (at(i, "\"\"\""))
          state = kCode, i += 2;
        break;
      case kMultiLiteral:
        if (at(i, "'''")) state = kCode, i += 2;
        break;
    }
    ++i;
  }
  if (state != kCode && state != kComment) return bad(name, line, "a string is not closed at the end of the input");
  return Status::Ok();
}

Status parse_toml_text(const std::string& text, const std::string& name, toml::table* out) {
  if (Status s = check_toml_text(text, name); !s.ok()) return s;
  try {
    *out = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return Status::Error(kInvalidConfig, fmt::format("{}: line {}: {}", name, e.source().begin.line, e.description()));
  } catch (const std::exception& e) {
    return Status::Error(kInvalidConfig, fmt::format("{}: {}", name, e.what()));
  }
  return Status::Ok();
}

Status parse_toml_file(const std::string& path, toml::table* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(kInvalidConfig, fmt::format("cannot open {}: {}", path, errno_text(errno)));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxTomlBytes)
      return Status::Error(kInvalidConfig, fmt::format("{}: larger than {} bytes", path, kMaxTomlBytes));
  }
  if (in.bad()) return Status::Error(kInvalidConfig, fmt::format("cannot read {}: {}", path, errno_text(errno)));
  return parse_toml_text(text, path, out);
}

}  // namespace pto::package
