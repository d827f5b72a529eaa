// Prometheus text exposition on a loopback HTTP port (GET /metrics): jobs by
// state, tasks, queue depth, task latency and mailbox round-trip histograms,
// heap ring and arena usage, child restarts, the fd socket's requests, and at
// level 4 the peers. No job
// or task ids as labels (docs/daemon.md lists every metric).
// A tiny HTTP/1.0 responder on Asio: one request per connection; GET and
// HEAD of /metrics.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "pto/base/status.h"

namespace pto {
class Worker;
class RunnerPool;
}  // namespace pto

namespace ptod {

class JobManager;
struct FdSocketCounts;

// The text exposition (format 0.0.4) of the Worker's and the job queue's state
// now, the fd socket's requests (when there is one: `fd`), and the
// process_* metrics.
std::string render_metrics(pto::Worker& w, JobManager& jobs, const pto::RunnerPool& runners,
                           const FdSocketCounts* fd = nullptr);

// A label value escaped as the text format requires (\\, \", \n).
std::string label_value(std::string_view v);

// The answer to one request line: GET and HEAD of /metrics (a query string
// is ignored), 405 with Allow for other methods there, 404 elsewhere, 400 for
// a malformed line. Pure, for tests.
struct HttpReply {
  std::string status;
  std::string content_type = "text/plain; charset=utf-8";
  std::string extra_headers;  // whole lines, each ending in \r\n
  std::string body;
  bool head_only = false;  // HEAD: the headers (Content-Length of the body) without it
};
HttpReply metrics_http_reply(std::string_view request_line, const std::function<std::string()>& render);

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
