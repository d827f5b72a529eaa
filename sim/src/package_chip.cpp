#include "pto2/sim/package_chip.h"

#include <fmt/format.h>

namespace pto2::sim {

const char* known_platforms() { return "a2a3sim, tx8sim"; }

Status create_sim_chip(const SimChipOptions& o, std::unique_ptr<SimChip>* out) {
  Status st;
  if (o.platform == "a2a3sim") {
    *out = A2A3SimPlatform::create(o.a2a3, &st);
  } else if (o.platform == "tx8sim") {
    *out = Tx8SimPlatform::create(o.tx8, &st);
  } else {
    return Status::Error(kInvalidConfig,
                         fmt::format("platform '{}' is unknown (known: {})", o.platform, known_platforms()));
  }
  if (!*out) return Status::Error(st.code, fmt::format("{}: {}", o.platform, st.message));
  return Status::Ok();
}

SimChipOptions chip_options(const pto::package::ChipConfig& cfg, const std::string& platform) {
  SimChipOptions o;
  o.platform = !platform.empty() ? platform : (cfg.platform.empty() ? "a2a3sim" : cfg.platform);
  o.a2a3.block_dim = cfg.block_dim;
  o.a2a3.aicpu_threads = cfg.aicpu_threads;
  o.a2a3.pipe_bytes = cfg.pipe_bytes;
  o.a2a3.pipe_timeout_ms = cfg.pipe_timeout_ms;
  o.tx8.aicpu_threads = cfg.aicpu_threads;
  const pto::package::ChipConfig::Tx8Settings& x = cfg.tx8;
  if (x.mesh_x) o.tx8.mesh_x = static_cast<int>(*x.mesh_x);
  if (x.mesh_y) o.tx8.mesh_y = static_cast<int>(*x.mesh_y);
  if (x.spm_bytes) o.tx8.spm_bytes = static_cast<uint64_t>(*x.spm_bytes);
  if (x.ddr_latency_ns) o.tx8.ddr_latency_ns = static_cast<uint32_t>(*x.ddr_latency_ns);
  if (x.hop_ns) o.tx8.hop_ns = static_cast<uint32_t>(*x.hop_ns);
  if (x.ddr_gbytes_per_s) o.tx8.ddr_gbytes_per_s = *x.ddr_gbytes_per_s;
  if (x.noc_gbytes_per_s) o.tx8.noc_gbytes_per_s = *x.noc_gbytes_per_s;
  if (x.compute_scale) o.tx8.compute_scale = *x.compute_scale;
  return o;
}

Status load_package_chip(const pto::package::ChipConfig& cfg, const SimChipOptions& o, PackageChip* chip) {
  chip->options = o;
  if (Status st = create_sim_chip(o, &chip->platform); !st.ok()) return st;
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
