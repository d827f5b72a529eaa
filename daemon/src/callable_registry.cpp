#include "callable_registry.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "log.h"
#include "names.h"
#include "pto/base/files.h"
#include "pto/package/chip_package.h"
#include "wire_enums.h"

namespace ptod {
namespace {

Status bad(std::string m) { return Status::Error(pto::kWorkerInvalidArgument, std::move(m)); }
Status taken(std::string m) { return Status::Error(pto::kAlreadyExists, std::move(m)); }

pto::v1::CallableIdentity to_proto(const pto::CallableIdentity& id) {
  pto::v1::CallableIdentity p;
  p.set_digest(std::string(reinterpret_cast<const char*>(id.digest.data()), 32));
  p.set_kind(to_wire(id.kind));
  p.set_target_namespace(to_wire(id.target_namespace));
  return p;
}

// What the state database keeps of a request: everything but the payload
// bytes, which are in the stored files.
std::string without_payload(const pto::v1::RegisterRequest& req) {
  pto::v1::RegisterRequest r = req;
  if (r.has_chip()) r.mutable_chip()->Clear();
  if (r.has_native_blob()) r.mutable_native_blob()->clear_library();
  return r.SerializeAsString();
}

}  // namespace

bool RegisteredCallable::visible_to(const Principal& p) const { return published || owned_by(p); }
bool RegisteredCallable::owned_by(const Principal& p) const {
  return p.admin || std::find(owners.begin(), owners.end(), p.name) != owners.end();
}

Status CallableRegistry::persist_locked(const RegisteredCallable& rc) {
  CallableRow row;
  row.digest = pto::to_hex(rc.handle.id.digest);
  row.request = rc.request;
  row.stored = rc.stored;
  row.owners = rc.owners;
  row.published = rc.published;
  return db_.put_callable(row);
}

// Holds a registration's claim on the files it stored; on destruction the
// files go unless the registration published its callable (keep()) or
// another one uses them.
class CallableRegistry::StoredClaim {
 public:
  explicit StoredClaim(CallableRegistry& r) : r_(r) {}
  ~StoredClaim() {
    if (!path_.empty()) r_.release_stored(path_, kept_);
  }
  StoredClaim(const StoredClaim&) = delete;
  StoredClaim& operator=(const StoredClaim&) = delete;
  void claim(const std::string& path) {
    path_ = path;
    r_.claim_stored(path);
  }
  void keep() { kept_ = true; }

 private:
  CallableRegistry& r_;
  std::string path_;
  bool kept_ = false;
};

void CallableRegistry::claim_stored(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  ++claims_[path];
}

void CallableRegistry::release_stored(const std::string& path, bool kept) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (--claims_[path] > 0 || kept) {
      if (claims_[path] == 0) claims_.erase(path);
      return;
    }
    claims_.erase(path);
    if (stored_in_use_locked(path)) return;  // the same content, registered by someone else
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// A blob is named by its bytes alone: the same library with another symbol or
// ABI is another registration of the same file.
bool CallableRegistry::stored_in_use_locked(const std::string& path) const {
  if (auto it = claims_.find(path); it != claims_.end() && it->second > 0) return true;
  for (const auto* m : {&by_digest_, &pending_})
    for (const auto& [d, rc] : *m)
      if (rc.stored == path) return true;
  return false;
}

void CallableRegistry::remove_stored(const std::string& path) {
  if (path.empty()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stored_in_use_locked(path)) return;
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

// A bundle's directory is named by its content digest (pto::package::bundle_digest).
Status CallableRegistry::store_bundle(const pto::v1::ChipBundle& b, StoredClaim* claim, std::string* config_path,
                                      pto::package::ChipConfig* config) {
  pto::package::ChipBundle bundle;
  bundle.config_toml = b.config_toml();
  bundle.libraries.insert(b.libraries().begin(), b.libraries().end());
  if (bundle.config_toml.empty()) return bad("chip bundle: config_toml is empty");
  const std::string dir = cfg_.state_dir + "/callables/bundle-" + pto::to_hex(pto::package::bundle_digest(bundle));
  claim->claim(dir);
  if (Status s = pto::package::unbundle(bundle, dir, config); !s.ok())
    return s.code == pto::kInvalidArgument ? bad(s.message) : s;
  *config_path = dir + "/kernels.toml";
  return Status::Ok();
}

Status CallableRegistry::add(const Principal& who, const pto::v1::RegisterRequest& req, pto::v1::RegisterReply* reply) {
  return add_impl(who, req, reply, false);
}

Status CallableRegistry::prepare(const Principal& who, const pto::v1::RegisterRequest& req,
                                 pto::v1::RegisterReply* reply) {
  return add_impl(who, req, reply, true);
}

// The callable a request describes, its files stored under `claim`.
Status CallableRegistry::from_request(const pto::v1::RegisterRequest& req, StoredClaim* claim, pto::Callable* out,
                                      std::string* source, std::string* stored,
                                      std::vector<pto::package::ArgSpec>* signature) {
  const bool orch_abi = req.abi() == pto::v1::ABI_ORCHESTRATION;
  pto::Callable& c = *out;
  switch (req.callable_case()) {
    case pto::v1::RegisterRequest::kChip: {
      if (!cfg_.allow_chip_bundles)
        return Status::Error(pto::kRefused,
                             "chip bundles are refused by this daemon ([security] allow_chip_bundles = false)");
      if (orch_abi) return bad("a chip bundle cannot have abi ABI_ORCHESTRATION");
      std::string path;
      pto::package::ChipConfig config;
      if (Status s = store_bundle(req.chip(), claim, &path, &config); !s.ok()) return s;
      *signature = config.args;
      c = pto::ChipCallable::from_config(path);
      *source = "bundle";
      *stored = std::filesystem::path(path).parent_path().string();
      break;
    }
    case pto::v1::RegisterRequest::kNativeImport: {
      if (!cfg_.allow_native_import)
        return Status::Error(pto::kRefused,
                             "native imports are refused by this daemon ([security] allow_native_import = false)");
      const auto& n = req.native_import();
      if (n.library_path().empty() || n.library_path()[0] != '/')
        return bad(fmt::format("native import: library_path '{}' must be absolute", n.library_path()));
      c = orch_abi ? pto::OrchestrationCallable::import(n.library_path(), n.symbol())
                   : pto::NativeCallable::import(n.library_path(), n.symbol());
      *source = n.library_path() + ":" + n.symbol();
      break;
    }
    case pto::v1::RegisterRequest::kNativeBlob: {
      if (!cfg_.allow_native_blob)
        return Status::Error(pto::kRefused,
                             "native blobs are refused by this daemon ([security] allow_native_blob = false)");
      const auto& n = req.native_blob();
      if (n.library().empty()) return bad("native blob: no library bytes");
      const std::string dir = cfg_.state_dir + "/callables";
      const std::string file = "blob-" + pto::to_hex(pto::sha256(n.library().data(), n.library().size())) + ".so";
      claim->claim(dir + "/" + file);
      if (Status s = pto::write_file_once(dir + "/" + file, n.library()); !s.ok()) return s;
      *stored = dir + "/" + file;
      if (orch_abi) {
        c = pto::OrchestrationCallable::import(dir + "/" + file, n.symbol());
      } else {
        c = pto::NativeCallable::blob(std::vector<uint8_t>(n.library().begin(), n.library().end()), n.symbol());
      }
      *source = "blob:" + n.symbol();
      break;
    }
    default: return bad("register: no callable given (chip, native_import or native_blob)");
  }
  return c.status;
}

// Makes the callable runnable: an orchestration is checked by loading it in
// a runner (a crash or a hang of its constructors costs a runner, not the
// daemon); anything else is registered with the Worker (at level 4, on the
// chosen L3 workers).
Status CallableRegistry::install(const pto::v1::RegisterRequest& req, const pto::Callable& c, bool orchestration,
                                 bool pending, RegisteredCallable* out) {
  const bool level4 = w_.config().level >= 4;
  const pto::CallableIdentity id = c.identity();
  RegisteredCallable& rc = *out;
  if (orchestration) {
    if (Status st = runners_.check_library(c.path, c.symbol); !st.ok()) return st;
    rc.runs_here = true;
    rc.path = c.path;
    rc.symbol = c.symbol;
    rc.handle.id = id;
    rc.handle.abi = pto::EntryAbi::ORCHESTRATION;
  } else if (level4) {
    // Local L3 children and every selected peer, all or nothing; the peers
    // receive this request (remote_payload) in their PREPARE.
    pto::CallableOptions o;
    o.max_retries = req.max_retries();
    o.local = cfg_.l3_children > 0;
    if (!cfg_.peers.empty()) {
      pto::v1::RegisterRequest fwd = req;
      fwd.clear_peers();
      fwd.clear_next_level();
      fwd.clear_max_retries();
      o.remote_payload = fwd.SerializeAsString();
      for (uint32_t p : req.peers()) {
        if (p >= cfg_.peers.size())
          return bad(fmt::format("peer {} is out of range: this daemon has {} peers (0..{})", p, cfg_.peers.size(),
                                 cfg_.peers.size() - 1));
        o.remote_workers.push_back(static_cast<int>(p));
      }
    }
    rc.handle = w_.register_callable(c, o);
    if (!rc.handle.ok()) return rc.handle.status;
    rc.remote = true;
    if (!rc.name.empty()) (void)w_.name_callable(rc.name, rc.handle);
  } else {
    rc.handle = w_.register_callable(c);
    if (!rc.handle.ok()) return rc.handle.status;
    if (!rc.name.empty() && !pending) (void)w_.name_callable(rc.name, rc.handle);
  }
  return Status::Ok();
}

Status CallableRegistry::add_impl(const Principal& who, const pto::v1::RegisterRequest& req,
                                  pto::v1::RegisterReply* reply, bool pending) {
  // At level 4, orchestrations marked next_level and every chip bundle go to
  // the L3 workers; other orchestrations run in this daemon.
  const bool level4 = w_.config().level >= 4;
  const bool orch_abi = req.abi() == pto::v1::ABI_ORCHESTRATION;
  const bool orchestration = orch_abi && !(level4 && req.next_level());  // loaded and run in this daemon
  if (req.abi() == pto::v1::ABI_CHIP && !req.has_chip()) return bad("abi ABI_CHIP needs a chip bundle");
  if (Status s = check_name("callable name", req.name()); !s.ok()) return s;
  pto::Callable c;
  std::string source, stored;
  StoredClaim claim(*this);  // what this request stores goes again unless it is published
  std::vector<pto::package::ArgSpec> signature;
  if (Status s = from_request(req, &claim, &c, &source, &stored, &signature); !s.ok()) return s;
  const pto::CallableIdentity id = c.identity();
  if (level4 && !orchestration && c.abi == pto::EntryAbi::SUB)
    return bad("a level-4 daemon runs sub callables on its own sub workers only; register them on the L3 daemons");
  {
    std::lock_guard<std::mutex> g(mu_);
    if (pending_.count(id.digest))  // a coordinator's two-phase registration of it is in progress
      return Status::Error(pto::kWorkerChildFailed,
                           fmt::format("callable {} is being registered by a coordinator session; retry when it "
                                       "has been committed or aborted",
                                       id.short_hex()));
    auto it = by_digest_.find(id.digest);
    if (it != by_digest_.end()) {
      if (!req.name().empty() && req.name() != it->second.name)
        return taken(fmt::format("callable {} is already registered as '{}'", id.short_hex(), it->second.name));
      if (Status s = join_locked(who, req, it->second); !s.ok()) return s;
      *reply->mutable_identity() = to_proto(id);
      reply->set_name(it->second.name);
      reply->set_existed(true);
      return Status::Ok();
    }
    if (!req.name().empty() && by_name_.count(req.name()))
      return taken(fmt::format("the name '{}' is taken by another callable", req.name()));
  }
  RegisteredCallable rc;
  rc.abi = c.abi;
  rc.name = req.name();
  rc.source = source;
  rc.stored = stored;
  rc.owners = {who.name};
  rc.published = req.publish();
  rc.request = without_payload(req);
  rc.signature = std::move(signature);
  if (Status s = install(req, c, orchestration, pending, &rc); !s.ok()) return s;
  std::lock_guard<std::mutex> g(mu_);
  if (pending) {
    if (by_digest_.count(id.digest) || pending_.count(id.digest)) {  // raced with another registration
      *reply->mutable_identity() = to_proto(id);
      reply->set_existed(true);
      return Status::Ok();
    }
    pending_[id.digest] = rc;
    claim.keep();
    *reply->mutable_identity() = to_proto(id);
    reply->set_name(rc.name);
    return Status::Ok();
  }
  // Another request may have registered the same content or taken the name
  // while this one was loading: decide again under the lock.
  if (auto it = by_digest_.find(id.digest); it != by_digest_.end()) {
    if (Status s = join_locked(who, req, it->second); !s.ok()) return s;
    *reply->mutable_identity() = to_proto(id);
    reply->set_name(it->second.name);
    reply->set_existed(true);
    return Status::Ok();
  }
  if (!rc.name.empty() && by_name_.count(rc.name)) {
    if (!rc.runs_here) (void)w_.unregister_callable(rc.handle);
    return taken(fmt::format("the name '{}' is taken by another callable", rc.name));
  }
  // Recorded before it is published: what a client was told exists survives a restart.
  if (Status s = persist_locked(rc); !s.ok()) {
    if (!rc.runs_here) (void)w_.unregister_callable(rc.handle);
    return s;
  }
  by_digest_[id.digest] = rc;
  claim.keep();
  if (!rc.name.empty()) by_name_[rc.name] = id.digest;
  *reply->mutable_identity() = to_proto(id);
  reply->set_name(rc.name);
  reply->set_existed(false);
  return Status::Ok();
}

// `who` null: any owner's. Another principal's unpublished callable is "not
// registered", word for word as a missing one.
Status CallableRegistry::find_locked(const Principal* who, const pto::v1::CallableRef& ref,
                                     const RegisteredCallable** out) const {
  pto::Digest d{};
  if (!ref.digest().empty()) {
    if (ref.digest().size() != 32) return bad(fmt::format("a digest has 32 bytes, not {}", ref.digest().size()));
    std::memcpy(d.data(), ref.digest().data(), 32);
  } else if (!ref.name().empty()) {
    auto n = by_name_.find(ref.name());
    if (n == by_name_.end())
      return Status::Error(pto::kWorkerNotRegistered, fmt::format("no callable is registered as '{}'", ref.name()));
    d = n->second;
  } else {
    return bad("a callable reference needs a digest or a name");
  }
  auto it = by_digest_.find(d);
  if (it == by_digest_.end() || (who && !it->second.visible_to(*who))) {
    if (!ref.name().empty() && ref.digest().empty())
      return Status::Error(pto::kWorkerNotRegistered, fmt::format("no callable is registered as '{}'", ref.name()));
    return Status::Error(pto::kWorkerNotRegistered, fmt::format("callable {} is not registered", pto::to_hex(d)));
  }
  *out = &it->second;
  return Status::Ok();
}

Status CallableRegistry::find(const Principal& who, const pto::v1::CallableRef& ref, RegisteredCallable* out) const {
  std::lock_guard<std::mutex> g(mu_);
  const RegisteredCallable* rc = nullptr;
  if (Status s = find_locked(&who, ref, &rc); !s.ok()) return s;
  *out = *rc;
  return Status::Ok();
}

bool CallableRegistry::visible(const Principal& who, const pto::Digest& d) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_digest_.find(d);
  return it != by_digest_.end() && it->second.visible_to(who);
}

// One more owner of content that is registered (and its publish wish); mu_ held.
Status CallableRegistry::join_locked(const Principal& who, const pto::v1::RegisterRequest& req,
                                     RegisteredCallable& rc) {
  const bool owner = std::find(rc.owners.begin(), rc.owners.end(), who.name) != rc.owners.end();
  if (owner && (!req.publish() || rc.published)) return Status::Ok();
  RegisteredCallable next = rc;
  if (!owner) next.owners.push_back(who.name);
  if (req.publish()) next.published = true;
  if (Status s = persist_locked(next); !s.ok()) return s;
  rc = std::move(next);
  return Status::Ok();
}

Status CallableRegistry::publish(const Principal& who, const pto::v1::CallableRef& ref, bool published) {
  std::lock_guard<std::mutex> g(mu_);
  const RegisteredCallable* p = nullptr;
  if (Status s = find_locked(&who, ref, &p); !s.ok()) return s;
  if (!p->owned_by(who))
    return Status::Error(pto::kRefused, fmt::format("callable {} is published by {}: only its owners or an admin may "
                                                    "change that",
                                                    p->name.empty() ? p->handle.id.short_hex() : "'" + p->name + "'",
                                                    fmt::join(p->owners, ", ")));
  RegisteredCallable next = *p;
  next.published = published;
  if (Status s = persist_locked(next); !s.ok()) return s;
  by_digest_[next.handle.id.digest] = next;
  return Status::Ok();
}

Status CallableRegistry::remove(const Principal& who, const pto::v1::CallableRef& ref) {
  return remove_impl(&who, ref);
}

Status CallableRegistry::remove_impl(const Principal* who, const pto::v1::CallableRef& ref) {
  RegisteredCallable rc;
  {
    std::lock_guard<std::mutex> g(mu_);
    const RegisteredCallable* p = nullptr;
    if (Status s = find_locked(who, ref, &p); !s.ok()) return s;
    if (who && !p->owned_by(*who))
      return Status::Error(
          pto::kRefused,
          fmt::format("callable {} is published by {}: only its owners or an admin may unregister it",
                      p->name.empty() ? p->handle.id.short_hex() : "'" + p->name + "'", fmt::join(p->owners, ", ")));
    // An owner among several lets go; the callable stays for the others.
    if (who && !who->admin && p->owners.size() > 1) {
      RegisteredCallable next = *p;
      next.owners.erase(std::find(next.owners.begin(), next.owners.end(), who->name));
      if (Status s = persist_locked(next); !s.ok()) return s;
      by_digest_[next.handle.id.digest] = next;
      return Status::Ok();
    }
    rc = *p;
    if (Status s = db_.delete_callable(pto::to_hex(rc.handle.id.digest)); !s.ok()) return s;
    by_digest_.erase(rc.handle.id.digest);
    if (!rc.name.empty()) by_name_.erase(rc.name);
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    tombstones_[rc.handle.id.digest] = rc.name.empty() ? "it was unregistered" : "'" + rc.name + "' was unregistered";
  }
  // The library of an orchestration stays loaded while a job holds a copy.
  Status st = !rc.runs_here ? w_.unregister_callable(rc.handle) : Status::Ok();
  // Uploaded files go too (a mapped library stays valid after its unlink;
  // the NATIVE_BLOB copy the Worker keeps is the Worker's own).
  remove_stored(rc.stored);  // unless another registration uses the same file
  return st;
}

Status CallableRegistry::commit(const pto::Digest& d) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = pending_.find(d);
  if (it == pending_.end()) {
    if (by_digest_.count(d)) return Status::Ok();  // it was present already: nothing to publish
    return Status::Error(pto::kWorkerNotRegistered,
                         fmt::format("commit: callable {} was not prepared", pto::to_hex(d)));
  }
  RegisteredCallable rc = it->second;
  if (!rc.name.empty() && by_name_.count(rc.name))
    return taken(fmt::format("commit: the name '{}' was taken meanwhile", rc.name));
  if (Status s = persist_locked(rc); !s.ok()) return s;
  pending_.erase(it);
  by_digest_[d] = rc;
  if (!rc.name.empty()) {
    by_name_[rc.name] = d;
    (void)w_.name_callable(rc.name, rc.handle);
  }
  tombstones_.erase(d);
  return Status::Ok();
}

Status CallableRegistry::abort(const pto::Digest& d) {
  RegisteredCallable rc;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pending_.find(d);
    if (it == pending_.end()) return Status::Ok();  // held, not prepared here: nothing to undo
    rc = it->second;
    pending_.erase(it);
  }
  discard(rc);
  return Status::Ok();
}

void CallableRegistry::discard(const RegisteredCallable& rc) {
  if (!rc.runs_here) (void)w_.unregister_callable(rc.handle);
  remove_stored(rc.stored);
}

bool CallableRegistry::has(const pto::Digest& d) const {
  std::lock_guard<std::mutex> g(mu_);
  return by_digest_.count(d) != 0;
}

std::string CallableRegistry::tombstone(const pto::Digest& d) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = tombstones_.find(d);
  return it == tombstones_.end() ? std::string() : it->second;
}

std::vector<RegisteredCallable> CallableRegistry::list(const Principal& who) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<RegisteredCallable> out;
  for (const auto& [d, rc] : by_digest_)
    if (rc.visible_to(who)) out.push_back(rc);
  return out;
}

// The request a row describes, its payload read back from the stored files.
static Status refill(const CallableRow& row, pto::v1::RegisterRequest* req) {
  if (req->has_chip()) {
    pto::package::ChipBundle b;
    if (Status s = pto::package::bundle_package(row.stored + "/kernels.toml", &b); !s.ok()) return s;
    req->mutable_chip()->set_config_toml(b.config_toml);
    for (const auto& [name, bytes] : b.libraries) (*req->mutable_chip()->mutable_libraries())[name] = bytes;
  } else if (req->has_native_blob()) {
    std::string bytes;
    if (Status s = pto::read_file(row.stored, &bytes); !s.ok()) return s;
    req->mutable_native_blob()->set_library(bytes);
  }
  return Status::Ok();
}

Status CallableRegistry::restore(std::set<std::string>* in_use) {
  std::vector<CallableRow> rows;
  if (Status s = db_.callables(&rows); !s.ok())
    return Status::Error(s.code, fmt::format("the registrations cannot be read: {}", s.message));
  size_t kept = 0;
  for (const CallableRow& row : rows)
    if (restore_one(row, in_use)) ++kept;
  if (!rows.empty()) log("registry")->info("restored {} of {} registration(s)", kept, rows.size());
  return Status::Ok();
}

// One row: registered again (true), kept for the next start (something
// refused it now: this daemon's [security] settings, a file it cannot read,
// a child or peer), or forgotten - only when what was registered is surely
// gone: the row does not parse, the daemon's stored copy is missing, or the
// files' digest is no longer the registered one.
bool CallableRegistry::restore_one(const CallableRow& row, std::set<std::string>* in_use) {
  const std::string stored_name = std::filesystem::path(row.stored).filename().string();
  pto::v1::RegisterRequest req;
  std::string gone;
  std::error_code ec;
  if (!req.ParseFromString(row.request))
    gone = "the stored request does not parse";
  else if (!row.stored.empty() && !std::filesystem::exists(row.stored, ec) && !ec)
    gone = "its stored files are gone";
  const std::string what =
      fmt::format("callable {}{} of {}", row.digest.substr(0, 16), req.name().empty() ? "" : " ('" + req.name() + "')",
                  fmt::join(row.owners, ", "));
  auto forget = [&](const std::string& why) {
    log("registry")->error("{} is not restored: {}; it is forgotten", what, why);
    (void)db_.delete_callable(row.digest);
    return false;
  };
  if (!gone.empty()) return forget(gone);
  pto::Callable c;
  std::string source, stored;
  std::vector<pto::package::ArgSpec> signature;
  StoredClaim claim(*this);
  Status s = refill(row, &req);
  if (s.ok()) s = from_request(req, &claim, &c, &source, &stored, &signature);
  // The content must be what was registered: a library changed on disk
  // since then is refused, never run under the old digest.
  if (s.ok() && pto::to_hex(c.identity().digest) != row.digest)
    return forget(fmt::format("its files changed since it was registered (their digest is now {})",
                              pto::to_hex(c.identity().digest).substr(0, 16)));
  RegisteredCallable rc;
  rc.abi = c.abi;
  rc.name = req.name();
  rc.source = source;
  rc.stored = stored;
  rc.owners = row.owners;
  rc.published = row.published;
  rc.request = row.request;
  rc.signature = std::move(signature);
  const bool level4 = w_.config().level >= 4;
  const bool orchestration = req.abi() == pto::v1::ABI_ORCHESTRATION && !(level4 && req.next_level());
  if (s.ok()) s = install(req, c, orchestration, false, &rc);
  if (!s.ok()) {  // intact, but refused now: kept for the next start, its files with it
    log("registry")
        ->error("{} is not available: {}; it stays recorded and is tried again at the next start", what, s.message);
    if (!row.stored.empty()) in_use->insert(stored_name);
    if (!stored.empty()) in_use->insert(std::filesystem::path(stored).filename().string());
    claim.keep();
    return false;
  }
  // Stored again under another name (a bundle's directory is named by its
  // configuration as this daemon writes it, which a client's own text need
  // not be): the row names the new one, or both stay.
  if (!stored.empty() && stored != row.stored) {
    CallableRow moved = row;
    moved.stored = stored;
    if (!db_.put_callable(moved).ok() && !row.stored.empty()) in_use->insert(stored_name);
  }
  std::lock_guard<std::mutex> g(mu_);
  by_digest_[c.identity().digest] = rc;
  if (!rc.name.empty()) by_name_[rc.name] = c.identity().digest;
  claim.keep();
  if (!stored.empty()) in_use->insert(std::filesystem::path(stored).filename().string());
  return true;
}

}  // namespace ptod
