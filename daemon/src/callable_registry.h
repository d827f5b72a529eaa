// The daemon's callables. Chip bundles and native blobs are written under
// <state_dir>/callables/ (directories 0700, files 0600), content-addressed,
// so the same content always gets the same digest. Chip and sub callables
// are registered with the Worker (broadcast to its children); an L3
// orchestration is checked by loading it in a runner process (its
// constructors never run in the daemon) and runs in a runner per job.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "pto/runner.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"

namespace ptod {

struct RegisteredCallable {
  pto::CallableHandle handle;  // for CHIP and SUB
  pto::EntryAbi abi = pto::EntryAbi::SUB;
  std::string name;
  std::string source;
  std::string stored;  // uploaded files (bundle directory or blob), removed on unregister
  // ORCHESTRATION run by this daemon: path:symbol, loaded in a runner per job.
  bool runs_here = false;
  std::string path, symbol;
  bool remote = false;  // level 4: registered on the L3 workers (peers), not run here
};

class CallableRegistry {
 public:
  CallableRegistry(pto::Worker& w, const pto::RunnerPool& runners, const DaemonConfig& cfg)
      : w_(w), runners_(runners), cfg_(cfg) {}

  // The error's code maps to a gRPC status: kWorkerInvalidArgument ->
  // INVALID_ARGUMENT, kWorkerChildFailed -> FAILED_PRECONDITION, 403-like
  // refusals -> PERMISSION_DENIED (code kRefused).
  Status add(const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply);
  Status remove(const pto::v1::CallableRef& ref);

  // Two-phase registration from a remote session (docs/remote.md): prepare
  // stores, loads and installs the callable but keeps it invisible (find,
  // list and names ignore it) until commit; abort undoes prepare. A prepare
  // of content already registered changes nothing (reply.existed()).
  Status prepare(const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply);
  Status commit(const pto::Digest& d);
  Status abort(const pto::Digest& d);
  bool has(const pto::Digest& d) const;
  // Why a digest is not registered any more ("'name' was unregistered"), or "".
  std::string tombstone(const pto::Digest& d) const;
  Status find(const pto::v1::CallableRef& ref, RegisteredCallable* out) const;
  std::vector<RegisteredCallable> list() const;

 private:
  // Files a registration stores are claimed while it is in flight; a
  // registration that ends without publishing its callable removes them
  // unless another registration (published, pending or in flight) uses them.
  class StoredClaim;
  void claim_stored(const std::string& path);
  void release_stored(const std::string& path, bool kept);

  Status store_bundle(const pto::v1::ChipBundle& b, StoredClaim* claim, std::string* config_path);
  Status find_locked(const pto::v1::CallableRef& ref, const RegisteredCallable** out) const;
  Status add_impl(const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply, bool pending);
  Status from_request(const pto::v1::RegisterRequest& req, StoredClaim* claim, pto::Callable* out, std::string* source,
                      std::string* stored);
  Status install(const pto::v1::RegisterRequest& req, const pto::Callable& c, bool orchestration, bool pending,
                 RegisteredCallable* out);
  void discard(const RegisteredCallable& rc);  // unregister from the Worker, delete uploaded files

  pto::Worker& w_;
  const pto::RunnerPool& runners_;
  const DaemonConfig& cfg_;
  mutable std::mutex mu_;
  std::map<pto::Digest, RegisteredCallable> by_digest_;
  std::map<std::string, pto::Digest> by_name_;
  std::map<pto::Digest, RegisteredCallable> pending_;  // prepared, not committed
  std::map<pto::Digest, std::string> tombstones_;
  std::map<std::string, int> claims_;  // stored path -> registrations in flight
};

}  // namespace ptod
