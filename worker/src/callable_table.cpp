// The CallableTable (callable_table.h): registration before and after
// init(), two-phase installation on remote workers, unregistration with
// tombstones, names, and the control requests that carry them to children.
#include "callable_table.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "child_pool.h"
#include "scheduler.h"

namespace pto {

CallableTable::~CallableTable() { remove_private_state_dir(); }

void CallableTable::remove_private_state_dir() {
  if (!own_state_dir_) return;
  std::error_code ec;
  std::filesystem::remove_all(state_dir_, ec);
  own_state_dir_ = false;
}

const Registered* CallableTable::lookup(const Digest& d) const {
  auto it = registry_.find(d);
  return it == registry_.end() ? nullptr : &it->second;
}

std::string CallableTable::tombstone(const Digest& d) const {
  auto it = tombstones_.find(d);
  return it == tombstones_.end() ? std::string() : it->second;
}

Status CallableTable::store_blob(Callable* c) {
  if (state_dir_.empty()) {
    if (!cfg_.state_dir.empty()) {
      state_dir_ = cfg_.state_dir;
    } else {
      const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): nothing here sets it
      std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/pto-worker-XXXXXX";
      if (!mkdtemp(tmpl.data()))
        return Status::Error(kWorkerInvalidConfig,
                             fmt::format("cannot create a state dir from {}: {}", tmpl, errno_text(errno)));
      state_dir_ = tmpl;
      own_state_dir_ = true;
    }
  }
  const std::string dir = state_dir_ + "/callables";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  chmod(state_dir_.c_str(), 0700);
  chmod(dir.c_str(), 0700);
  const std::string path = dir + "/" + c->identity().hex() + ".so";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(kWorkerInvalidConfig, fmt::format("cannot write {}: {}", path, errno_text(errno)));
  size_t off = 0;
  while (off < c->blob.size()) {
    const ssize_t w = ::write(fd, c->blob.data() + off, c->blob.size() - off);
    if (w <= 0) {
      ::close(fd);
      return Status::Error(kWorkerInvalidConfig, fmt::format("cannot write {}: {}", path, errno_text(errno)));
    }
    off += static_cast<size_t>(w);
  }
  ::close(fd);
  c->path = path;
  c->blob.clear();
  return Status::Ok();
}

// The local children a registration is broadcast to (remote workers take
// the two-phase path, install_remote). At level >= 4 chip callables go to the
// local L3 children, which register them with their own chips.
std::vector<Endpoint*> CallableTable::targets_for(EntryAbi abi) {
  auto& list = abi == EntryAbi::SUB ? pool_.subs() : pool_.next_level();
  std::vector<Endpoint*> out;
  for (auto& e : list)
    if (!e->is_remote()) out.push_back(e.get());
  return out;
}

CallableHandle CallableTable::add(const Callable& c, const CallableOptions& o) {
  CallableHandle h;
  h.abi = c.abi;
  if (!c.status.ok()) {
    h.status = c.status;
    return h;
  }
  if (life_.closed) {
    h.status = Status::Error(kWorkerClosed, "register_callable after close()");
    return h;
  }
  if (c.abi == EntryAbi::CHIP && cfg_.level > 4) {
    h.status = Status::Error(kWorkerInvalidArgument,
                             fmt::format("chip callables run on a level-3 Worker's chips (or a level-4 Worker's L3 "
                                         "children); this Worker is level {}",
                                         cfg_.level));
    return h;
  }
  const bool remote = !o.remote_payload.empty();
  if (remote && (!life_.initialized || pool_.links().empty() || c.abi == EntryAbi::SUB)) {
    h.status =
        Status::Error(kWorkerInvalidArgument,
                      !life_.initialized      ? "remote registration needs an initialised Worker (after init())"
                      : pool_.links().empty() ? "remote registration on a Worker without remote workers"
                                              : "sub callables run on local sub workers only; register them without "
                                                "remote_payload");
    return h;
  }
  if (c.abi == EntryAbi::ORCHESTRATION && cfg_.level < 4) {
    h.status =
        Status::Error(kWorkerInvalidArgument,
                      "orchestration callables run on the L3 children of a level-4 Worker; this Worker is level 3");
    return h;
  }
  Callable copy = c;
  if (copy.kind == CallableKind::NATIVE_BLOB && !copy.blob.empty()) {
    std::lock_guard<std::mutex> g(lock_.mu);
    if (Status s = store_blob(&copy); !s.ok()) {
      h.status = s;
      return h;
    }
  }
  h.id = copy.identity();
  std::vector<Endpoint*> targets;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    auto it = registry_.find(h.id.digest);
    if (it != registry_.end()) return it->second.handle;
    if (!life_.initialized) {
      registry_[h.id.digest] = Registered{copy, h, o, nullptr, {}};
      return h;
    }
    // An in-process function cannot reach running children; one by
    // reference is found by name in each (the process's resolver).
    if (copy.kind == CallableKind::FUNCTION && (copy.sub_fn || copy.orch_fn || !has_sub_function_resolver())) {
      h.status = Status::Error(kWorkerInvalidArgument,
                               fmt::format("function callable '{}' registered after init(): an in-process function "
                                           "cannot reach running children; register it before init(), by reference "
                                           "(NativeCallable::by_reference, with a resolver), or use "
                                           "NativeCallable::import / ::blob",
                                           copy.name));
      return h;
    }
    if (o.local) targets = targets_for(copy.abi);
  }
  ControlDescriptor d{copy.kind, copy.abi, copy.path, copy.symbol, copy.name};
  // Published in the same critical section that completes the broadcast, so
  // a replacement child forked later inherits it.
  auto publish = [this, copy, h, o] {
    registry_[h.id.digest] = Registered{copy, h, o, mask_of(o.local, copy.abi, {}), {}};
    tombstones_.erase(h.id.digest);
  };
  if (!remote) {
    if (Status s = control(CTRL_REGISTER, h.id.digest, encode_control(d), targets, nullptr, publish); !s.ok())
      h.status = Status::Error(
          s.code, fmt::format("registering {} ({}): {}", h.id.short_hex(), kind_name(copy.kind), s.message));
    return h;
  }
  // Local children and remote workers together, all or nothing.
  if (Status s = control(CTRL_REGISTER, h.id.digest, encode_control(d), targets, nullptr); !s.ok()) {
    h.status = Status::Error(s.code,
                             fmt::format("registering {} ({}): {}", h.id.short_hex(), kind_name(copy.kind), s.message));
    return h;
  }
  std::vector<int> installed;
  if (Status s = install_remote(h.id, o, &installed); !s.ok()) {
    (void)control(CTRL_UNREGISTER, h.id.digest, {}, targets, nullptr);
    h.status =
        Status::Error(s.code, fmt::format("registering {} ({}) remotely: {}{}", h.id.short_hex(), kind_name(copy.kind),
                                          s.message, targets.empty() ? "" : " (rolled back on the local children)"));
    return h;
  }
  std::lock_guard<std::mutex> g(lock_.mu);
  registry_[h.id.digest] = Registered{copy, h, o, mask_of(o.local && !targets.empty(), copy.abi, installed), installed};
  tombstones_.erase(h.id.digest);
  return h;
}

CallableHandle CallableTable::add_remote(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o) {
  CallableHandle h;
  h.id = id;
  h.id.target_namespace = TargetNamespace::REMOTE;
  h.abi = abi;
  if (life_.closed) {
    h.status = Status::Error(kWorkerClosed, "register_remote_callable after close()");
    return h;
  }
  if (!life_.initialized || pool_.links().empty() || o.remote_payload.empty() || abi == EntryAbi::SUB) {
    h.status = Status::Error(kWorkerInvalidArgument,
                             "register_remote_callable needs an initialised Worker with remote workers, a "
                             "remote_payload, and a next-level (chip or orchestration) callable");
    return h;
  }
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    auto it = registry_.find(id.digest);
    if (it != registry_.end()) return it->second.handle;
  }
  std::vector<int> installed;
  if (Status s = install_remote(h.id, o, &installed); !s.ok()) {
    h.status = Status::Error(s.code, fmt::format("registering {} remotely: {}", id.short_hex(), s.message));
    return h;
  }
  Callable c;
  c.kind = id.kind;
  c.abi = abi;
  std::lock_guard<std::mutex> g(lock_.mu);
  registry_[id.digest] = Registered{c, h, o, mask_of(false, abi, installed), installed};
  tombstones_.erase(id.digest);
  return h;
}

// Which next-level endpoints hold a callable: the local L3 children (when it
// was broadcast to them) and the remote workers it was committed on. Null
// means every endpoint of its kind (no remote workers involved).
std::shared_ptr<const std::vector<uint8_t>> CallableTable::mask_of(bool local, EntryAbi abi,
                                                                   const std::vector<int>& remote) const {
  if (pool_.links().empty() || abi == EntryAbi::SUB) return nullptr;
  auto m = std::make_shared<std::vector<uint8_t>>(pool_.l3s().size(), 0);
  for (size_t i = 0; i < pool_.l3s().size(); ++i)
    if (!pool_.l3s()[i]->is_remote()) (*m)[i] = local ? 1 : 0;
  for (int i : remote) (*m)[i] = 1;
  return m;
}

// Two-phase registration across the selected remote workers.
Status CallableTable::install_remote(const CallableIdentity& id, const CallableOptions& o,
                                     std::vector<int>* installed) {
  const int first = static_cast<int>(pool_.inner().size());
  const int n = static_cast<int>(pool_.links().size());
  std::vector<int> sel;
  if (o.remote_workers.empty())
    for (int i = 0; i < n; ++i) sel.push_back(first + i);
  for (int r : o.remote_workers) {
    if (r < 0 || r >= n)
      return Status::Error(
          kWorkerInvalidArgument,
          fmt::format("remote worker {} is out of range (this Worker has {} remote workers, 0..{})", r, n, n - 1));
    if (std::find(sel.begin(), sel.end(), first + r) == sel.end()) sel.push_back(first + r);
  }
  const uint32_t tmo = cfg_.control_timeout_ms;
  std::vector<int> prepared;
  std::string failure;
  auto note = [&](const std::string& m) { failure += (failure.empty() ? "" : "; ") + m; };
  for (int i : sel) {
    Endpoint& ep = *pool_.l3s()[i];
    if (!ep.link->ready()) {
      note(fmt::format("{} is not connected ({})", ep.label(), ep.link->state_text()));
      continue;
    }
    if (Status s = ep.link->prepare(id, o.remote_payload, tmo); !s.ok())
      note(ep.label() + " refused: " + s.message);
    else
      prepared.push_back(i);
  }
  std::vector<int> committed;
  if (failure.empty())
    for (int i : prepared) {
      if (Status s = pool_.l3s()[i]->link->commit(id, tmo); !s.ok()) {
        note(pool_.l3s()[i]->label() + " could not commit: " + s.message);
        break;
      }
      committed.push_back(i);
    }
  if (failure.empty()) {
    *installed = committed;
    return Status::Ok();
  }
  // Nothing stays registered anywhere.
  for (int i : prepared) {
    const bool was_committed = std::find(committed.begin(), committed.end(), i) != committed.end();
    Status s = was_committed ? pool_.l3s()[i]->link->unregister(id, tmo) : pool_.l3s()[i]->link->abort(id, tmo);
    if (!s.ok())
      note(fmt::format("{} did not confirm the {}: {}", pool_.l3s()[i]->label(), was_committed ? "unregister" : "abort",
                       s.message));
  }
  return Status::Error(kWorkerChildFailed,
                       failure + (prepared.empty() ? "" : " (aborted on the peers that had prepared it)"));
}

Status CallableTable::remove(const CallableHandle& h) {
  std::vector<Endpoint*> targets;
  std::vector<int> remote;
  bool local = true;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    auto it = registry_.find(h.id.digest);
    if (it == registry_.end())
      return Status::Error(kWorkerNotRegistered, fmt::format("unregister: callable {} is not registered", h.id.hex()));
    remote = it->second.remote_installed;
    local = it->second.options.local;
    registry_.erase(it);  // new submits fail from here on
    tombstones_[h.id.digest] = "it was unregistered";
    if (!life_.initialized || life_.closed) return Status::Ok();
    if (local) targets = targets_for(h.abi);
  }
  Status first = control(CTRL_UNREGISTER, h.id.digest, {}, targets, nullptr);
  // Remote peers keep a tombstone: a task that arrives late fails naming it.
  for (int i : remote)
    if (Status s = pool_.l3s()[i]->link->unregister(h.id, cfg_.control_timeout_ms); !s.ok() && first.ok())
      first = Status::Error(s.code, fmt::format("{}: {}", pool_.l3s()[i]->label(), s.message));
  return first;
}

Result<bool> CallableTable::child_has(const CallableHandle& h, ChildKind kind, int index) {
  Result<bool> r;
  Endpoint* ep = nullptr;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    auto& list = kind == ChildKind::CHIP ? pool_.chips() : kind == ChildKind::SUB ? pool_.subs() : pool_.l3s();
    if (!life_.initialized || life_.closed || index < 0 || index >= static_cast<int>(list.size())) {
      r.status = Status::Error(kWorkerInvalidArgument, fmt::format("no running {} {}", kind_label(kind), index));
      return r;
    }
    ep = list[index].get();
  }
  uint32_t q = 0;
  r.status = control(CTRL_QUERY, h.id.digest, {}, {ep}, &q);
  r.value = q != 0;
  return r;
}

Status CallableTable::control(ControlOp op, const Digest& digest, std::vector<uint8_t> payload,
                              std::vector<Endpoint*> targets, uint32_t* query_result,
                              std::function<void()> on_success) {
  if (targets.empty()) {
    if (on_success) {
      std::lock_guard<std::mutex> g(lock_.mu);
      on_success();
    }
    return Status::Ok();
  }
  if (payload.size() > kMailboxBlobCapacity)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("control payload of {} bytes exceeds the mailbox", payload.size()));
  auto c = std::make_shared<ControlRequest>();
  c->op = op;
  c->digest = digest;
  c->payload = std::move(payload);
  c->targets = std::move(targets);
  c->sent.assign(c->targets.size(), 0);
  c->done.assign(c->targets.size(), 0);
  c->sent_ns.assign(c->targets.size(), 0);
  c->incarnation.assign(c->targets.size(), 0);
  c->created_ns = now_ns();
  c->on_success = std::move(on_success);
  std::unique_lock<std::mutex> lk(lock_.mu);
  if (life_.closed || !pool_.bell()) return Status::Error(kWorkerClosed, "control request after close()");
  sched_.add_control(c);
  ++sched_.controls_in_flight;
  pool_.bell()->ring();
  // The driver kills a target that does not answer within control_timeout_ms,
  // so the request finishes by then - unless every target stays busy with a
  // task (a registration waits for one acknowledgement, a query for its
  // child); the wait's own bound is a backstop.
  const auto backstop = std::chrono::milliseconds(2 * uint64_t(cfg_.control_timeout_ms) + 1000);
  const bool finished = c->cv.wait_for(lk, backstop, [&] { return c->finished; });
  --sched_.controls_in_flight;
  lock_.idle.notify_all();
  if (!finished) {
    c->abandoned = true;  // the scheduler rolls it back when it completes
    return Status::Error(kWorkerTimeout, fmt::format("the control request did not finish within {} ms ({})",
                                                     backstop.count(), sched_.pending_targets(*c)));
  }
  if (query_result) *query_result = c->query_result;
  if (!c->failure.empty()) {
    const bool rolled = c->rolling_back;
    return Status::Error(kWorkerChildFailed,
                         c->failure + (rolled ? " (rolled back on the children that installed it)" : ""));
  }
  return Status::Ok();
}

Status CallableTable::name(const std::string& name, const CallableHandle& h) {
  std::lock_guard<std::mutex> g(lock_.mu);
  if (name.empty()) return Status::Error(kWorkerInvalidArgument, "name_callable: empty name");
  if (!registry_.count(h.id.digest))
    return Status::Error(kWorkerNotRegistered, fmt::format("name_callable: callable {} is not registered", h.id.hex()));
  names_[name] = h;
  return Status::Ok();
}

CallableHandle CallableTable::find(const std::string& name) const {
  std::lock_guard<std::mutex> g(lock_.mu);
  auto it = names_.find(name);
  if (it != names_.end() && registry_.count(it->second.id.digest)) return it->second;
  CallableHandle h;
  h.status = Status::Error(kWorkerNotRegistered, fmt::format("no callable is registered under the name '{}'", name));
  return h;
}

}  // namespace pto
