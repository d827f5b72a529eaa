// Canonical callable descriptors and their SHA-256 digests (docs/worker.md,
// "Callable identity"). Every integer is little-endian; strings and byte
// strings are a u32 length followed by the bytes. Paths are never hashed:
// the same library content under another path is the same callable.
#include "pto/callable.h"

#include <fmt/format.h>
#include <algorithm>
#include <cstring>
#include <fstream>

#include "pto/base/byte_writer.h"
#include "pto/package/chip_package.h"
#include "pto/worker.h"

namespace pto {
namespace {

constexpr char kMagic[] = "PTO-CALLABLE";  // 12 bytes, no NUL

// A descriptor: the header, then the kind's fields.
class Encoder : public ByteWriter {
 public:
  Encoder(CallableKind kind, EntryAbi abi) : ByteWriter(&out_) {
    out_.reserve(256);
    for (int i = 0; i < 12; ++i) u8(static_cast<uint8_t>(kMagic[i]));
    u16(descriptor::kVersion);
    u8(static_cast<uint8_t>(kind));
    u8(static_cast<uint8_t>(abi));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
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
  package::ChipConfig cfg;
  if (Status s = package::ChipConfig::load(path, &cfg); !s.ok())
    return failed(CallableKind::CHIP, EntryAbi::CHIP, s.message);
  std::vector<uint8_t> body;
  if (Status s = package::identity_body(cfg, &body); !s.ok())
    return failed(CallableKind::CHIP, EntryAbi::CHIP, s.message);
  Encoder e(CallableKind::CHIP, EntryAbi::CHIP);
  e.bytes(body);
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

Callable NativeCallable::by_reference(const std::string& name) {
  if (name.empty()) return failed(CallableKind::FUNCTION, EntryAbi::SUB, "a by-reference function needs a name");
  Callable c;
  c.kind = CallableKind::FUNCTION;
  c.abi = EntryAbi::SUB;
  c.name = name;
  c.descriptor = descriptor::function(EntryAbi::SUB, name);
  return c;
}

namespace {
SubFunctionResolver& resolver() {
  static auto* r = new SubFunctionResolver;  // never destroyed: children _exit without destructors
  return *r;
}
}  // namespace

void set_sub_function_resolver(SubFunctionResolver r) { resolver() = std::move(r); }
bool has_sub_function_resolver() { return static_cast<bool>(resolver()); }
Status resolve_sub_function(const std::string& name, SubFunction* out) {
  if (!resolver())
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("function '{}' is registered by reference, but this process has no resolver", name));
  return resolver()(name, out);
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
