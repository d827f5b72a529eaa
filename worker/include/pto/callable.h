// Callable identity (docs/worker.md, "Callables"): what a task runs is named by a 32-byte
// SHA-256 digest of a canonical, versioned, little-endian descriptor, so the
// same descriptor gives the same digest in every process and on every
// machine; each receiving child resolves the digest to its own prepared
// callable. docs/worker.md documents the descriptor bytes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pto/base/sha256.h"
#include "pto/base/status.h"
#include "pto/task_args.h"

namespace pto {

class Orchestrator;

enum class CallableKind : uint8_t {
  CHIP = 1,           // orchestration + kernel libraries + signature, hashed by content
  NATIVE_IMPORT = 2,  // library:symbol on this host, hashed with the library's content
  NATIVE_BLOB = 3,    // library bytes + symbol (code that arrives over the network)
  FUNCTION = 4,       // an in-process C++ function, registered before init() only
};
enum class TargetNamespace : uint8_t { LOCAL_CHIP = 1, LOCAL_NATIVE = 2, REMOTE = 3 };
// How a child calls it: a chip run, a sub callable (native_abi.h), or an
// orchestration run on the child's own inner Worker (L4 -> L3).
enum class EntryAbi : uint8_t { CHIP = 1, SUB = 2, ORCHESTRATION = 3 };

const char* kind_name(CallableKind k);
const char* abi_name(EntryAbi a);

// Digest, sha256, file_sha256 and to_hex: pto/base/sha256.h.

struct CallableIdentity {
  Digest digest{};
  CallableKind kind = CallableKind::FUNCTION;
  TargetNamespace target_namespace = TargetNamespace::LOCAL_NATIVE;
  std::string hex() const { return to_hex(digest); }
  std::string short_hex() const { return to_hex(digest).substr(0, 16); }
  bool operator==(const CallableIdentity& o) const { return digest == o.digest; }
};

using SubFunction = std::function<int(const TaskArgsView& args, std::string& error)>;
using OrchestrationFunction =
    std::function<int(Orchestrator& orch, const TaskArgsView& args, const CallConfig& config)>;
// The exported-symbol form of an orchestration (OrchestrationCallable::import):
//   extern "C" int fn(pto::Orchestrator*, const PtoTaskArgsView*, const pto::CallConfig*);
using OrchestrationEntryFn = int (*)(Orchestrator*, const PtoTaskArgsView*, const CallConfig*);

// A callable before registration: its canonical descriptor (what is hashed)
// plus what a child needs to prepare it. Factory errors are kept in `status`
// and returned by Worker::register_callable.
struct Callable {
  CallableKind kind = CallableKind::FUNCTION;
  EntryAbi abi = EntryAbi::SUB;
  std::string path;           // CHIP: kernel config; NATIVE_IMPORT: library; NATIVE_BLOB: stored file
  std::string symbol;         // NATIVE_*
  std::string name;           // FUNCTION
  std::vector<uint8_t> blob;  // NATIVE_BLOB library bytes (until stored)
  SubFunction sub_fn;
  OrchestrationFunction orch_fn;
  std::vector<uint8_t> descriptor;  // canonical bytes
  Status status;

  CallableIdentity identity() const;
  TargetNamespace target_namespace() const;
};

struct ChipCallable {
  // A kernel config (TOML, docs/sim.md): orchestration, kernels, signature.
  static Callable from_config(const std::string& path);
};
struct NativeCallable {
  static Callable import(const std::string& library, const std::string& symbol);
  static Callable blob(std::vector<uint8_t> library_bytes, const std::string& symbol);
  static Callable function(const std::string& name, SubFunction fn);
  // A sub function found by name in each child by the process's resolver
  // (set_sub_function_resolver): registrable after init(), when an in-process
  // function can no longer reach the running children. The name is the whole
  // identity (an embedding interpreter puts a digest of the code in it).
  static Callable by_reference(const std::string& name);
};

// How a child turns a by-reference name into its function (an embedding
// interpreter imports the code, checks it is the code that was registered).
// Process-wide, set before init(); children inherit it through fork.
using SubFunctionResolver = std::function<Status(const std::string& name, SubFunction* out)>;
void set_sub_function_resolver(SubFunctionResolver resolver);
bool has_sub_function_resolver();
Status resolve_sub_function(const std::string& name, SubFunction* out);
struct OrchestrationCallable {
  static Callable import(const std::string& library, const std::string& symbol);
  static Callable function(const std::string& name, OrchestrationFunction fn);
};

// What register_callable returns: the identity to submit with, or the error.
struct CallableHandle {
  CallableIdentity id;
  EntryAbi abi = EntryAbi::SUB;
  Status status;
  bool ok() const { return status.ok(); }
};

// Canonical descriptor encoding, exposed for tests and the remote protocol.
namespace descriptor {
inline constexpr uint16_t kVersion = 2;  // 2: a CHIP descriptor also carries its [runtime] section
std::vector<uint8_t> import_or_blob(CallableKind kind, EntryAbi abi, const std::string& symbol,
                                    const Digest& library_hash);
std::vector<uint8_t> function(EntryAbi abi, const std::string& name);
}  // namespace descriptor

}  // namespace pto
