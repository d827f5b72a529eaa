// The kernel-config file of an example (TOML): which func_id is which kernel
// library and core type, which orchestration library, the runtime settings,
// and the orchestration's arguments (tensors with shapes and dtypes, how to
// generate inputs, output tolerances, scalars). Library paths are relative
// to the file. docs/sim.md documents every key; an unknown key or a bad value
// is an error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "pto2/config.h"
#include "pto2/errors.h"
#include "pto2/platform.h"

namespace pto2::sim {

struct KernelSpec {
  int32_t func_id = 0;
  std::string name;
  std::string library;  // resolved path
  WorkerType core_type = WorkerType::kVector;
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
  uint64_t seed = 1;
  RuntimeConfig runtime;
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

// dtype names used in the file: float32, float16, bfloat16, float64, int8,
// uint8, int16, int32, int64. -1 if unknown.
int32_t dtype_from_name(const std::string& name);

}  // namespace pto2::sim
