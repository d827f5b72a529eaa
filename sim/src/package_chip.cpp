#include "pto2/sim/package_chip.h"

#include <fmt/format.h>

namespace pto2::sim {

Status load_package_chip(const pto::package::ChipConfig& cfg, const A2A3SimConfig& sc, PackageChip* chip) {
  chip->config = sc;
  Status st;
  chip->platform = A2A3SimPlatform::create(sc, &st);
  if (!chip->platform) return st;
  chip->kernels.resize(cfg.kernels.size());
  for (size_t i = 0; i < cfg.kernels.size(); ++i) {
    const pto::package::KernelSpec& k = cfg.kernels[i];
    if (Status ls = load_kernel(k.library, &chip->kernels[i]); !ls.ok())
      return Status::Error(ls.code, fmt::format("kernel {} ({}): {}", k.func_id, k.name, ls.message));
    chip->platform->register_kernel(k.func_id, k.core_type, chip->kernels[i].entry);
  }
  if (Status ls = load_orchestration(cfg.orchestration, &chip->orchestration); !ls.ok())
    return Status::Error(ls.code, "orchestration: " + ls.message);
  return Status::Ok();
}

}  // namespace pto2::sim
