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
#include <set>
#include <string>
#include <vector>

#include "config.h"
#include "principal.h"
#include "pto/package/chip_package.h"
#include "pto/runner.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"
#include "state_db.h"

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
  // The principals that registered it (the same content registered by two
  // principals is one callable with two owners), and whether everyone may
  // find and run it.
  std::vector<std::string> owners;
  bool published = false;
  std::string request;  // the RegisterRequest without its payload bytes (the state database's copy)
  // A chip callable's arguments as its kernel config declares them: Submit
  // checks a job's arguments against them before it is queued.
  std::vector<pto::package::ArgSpec> signature;
  bool visible_to(const Principal& p) const;
  bool owned_by(const Principal& p) const;
};

class CallableRegistry {
 public:
  CallableRegistry(pto::Worker& w, const pto::RunnerPool& runners, const DaemonConfig& cfg, StateDb& db)
      : w_(w), runners_(runners), cfg_(cfg), db_(db) {}

  // Registers again what the state database holds, each from its stored
  // files, checking that the content still has its digest: a callable whose
  // files changed or are gone is forgotten; one refused now (by this
  // daemon's [security] settings, a file it cannot read, a child) stays
  // recorded for the next start; the log says which and why. *in_use gets
  // the stored entries still named (for the debris sweep). An error - the
  // table cannot be read - restores nothing: the daemon must not start (nor
  // sweep the stored files).
  Status restore(std::set<std::string>* in_use);

  // The error's code maps to a gRPC status: kWorkerInvalidArgument ->
  // INVALID_ARGUMENT, kWorkerChildFailed -> FAILED_PRECONDITION, 403-like
  // refusals -> PERMISSION_DENIED (code kRefused). Registering content that
  // exists makes `who` one more owner of it.
  Status add(const Principal& who, const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply);
  // An owner lets go of it (the callable goes with its last owner); an admin
  // removes it. Others: NOT_FOUND, or PERMISSION_DENIED for a published one.
  Status remove(const Principal& who, const pto::v1::CallableRef& ref);
  Status publish(const Principal& who, const pto::v1::CallableRef& ref, bool published);

  // Two-phase registration from a remote session (docs/remote.md): prepare
  // stores, loads and installs the callable but keeps it invisible (find,
  // list and names ignore it) until commit; abort undoes prepare. A prepare
  // of content already registered changes nothing (reply.existed()).
  Status prepare(const Principal& who, const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply);
  Status commit(const pto::Digest& d);
  Status abort(const pto::Digest& d);
  bool has(const pto::Digest& d) const;
  // Why a digest is not registered any more ("'name' was unregistered"), or "".
  std::string tombstone(const pto::Digest& d) const;
  // What `who` may see: its own, published ones, or (admin) any.
  Status find(const Principal& who, const pto::v1::CallableRef& ref, RegisteredCallable* out) const;
  std::vector<RegisteredCallable> list(const Principal& who) const;
  // Registered and visible to `who` (its own, published, or an admin).
  bool visible(const Principal& who, const pto::Digest& d) const;

 private:
  // Files a registration stores are claimed while it is in flight; a
  // registration that ends without publishing its callable removes them
  // unless another registration (published, pending or in flight) uses them.
  class StoredClaim;
  void claim_stored(const std::string& path);
  void release_stored(const std::string& path, bool kept);

  Status store_bundle(const pto::v1::ChipBundle& b, StoredClaim* claim, std::string* config_path,
                      pto::package::ChipConfig* config);
  Status find_locked(const Principal* who, const pto::v1::CallableRef& ref, const RegisteredCallable** out) const;
  Status add_impl(const Principal& who, const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply,
                  bool pending);
  Status remove_impl(const Principal* who, const pto::v1::CallableRef& ref);
  // Another registration (published, pending or in flight) uses this stored file.
  bool stored_in_use_locked(const std::string& path) const;
  void remove_stored(const std::string& path);
  Status join_locked(const Principal& who, const pto::v1::RegisterRequest& req, RegisteredCallable& rc);
  Status persist_locked(const RegisteredCallable& rc);
  // `signature`: a chip callable's declared arguments (left empty for others).
  bool restore_one(const CallableRow& row, std::set<std::string>* in_use);
  Status from_request(const pto::v1::RegisterRequest& req, StoredClaim* claim, pto::Callable* out, std::string* source,
                      std::string* stored, std::vector<pto::package::ArgSpec>* signature);
  Status install(const pto::v1::RegisterRequest& req, const pto::Callable& c, bool orchestration, bool pending,
                 RegisteredCallable* out);
  void discard(const RegisteredCallable& rc);  // unregister from the Worker, delete uploaded files

  pto::Worker& w_;
  const pto::RunnerPool& runners_;
  const DaemonConfig& cfg_;
  StateDb& db_;
  mutable std::mutex mu_;
  std::map<pto::Digest, RegisteredCallable> by_digest_;
  std::map<std::string, pto::Digest> by_name_;
  std::map<pto::Digest, RegisteredCallable> pending_;  // prepared, not committed
  std::map<pto::Digest, std::string> tombstones_;
  std::map<std::string, int> claims_;  // stored path -> registrations in flight
};

}  // namespace ptod
