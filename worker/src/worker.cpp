// pto::Worker: configuration, children (fork, replacement, shutdown),
// registration (captured before init, a control broadcast after), runs and
// asynchronous runs, the buffer arena. docs/worker.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "worker_impl.h"

namespace bip = boost::interprocess;

namespace pto {
namespace {

std::atomic<uint32_t> g_worker_serial{0};
constexpr const char* kShmPrefix = "pto-";

// Mailbox segments are named pto-<pid>-<serial>-<child>. Names are removed as
// soon as the segment is mapped (children inherit the mapping through fork),
// so only a crash inside init() can leave one; the next init() removes every
// segment whose creator is gone.
void sweep_stale_segments() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(kShmPrefix, 0) != 0) continue;
    const long pid = std::strtol(n.c_str() + 4, nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;
    bip::shared_memory_object::remove(n.c_str());
  }
}

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::SUCCESS: return "SUCCESS";
    case Outcome::TASK_FAILURE: return "TASK_FAILURE";
    case Outcome::ENDPOINT_FAILURE: return "ENDPOINT_FAILURE";
    case Outcome::SKIPPED: return "SKIPPED";
  }
  return "?";
}

const char* child_state_name(ChildState s) {
  switch (s) {
    case ChildState::NOT_STARTED: return "not-started";
    case ChildState::IDLE: return "idle";
    case ChildState::BUSY: return "busy";
    case ChildState::DEAD: return "dead";
    case ChildState::STOPPED: return "stopped";
  }
  return "?";
}

static const char* kind_label(ChildKind k) {
  return k == ChildKind::CHIP ? "chip" : k == ChildKind::SUB ? "sub" : "l3";
}
std::string ChildInfo::label() const { return fmt::format("{} {}", kind_label(kind), index); }
std::string Endpoint::label() const {
  return link ? fmt::format("{} {} ({})", kind_label(kind), index, link->label())
              : fmt::format("{} {}", kind_label(kind), index);
}

std::string TaskFailure::describe() const {
  return fmt::format("task {} ({}) {}{}: {}", task_id, callable.substr(0, 16), outcome_name(outcome),
                     worker.empty() ? "" : " on " + worker, message);
}

Status WorkerConfig::validate() const {
  auto bad = [](const std::string& m) { return Status::Error(kWorkerInvalidConfig, m); };
  if (level < 3) return bad(fmt::format("level {} is not a Worker level: the engine serves levels >= 3", level));
  if (num_chips < 0 || num_chips > 64) return bad(fmt::format("num_chips {} is outside 0..64", num_chips));
  if (num_sub_workers < 0 || num_sub_workers > 64)
    return bad(fmt::format("num_sub_workers {} is outside 0..64", num_sub_workers));
  if (level > 3 && num_chips != 0)
    return bad(
        fmt::format("num_chips {} at level {}: above level 3 the next-level children are L3 Workers "
                    "(add_next_level_worker)",
                    num_chips, level));
  if (platform != "a2a3sim") return bad(fmt::format("platform '{}' is unknown (known: a2a3sim)", platform));
  if (heap_ring_bytes < 4096 || heap_ring_bytes > (1ull << 40))
    return bad(fmt::format("heap_ring_bytes {} is outside 4096..2^40", heap_ring_bytes));
  if (buffer_arena_bytes < 4096 || buffer_arena_bytes > (1ull << 42))
    return bad(fmt::format("buffer_arena_bytes {} is outside 4096..2^42", buffer_arena_bytes));
  if (spin_us > 100000) return bad(fmt::format("spin_us {} is above 100000", spin_us));
  if (init_timeout_ms == 0 || control_timeout_ms == 0 || shutdown_timeout_ms == 0)
    return bad("init_timeout_ms, control_timeout_ms and shutdown_timeout_ms must be > 0");
  return Status::Ok();
}

// --- Worker facade ------------------------------------------------------------

Worker::Worker(const WorkerConfig& config) : impl_(std::make_unique<WorkerImpl>(config)) {}
Worker::~Worker() { (void)impl_->close(); }
Status Worker::add_next_level_worker(std::unique_ptr<Worker> inner) {
  return impl_->add_next_level_worker(std::move(inner));
}
Status Worker::add_remote_worker(std::shared_ptr<RemoteLink> link) { return impl_->add_remote_worker(std::move(link)); }
CallableHandle Worker::register_callable(const Callable& c) { return impl_->register_callable(c, {}); }
CallableHandle Worker::register_callable(const Callable& c, const CallableOptions& o) {
  return impl_->register_callable(c, o);
}
CallableHandle Worker::register_remote_callable(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o) {
  return impl_->register_remote_callable(id, abi, o);
}
Status Worker::unregister_callable(const CallableHandle& h) { return impl_->unregister_callable(h); }
Result<bool> Worker::child_has_callable(const CallableHandle& h, ChildKind kind, int index) {
  return impl_->child_has_callable(h, kind, index);
}
Status Worker::init() { return impl_->init(); }
RunResult Worker::run_function(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg) {
  return impl_->run(fn, args, cfg);
}
RunHandle Worker::submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg) {
  return impl_->submit(std::move(fn), std::move(args), cfg, {});
}
RunHandle Worker::submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                                  std::function<void(const RunResult&)> on_done) {
  return impl_->submit(std::move(fn), std::move(args), cfg, std::move(on_done));
}
Status Worker::close() { return impl_->close(); }
Result<ContinuousTensor> Worker::alloc(const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_buffer(shape, dtype);
}
Status Worker::free(const ContinuousTensor& t) { return impl_->free_buffer(t); }
Result<ContinuousTensor> Worker::alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_remote(worker, shape, dtype);
}
Status Worker::free_remote(const ContinuousTensor& t) { return impl_->free_remote(t); }
Status Worker::write_remote(const ContinuousTensor& t, const void* src) {
  return impl_->move_remote(t, const_cast<void*>(src), true);
}
Status Worker::read_remote(const ContinuousTensor& t, void* dst) { return impl_->move_remote(t, dst, false); }
std::vector<ChildInfo> Worker::children() const { return impl_->children(); }
WorkerStats Worker::stats() const { return impl_->stats(); }
Status Worker::name_callable(const std::string& name, const CallableHandle& h) { return impl_->name_callable(name, h); }
Worker::RunProgress Worker::progress() const { return impl_->progress(); }
bool Worker::cancel_run(const std::string& reason) { return impl_->cancel_run(reason); }
const WorkerConfig& Worker::config() const { return impl_->cfg_; }
bool Worker::initialized() const { return impl_->is_initialized(); }

bool RunHandle::done() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->done;
}
bool RunHandle::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lk(state_->mu);
  return state_->cv.wait_for(lk, timeout, [&] { return state_->done; });
}
const RunResult& RunHandle::result() const {
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  return state_->result;
}

// --- WorkerImpl ------------------------------------------------------------------

WorkerImpl::WorkerImpl(const WorkerConfig& cfg) : cfg_(cfg) {}

WorkerImpl::~WorkerImpl() { (void)close(); }

Status WorkerImpl::add_next_level_worker(std::unique_ptr<Worker> inner) {
  if (cfg_.level < 4)
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("add_next_level_worker on a level-{} Worker: only levels >= 4 have Worker children", cfg_.level));
  if (initialized_ || closed_) return Status::Error(kWorkerInvalidArgument, "add_next_level_worker after init()");
  if (!inner || inner->initialized())
    return Status::Error(kWorkerInvalidArgument, "add_next_level_worker needs a Worker that is not initialised");
  if (inner->config().level != cfg_.level - 1)
    return Status::Error(kWorkerInvalidArgument, fmt::format("a level-{} Worker cannot hold a level-{} child",
                                                             cfg_.level, inner->config().level));
  if (!links_.empty())
    return Status::Error(kWorkerInvalidArgument,
                         "add_next_level_worker after add_remote_worker: local L3 children come first");
  inner_.push_back(std::move(inner));
  return Status::Ok();
}

Status WorkerImpl::add_remote_worker(std::shared_ptr<RemoteLink> link) {
  if (cfg_.level < 4)
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("add_remote_worker on a level-{} Worker: remote L3 workers belong to levels >= 4", cfg_.level));
  if (initialized_ || closed_) return Status::Error(kWorkerInvalidArgument, "add_remote_worker after init()");
  if (!link) return Status::Error(kWorkerInvalidArgument, "add_remote_worker: null link");
  links_.push_back(std::move(link));
  return Status::Ok();
}

Status WorkerImpl::store_blob(Callable* c) {
  if (state_dir_.empty()) {
    if (!cfg_.state_dir.empty()) {
      state_dir_ = cfg_.state_dir;
    } else {
      const char* tmp = std::getenv("TMPDIR");
      std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/pto-worker-XXXXXX";
      if (!mkdtemp(tmpl.data()))
        return Status::Error(kWorkerInvalidConfig,
                             fmt::format("cannot create a state dir from {}: {}", tmpl, strerror(errno)));
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
  if (fd < 0) return Status::Error(kWorkerInvalidConfig, fmt::format("cannot write {}: {}", path, strerror(errno)));
  size_t off = 0;
  while (off < c->blob.size()) {
    const ssize_t w = ::write(fd, c->blob.data() + off, c->blob.size() - off);
    if (w <= 0) {
      ::close(fd);
      return Status::Error(kWorkerInvalidConfig, fmt::format("cannot write {}: {}", path, strerror(errno)));
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
std::vector<Endpoint*> WorkerImpl::targets_for(EntryAbi abi) {
  auto& list = abi == EntryAbi::SUB ? subs_ : cfg_.level == 3 ? chips_ : l3s_;
  std::vector<Endpoint*> out;
  for (auto& e : list)
    if (!e->is_remote()) out.push_back(e.get());
  return out;
}

CallableHandle WorkerImpl::register_callable(const Callable& c, const CallableOptions& o) {
  CallableHandle h;
  h.abi = c.abi;
  if (!c.status.ok()) {
    h.status = c.status;
    return h;
  }
  if (closed_) {
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
  if (remote && (!initialized_ || links_.empty() || c.abi == EntryAbi::SUB)) {
    h.status = Status::Error(kWorkerInvalidArgument,
                             !initialized_    ? "remote registration needs an initialised Worker (after init())"
                             : links_.empty() ? "remote registration on a Worker without remote workers"
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
    std::lock_guard<std::mutex> g(mu_);
    if (Status s = store_blob(&copy); !s.ok()) {
      h.status = s;
      return h;
    }
  }
  h.id = copy.identity();
  std::vector<Endpoint*> targets;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = registry_.find(h.id.digest);
    if (it != registry_.end()) return it->second.handle;
    if (!initialized_) {
      registry_[h.id.digest] = Registered{copy, h, o, nullptr, {}};
      return h;
    }
    if (copy.kind == CallableKind::FUNCTION) {
      h.status = Status::Error(kWorkerInvalidArgument,
                               fmt::format("function callable '{}' registered after init(): an in-process function "
                                           "cannot reach running children; register it before init() or use "
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
  std::lock_guard<std::mutex> g(mu_);
  registry_[h.id.digest] = Registered{copy, h, o, mask_of(o.local && !targets.empty(), copy.abi, installed), installed};
  tombstones_.erase(h.id.digest);
  return h;
}

CallableHandle WorkerImpl::register_remote_callable(const CallableIdentity& id, EntryAbi abi,
                                                    const CallableOptions& o) {
  CallableHandle h;
  h.id = id;
  h.id.target_namespace = TargetNamespace::REMOTE;
  h.abi = abi;
  if (closed_) {
    h.status = Status::Error(kWorkerClosed, "register_remote_callable after close()");
    return h;
  }
  if (!initialized_ || links_.empty() || o.remote_payload.empty() || abi == EntryAbi::SUB) {
    h.status = Status::Error(kWorkerInvalidArgument,
                             "register_remote_callable needs an initialised Worker with remote workers, a "
                             "remote_payload, and a next-level (chip or orchestration) callable");
    return h;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
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
  std::lock_guard<std::mutex> g(mu_);
  registry_[id.digest] = Registered{c, h, o, mask_of(false, abi, installed), installed};
  tombstones_.erase(id.digest);
  return h;
}

// Which next-level endpoints hold a callable: the local L3 children (when it
// was broadcast to them) and the remote workers it was committed on. Null
// means every endpoint of its kind (no remote workers involved).
std::shared_ptr<const std::vector<uint8_t>> WorkerImpl::mask_of(bool local, EntryAbi abi,
                                                                const std::vector<int>& remote) const {
  if (links_.empty() || abi == EntryAbi::SUB) return nullptr;
  auto m = std::make_shared<std::vector<uint8_t>>(l3s_.size(), 0);
  for (size_t i = 0; i < l3s_.size(); ++i)
    if (!l3s_[i]->is_remote()) (*m)[i] = local ? 1 : 0;
  for (int i : remote) (*m)[i] = 1;
  return m;
}

// Two-phase registration across the selected remote workers.
Status WorkerImpl::install_remote(const CallableIdentity& id, const CallableOptions& o, std::vector<int>* installed) {
  const int first = static_cast<int>(inner_.size());
  const int n = static_cast<int>(links_.size());
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
    Endpoint& ep = *l3s_[i];
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
      if (Status s = l3s_[i]->link->commit(id, tmo); !s.ok()) {
        note(l3s_[i]->label() + " could not commit: " + s.message);
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
    Status s = was_committed ? l3s_[i]->link->unregister(id, tmo) : l3s_[i]->link->abort(id, tmo);
    if (!s.ok())
      note(fmt::format("{} did not confirm the {}: {}", l3s_[i]->label(), was_committed ? "unregister" : "abort",
                       s.message));
  }
  return Status::Error(kWorkerChildFailed,
                       failure + (prepared.empty() ? "" : " (aborted on the peers that had prepared it)"));
}

Status WorkerImpl::unregister_callable(const CallableHandle& h) {
  std::vector<Endpoint*> targets;
  std::vector<int> remote;
  bool local = true;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = registry_.find(h.id.digest);
    if (it == registry_.end())
      return Status::Error(kWorkerNotRegistered, fmt::format("unregister: callable {} is not registered", h.id.hex()));
    remote = it->second.remote_installed;
    local = it->second.options.local;
    registry_.erase(it);  // new submits fail from here on
    tombstones_[h.id.digest] = "it was unregistered";
    if (!initialized_ || closed_) return Status::Ok();
    if (local) targets = targets_for(h.abi);
  }
  Status first = control(CTRL_UNREGISTER, h.id.digest, {}, targets, nullptr);
  // Remote peers keep a tombstone: a task that arrives late fails naming it.
  for (int i : remote)
    if (Status s = l3s_[i]->link->unregister(h.id, cfg_.control_timeout_ms); !s.ok() && first.ok())
      first = Status::Error(s.code, fmt::format("{}: {}", l3s_[i]->label(), s.message));
  return first;
}

Result<bool> WorkerImpl::child_has_callable(const CallableHandle& h, ChildKind kind, int index) {
  Result<bool> r;
  Endpoint* ep = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& list = kind == ChildKind::CHIP ? chips_ : kind == ChildKind::SUB ? subs_ : l3s_;
    if (!initialized_ || closed_ || index < 0 || index >= static_cast<int>(list.size())) {
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

Status WorkerImpl::control(ControlOp op, const Digest& digest, std::vector<uint8_t> payload,
                           std::vector<Endpoint*> targets, uint32_t* query_result, std::function<void()> on_success) {
  if (targets.empty()) {
    if (on_success) {
      std::lock_guard<std::mutex> g(mu_);
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
  c->on_success = std::move(on_success);
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_ || !bell_) return Status::Error(kWorkerClosed, "control request after close()");
  controls_.push_back(c);
  controls_queued_.store(static_cast<uint32_t>(controls_.size()), std::memory_order_release);
  ++controls_in_flight_;
  bell_->ring();
  // The driver kills a target that does not answer within control_timeout_ms,
  // so the request finishes by then; the wait's own bound is a backstop.
  const auto backstop = std::chrono::milliseconds(2 * uint64_t(cfg_.control_timeout_ms) + 1000);
  const bool finished = c->cv.wait_for(lk, backstop, [&] { return c->finished; });
  --controls_in_flight_;
  idle_cv_.notify_all();
  if (!finished) {
    c->abandoned = true;  // the scheduler rolls it back when it completes
    return Status::Error(kWorkerTimeout,
                         fmt::format("the control request did not finish within {} ms", backstop.count()));
  }
  if (query_result) *query_result = c->query_result;
  if (!c->failure.empty()) {
    const bool rolled = c->rolling_back;
    return Status::Error(kWorkerChildFailed,
                         c->failure + (rolled ? " (rolled back on the children that installed it)" : ""));
  }
  return Status::Ok();
}

Status WorkerImpl::fork_child(Endpoint& ep, bool replacement) {
  Mailbox* mb = ep.mb;
  mb->state.store(MB_IDLE, std::memory_order_relaxed);
  mb->child_parked.store(0, std::memory_order_relaxed);
  mb->clear_error();
  ep.running = nullptr;
  ep.in_control = false;
  ep.seq = 0;
  // PR_SET_PDEATHSIG fires when the forking *thread* ends; only the main
  // thread lives as long as the process. Children forked from another thread
  // watch their parent with a thread of their own instead (child.cpp).
  const bool from_main_thread = gettid() == getpid();
  std::fflush(nullptr);  // buffered output would otherwise be written twice
  pid_t pid;
  {
    auto regions = lock_shared_regions();  // the child must not inherit it locked
    pid = fork();
  }
  if (pid < 0) return Status::Error(kWorkerChildFailed, fmt::format("fork for {}: {}", ep.label(), strerror(errno)));
  if (pid == 0) child_main(ep, from_main_thread);
  ep.pid = pid;
  ep.reaped = false;
  if (replacement) ++ep.restarts;
  return Status::Ok();
}

Status WorkerImpl::await_ready(Endpoint& ep) {
  Mailbox* mb = ep.mb;
  const pid_t pid = ep.pid;
  const uint64_t deadline = now_ns() + uint64_t(cfg_.init_timeout_ms) * 1'000'000;
  for (;;) {
    const uint32_t s = mb->state.load(std::memory_order_acquire);
    int status = 0;
    if (s == MB_INIT_READY) {
      mb->state.store(MB_IDLE, std::memory_order_release);
      std::lock_guard<std::mutex> g(mu_);
      ep.alive = true;
      ep.death.clear();
      return Status::Ok();
    }
    if (s == MB_INIT_FAILED) {
      const std::string why = mb->error();
      waitpid(pid, &status, 0);  // it exits right after reporting
      ep.reaped = true;
      ep.death = "failed to start: " + why;
      return Status::Error(kWorkerChildFailed, fmt::format("{} failed to start: {}", ep.label(), why));
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ep.reaped = true;
      ep.death = "died during start-up";
      return Status::Error(kWorkerChildFailed,
                           fmt::format("{} (pid {}) died during start-up ({})", ep.label(), pid,
                                       WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                           : "exit " + std::to_string(WEXITSTATUS(status))));
    }
    if (now_ns() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ep.reaped = true;
      ep.death = "did not start in time";
      return Status::Error(kWorkerTimeout, fmt::format("{} did not report INIT_READY within {} ms (init_timeout_ms)",
                                                       ep.label(), cfg_.init_timeout_ms));
    }
    futex_wait_shared(&mb->state, s, 2'000'000);
  }
}

Status WorkerImpl::init() {
  if (closed_) return Status::Error(kWorkerClosed, "init after close()");
  if (initialized_) return Status::Error(kWorkerInvalidArgument, "init() called twice");
  if (Status s = cfg_.validate(); !s.ok()) return s;
  if (cfg_.level >= 4 && inner_.empty() && links_.empty() && cfg_.num_sub_workers == 0)
    return Status::Error(
        kWorkerInvalidConfig,
        "a level-4 Worker needs L3 children (add_next_level_worker, add_remote_worker) or sub workers");
  owner_pid_ = getpid();
  sweep_stale_segments();
  auto fail = [&](Status s) {
    initialized_ = true;  // let close() tear down what exists
    (void)close();
    return s;
  };
  for (int r = 0; r < kHeapRings; ++r) {
    if (Status s = rings_map_[r].map(cfg_.heap_ring_bytes, "a heap ring"); !s.ok()) return fail(s);
    rings_[r].attach(rings_map_[r].data(), cfg_.heap_ring_bytes);
  }
  if (Status s = arena_map_.map(cfg_.buffer_arena_bytes, "the buffer arena"); !s.ok()) return fail(s);
  arena_.attach(arena_map_.data(), cfg_.buffer_arena_bytes);
  if (Status s = bell_map_.map(4096, "the doorbell"); !s.ok()) return fail(s);
  remove_shared_region(bell_map_.data());  // not tensor memory
  bell_ = new (bell_map_.data()) SharedDoorbell();

  const uint32_t serial = g_worker_serial.fetch_add(1);
  auto make = [&](ChildKind kind, int n, std::vector<std::unique_ptr<Endpoint>>& list) -> Status {
    for (int i = 0; i < n; ++i) {
      auto ep = std::make_unique<Endpoint>();
      ep->kind = kind;
      ep->index = i;
      const std::string name = fmt::format("{}{}-{}-{}{}", kShmPrefix, getpid(), serial, kind_label(kind), i);
      try {
        bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
        shm.truncate(static_cast<bip::offset_t>(kMailboxBytes));
        ep->region = std::make_unique<bip::mapped_region>(shm, bip::read_write);
        bip::shared_memory_object::remove(name.c_str());
      } catch (const bip::interprocess_exception& e) {
        bip::shared_memory_object::remove(name.c_str());
        return Status::Error(kWorkerChildFailed,
                             fmt::format("mailbox {} for {} {}: {}", name, kind_label(kind), i, e.what()));
      }
      ep->mb = new (ep->region->get_address()) Mailbox();
      ep->transport = make_mailbox_transport(*this);
      list.push_back(std::move(ep));
    }
    return Status::Ok();
  };
  if (Status s = make(ChildKind::CHIP, cfg_.level == 3 ? cfg_.num_chips : 0, chips_); !s.ok()) return fail(s);
  if (Status s = make(ChildKind::SUB, cfg_.num_sub_workers, subs_); !s.ok()) return fail(s);
  if (Status s = make(ChildKind::L3, static_cast<int>(inner_.size()), l3s_); !s.ok()) return fail(s);
  if (!links_.empty()) {
    // Address space only (PROT_NONE, nothing backed): remote buffers get
    // placeholder addresses no real tensor can have.
    rbuf_size_ = 64ull << 30;
    void* p = mmap(nullptr, rbuf_size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return fail(Status::Error(kWorkerHeapExhausted, "cannot reserve the remote-buffer address range"));
    rbuf_base_ = rbuf_next_ = reinterpret_cast<uint64_t>(p);
  }
  for (auto& link : links_) {  // remote L3 workers follow the local ones
    auto ep = std::make_unique<Endpoint>();
    ep->kind = ChildKind::L3;
    ep->index = static_cast<int>(l3s_.size());
    ep->link = link;
    ep->transport = make_remote_transport(*this);
    l3s_.push_back(std::move(ep));
  }
  next_pinned_.assign(cfg_.level == 3 ? chips_.size() : l3s_.size(), {});
  Status fork_error;

  // Fork every child before any thread of ours exists (all at once, so they
  // prepare their callables in parallel), then wait for each.
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto* list : {&chips_, &subs_, &l3s_})
      for (auto& ep : *list)
        if (Status s = ep->is_remote() ? Status::Ok() : fork_child(*ep, false); !s.ok()) {
          fork_error = s;
          break;
        }
  }
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list)
      if (ep->pid > 0 && !ep->reaped)
        if (Status s = await_ready(*ep); !s.ok() && fork_error.ok()) fork_error = s;
  if (!fork_error.ok()) return fail(fork_error);
  initialized_ = true;
  start_scheduler();
  // Sessions to remote L3 workers: started now that every child is forked
  // (their threads must not exist at fork). A peer that is not READY within
  // remote_ready_timeout_ms does not fail init: its link keeps reconnecting
  // and the scheduler uses it once it is READY.
  for (auto& link : links_)
    if (Status s = link->start([this] {
          if (SharedDoorbell* b = bell_) b->ring();
        });
        !s.ok())
      return fail(s);
  const uint64_t deadline = now_ns() + uint64_t(cfg_.remote_ready_timeout_ms) * 1'000'000;
  for (auto& link : links_)
    while (!link->ready() && now_ns() < deadline) usleep(2000);
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& ep : l3s_)
      if (ep->is_remote()) ep->alive = ep->link->ready();
  }
  return Status::Ok();
}

void WorkerImpl::start_scheduler() {
  stop_.store(false, std::memory_order_release);
  scheduler_ = std::thread([this] { scheduler_main(); });
}

void WorkerImpl::stop_scheduler() {
  if (!scheduler_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  bell_->ring();
  scheduler_.join();
}

Status WorkerImpl::restart_dead_children() {
  std::vector<Endpoint*> dead;
  {
    std::unique_lock<std::mutex> lk(mu_);
    // A registration in flight must finish first: its targets are fixed.
    idle_cv_.wait_for(lk, std::chrono::milliseconds(cfg_.control_timeout_ms), [&] { return controls_in_flight_ == 0; });
    for (auto* list : {&chips_, &subs_, &l3s_})
      for (auto& ep : *list)
        if (!ep->alive && !ep->is_remote()) dead.push_back(ep.get());  // a link reconnects by itself
  }
  if (dead.empty()) return Status::Ok();
  // Fork only while no thread of ours runs: the child must not inherit a
  // half-held lock of the scheduler thread.
  stop_scheduler();
  Status first;
  {
    std::lock_guard<std::mutex> g(mu_);  // a consistent registry snapshot for the children
    for (Endpoint* ep : dead) {
      if (!ep->reaped && ep->pid > 0) {  // a kill whose reaping timed out
        int status;
        waitpid(ep->pid, &status, 0);
        ep->reaped = true;
      }
      if (Status s = fork_child(*ep, true); !s.ok() && first.ok()) first = s;
      ++stats_.child_restarts;
    }
  }
  for (Endpoint* ep : dead)
    if (ep->pid > 0 && !ep->reaped)
      if (Status s = await_ready(*ep); !s.ok() && first.ok()) first = s;
  start_scheduler();
  return first;
}

RunResult WorkerImpl::run(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg) {
  if (run_thread_.load() == std::this_thread::get_id()) {
    RunResult bad;
    bad.status = Status::Error(kWorkerInvalidArgument, "run() from inside an orchestration of the same Worker");
    return bad;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  run_thread_.store(std::this_thread::get_id());
  struct Clear {
    std::atomic<std::thread::id>& t;
    ~Clear() { t.store(std::thread::id()); }
  } clear{run_thread_};
  RunResult bad;
  if (closed_) {
    bad.status = Status::Error(kWorkerClosed, "run after close()");
    return bad;
  }
  if (!initialized_) {
    bad.status = Status::Error(kWorkerInvalidArgument, "run before init()");
    return bad;
  }
  if (!fn) {
    bad.status = Status::Error(kWorkerInvalidArgument, "run with an empty orchestration function");
    return bad;
  }
  if (Status s = restart_dead_children(); !s.ok()) {
    bad.status = Status::Error(s.code, "replacing a dead child: " + s.message);
    return bad;
  }
  const uint64_t t0 = now_ns();
  {
    std::lock_guard<std::mutex> g(mu_);
    run_ = RunResult{};
    cancelled_.clear();
    scopes_.assign(1, {});
    scope_depth_ = 0;
    in_run_ = true;
  }
  try {
    const int rc = fn(orch_, args.view(), cfg);
    if (rc != 0) {
      std::lock_guard<std::mutex> g(mu_);
      fail_run(Status::Error(kWorkerRunFailed, fmt::format("the orchestration function returned {}", rc)));
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> g(mu_);
    fail_run(Status::Error(kWorkerRunFailed, fmt::format("the orchestration function threw: {}", e.what())));
  } catch (...) {
    std::lock_guard<std::mutex> g(mu_);
    fail_run(Status::Error(kWorkerRunFailed, "the orchestration function threw a non-std exception"));
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (scopes_.size() > 1)
    fail_run(Status::Error(kWorkerInvalidArgument,
                           fmt::format("{} scope(s) left open by the orchestration function", scopes_.size() - 1)));
  while (!scopes_.empty()) {
    std::vector<Slot*> members = std::move(scopes_.back());
    scopes_.pop_back();
    for (Slot* s : members) unref(s);
  }
  // Every pending task ends: children are watched and tasks time out. This
  // thread drives the end of the run itself while completions come quickly:
  // a condition-variable wake-up from the scheduler thread costs more than a
  // short run.
  if (pending_.load() > 0) {
    lk.unlock();
    help_drain();
    lk.lock();
  }
  while (pending_ > 0) idle_cv_.wait_for(lk, std::chrono::milliseconds(100));
  in_run_ = false;
  ++stats_.runs;
  RunResult r = std::move(run_);
  r.wall_ns = now_ns() - t0;
  if (r.status.ok() && r.first_failure) r.status = Status::Error(kWorkerRunFailed, r.first_failure->describe());
  slots_.clear();
  tmap_.clear();
  next_any_.clear();
  sub_q_.clear();
  for (auto& q : next_pinned_) q.clear();
  queued_.store(0, std::memory_order_release);
  for (int i = 0; i < kHeapRings; ++i) {
    ring_allocs_[i].clear();
    rings_[i].reset();
  }
  allocs_.clear();
  next_task_id_ = 1;
  return r;
}

RunHandle WorkerImpl::submit(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                             std::function<void(const RunResult&)> on_done) {
  RunHandle h;
  h.state_ = std::make_shared<RunHandle::State>();
  h.state_->on_done = std::move(on_done);
  h.state_->fn = std::move(fn);
  h.state_->args = std::move(args);
  h.state_->cfg = cfg;
  std::lock_guard<std::mutex> g(async_mu_);
  if (closed_ || runner_stop_) {
    h.state_->result.status = Status::Error(kWorkerClosed, "submit after close()");
    h.state_->done = true;
    if (h.state_->on_done) h.state_->on_done(h.state_->result);
    return h;
  }
  if (!runner_.joinable()) {
    runner_ = std::thread([this] {
      std::unique_lock<std::mutex> lk(async_mu_);
      for (;;) {
        if (async_q_.empty() && !runner_stop_) {
          // Runs that follow each other (a remote session's tasks) find
          // this thread awake: spin spin_us before sleeping on the condition.
          lk.unlock();
          const uint64_t t0 = now_ns();
          uint32_t spins = 0;
          while (async_queued_.load(std::memory_order_acquire) == 0 && now_ns() - t0 < uint64_t(cfg_.spin_us) * 1000)
            spin_step(spins);
          lk.lock();
        }
        async_cv_.wait(lk, [&] { return runner_stop_ || !async_q_.empty(); });
        if (async_q_.empty()) return;  // stopping and drained
        auto st = async_q_.front();
        async_q_.pop_front();
        async_queued_.fetch_sub(1, std::memory_order_release);
        lk.unlock();
        RunResult r = run(st->fn, st->args, st->cfg);
        if (st->on_done) st->on_done(r);
        {
          std::lock_guard<std::mutex> g2(st->mu);
          st->result = std::move(r);
          st->done = true;
        }
        st->cv.notify_all();
        lk.lock();
      }
    });
  }
  async_q_.push_back(h.state_);
  async_queued_.fetch_add(1, std::memory_order_release);
  async_cv_.notify_one();
  return h;
}

Status WorkerImpl::close() {
  // Children hold a copy of this object; only the process that init()ed it
  // may stop the children. In another process (a fork of the owner) the
  // thread objects name threads that do not exist there: let them go.
  if (initialized_ && owner_pid_ != getpid()) {
    if (scheduler_.joinable()) scheduler_.detach();
    if (runner_.joinable()) runner_.detach();
    return Status::Ok();
  }
  if (run_thread_.load() == std::this_thread::get_id())
    return Status::Error(kWorkerInvalidArgument, "close() from inside an orchestration: return from it first");
  std::lock_guard<std::mutex> close_lock(close_mu_);
  {
    std::lock_guard<std::mutex> g(async_mu_);
    runner_stop_ = true;
  }
  async_cv_.notify_all();
  if (runner_.joinable()) runner_.join();  // queued runs still execute; each is bounded
  std::lock_guard<std::mutex> run_lock(run_mu_);
  if (closed_) return Status::Ok();
  {
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
    // Registration requests still queued fail now rather than at their timeout.
    for (auto& c : controls_) {
      c->failure = "the Worker was closed";
      c->finished = true;
      c->cv.notify_all();
    }
    controls_.clear();
    controls_queued_.store(0, std::memory_order_release);
  }
  if (!initialized_) {
    for (auto& l : links_) l->stop();
    return Status::Ok();
  }
  stop_scheduler();
  for (auto& l : links_) l->stop();  // SHUTDOWN frames; their sessions end
  // SHUTDOWN to every live child, then reap within the bound, then SIGKILL.
  std::vector<Endpoint*> all;
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list)
      if (!ep->is_remote() && ep->pid > 0 && !ep->reaped) all.push_back(ep.get());
  for (Endpoint* ep : all) {
    if (!ep->alive) continue;
    ep->mb->state.store(MB_SHUTDOWN, std::memory_order_seq_cst);
    futex_wake_shared(&ep->mb->state);
  }
  const uint64_t deadline = now_ns() + uint64_t(cfg_.shutdown_timeout_ms) * 1'000'000;
  std::string stuck;
  for (Endpoint* ep : all) {
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(ep->pid, &status, WNOHANG);
      if (r == ep->pid || r < 0) break;
      if (now_ns() > deadline || !ep->alive) {
        kill(ep->pid, SIGKILL);
        waitpid(ep->pid, &status, 0);
        if (ep->alive) stuck += (stuck.empty() ? "" : ", ") + ep->label();
        break;
      }
      usleep(500);
    }
    ep->alive = false;
    ep->reaped = true;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto* list : {&chips_, &subs_, &l3s_}) list->clear();  // unmaps the mailboxes
    bell_ = nullptr;
  }
  for (auto& m : rings_map_) m.reset();
  arena_map_.reset();
  if (rbuf_base_) munmap(reinterpret_cast<void*>(rbuf_base_), rbuf_size_);
  rbuf_base_ = 0;
  bell_map_.reset();
  if (own_state_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(state_dir_, ec);
  }
  if (!stuck.empty())
    return Status::Error(kWorkerTimeout,
                         fmt::format("{} did not stop within {} ms and were killed", stuck, cfg_.shutdown_timeout_ms));
  return Status::Ok();
}

Result<ContinuousTensor> WorkerImpl::alloc_buffer(const std::vector<uint32_t>& shape, int32_t dtype) {
  Result<ContinuousTensor> r;
  if (!initialized_ || closed_) {
    r.status = Status::Error(closed_ ? kWorkerClosed : kWorkerInvalidArgument,
                             "Worker::alloc needs an initialised, open Worker (the arena is mapped by init())");
    return r;
  }
  if (shape.size() > PTO_TENSOR_MAX_DIMS || pto2_dtype_size(dtype) == 0) {
    r.status = Status::Error(kWorkerInvalidArgument, fmt::format("alloc: {} dims (at most {}) and dtype {} (must be a "
                                                                 "PTO2DataType)",
                                                                 shape.size(), PTO_TENSOR_MAX_DIMS, dtype));
    return r;
  }
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  uint8_t* p = nullptr;
  if (Status s = arena_.alloc(std::max<uint64_t>(tensor_bytes(t), 1), &p); !s.ok()) {
    r.status = s;
    return r;
  }
  t.data = reinterpret_cast<uint64_t>(p);
  r.value = t;
  return r;
}

Status WorkerImpl::free_buffer(const ContinuousTensor& t) {
  if (!initialized_ || closed_) return Status::Error(kWorkerClosed, "Worker::free on a closed or uninitialised Worker");
  return arena_.free(reinterpret_cast<const void*>(t.data));
}

Status WorkerImpl::name_callable(const std::string& name, const CallableHandle& h) {
  std::lock_guard<std::mutex> g(mu_);
  if (name.empty()) return Status::Error(kWorkerInvalidArgument, "name_callable: empty name");
  if (!registry_.count(h.id.digest))
    return Status::Error(kWorkerNotRegistered, fmt::format("name_callable: callable {} is not registered", h.id.hex()));
  names_[name] = h;
  return Status::Ok();
}

CallableHandle WorkerImpl::find_callable(const std::string& name) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = names_.find(name);
  if (it != names_.end() && registry_.count(it->second.id.digest)) return it->second;
  CallableHandle h;
  h.status = Status::Error(kWorkerNotRegistered, fmt::format("no callable is registered under the name '{}'", name));
  return h;
}

Worker::RunProgress WorkerImpl::progress() const {
  std::lock_guard<std::mutex> g(mu_);
  Worker::RunProgress p;
  p.running = in_run_;
  if (in_run_) {
    p.submitted = run_.tasks_submitted;
    p.finished = run_.tasks_succeeded + run_.tasks_failed + run_.tasks_skipped;
  }
  return p;
}

bool WorkerImpl::cancel_run(const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  if (!in_run_ || !cancelled_.empty()) return false;
  cancelled_ = reason.empty() ? "cancelled" : reason;
  fail_run(Status::Error(kWorkerCancelled, "cancelled: " + cancelled_));
  // Ready tasks not yet launched end now; tasks still waiting on producers
  // end when they become ready (make_ready).
  std::vector<Slot*> ready;
  for (auto* q : {&next_any_, &sub_q_}) {
    ready.insert(ready.end(), q->begin(), q->end());
    q->clear();
  }
  for (auto& q : next_pinned_) {
    ready.insert(ready.end(), q.begin(), q.end());
    q.clear();
  }
  queued_.store(0, std::memory_order_release);
  for (Slot* s : ready) {
    s->failure = TaskFailure{s->id, s->callable.hex(), "", Outcome::SKIPPED, "cancelled: " + cancelled_};
    s->members_left = 0;
    finalize(s, Outcome::SKIPPED);
  }
  return true;
}

WorkerStats WorkerImpl::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  WorkerStats s = stats_;
  s.ready_queue_depth = next_any_.size() + sub_q_.size();
  for (const auto& q : next_pinned_) s.ready_queue_depth += q.size();
  s.tasks_in_flight = running_;
  s.heap_ring_bytes = cfg_.heap_ring_bytes;
  for (int i = 0; i < kHeapRings; ++i) s.heap_ring_used[i] = rings_[i].used();
  s.arena_bytes = cfg_.buffer_arena_bytes;
  s.arena_in_use = initialized_ && !closed_ ? arena_.bytes_in_use() : 0;
  return s;
}

std::vector<ChildInfo> WorkerImpl::children() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<ChildInfo> out;
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list) {
      ChildInfo c;
      c.kind = ep->kind;
      c.index = ep->index;
      c.pid = ep->pid;
      c.tasks_run = ep->tasks_run;
      c.restarts = ep->restarts;
      c.state = closed_                                            ? ChildState::STOPPED
                : !ep->alive                                       ? ChildState::DEAD
                : (ep->transport->held(*ep) > 0 || ep->in_control) ? ChildState::BUSY
                                                                   : ChildState::IDLE;
      // A local L3 child's own children, as it last reported them.
      std::vector<ChildInfo> inner;
      if (ep->kind == ChildKind::L3 && !ep->is_remote() && ep->mb && ep->mb->inner.read(&inner))
        for (const ChildInfo& k : inner)
          c.peer_children.push_back(
              {k.label(), child_state_name(k.state), k.pid, k.tasks_run, k.kind == ChildKind::CHIP ? 2 : 0});
      if (ep->is_remote()) {
        c.remote = true;
        c.address = ep->link->label();
        c.state_text = ep->link->state_text();
        c.in_flight = ep->transport->held(*ep);
        c.credits = ep->link->credits();
        c.peer_children = ep->link->peer_children();
      }
      out.push_back(c);
    }
  return out;
}

}  // namespace pto
