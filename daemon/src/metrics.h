// Prometheus text exposition on a loopback HTTP port (GET /metrics): jobs by
// state, tasks, queue depth, task latency and mailbox round-trip histograms,
// heap ring and arena usage, child restarts, and at level 4 the peers. No job
// or task ids as labels (docs/daemon.md lists every metric).
// A tiny HTTP/1.0 responder on Asio: one request per connection.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "pto/base/status.h"

namespace pto {
class Worker;
class RunnerPool;
}  // namespace pto

namespace ptod {

class JobManager;

// The text exposition (format 0.0.4) of the Worker's and the job queue's state now.
std::string render_metrics(pto::Worker& w, JobManager& jobs, const pto::RunnerPool& runners);

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // Binds host:port (port 0 picks one; bound_port() tells which).
  static std::unique_ptr<MetricsServer> start(const std::string& host, int port, Render render, pto::Status* error);
  ~MetricsServer();
  int bound_port() const { return port_; }

 private:
  MetricsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace ptod
