// A chip package: a kernel config (kernels.toml) and the libraries it names
// — which func_id is which kernel library and core type, the orchestration
// library, the runtime settings, and the orchestration's arguments (tensors
// with shapes and dtypes, how to generate inputs, output tolerances,
// scalars). This file is the one place that reads, bundles, unbundles and
// identifies a package: pto2-run and the chip worker load it, a client
// bundles it for ptod, ptod unbundles it into its state directory, and the
// engine hashes it into a callable digest. docs/sim.md documents every key;
// an unknown key or a bad value is an error naming it. Library paths are
// relative to the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "pto/base/sha256.h"
#include "pto2/config.h"
#include "pto2/errors.h"
#include "pto2/platform.h"

namespace pto::package {

struct KernelSpec {
  int32_t func_id = 0;
  std::string name;
  std::string library;  // resolved path
  pto2::WorkerType core_type = pto2::WorkerType::kVector;
};

struct ArgSpec {
  // kInout: a tensor that starts from generated data and is compared after
  // the run (an accumulator). Values are part of the callable's identity.
  enum class Role { kInput = 0, kOutput = 1, kScalar = 2, kInout = 3 };
  std::string name;
  Role role = Role::kInput;
  int32_t dtype = 0;                // PTO2DataType (tensors)
  std::vector<uint64_t> shape;      // tensors
  std::string generate = "random";  // inputs: random | constant | arange | zeros
  double low = -1.0, high = 1.0, value = 0.0;
  double rtol = 1e-5, atol = 1e-5;  // outputs
  uint64_t scalar = 0;              // scalars: the 64-bit value (float32 given as a float is bit-cast)
  uint64_t elements() const;
  uint64_t bytes() const;
  bool is_tensor() const { return role != Role::kScalar; }
  bool reads() const { return role == Role::kInput || role == Role::kInout; }    // starts from data
  bool writes() const { return role == Role::kOutput || role == Role::kInout; }  // compared after the run
};

struct ChipConfig {
  std::string path;
  std::string orchestration;  // resolved library path
  std::string reference;      // resolved golden library path, empty if none
  std::vector<KernelSpec> kernels;
  std::string variant = "tensormap_and_ringbuffer";
  int block_dim = 24;
  int aicpu_threads = 4;
  // The simulated chip's cluster pipes (docs/sim.md, "Pipes"): [runtime]
  // pipe_bytes and pipe_timeout_ms.
  uint64_t pipe_bytes = 32768;
  uint32_t pipe_timeout_ms = 5000;
  uint64_t seed = 1;
  // [runtime] platform: the simulated chip the package asks for, "a2a3sim" or
  // "tx8sim"; "" when it names none (pto2-run then uses a2a3sim, a Worker its
  // own chips).
  std::string platform;
  // [tx8sim]: the tx8sim chip's settings (docs/tx8sim.md); what is unset
  // keeps the chip's default.
  struct Tx8Settings {
    std::optional<int64_t> mesh_x, mesh_y, spm_bytes, ddr_latency_ns, hop_ns;
    std::optional<double> ddr_gbytes_per_s, noc_gbytes_per_s, compute_scale;
    bool any() const {
      return mesh_x || mesh_y || spm_bytes || ddr_latency_ns || hop_ns || ddr_gbytes_per_s || noc_gbytes_per_s ||
             compute_scale;
    }
  } tx8;
  pto2::RuntimeConfig runtime;
  std::vector<ArgSpec> args;

  static Status load(const std::string& path, ChipConfig* out);
  // The same from text (a bundle's config); path names it and library paths
  // are relative to its directory.
  static Status parse(const std::string& text, const std::string& path, ChipConfig* out);

 private:
  static Status from_table(const toml::table& doc, const std::string& path, ChipConfig* out);
};

// The largest tensor a config may declare.
inline constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 40;

// A package as it travels (a client to ptod): the config with every library
// path replaced by its plain file name, and each library's bytes by name.
struct ChipBundle {
  std::string config_toml;
  std::map<std::string, std::string> libraries;  // file name -> bytes
};
// Reads kernels.toml and the libraries it names into a bundle. Two different
// libraries with the same file name are an error (a bundle holds files by name).
Status bundle_package(const std::string& kernels_toml, ChipBundle* out);
// The bundle's content digest: the config, then each library's name, size
// and bytes in name order. ptod names a bundle's directory by it.
Digest bundle_digest(const ChipBundle& b);
// Writes the bundle into dir as kernels.toml and its libraries (files 0600,
// each written to a temporary name and renamed into place; a file that exists
// already has these bytes — the directory is content-addressed — and is
// kept), loads the config, and checks that every library it names is one of
// the bundle's own files: a bundle cannot point at other code on the host.
Status unbundle(const ChipBundle& b, const std::string& dir, ChipConfig* out);

// What a chip callable's digest covers after the descriptor's header
// (docs/worker.md, "Descriptor bytes"): the orchestration library's content,
// each kernel (func_id, core type, content) in (func_id, core type) order,
// the signature ([[args]]: role, dtype, shape, default scalar) and the
// [runtime] section. Paths are never hashed.
Status identity_body(const ChipConfig& cfg, std::vector<uint8_t>* out);

// dtype names used in the file: float32, float16, bfloat16, float64, int8,
// uint8, int16, int32, int64. -1 if unknown.
int32_t dtype_from_name(const std::string& name);

}  // namespace pto::package
