#include "daemon.h"

#include <fmt/format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <asio.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "callable_registry.h"
#include "fd_transfers.h"
#include "health_service.h"
#include "idle_trim.h"
#include "job_manager.h"
#include "log.h"
#include "metrics.h"
#include "pto/base/cpu_set.h"
#include "pto/base/freed_memory.h"
#include "pto/version.h"
#include "remote_link.h"
#include "services.h"
#include "session_service.h"
#include "state_db.h"
#include "state_dir.h"
#include "tensor_store.h"
#include "unix_listener.h"

namespace ptod {
namespace {

std::string read_file(const std::string& path, Status* st) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *st = Status::Error(pto::kInvalidConfig, fmt::format("cannot read '{}'", path));
    return {};
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The TLS listeners admit a call only with a bearer token the daemon knows
// ([server] token_file or one of tokens_file); which principal it names is
// decided per call (Principals). The unix socket and loopback are protected
// by file permissions and the host.
class TokenAuth : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuth(const DaemonConfig& cfg) {
    if (!cfg.token.empty()) expected_.push_back("Bearer " + cfg.token);
    for (const auto& t : cfg.named_tokens) expected_.push_back("Bearer " + t.token);
  }
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& md, grpc::AuthContext*, OutputMetadata*, OutputMetadata*) override {
    auto it = md.find("authorization");
    bool known = false;
    if (it != md.end())
      for (const std::string& e : expected_)  // every one compared, each in constant time
        known |= it->second.size() == e.size() && CRYPTO_memcmp(it->second.data(), e.data(), e.size()) == 0;
    if (!known)
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this listener needs 'authorization: Bearer <token>' (a token of the daemon's [server] "
                          "token_file or tokens_file)");
    return grpc::Status::OK;
  }

 private:
  std::vector<std::string> expected_;
};

int fail(const std::string& m) {
  std::fprintf(stderr, "ptod: %s\n", m.c_str());
  return 1;
}

Status check_last_stop(StateDb& db, bool* drop_unsynced);

// Before anything else: the config holds, the logs are open, the state
// directory exists and is this daemon's alone (its lock), and the socket's
// path is free or stale. Uploaded code lives in the state directory, so only
// this user may read it.
Status prepare(DaemonConfig& cfg, StateDirLock& lock, SocketPath& socket, SocketPath& fd_socket, StateDb& db,
               bool* drop_unsynced) {
  if (Status s = cfg.validate(); !s.ok()) return s;
  // Placed before its own threads start: they, its runners and (without
  // [worker] child_cpus) its children inherit the mask; a library's thread
  // already running is moved.
  if (!cfg.cpus.empty())
    if (Status s = pto::run_process_on_cpus(cfg.cpus); !s.ok())
      return Status::Error(s.code, "[daemon] cpus: " + s.message);
  if (Status s = setup_logging(cfg.log_level, cfg.log_file, cfg.log_target); !s.ok()) return s;
  if (!cfg.cpus.empty()) log("main")->info("ptod runs on CPUs {}", pto::format_cpu_list(cfg.cpus));
  // Before gRPC's threads allocate (docs/daemon.md, "Memory ptod keeps").
  // Only a speed: under another allocator ptod runs on, and says so.
  if (Status s = pto::keep_freed_memory(cfg.malloc_keep_bytes); !s.ok())
    log("main")->warn("[daemon] malloc_keep_bytes = {} not applied: {}", cfg.malloc_keep_bytes, s.message);
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/callables", ec);
  if (!ec) std::filesystem::create_directories(cfg.state_dir + "/traces", ec);
  if (!ec) std::filesystem::create_directories(cfg.state_dir + "/logs", ec);
  if (ec)
    return Status::Error(pto::kInvalidConfig, fmt::format("[daemon] state_dir '{}': {}", cfg.state_dir, ec.message()));
  chmod(cfg.state_dir.c_str(), 0700);
  chmod((cfg.state_dir + "/callables").c_str(), 0700);
  chmod((cfg.state_dir + "/traces").c_str(), 0700);
  chmod((cfg.state_dir + "/logs").c_str(), 0700);
  if (Status s = lock.acquire(cfg.state_dir); !s.ok()) return s;
  if (Status s = db.open(cfg.state_dir, cfg.durable); !s.ok()) return s;
  if (!cfg.socket.empty()) {
    std::filesystem::create_directories(std::filesystem::path(cfg.socket).parent_path(), ec);
    if (Status s = socket.claim(cfg.socket); !s.ok()) return s;
    if (Status s = fd_socket.claim(fd_socket_path(cfg.socket)); !s.ok()) return s;
  }
  return check_last_stop(db, drop_unsynced);
}

// Did the host restart since the last daemon ran, without that daemon
// stopping cleanly (which writes every tensor to disk)? Then tensor bytes
// that were never fsynced may be lost, and those tensors are dropped rather
// than served wrong. A crash of ptod alone loses nothing: the page cache
// holds the arena file's bytes.
Status check_last_stop(StateDb& db, bool* drop_unsynced) {
  std::string boot, last_boot, clean;
  {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
  }
  if (Status s = db.get_meta("boot_id", &last_boot); !s.ok()) return s;
  if (Status s = db.get_meta("clean_stop", &clean); !s.ok()) return s;
  *drop_unsynced = !last_boot.empty() && last_boot != boot && clean != "1";
  if (*drop_unsynced)
    log("main")->warn(
        "the host restarted since the last daemon ran, which did not stop cleanly: tensors whose bytes "
        "were not fsynced are dropped ([daemon] durable = true keeps them)");
  if (Status s = db.set_meta("boot_id", boot); !s.ok()) return s;
  return db.set_meta("clean_stop", "0");
}

// The state the last daemon left, in dependency order: tensors (at their
// places in the arena file), registrations (each checked against its
// digest), then stored files no registration names are removed, then the job
// records.
Status restore_state(const DaemonConfig& cfg, bool drop_unsynced, TensorStore& tensors, CallableRegistry& registry,
                     JobManager& jobs) {
  if (Status s = tensors.restore(drop_unsynced); !s.ok()) return s;
  std::set<std::string> in_use;
  if (Status s = registry.restore(&in_use); !s.ok()) return s;
  if (size_t n = remove_unreferenced_bundles(cfg.state_dir + "/callables", in_use); n > 0)
    log("main")->info("removed {} stored callable file(s) that no registration names", n);
  return jobs.restore();
}

pto::WorkerConfig worker_config(const DaemonConfig& cfg) {
  pto::WorkerConfig wc;
  wc.level = cfg.level;
  wc.num_chips = cfg.level == 3 ? cfg.chips : 0;
  wc.platform = cfg.platform;
  wc.num_sub_workers = cfg.sub_workers;
  wc.heap_ring_bytes = cfg.heap_ring_bytes;
  wc.buffer_arena_bytes = cfg.arena_bytes;
  wc.arena_warm_bytes = cfg.arena_warm_bytes;
  wc.task_timeout_ms = cfg.task_timeout_ms;
  wc.spin_us = cfg.spin_us;
  wc.state_dir = cfg.state_dir + "/worker";
  wc.arena_file = cfg.state_dir + "/arena";  // tensors outlive the process (docs/daemon.md, "State")
  wc.name = "ptod";
  wc.remote_ready_timeout_ms = cfg.peer_ready_timeout_ms;
  wc.max_concurrent_runs = static_cast<int>(cfg.max_running);
  wc.shutdown_timeout_ms = 500;  // part of the drain's bound (drain_and_stop)
  wc.liveness_timeout_ms = cfg.liveness_timeout_ms;
  wc.child_cpus = cfg.child_cpus;
  return wc;
}

// Level 4: local L3 children (each an L3 Worker with its own chips and sub
// workers), then one remote L3 worker per [[peers]] entry; init() forks the
// children, so no thread may exist yet.
Status start_worker(const DaemonConfig& cfg, const pto::WorkerConfig& wc, pto::Worker& worker) {
  for (int i = 0; i < cfg.l3_children; ++i) {
    pto::WorkerConfig ic = wc;
    ic.level = 3;
    ic.num_chips = cfg.chips;
    ic.state_dir = fmt::format("{}/worker-l3-{}", cfg.state_dir, i);
    ic.name = fmt::format("ptod-l3-{}", i);
    if (Status s = worker.add_next_level_worker(std::make_unique<pto::Worker>(ic)); !s.ok())
      return Status::Error(s.code, "[worker] l3_children: " + s.message);
  }
  for (size_t i = 0; i < cfg.peers.size(); ++i)
    if (Status s = worker.add_remote_worker(
            std::make_shared<GrpcRemoteLink>(cfg.peers[i], static_cast<uint32_t>(cfg.l3_children + i), cfg));
        !s.ok())
      return Status::Error(s.code, "[[peers]]: " + s.message);
  if (Status s = worker.init(); !s.ok()) return Status::Error(s.code, "starting the Worker: " + s.message);
  if (cfg.level == 3) {
    log("main")->info("worker up: {} chip(s), {} sub worker(s){}", cfg.chips, cfg.sub_workers,
                      cfg.child_cpus.empty() ? "" : ", on CPUs " + pto::format_cpu_list(cfg.child_cpus));
  } else {
    int ready = 0;
    for (const pto::ChildInfo& c : worker.children()) ready += c.remote && c.state != pto::ChildState::DEAD;
    log("main")->info("level-4 worker up: {} local L3 child(ren), {} peer(s) ({} ready), {} sub worker(s){}",
                      cfg.l3_children, cfg.peers.size(), ready, cfg.sub_workers,
                      cfg.child_cpus.empty() ? "" : ", local children on CPUs " + pto::format_cpu_list(cfg.child_cpus));
  }
  return Status::Ok();
}

// The gRPC services, over the daemon's parts.
struct Services {
  explicit Services(const DaemonParts& p)
      : registry(p),
        tensors(p),
        jobs(p),
        node(p),
        session(p),
        health({"pto.v1.Registry", "pto.v1.Tensors", "pto.v1.Jobs", "pto.v1.Node", "pto.v1.Session"}) {}
  RegistryService registry;
  TensorsService tensors;
  JobsService jobs;
  NodeService node;
  SessionService session;
  HealthService health;
};

// A TCP listener's credentials: TLS with the token check when configured.
std::shared_ptr<grpc::ServerCredentials> listener_credentials(const DaemonConfig& cfg, Status* st) {
  if (cfg.tls_cert.empty()) return grpc::InsecureServerCredentials();  // validate(): loopback only
  grpc::SslServerCredentialsOptions o(cfg.tls_client_ca.empty()
                                          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair kp{read_file(cfg.tls_key, st), read_file(cfg.tls_cert, st)};
  if (!cfg.tls_client_ca.empty()) o.pem_root_certs = read_file(cfg.tls_client_ca, st);
  if (!st->ok()) return nullptr;
  o.pem_key_cert_pairs.push_back(kp);
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(o);
  if (!cfg.token.empty() || !cfg.named_tokens.empty())
    creds->SetAuthMetadataProcessor(std::make_shared<TokenAuth>(cfg));
  return creds;
}

// Binds every listener and starts serving; (*ports)[i] is the port listen[i]
// bound. On a bind error *server may be running: the caller's return stops it.
Status start_server(const DaemonConfig& cfg, Services& svc, std::unique_ptr<grpc::Server>* server,
                    std::vector<int>* ports) {
  // Not gRPC's built-in health service: it is a callback service (see
  // health_service.h). Ours is registered below; reflection serves its
  // descriptors, so grpcurl can call grpc.health.v1.Health/Check.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Bounded threads: a flood of Watch streams cannot grow the daemon without limit.
  grpc::ResourceQuota quota("ptod");
  quota.SetMaxThreads(128);
  builder.SetResourceQuota(quota);
  // Up to 16 idle threads stay, polling, between calls. With gRPC's default
  // (2) every thread beyond two that finishes a call exits, and the next
  // burst of calls creates it again: with 8 clients each waiting on its job
  // the daemon created a thread for about every second call, and the stacks'
  // mapping and unmapping (TLB shootdowns across the vCPUs) cost it a third
  // of its throughput (docs/daemon.md, "Figures").
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 16);
  // Accept the clients' keepalive pings (every 30 s) that bound their Watch streams.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(static_cast<int>(cfg.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(cfg.max_message_bytes));
  ports->assign(cfg.listen.size(), 0);
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    Status st;
    std::shared_ptr<grpc::ServerCredentials> creds = listener_credentials(cfg, &st);
    if (!st.ok()) return Status::Error(st.code, "[server] " + st.message);
    builder.AddListeningPort(cfg.listen[i], creds, &(*ports)[i]);
  }
  builder.RegisterService(&svc.registry);
  builder.RegisterService(&svc.tensors);
  builder.RegisterService(&svc.jobs);
  builder.RegisterService(&svc.node);
  builder.RegisterService(&svc.session);
  builder.RegisterService(&svc.health);
  *server = builder.BuildAndStart();
  if (!*server)
    return Status::Error(pto::kInvalidConfig,
                         "cannot start the gRPC server: a listener could not be bound (address in use or not "
                         "permitted?)");
  for (size_t i = 0; i < cfg.listen.size(); ++i)
    if ((*ports)[i] == 0) return Status::Error(pto::kInvalidConfig, fmt::format("cannot listen on {}", cfg.listen[i]));
  return Status::Ok();
}

Status start_metrics(const DaemonConfig& cfg, pto::Worker& worker, JobManager& jobs, const pto::RunnerPool& runners,
                     const FdTransfers& fd_transfers, std::unique_ptr<MetricsServer>* metrics) {
  if (cfg.metrics_listen.empty()) return Status::Ok();
  std::string host;
  int port = 0;
  (void)split_host_port(cfg.metrics_listen, &host, &port);
  Status st;
  *metrics = MetricsServer::start(
      host, port,
      [w = &worker, j = &jobs, r = &runners, f = &fd_transfers, has_fd = !cfg.socket.empty()] {
        const FdSocketCounts fd = f->counts();
        return render_metrics(*w, *j, *r, has_fd ? &fd : nullptr);
      },
      &st);
  return st;
}

// Where the daemon serves: in the log, in the ready file, and to systemd (READY).
void announce(const DaemonConfig& cfg, const RunOptions& opts, const std::vector<int>& ports,
              const MetricsServer* metrics) {
  std::string where = cfg.socket.empty() ? "" : "unix:" + cfg.socket;
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    std::string host;
    int port = 0;
    (void)split_host_port(cfg.listen[i], &host, &port);
    where += fmt::format("{}{}:{}", where.empty() ? "" : ", ", host, ports[i]);
  }
  log("main")->info("ptod {} serving on {}{}", PTO_VERSION_STRING, where,
                    metrics
                        ? fmt::format("; metrics on {}:{}", cfg.metrics_listen.substr(0, cfg.metrics_listen.rfind(':')),
                                      metrics->bound_port())
                        : "");
  if (!opts.ready_file.empty()) {
    const std::string tmp = opts.ready_file + ".tmp";
    {
      std::ofstream f(tmp);
      f << "grpc_port=" << (ports.empty() ? 0 : ports[0]) << "\nmetrics_port=" << (metrics ? metrics->bound_port() : 0)
        << "\nsocket=" << cfg.socket << "\npid=" << getpid() << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, opts.ready_file, ec);
  }
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s with %d chip(s), %d sub worker(s)\nMAINPID=%d", where.c_str(), cfg.chips,
             cfg.sub_workers, getpid());
}

// Signals, the systemd watchdog and the idle trim, on this thread, until SIGTERM or SIGINT.
void serve_until_signal(const DaemonConfig& cfg, asio::io_context& io, asio::signal_set& signals) {
  auto main_log = log("main");
  std::function<void(const std::error_code&, int)> on_signal;
  bool stopping = false;
  on_signal = [&](const std::error_code& e, int sig) {
    if (e) return;
    if (sig == SIGHUP) {
      main_log->info("SIGHUP: reopening logs");
      if (Status s = setup_logging(cfg.log_level, cfg.log_file, cfg.log_target); !s.ok())
        main_log->error("{}", s.message);
      signals.async_wait(on_signal);
      return;
    }
    if (stopping) return;
    stopping = true;
    main_log->info("{}: draining (up to {} s for running jobs)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                   cfg.drain_timeout_s);
    io.stop();
  };
  signals.async_wait(on_signal);
  uint64_t watchdog_usec = 0;
  asio::steady_timer watchdog(io);
  std::function<void(const std::error_code&)> on_watchdog = [&](const std::error_code& e) {
    if (e) return;
    sd_notify(0, "WATCHDOG=1");
    watchdog.expires_after(std::chrono::microseconds(watchdog_usec / 2));
    watchdog.async_wait(on_watchdog);
  };
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    watchdog.expires_after(std::chrono::microseconds(watchdog_usec / 2));
    watchdog.async_wait(on_watchdog);
  }
  start_idle_trim(io, std::chrono::seconds(cfg.malloc_idle_trim_s));
  io.run();
}

// Drain: refuse new work, let the running jobs finish (bounded), stop. The
// whole stop takes at most drain_timeout_s + 2 s, whatever user code does:
// user code runs in children and runners, which are killed; every later
// step has its own short bound; and a backstop ends the process if a step
// still overran.
void drain_and_stop(const DaemonParts& parts, SessionService& sessions, HealthService& health, grpc::Server& server,
                    UnixListener& unix, FdTransfers& fd_transfers, std::unique_ptr<MetricsServer>& metrics,
                    TensorStore& tensors, StateDb& db) {
  auto main_log = log("main");
  const DaemonConfig& cfg = parts.cfg;
  const auto hard_end =
      std::chrono::steady_clock::now() + std::chrono::seconds(cfg.drain_timeout_s) + std::chrono::milliseconds(1900);
  std::thread([hard_end] {
    std::this_thread::sleep_until(hard_end);
    log("main")->error("the drain overran its bound (drain_timeout_s + 2 s): exiting now");
    std::fflush(nullptr);
    _exit(1);  // children and runners notice the parent's end within 100 ms
  }).detach();
  parts.draining = true;
  health.set_serving(false);
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  parts.jobs.start_drain("the daemon is shutting down");
  if (!parts.jobs.wait_idle(std::chrono::seconds(cfg.drain_timeout_s))) {
    main_log->warn("running jobs did not finish within {} s: cancelling them", cfg.drain_timeout_s);
    parts.jobs.cancel_running("the daemon's drain time ran out");
    (void)parts.jobs.wait_idle(std::chrono::milliseconds(500));
  }
  // Stop the job manager first: callers waiting on a job (Watch, Submit or
  // Result with a wait) then return at once, so the server's shutdown does
  // not wait for their deadlines.
  parts.jobs.stop(std::chrono::milliseconds(300));
  sessions.shutdown_all("the peer is shutting down");
  health.shutdown();  // its Watch streams end now, not at the shutdown's deadline
  unix.stop();
  fd_transfers.stop();
  server.Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  metrics.reset();
  // A clean stop: every tensor's bytes are on disk, so a power loss from
  // here on loses none of them.
  const bool synced = tensors.sync_all();
  // gRPC lets go of a download's last slices over the arena as it tears the
  // connections down: the arena is unmapped under none of them.
  if (!tensors.wait_lent(std::chrono::seconds(5)))
    main_log->warn("gRPC still holds pages of a download 5 s after the server stopped; closing anyway");
  if (!sessions.wait_lent(std::chrono::seconds(5)))
    main_log->warn("gRPC still holds pages of a remote buffer 5 s after the server stopped; closing anyway");
  if (Status s = parts.worker.close(); !s.ok()) main_log->warn("closing the Worker: {}", s.message);
  if (synced) (void)db.set_meta("clean_stop", "1");
  main_log->info("stopped");
}

}  // namespace

int run_daemon(DaemonConfig cfg, const RunOptions& opts) {
  StateDirLock state_lock;
  SocketPath socket, fd_socket;
  StateDb db;
  bool drop_unsynced = false;
  if (Status s = prepare(cfg, state_lock, socket, fd_socket, db, &drop_unsynced); !s.ok()) return fail(s.message);

  // The Worker forks its children now, before gRPC, Asio or the job runner
  // start any thread.
  const pto::WorkerConfig wc = worker_config(cfg);
  pto::Worker worker(wc);
  if (Status s = start_worker(cfg, wc, worker); !s.ok()) return fail(s.message);

  TensorStore tensors(worker, cfg, db);
  pto::RunnerConfig rcfg;
  rcfg.load_timeout_ms = cfg.runner_load_timeout_ms;
  rcfg.liveness_timeout_ms = cfg.liveness_timeout_ms;
  rcfg.spin_us = std::min<uint32_t>(cfg.spin_us, 50);
  rcfg.idle_ms = cfg.runner_idle_ms;
  rcfg.max_idle = cfg.runner_max_idle;
  pto::RunnerPool runners(rcfg);
  CallableRegistry registry(worker, runners, cfg, db);
  JobManager jobs(worker, tensors, runners, cfg, db);
  if (Status s = restore_state(cfg, drop_unsynced, tensors, registry, jobs); !s.ok()) return fail(s.message);
  std::atomic<bool> draining{false};
  UnixPeers unix_peers;
  Principals principals(cfg, unix_peers);
  StallWatch stalls;
  DaemonParts parts{cfg, worker, tensors, registry, jobs, draining, runners, principals, stalls};
  Services services(parts);
  UnixListener unix;
  FdTransfers fd_transfers(tensors, principals);
  fd_transfers.set_buffer_host(&services.session);
  fd_transfers.set_job_host(&services.jobs);
  if (!cfg.socket.empty()) {
    if (Status s = unix.bind(cfg.socket); !s.ok()) return fail(s.message);
    socket.bound();
    if (Status s = fd_transfers.bind(fd_socket_path(cfg.socket)); !s.ok()) return fail(s.message);
    fd_socket.bound();
  }
  std::unique_ptr<grpc::Server> server;
  std::vector<int> ports;
  if (Status s = start_server(cfg, services, &server, &ports); !s.ok()) return fail(s.message);
  unix.start(server.get(), &unix_peers);
  fd_transfers.start();
  services.health.set_serving(true);
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = start_metrics(cfg, worker, jobs, runners, fd_transfers, &metrics); !s.ok()) {
    unix.stop();
    fd_transfers.stop();
    server->Shutdown();
    return fail(s.message);
  }

  // Signal handling exists before READY, so a SIGTERM right after READY drains.
  asio::io_context io;
  asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  announce(cfg, opts, ports, metrics.get());
  serve_until_signal(cfg, io, signals);
  drain_and_stop(parts, services.session, services.health, *server, unix, fd_transfers, metrics, tensors, db);
  socket.release();
  fd_socket.release();
  return 0;
}

}  // namespace ptod
