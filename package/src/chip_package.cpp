#include "pto/package/chip_package.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "pto/base/byte_writer.h"
#include "pto/base/files.h"
#include "pto/package/toml_input.h"

#include "pto2/orchestration_api.h"

namespace pto::package {

namespace {

Status bad(const std::string& file, const std::string& msg) {
  return Status::Error(kInvalidConfig, fmt::format("{}: {}", file, msg));
}

// Rejects keys outside `allowed` in table t (named `where`).
Status only_keys(const std::string& file, const toml::table& t, const std::string& where,
                 std::initializer_list<const char*> allowed) {
  std::set<std::string> ok(allowed.begin(), allowed.end());
  for (auto&& [k, v] : t) {
    (void)v;
    if (!ok.count(std::string(k.str())))
      return bad(file, fmt::format("unknown key '{}' in {} (allowed: {})", k.str(), where,
                                   fmt::join(allowed.begin(), allowed.end(), ", ")));
  }
  return Status::Ok();
}

// Only a TOML integer: toml++'s value<int64_t>() converts floats, with
// undefined behaviour when they are out of range.
std::optional<int64_t> integer(const toml::node* n) {
  if (n == nullptr) return std::nullopt;
  if (const auto* i = n->as_integer()) return i->get();
  return std::nullopt;
}

// An optional integer key in [lo, hi]; absent leaves *out unchanged.
template <class T>
Status read_int(const std::string& file, const toml::table& t, const char* where, const char* key, int64_t lo,
                int64_t hi, T* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  const std::optional<int64_t> v = integer(n);
  if (!v || *v < lo || *v > hi) return bad(file, fmt::format("{} {} must be an integer in {}..{}", where, key, lo, hi));
  *out = static_cast<T>(*v);
  return Status::Ok();
}

std::string resolve(const std::string& dir, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (std::filesystem::path(dir) / p).lexically_normal().string();
}

}  // namespace

int32_t dtype_from_name(const std::string& n) {
  if (n == "float32") return PTO2_FLOAT32;
  if (n == "float16") return PTO2_FLOAT16;
  if (n == "bfloat16") return PTO2_BFLOAT16;
  if (n == "float64") return PTO2_FLOAT64;
  if (n == "int8") return PTO2_INT8;
  if (n == "uint8") return PTO2_UINT8;
  if (n == "int16") return PTO2_INT16;
  if (n == "int32") return PTO2_INT32;
  if (n == "int64") return PTO2_INT64;
  return -1;
}

uint64_t ArgSpec::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}
uint64_t ArgSpec::bytes() const { return elements() * pto2_dtype_size(dtype); }

Status ChipConfig::load(const std::string& path, ChipConfig* out) {
  *out = ChipConfig{};
  out->path = path;
  toml::table doc;
  if (Status s = parse_toml_file(path, &doc); !s.ok()) return s;
  return from_table(doc, path, out);
}

Status ChipConfig::parse(const std::string& text, const std::string& path, ChipConfig* out) {
  *out = ChipConfig{};
  out->path = path;
  toml::table doc;
  if (Status s = parse_toml_text(text, path, &doc); !s.ok()) return s;
  return from_table(doc, path, out);
}

namespace {

// from_table's parts, one per section of the file.

Status read_kernels(const toml::table& doc, const std::string& path, const std::string& dir, ChipConfig* out) {
  const toml::array* kernels = doc["kernels"].as_array();
  if (!kernels || kernels->empty()) return bad(path, "needs at least one [[kernels]] entry");
  std::set<std::pair<int32_t, int>> seen;
  for (size_t i = 0; i < kernels->size(); ++i) {
    const toml::table* k = (*kernels)[i].as_table();
    if (!k) return bad(path, fmt::format("kernels[{}] is not a table", i));
    if (Status s = only_keys(path, *k, fmt::format("kernels[{}]", i), {"func_id", "name", "library", "core_type"});
        !s.ok())
      return s;
    KernelSpec spec;
    auto id = integer((*k).get("func_id"));
    auto lib = (*k)["library"].value<std::string>();
    auto type = (*k)["core_type"].value<std::string>();
    if (!id || *id < 0 || *id > 1 << 20)
      return bad(path, fmt::format("kernels[{}].func_id missing or not in 0..2^20", i));
    if (!lib) return bad(path, fmt::format("kernels[{}].library missing", i));
    if (!type || (*type != "aic" && *type != "aiv"))
      return bad(path, fmt::format("kernels[{}].core_type = '{}': must be \"aic\" or \"aiv\"", i, type.value_or("")));
    spec.func_id = static_cast<int32_t>(*id);
    spec.name = (*k)["name"].value_or(fmt::format("func{}", *id));
    spec.library = resolve(dir, *lib);
    spec.core_type = *type == "aic" ? pto2::WorkerType::kCube : pto2::WorkerType::kVector;
    if (!seen.insert({spec.func_id, static_cast<int>(spec.core_type)}).second)
      return bad(path, fmt::format("kernels[{}]: func_id {} on {} is defined twice", i, spec.func_id, *type));
    out->kernels.push_back(spec);
  }

  return Status::Ok();
}

Status read_runtime(const toml::table& runtime, const std::string& path, ChipConfig* out) {
  const toml::table* r = &runtime;
  if (Status s = only_keys(path, *r, "[runtime]",
                           {"variant", "aicpu_thread_num", "block_dim", "task_window", "heap_size", "dep_pool_size",
                            "tensormap_pool_size", "ready_queue_shards", "seed", "block_mode", "pipe_bytes",
                            "pipe_timeout_ms", "platform"});
      !s.ok())
    return s;
  out->variant = (*r)["variant"].value_or(out->variant);
  if (out->variant != "tensormap_and_ringbuffer")
    return bad(path, fmt::format("[runtime] variant = '{}': pto2-run runs \"tensormap_and_ringbuffer\"", out->variant));
  if (r->contains("platform")) {
    out->platform = (*r)["platform"].value_or(std::string());
    if (out->platform != "a2a3sim" && out->platform != "tx8sim")
      return bad(path, fmt::format("[runtime] platform = '{}': must be \"a2a3sim\" or \"tx8sim\"", out->platform));
  }
  pto2::RuntimeConfig& rc = out->runtime;
  constexpr int64_t kBig = int64_t(1) << 62;  // RuntimeConfig::validate() has the exact rules
  for (Status s : {read_int(path, *r, "[runtime]", "aicpu_thread_num", 1, 64, &out->aicpu_threads),
                   read_int(path, *r, "[runtime]", "block_dim", 1, 1024, &out->block_dim),
                   read_int(path, *r, "[runtime]", "seed", 0, kBig, &out->seed),
                   read_int(path, *r, "[runtime]", "task_window", 1, kBig, &rc.task_window),
                   read_int(path, *r, "[runtime]", "heap_size", 1, kBig, &rc.heap_size),
                   read_int(path, *r, "[runtime]", "dep_pool_size", 1, kBig, &rc.dep_pool_size),
                   read_int(path, *r, "[runtime]", "tensormap_pool_size", 1, kBig, &rc.tensormap_pool_size),
                   read_int(path, *r, "[runtime]", "ready_queue_shards", 1, 1024, &rc.ready_queue_shards),
                   read_int(path, *r, "[runtime]", "pipe_bytes", 64, int64_t(64) << 20, &out->pipe_bytes),
                   read_int(path, *r, "[runtime]", "pipe_timeout_ms", 1, int64_t(1) << 31, &out->pipe_timeout_ms)})
    if (!s.ok()) return s;
  if (r->contains("block_mode")) {
    const std::string mode = (*r)["block_mode"].value_or(std::string());
    if (mode == "batch")
      rc.block_mode = pto2::BlockMode::kBatch;
    else if (mode == "expand")
      rc.block_mode = pto2::BlockMode::kExpand;
    else
      return bad(path, fmt::format("[runtime] block_mode = '{}': must be \"batch\" or \"expand\"", mode));
  }
  if (Status s = rc.validate(); !s.ok()) return bad(path, "[runtime] " + s.message);
  return Status::Ok();
}

// [tx8sim]: ranges here are the file's sanity; the chip checks its own rules.
Status read_tx8(const toml::table& t, const std::string& path, ChipConfig* out) {
  if (Status s = only_keys(
          path, t, "[tx8sim]",
          {"mesh", "spm_bytes", "ddr_gbytes_per_s", "ddr_latency_ns", "noc_gbytes_per_s", "hop_ns", "compute_scale"});
      !s.ok())
    return s;
  ChipConfig::Tx8Settings& x = out->tx8;
  if (const toml::node* m = t.get("mesh")) {
    const toml::array* a = m->as_array();
    const std::optional<int64_t> mx = a && a->size() == 2 ? integer(a->get(0)) : std::nullopt;
    const std::optional<int64_t> my = a && a->size() == 2 ? integer(a->get(1)) : std::nullopt;
    if (!mx || !my || *mx < 1 || *mx > 16 || *my < 1 || *my > 16)
      return bad(path, "[tx8sim] mesh must be [x, y] with each side an integer in 1..16");
    x.mesh_x = mx;
    x.mesh_y = my;
  }
  auto opt_int = [&](const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* v) {
    int64_t got = 0;
    if (!t.contains(key)) return Status::Ok();
    if (Status s = read_int(path, t, "[tx8sim]", key, lo, hi, &got); !s.ok()) return s;
    *v = got;
    return Status::Ok();
  };
  auto opt_num = [&](const char* key, std::optional<double>* v) {
    const toml::node* n = t.get(key);
    if (!n) return Status::Ok();
    const std::optional<double> d = n->value<double>();
    if (!d || !(*d >= 0) || *d > 1e9) return bad(path, fmt::format("[tx8sim] {} must be a number in 0..1e9", key));
    *v = d;
    return Status::Ok();
  };
  for (Status s : {opt_int("spm_bytes", 4096, int64_t(256) << 20, &x.spm_bytes),
                   opt_int("ddr_latency_ns", 0, 1000000000, &x.ddr_latency_ns),
                   opt_int("hop_ns", 0, 1000000000, &x.hop_ns), opt_num("ddr_gbytes_per_s", &x.ddr_gbytes_per_s),
                   opt_num("noc_gbytes_per_s", &x.noc_gbytes_per_s), opt_num("compute_scale", &x.compute_scale)})
    if (!s.ok()) return s;
  return Status::Ok();
}

Status read_arg(const std::string& path, const toml::table& a_table, size_t i, ArgSpec* out_spec) {
  const toml::table* a = &a_table;
  ArgSpec& spec = *out_spec;
  spec.name = (*a)["name"].value_or(fmt::format("arg{}", i));
  const std::string role = (*a)["role"].value_or(std::string());
  if (role == "input")
    spec.role = ArgSpec::Role::kInput;
  else if (role == "output")
    spec.role = ArgSpec::Role::kOutput;
  else if (role == "inout")
    spec.role = ArgSpec::Role::kInout;
  else if (role == "scalar")
    spec.role = ArgSpec::Role::kScalar;
  else
    return bad(path,
               fmt::format("args[{}] ({}): role = '{}': must be input, output, inout or scalar", i, spec.name, role));
  if (spec.role == ArgSpec::Role::kOutput) {
    // An output starts undefined (pto2-run fills it with NaN or a marker
    // so an element no task wrote cannot pass); data settings would be ignored.
    for (const char* key : {"generate", "value", "low", "high"})
      if ((*a).contains(key))
        return bad(path, fmt::format("args[{}] ({}): '{}' does not apply to an output, which no one initialises; "
                                     "use role = \"inout\" for a tensor that starts from data and is compared",
                                     i, spec.name, key));
  }
  const std::string dtype = (*a)["dtype"].value_or(std::string(spec.role == ArgSpec::Role::kScalar ? "int64" : ""));
  spec.dtype = dtype_from_name(dtype);
  if (spec.dtype < 0) return bad(path, fmt::format("args[{}] ({}): unknown dtype '{}'", i, spec.name, dtype));
  if (spec.role != ArgSpec::Role::kScalar && (spec.dtype == PTO2_FLOAT16 || spec.dtype == PTO2_BFLOAT16))
    return bad(path, fmt::format("args[{}] ({}): dtype '{}' is not supported by pto2-run (it generates and "
                                 "compares float32, float64 and integer tensors)",
                                 i, spec.name, dtype));
  if (spec.role == ArgSpec::Role::kScalar) {
    const toml::node* v = (*a)["value"].node();
    if (!v) return bad(path, fmt::format("args[{}] ({}): a scalar needs value", i, spec.name));
    if (spec.dtype == PTO2_FLOAT32) {
      const float f = static_cast<float>(v->value<double>().value_or(0.0));
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      spec.scalar = u;
    } else if (spec.dtype == PTO2_FLOAT64) {
      const double d = v->value<double>().value_or(0.0);
      std::memcpy(&spec.scalar, &d, sizeof(d));
    } else {
      auto iv = integer(v);
      if (!iv) return bad(path, fmt::format("args[{}] ({}): value must be an integer for {}", i, spec.name, dtype));
      spec.scalar = static_cast<uint64_t>(*iv);
    }
  } else {
    const toml::array* shape = (*a)["shape"].as_array();
    if (!shape || shape->empty() || shape->size() > PTO2_MAX_DIMS)
      return bad(path, fmt::format("args[{}] ({}): shape must list 1..{} dimensions", i, spec.name, PTO2_MAX_DIMS));
    uint64_t bytes = pto2_dtype_size(spec.dtype);
    for (auto&& d : *shape) {
      auto v = integer(&d);
      if (!v || *v <= 0) return bad(path, fmt::format("args[{}] ({}): shape entries must be positive", i, spec.name));
      spec.shape.push_back(static_cast<uint64_t>(*v));
      // Sizes are computed from the shape everywhere: no product may wrap.
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(*v), &bytes) || bytes > kMaxTensorBytes)
        return bad(path, fmt::format("args[{}] ({}): its shape makes a tensor larger than {} bytes (at dimension {}, "
                                     "{})",
                                     i, spec.name, kMaxTensorBytes, spec.shape.size() - 1, *v));
    }
    spec.generate =
        (*a)["generate"].value_or(spec.role == ArgSpec::Role::kOutput ? std::string("none") : spec.generate);
    if (spec.role != ArgSpec::Role::kOutput && spec.generate != "random" && spec.generate != "constant" &&
        spec.generate != "arange" && spec.generate != "zeros")
      return bad(path, fmt::format("args[{}] ({}): generate = '{}': must be random, constant, arange or zeros", i,
                                   spec.name, spec.generate));
    spec.low = (*a)["low"].value_or(spec.low);
    spec.high = (*a)["high"].value_or(spec.high);
    spec.value = (*a)["value"].value_or(spec.value);
    spec.rtol = (*a)["rtol"].value_or(spec.rtol);
    spec.atol = (*a)["atol"].value_or(spec.atol);
  }
  return Status::Ok();
}

}  // namespace

Status ChipConfig::from_table(const toml::table& doc, const std::string& path, ChipConfig* out) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (Status s = only_keys(path, doc, "the file", {"orchestration", "kernels", "runtime", "args", "golden", "tx8sim"});
      !s.ok())
    return s;

  const toml::table* orch = doc["orchestration"].as_table();
  if (!orch || !(*orch)["library"].is_string()) return bad(path, "[orchestration] needs library = \"...so\"");
  if (Status s = only_keys(path, *orch, "[orchestration]", {"library"}); !s.ok()) return s;
  out->orchestration = resolve(dir, (*orch)["library"].value_or(std::string()));

  if (const toml::table* g = doc["golden"].as_table()) {
    if (Status s = only_keys(path, *g, "[golden]", {"library"}); !s.ok()) return s;
    out->reference = resolve(dir, (*g)["library"].value_or(std::string()));
  }

  if (Status s = read_kernels(doc, path, dir, out); !s.ok()) return s;
  if (const toml::table* r = doc["runtime"].as_table())
    if (Status s = read_runtime(*r, path, out); !s.ok()) return s;
  if (const toml::table* t = doc["tx8sim"].as_table())
    if (Status s = read_tx8(*t, path, out); !s.ok()) return s;

  const toml::array* args = doc["args"].as_array();
  if (!args) return bad(path, "needs [[args]] entries: the orchestration's arguments in order");
  for (size_t i = 0; i < args->size(); ++i) {
    const toml::table* a = (*args)[i].as_table();
    if (!a) return bad(path, fmt::format("args[{}] is not a table", i));
    if (Status s = only_keys(path, *a, fmt::format("args[{}]", i),
                             {"name", "role", "dtype", "shape", "generate", "low", "high", "value", "rtol", "atol"});
        !s.ok())
      return s;
    ArgSpec spec;
    if (Status s = read_arg(path, *a, i, &spec); !s.ok()) return s;
    out->args.push_back(spec);
  }
  return Status::Ok();
}

// --- bundles -------------------------------------------------------------------

namespace {

bool read_all(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

bool plain_file_name(const std::string& n) {
  return !n.empty() && n.size() < 256 && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

}  // namespace

Status bundle_package(const std::string& kernels_toml, ChipBundle* out) {
  toml::table doc;
  if (Status s = parse_toml_file(kernels_toml, &doc); !s.ok()) return s;
  const std::filesystem::path dir = std::filesystem::path(kernels_toml).parent_path();
  Status st;
  // Each library path becomes its file name, and the file's bytes go along.
  auto take = [&](toml::table& t) -> bool {
    auto lib = t["library"].value<std::string>();
    if (!lib) return true;
    const std::filesystem::path p =
        std::filesystem::path(*lib).is_absolute() ? std::filesystem::path(*lib) : dir / *lib;
    std::string bytes;
    if (!read_all(p.string(), &bytes)) {
      st = Status::Error(kInvalidArgument, fmt::format("{}: cannot read library '{}'", kernels_toml, p.string()));
      return false;
    }
    const std::string file = p.filename().string();
    if (out->libraries.count(file) && out->libraries.at(file) != bytes) {
      st = Status::Error(kInvalidArgument, fmt::format("{}: two different libraries are named '{}'; a bundle holds "
                                                       "files by name",
                                                       kernels_toml, file));
      return false;
    }
    out->libraries[file] = bytes;
    t.insert_or_assign("library", file);
    return true;
  };
  for (const char* section : {"orchestration", "golden"})
    if (toml::table* t = doc[section].as_table())
      if (!take(*t)) return st;
  if (toml::array* ks = doc["kernels"].as_array())
    for (auto& k : *ks)
      if (toml::table* t = k.as_table())
        if (!take(*t)) return st;
  std::ostringstream os;
  os << doc;
  out->config_toml = os.str();
  return Status::Ok();
}

Digest bundle_digest(const ChipBundle& b) {
  std::string canon = b.config_toml;
  for (const auto& [name, bytes] : b.libraries)
    canon += '\0' + name + '\0' + std::to_string(bytes.size()) + '\0' + bytes;
  return sha256(canon.data(), canon.size());
}

Status unbundle(const ChipBundle& b, const std::string& dir, ChipConfig* out) {
  if (b.config_toml.empty()) return Status::Error(kInvalidArgument, "chip bundle: config_toml is empty");
  for (const auto& [name, bytes] : b.libraries) {
    if (!plain_file_name(name) || name == "kernels.toml")
      return Status::Error(kInvalidArgument,
                           fmt::format("chip bundle: library name '{}' must be a plain file name", name));
    if (bytes.empty()) return Status::Error(kInvalidArgument, fmt::format("chip bundle: library '{}' is empty", name));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(kStorageError, fmt::format("cannot create {}: {}", dir, ec.message()));
  chmod(dir.c_str(), 0700);
  for (const auto& [name, bytes] : b.libraries)
    if (Status s = write_file_once(dir + "/" + name, bytes); !s.ok()) return s;
  if (Status s = write_file_once(dir + "/kernels.toml", b.config_toml); !s.ok()) return s;
  if (Status s = ChipConfig::load(dir + "/kernels.toml", out); !s.ok()) return s;
  std::vector<std::string> named = {out->orchestration};
  if (!out->reference.empty()) named.push_back(out->reference);
  for (const auto& k : out->kernels) named.push_back(k.library);
  for (const std::string& lib : named) {
    const std::filesystem::path p(lib);
    if (p.parent_path() != std::filesystem::path(dir) || !b.libraries.count(p.filename().string()))
      return Status::Error(kInvalidArgument,
                           fmt::format("chip bundle: the config names library '{}', which is not one of the bundle's "
                                       "files",
                                       lib));
  }
  return Status::Ok();
}

// --- identity ------------------------------------------------------------------

Status identity_body(const ChipConfig& cfg, std::vector<uint8_t>* out) {
  ByteWriter e(out);
  Digest h{};
  if (Status s = file_sha256(cfg.orchestration, &h); !s.ok()) return s;
  e.digest(h);
  std::vector<KernelSpec> kernels = cfg.kernels;
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
    return a.func_id != b.func_id ? a.func_id < b.func_id : a.core_type < b.core_type;
  });
  e.u32(static_cast<uint32_t>(kernels.size()));
  for (const auto& k : kernels) {
    if (Status s = file_sha256(k.library, &h); !s.ok()) return s;
    e.i32(k.func_id);
    e.u8(static_cast<uint8_t>(k.core_type));
    e.digest(h);
  }
  e.u32(static_cast<uint32_t>(cfg.args.size()));  // the signature
  for (const auto& a : cfg.args) {
    e.u8(static_cast<uint8_t>(a.role));
    e.i32(a.dtype);
    e.u32(static_cast<uint32_t>(a.shape.size()));
    for (uint64_t d : a.shape) e.u64(d);
    e.u64(a.scalar);
  }
  e.str(cfg.variant);
  // The [runtime] section decides how the package runs (ring and pool sizes,
  // the chip's shape), so two bundles that differ only there are two callables.
  e.i32(cfg.block_dim);
  e.i32(cfg.aicpu_threads);
  e.u64(cfg.runtime.task_window);
  e.u64(cfg.runtime.heap_size);
  e.u64(cfg.runtime.dep_pool_size);
  e.u64(cfg.runtime.tensormap_pool_size);
  e.i32(cfg.runtime.ready_queue_shards);
  e.i32(static_cast<int32_t>(cfg.runtime.block_mode));
  e.u64(cfg.pipe_bytes);
  e.u32(cfg.pipe_timeout_ms);
  // Appended only when set, so a package that names no platform keeps the
  // digest it always had.
  if (!cfg.platform.empty() || cfg.tx8.any()) {
    e.str(cfg.platform);
    const ChipConfig::Tx8Settings& x = cfg.tx8;
    for (const std::optional<int64_t>& v : {x.mesh_x, x.mesh_y, x.spm_bytes, x.ddr_latency_ns, x.hop_ns})
      e.u64(v ? static_cast<uint64_t>(*v) + 1 : 0);
    for (const std::optional<double>& v : {x.ddr_gbytes_per_s, x.noc_gbytes_per_s, x.compute_scale}) {
      uint64_t bits = 0;
      if (v) std::memcpy(&bits, &*v, sizeof(bits));
      e.u8(v ? 1 : 0);
      e.u64(bits);
    }
  }
  return Status::Ok();
}

}  // namespace pto::package
