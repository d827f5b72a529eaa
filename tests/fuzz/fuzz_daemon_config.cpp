// ptod's config file: the TOML checks, the parser and each key's rule.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ptod::DaemonConfig c;
  if (ptod::DaemonConfig::parse(text, "fuzz.toml", &c).ok()) (void)c.effective_toml();
  return 0;
}
