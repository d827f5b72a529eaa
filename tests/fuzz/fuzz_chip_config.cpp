// A kernel config (a chip bundle's kernels.toml, sent by clients): the TOML
// checks, the parser and every [[args]] shape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pto/package/chip_package.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pto::package::ChipConfig cfg;
  if (pto::package::ChipConfig::parse(text, "/fuzz/kernels.toml", &cfg).ok()) {
    for (const auto& a : cfg.args)
      if (a.is_tensor() && a.bytes() > pto::package::kMaxTensorBytes) __builtin_trap();  // the parser bounds sizes
  }
  return 0;
}
