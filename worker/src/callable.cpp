// Canonical callable descriptors and their SHA-256 digests (docs/worker.md,
// "Callable identity"). Every integer is little-endian; strings and byte
// strings are a u32 length followed by the bytes. Paths are never hashed:
// the same library content under another path is the same callable.
#include "pto/callable.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "pto/worker.h"
#include "pto2/sim/chip_config.h"

namespace pto {
namespace {

constexpr char kMagic[] = "PTO-CALLABLE";  // 12 bytes, no NUL

class Encoder {
 public:
  Encoder(CallableKind kind, EntryAbi abi) {
    out_.reserve(256);
    for (int i = 0; i < 12; ++i) out_.push_back(static_cast<uint8_t>(kMagic[i]));
    u16(descriptor::kVersion);
    u8(static_cast<uint8_t>(kind));
    u8(static_cast<uint8_t>(abi));
  }
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void i32(int32_t v) { le(static_cast<uint32_t>(v), 4); }
  void u64(uint64_t v) { le(v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void digest(const Digest& d) { out_.insert(out_.end(), d.begin(), d.end()); }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

Callable failed(CallableKind kind, EntryAbi abi, std::string message) {
  Callable c;
  c.kind = kind;
  c.abi = abi;
  c.status = Status::Error(kWorkerInvalidArgument, std::move(message));
  return c;
}

Callable import_callable(EntryAbi abi, const std::string& library, const std::string& symbol) {
  if (symbol.empty())
    return failed(CallableKind::NATIVE_IMPORT, abi, "native import of '" + library + "': empty symbol name");
  Digest h{};
  if (Status s = file_sha256(library, &h); !s.ok()) return failed(CallableKind::NATIVE_IMPORT, abi, s.message);
  Callable c;
  c.kind = CallableKind::NATIVE_IMPORT;
  c.abi = abi;
  c.path = library;
  c.symbol = symbol;
  c.descriptor = descriptor::import_or_blob(c.kind, abi, symbol, h);
  return c;
}

}  // namespace

const char* kind_name(CallableKind k) {
  switch (k) {
    case CallableKind::CHIP: return "CHIP";
    case CallableKind::NATIVE_IMPORT: return "NATIVE_IMPORT";
    case CallableKind::NATIVE_BLOB: return "NATIVE_BLOB";
    case CallableKind::FUNCTION: return "FUNCTION";
  }
  return "?";
}
const char* abi_name(EntryAbi a) {
  switch (a) {
    case EntryAbi::CHIP: return "chip";
    case EntryAbi::SUB: return "sub";
    case EntryAbi::ORCHESTRATION: return "orchestration";
  }
  return "?";
}

std::string to_hex(const Digest& d) {
  static const char* k = "0123456789abcdef";
  std::string s(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = k[d[i] >> 4];
    s[2 * i + 1] = k[d[i] & 15];
  }
  return s;
}

Digest sha256(const void* data, size_t bytes) {
  Digest d{};
  unsigned int len = 0;
  EVP_Digest(data, bytes, d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

Status file_sha256(const std::string& path, Digest* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error(kWorkerInvalidArgument, "cannot read '" + path + "': " + std::strerror(errno));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  const bool bad = f.bad();
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, out->data(), &len);
  EVP_MD_CTX_free(ctx);
  if (bad) return Status::Error(kWorkerInvalidArgument, "error reading '" + path + "'");
  return Status::Ok();
}

namespace descriptor {
std::vector<uint8_t> import_or_blob(CallableKind kind, EntryAbi abi, const std::string& symbol,
                                    const Digest& library_hash) {
  Encoder e(kind, abi);
  e.str(symbol);
  e.digest(library_hash);
  return e.take();
}
std::vector<uint8_t> function(EntryAbi abi, const std::string& name) {
  Encoder e(CallableKind::FUNCTION, abi);
  e.str(name);
  return e.take();
}
}  // namespace descriptor

CallableIdentity Callable::identity() const {
  CallableIdentity id;
  id.digest = sha256(descriptor.data(), descriptor.size());
  id.kind = kind;
  id.target_namespace = target_namespace();
  return id;
}

TargetNamespace Callable::target_namespace() const {
  return abi == EntryAbi::CHIP ? TargetNamespace::LOCAL_CHIP : TargetNamespace::LOCAL_NATIVE;
}

Callable ChipCallable::from_config(const std::string& path) {
  pto2::sim::ChipConfig cfg;
  if (Status s = pto2::sim::ChipConfig::load(path, &cfg); !s.ok())
    return failed(CallableKind::CHIP, EntryAbi::CHIP, s.message);
  Encoder e(CallableKind::CHIP, EntryAbi::CHIP);
  Digest h{};
  if (Status s = file_sha256(cfg.orchestration, &h); !s.ok())
    return failed(CallableKind::CHIP, EntryAbi::CHIP, s.message);
  e.digest(h);
  std::vector<pto2::sim::KernelSpec> kernels = cfg.kernels;
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
    return a.func_id != b.func_id ? a.func_id < b.func_id : a.core_type < b.core_type;
  });
  e.u32(static_cast<uint32_t>(kernels.size()));
  for (const auto& k : kernels) {
    if (Status s = file_sha256(k.library, &h); !s.ok()) return failed(CallableKind::CHIP, EntryAbi::CHIP, s.message);
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
  Callable c;
  c.kind = CallableKind::CHIP;
  c.abi = EntryAbi::CHIP;
  c.path = path;
  c.descriptor = e.take();
  return c;
}

Callable NativeCallable::import(const std::string& library, const std::string& symbol) {
  return import_callable(EntryAbi::SUB, library, symbol);
}

Callable NativeCallable::blob(std::vector<uint8_t> library_bytes, const std::string& symbol) {
  if (library_bytes.empty()) return failed(CallableKind::NATIVE_BLOB, EntryAbi::SUB, "native blob: no library bytes");
  if (symbol.empty()) return failed(CallableKind::NATIVE_BLOB, EntryAbi::SUB, "native blob: empty symbol name");
  Callable c;
  c.kind = CallableKind::NATIVE_BLOB;
  c.abi = EntryAbi::SUB;
  c.symbol = symbol;
  c.descriptor = descriptor::import_or_blob(c.kind, c.abi, symbol, sha256(library_bytes.data(), library_bytes.size()));
  c.blob = std::move(library_bytes);
  return c;
}

// An in-process function callable; the caller stores the function itself.
static Callable function_callable(EntryAbi abi, const std::string& name, bool has_fn) {
  if (name.empty() || !has_fn)
    return failed(CallableKind::FUNCTION, abi, "function callable needs a name and a function");
  Callable c;
  c.kind = CallableKind::FUNCTION;
  c.abi = abi;
  c.name = name;
  c.descriptor = descriptor::function(abi, name);
  return c;
}

Callable NativeCallable::function(const std::string& name, SubFunction fn) {
  Callable c = function_callable(EntryAbi::SUB, name, static_cast<bool>(fn));
  if (c.status.ok()) c.sub_fn = std::move(fn);
  return c;
}

Callable OrchestrationCallable::import(const std::string& library, const std::string& symbol) {
  return import_callable(EntryAbi::ORCHESTRATION, library, symbol);
}

Callable OrchestrationCallable::function(const std::string& name, OrchestrationFunction fn) {
  Callable c = function_callable(EntryAbi::ORCHESTRATION, name, static_cast<bool>(fn));
  if (c.status.ok()) c.orch_fn = std::move(fn);
  return c;
}

// --- TaskArgs helpers -------------------------------------------------------

const char* tag_name(TensorArgType t) {
  switch (t) {
    case TensorArgType::INPUT: return "INPUT";
    case TensorArgType::OUTPUT: return "OUTPUT";
    case TensorArgType::INOUT: return "INOUT";
    case TensorArgType::OUTPUT_EXISTING: return "OUTPUT_EXISTING";
    case TensorArgType::NO_DEP: return "NO_DEP";
  }
  return "?";
}

ContinuousTensor make_tensor(void* data, const std::vector<uint32_t>& shape, int32_t dtype) {
  ContinuousTensor t{};
  t.data = reinterpret_cast<uint64_t>(data);
  t.dtype = dtype;
  t.ndims = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size() && i < PTO_TENSOR_MAX_DIMS; ++i) t.shape[i] = shape[i];
  return t;
}
ContinuousTensor make_tensor(void* data, std::initializer_list<uint32_t> shape, int32_t dtype) {
  return make_tensor(data, std::vector<uint32_t>(shape), dtype);
}

TaskArgs& TaskArgs::add_scalar_f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return add_scalar(bits);
}

TaskArgs TaskArgs::from_view(const TaskArgsView& v) {
  TaskArgs a;
  for (int32_t i = 0; i < v.tensor_count; ++i) a.add_tensor(v.tensors[i], TensorArgType::INPUT);
  for (int32_t i = 0; i < v.scalar_count; ++i) a.add_scalar(v.scalars[i]);
  return a;
}

}  // namespace pto
