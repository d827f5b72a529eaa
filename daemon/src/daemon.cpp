#include "daemon.h"

#include <fmt/format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <asio.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "callable_registry.h"
#include "job_manager.h"
#include "log.h"
#include "metrics.h"
#include "remote_link.h"
#include "services.h"
#include "session_service.h"
#include "tensor_store.h"

namespace ptod {
namespace {

std::string read_file(const std::string& path, Status* st) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *st = Status::Error(pto2::kInvalidConfig, fmt::format("cannot read '{}'", path));
    return {};
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Bearer-token check for the TLS listeners (not for the unix socket or
// loopback, which are protected by file permissions and the host).
class TokenAuth : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuth(std::string token) : expected_("Bearer " + std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& md, grpc::AuthContext*, OutputMetadata*, OutputMetadata*) override {
    auto it = md.find("authorization");
    if (it == md.end() || it->second.size() != expected_.size() ||
        CRYPTO_memcmp(it->second.data(), expected_.data(), expected_.size()) != 0)  // constant time
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this listener needs 'authorization: Bearer <token>' (the daemon's [server] token_file)");
    return grpc::Status::OK;
  }

 private:
  std::string expected_;
};

void histogram(std::string& out, const char* name, const char* help, const pto::LatencyHistogram& h) {
  static const double bounds[] = {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4,
                                  5e-4, 1e-3,   2.5e-3, 1e-2, 0.1,    1.0,  10.0};
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (double b : bounds) {
    uint64_t n = 0;
    for (int i = 0; i < pto::LatencyHistogram::kBuckets; ++i)
      if (double(pto::LatencyHistogram::bucket_upper_ns(i)) <= b * 1e9) n += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, b, n);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                     double(h.sum_ns) / 1e9, name, h.count);
}

std::string render_metrics(pto::Worker& w, JobManager& jobs) {
  const pto::WorkerStats s = w.stats();
  const JobCounts j = jobs.counts();
  std::string o;
  o += "# HELP ptod_jobs Jobs now queued or running.\n# TYPE ptod_jobs gauge\n";
  o += fmt::format("ptod_jobs{{state=\"queued\"}} {}\nptod_jobs{{state=\"running\"}} {}\n", j.queued, j.running);
  o += "# HELP ptod_jobs_total Jobs that ended, by final state; and jobs submitted.\n# TYPE ptod_jobs_total counter\n";
  o += fmt::format(
      "ptod_jobs_total{{state=\"submitted\"}} {}\nptod_jobs_total{{state=\"succeeded\"}} {}\n"
      "ptod_jobs_total{{state=\"failed\"}} {}\nptod_jobs_total{{state=\"cancelled\"}} {}\n",
      j.submitted_total, j.succeeded_total, j.failed_total, j.cancelled_total);
  o += "# HELP ptod_tasks_total Tasks that ended, by outcome.\n# TYPE ptod_tasks_total counter\n";
  o += fmt::format(
      "ptod_tasks_total{{outcome=\"succeeded\"}} {}\nptod_tasks_total{{outcome=\"failed\"}} {}\n"
      "ptod_tasks_total{{outcome=\"skipped\"}} {}\n",
      s.tasks_succeeded, s.tasks_failed, s.tasks_skipped);
  o += "# HELP ptod_queue_depth Jobs waiting plus ready tasks waiting for an idle child.\n# TYPE ptod_queue_depth "
       "gauge\n";
  o += fmt::format("ptod_queue_depth{{queue=\"jobs\"}} {}\nptod_queue_depth{{queue=\"tasks\"}} {}\n", j.queued,
                   s.ready_queue_depth);
  histogram(o, "ptod_task_latency_seconds", "Task submit to final state.", s.task_latency);
  histogram(o, "ptod_mailbox_round_trip_seconds", "Dispatch written to completion seen.", s.mailbox_round_trip);
  o += "# HELP ptod_heap_ring_used_bytes Bytes in use per heap ring.\n# TYPE ptod_heap_ring_used_bytes gauge\n";
  for (int r = 0; r < 4; ++r) o += fmt::format("ptod_heap_ring_used_bytes{{ring=\"{}\"}} {}\n", r, s.heap_ring_used[r]);
  o += fmt::format(
      "# HELP ptod_heap_ring_size_bytes Size of each heap ring.\n# TYPE ptod_heap_ring_size_bytes gauge\n"
      "ptod_heap_ring_size_bytes {}\n",
      s.heap_ring_bytes);
  o += fmt::format(
      "# HELP ptod_arena_bytes Tensor arena size and use.\n# TYPE ptod_arena_bytes gauge\n"
      "ptod_arena_bytes{{kind=\"size\"}} {}\nptod_arena_bytes{{kind=\"used\"}} {}\n",
      s.arena_bytes, s.arena_in_use);
  o += fmt::format(
      "# HELP ptod_child_restarts_total Children forked again after they died.\n"
      "# TYPE ptod_child_restarts_total counter\nptod_child_restarts_total {}\n",
      s.child_restarts);
  // Level 4: the remote sessions.
  histogram(o, "ptod_remote_round_trip_seconds", "Remote task dispatch to completion seen.", s.remote_round_trip);
  o += fmt::format(
      "# HELP ptod_task_retries_total Tasks run again after ENDPOINT_FAILURE.\n"
      "# TYPE ptod_task_retries_total counter\nptod_task_retries_total {}\n",
      s.task_retries);
  std::string up, in_flight;
  for (const pto::ChildInfo& c : w.children())
    if (c.remote) {
      up += fmt::format("ptod_peer_up{{worker=\"{}\",peer=\"{}\"}} {}\n", c.index, c.address,
                        c.state == pto::ChildState::DEAD ? 0 : 1);
      in_flight += fmt::format("ptod_peer_tasks_in_flight{{worker=\"{}\"}} {}\n", c.index, c.in_flight);
    }
  if (!up.empty())
    o += "# HELP ptod_peer_up 1 while the session to the peer is READY.\n# TYPE ptod_peer_up gauge\n" + up +
         "# HELP ptod_peer_tasks_in_flight Tasks the peer holds.\n# TYPE ptod_peer_tasks_in_flight gauge\n" + in_flight;
  return o;
}

}  // namespace

int run_daemon(DaemonConfig cfg, const RunOptions& opts) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "ptod: %s\n", m.c_str());
    return 1;
  };
  if (Status s = cfg.validate(); !s.ok()) return fail(s.message);
  if (Status s = setup_logging(cfg.log_level, cfg.log_file); !s.ok()) return fail(s.message);
  auto main_log = log("main");

  // State directory: uploaded code lives here, so only this user may read it.
  std::error_code ec;
  std::filesystem::create_directories(cfg.state_dir + "/callables", ec);
  if (!ec) std::filesystem::create_directories(cfg.state_dir + "/traces", ec);
  if (ec) return fail(fmt::format("[daemon] state_dir '{}': {}", cfg.state_dir, ec.message()));
  chmod(cfg.state_dir.c_str(), 0700);
  chmod((cfg.state_dir + "/callables").c_str(), 0700);
  chmod((cfg.state_dir + "/traces").c_str(), 0700);
  if (!cfg.socket.empty()) {
    std::filesystem::create_directories(std::filesystem::path(cfg.socket).parent_path(), ec);
    std::filesystem::remove(cfg.socket, ec);  // a stale socket of an earlier run
  }

  // The Worker forks its children now, before gRPC, Asio or the job runner
  // start any thread.
  pto::WorkerConfig wc;
  wc.level = cfg.level;
  wc.num_chips = cfg.level == 3 ? cfg.chips : 0;
  wc.num_sub_workers = cfg.sub_workers;
  wc.heap_ring_bytes = cfg.heap_ring_bytes;
  wc.buffer_arena_bytes = cfg.arena_bytes;
  wc.task_timeout_ms = cfg.task_timeout_ms;
  wc.spin_us = cfg.spin_us;
  wc.state_dir = cfg.state_dir + "/worker";
  wc.name = "ptod";
  wc.remote_ready_timeout_ms = cfg.peer_ready_timeout_ms;
  pto::Worker worker(wc);
  // Level 4: local L3 children (each an L3 Worker with its own chips and sub
  // workers), then one remote L3 worker per [[peers]] entry.
  for (int i = 0; i < cfg.l3_children; ++i) {
    pto::WorkerConfig ic = wc;
    ic.level = 3;
    ic.num_chips = cfg.chips;
    ic.state_dir = fmt::format("{}/worker-l3-{}", cfg.state_dir, i);
    ic.name = fmt::format("ptod-l3-{}", i);
    if (Status s = worker.add_next_level_worker(std::make_unique<pto::Worker>(ic)); !s.ok())
      return fail("[worker] l3_children: " + s.message);
  }
  for (size_t i = 0; i < cfg.peers.size(); ++i)
    if (Status s = worker.add_remote_worker(
            std::make_shared<GrpcRemoteLink>(cfg.peers[i], static_cast<uint32_t>(cfg.l3_children + i), cfg));
        !s.ok())
      return fail("[[peers]]: " + s.message);
  if (Status s = worker.init(); !s.ok()) return fail("starting the Worker: " + s.message);
  if (cfg.level == 3) {
    main_log->info("worker up: {} chip(s), {} sub worker(s)", cfg.chips, cfg.sub_workers);
  } else {
    int ready = 0;
    for (const pto::ChildInfo& c : worker.children()) ready += c.remote && c.state != pto::ChildState::DEAD;
    main_log->info("level-4 worker up: {} local L3 child(ren), {} peer(s) ({} ready), {} sub worker(s)",
                   cfg.l3_children, cfg.peers.size(), ready, cfg.sub_workers);
  }

  TensorStore tensors(worker);
  CallableRegistry registry(worker, cfg);
  JobManager jobs(worker, tensors, cfg);
  std::atomic<bool> draining{false};
  DaemonParts parts{cfg, worker, tensors, registry, jobs, draining};
  RegistryService registry_svc(parts);
  TensorsService tensors_svc(parts);
  JobsService jobs_svc(parts);
  NodeService node_svc(parts);
  SessionService session_svc(parts);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Bounded threads: a flood of Watch streams cannot grow the daemon without limit.
  grpc::ResourceQuota quota("ptod");
  quota.SetMaxThreads(128);
  builder.SetResourceQuota(quota);
  // Accept the clients' keepalive pings (every 30 s) that bound their Watch streams.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(static_cast<int>(cfg.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(cfg.max_message_bytes));
  if (!cfg.socket.empty()) builder.AddListeningPort("unix:" + cfg.socket, grpc::InsecureServerCredentials());
  std::vector<int> ports(cfg.listen.size(), 0);
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    std::string host;
    int port = 0;
    (void)split_host_port(cfg.listen[i], &host, &port);
    std::shared_ptr<grpc::ServerCredentials> creds;
    if (!cfg.tls_cert.empty()) {
      Status st;
      grpc::SslServerCredentialsOptions o(cfg.tls_client_ca.empty()
                                              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      grpc::SslServerCredentialsOptions::PemKeyCertPair kp{read_file(cfg.tls_key, &st), read_file(cfg.tls_cert, &st)};
      if (!cfg.tls_client_ca.empty()) o.pem_root_certs = read_file(cfg.tls_client_ca, &st);
      if (!st.ok()) return fail("[server] " + st.message);
      o.pem_key_cert_pairs.push_back(kp);
      creds = grpc::SslServerCredentials(o);
      if (!cfg.token.empty()) creds->SetAuthMetadataProcessor(std::make_shared<TokenAuth>(cfg.token));
    } else {
      creds = grpc::InsecureServerCredentials();  // validate(): loopback only
    }
    builder.AddListeningPort(cfg.listen[i], creds, &ports[i]);
  }
  builder.RegisterService(&registry_svc);
  builder.RegisterService(&tensors_svc);
  builder.RegisterService(&jobs_svc);
  builder.RegisterService(&node_svc);
  builder.RegisterService(&session_svc);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server)
    return fail("cannot start the gRPC server: a listener could not be bound (address in use or not permitted?)");
  for (size_t i = 0; i < cfg.listen.size(); ++i)
    if (ports[i] == 0) return fail(fmt::format("cannot listen on {}", cfg.listen[i]));
  if (!cfg.socket.empty()) chmod(cfg.socket.c_str(), 0660);
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  auto set_serving = [&](bool serving) {
    if (!health) return;
    health->SetServingStatus(serving);
    for (const char* svc : {"pto.v1.Registry", "pto.v1.Tensors", "pto.v1.Jobs", "pto.v1.Node", "pto.v1.Session"})
      health->SetServingStatus(svc, serving);
  };
  set_serving(true);

  std::unique_ptr<MetricsServer> metrics;
  if (!cfg.metrics_listen.empty()) {
    std::string host;
    int port = 0;
    (void)split_host_port(cfg.metrics_listen, &host, &port);
    Status st;
    metrics = MetricsServer::start(
        host, port, [&] { return render_metrics(worker, jobs); }, &st);
    if (!metrics) {
      server->Shutdown();
      return fail(st.message);
    }
  }

  // Signal handling exists before READY, so a SIGTERM right after READY drains.
  asio::io_context io;
  asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);

  std::string where = cfg.socket.empty() ? "" : "unix:" + cfg.socket;
  for (size_t i = 0; i < cfg.listen.size(); ++i) {
    std::string host;
    int port = 0;
    (void)split_host_port(cfg.listen[i], &host, &port);
    where += fmt::format("{}{}:{}", where.empty() ? "" : ", ", host, ports[i]);
  }
  main_log->info("serving on {}{}", where,
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
    std::filesystem::rename(tmp, opts.ready_file, ec);
  }
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s with %d chip(s), %d sub worker(s)\nMAINPID=%d", where.c_str(), cfg.chips,
             cfg.sub_workers, getpid());

  // Signals and the watchdog, on this thread.
  std::function<void(const std::error_code&, int)> on_signal;
  bool stopping = false;
  on_signal = [&](const std::error_code& e, int sig) {
    if (e) return;
    if (sig == SIGHUP) {
      main_log->info("SIGHUP: reopening logs");
      if (Status s = setup_logging(cfg.log_level, cfg.log_file); !s.ok()) main_log->error("{}", s.message);
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
  io.run();

  // Drain: refuse new work, let the running job finish (bounded), stop.
  draining = true;
  set_serving(false);
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  jobs.start_drain("the daemon is shutting down");
  if (!jobs.wait_idle(std::chrono::seconds(cfg.drain_timeout_s))) {
    main_log->warn("the running job did not finish within {} s: cancelling it", cfg.drain_timeout_s);
    jobs.cancel_running("the daemon's drain time ran out");
    (void)jobs.wait_idle(std::chrono::seconds(10));
  }
  // Stop the job manager first: callers waiting on a job (Watch, Submit or
  // Result with a wait) then return at once, so the server's shutdown does
  // not wait for their deadlines.
  jobs.stop();
  session_svc.shutdown_all("the peer is shutting down");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics.reset();
  if (Status s = worker.close(); !s.ok()) main_log->warn("closing the Worker: {}", s.message);
  if (!cfg.socket.empty()) std::filesystem::remove(cfg.socket, ec);
  main_log->info("stopped");
  return 0;
}

}  // namespace ptod
