// TOML from outside (a kernel config, a bundle a client sent, the daemon's
// config): checked before toml++ sees it, then parsed.
//
// The checks: at most kMaxTomlBytes; valid UTF-8 (no overlong forms,
// surrogates or code points above U+10FFFF); no control characters but tab,
// CR and LF; and non-ASCII text only inside strings and comments. The last
// rule is TOML's own (bare keys, numbers and punctuation are ASCII), and it
// keeps Debian's toml++ 3.3.0 away from its Unicode classification tables,
// which reach undefined behaviour on some inputs (the bytes 33 EF BB BE).
// Every error names the input, the line and the rule.
#pragma once

#include <cstddef>
#include <string>

#include <toml++/toml.h>

#include "pto2/errors.h"

namespace pto::package {

inline constexpr size_t kMaxTomlBytes = 1 << 20;

// The checks above alone (exposed for tests and the fuzz target).
Status check_toml_text(const std::string& text, const std::string& name);
// Checks, then parses; `name` (a path, or "bundle config") is what errors name.
Status parse_toml_text(const std::string& text, const std::string& name, toml::table* out);
// Reads the file (bounded) and parses it: "cannot open PATH: reason" when it
// cannot be read.
Status parse_toml_file(const std::string& path, toml::table* out);

}  // namespace pto::package
