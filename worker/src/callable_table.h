// The CallableTable: what this Worker can run (docs/worker.md, "Callables"
// and "Registration"). Registration before init() is captured and inherited
// by the children through fork; after init() it is a control request
// broadcast to every target child (through the Scheduler), published only
// when every target acknowledged and rolled back otherwise; at level 4 with
// remote options it is also installed on the selected peers in two phases.
// It also keeps names, tombstones of unregistered digests, and the files of
// uploaded libraries (NATIVE_BLOB) in the state directory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "control_request.h"
#include "engine_lock.h"
#include "pto/worker.h"

namespace pto {

class ChildPool;
class Scheduler;
struct Endpoint;

struct Registered {
  Callable callable;  // for FUNCTION kinds, the function itself (inherited by fork)
  CallableHandle handle;
  CallableOptions options;
  std::shared_ptr<const std::vector<uint8_t>> allowed;  // next-level endpoints holding it; null = all
  std::vector<int> remote_installed;                    // remote endpoint indices (in l3s) it was committed on
};

// Whether the Worker has started its children, and whether it was closed.
struct Lifecycle {
  std::atomic<bool> initialized{false}, closed{false};
};

class CallableTable {
 public:
  CallableTable(const WorkerConfig& cfg, EngineLock& lock, const Lifecycle& life, ChildPool& pool, Scheduler& sched)
      : cfg_(cfg), lock_(lock), life_(life), pool_(pool), sched_(sched) {}
  ~CallableTable();

  // Thread-safe (they take mu themselves).
  CallableHandle add(const Callable& c, const CallableOptions& o);
  CallableHandle add_remote(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o);
  Status remove(const CallableHandle& h);
  Result<bool> child_has(const CallableHandle& h, ChildKind kind, int index);
  Status name(const std::string& name, const CallableHandle& h);
  CallableHandle find(const std::string& name) const;

  // mu held.
  const Registered* lookup(const Digest& d) const;
  std::string tombstone(const Digest& d) const;  // why it is gone, "" if it never was
  const std::map<Digest, Registered>& all() const { return registry_; }  // children install these at start
  // close(): removes a private state directory (one made for uploaded libraries).
  void remove_private_state_dir();

 private:
  // Sends a control request to targets and waits for it (mu not held).
  Status control(ControlOp op, const Digest& digest, std::vector<uint8_t> payload, std::vector<Endpoint*> targets,
                 uint32_t* query_result, std::function<void()> on_success = {});
  std::vector<Endpoint*> targets_for(EntryAbi abi);  // mu held
  // Two-phase registration on remote endpoints (mu not held): prepares on
  // each, commits when all prepared, aborts the prepared ones otherwise.
  Status install_remote(const CallableIdentity& id, const CallableOptions& o, std::vector<int>* installed);
  std::shared_ptr<const std::vector<uint8_t>> mask_of(bool local, EntryAbi abi, const std::vector<int>& remote) const;
  Status store_blob(Callable* c);  // mu held

  const WorkerConfig& cfg_;
  EngineLock& lock_;
  const Lifecycle& life_;
  ChildPool& pool_;
  Scheduler& sched_;
  std::map<Digest, Registered> registry_;
  std::map<std::string, CallableHandle> names_;
  std::map<Digest, std::string> tombstones_;  // unregistered digests: a late submit names it
  std::string state_dir_;
  bool own_state_dir_ = false;
};

}  // namespace pto
