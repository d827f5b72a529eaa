#include "metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>
#include <vector>

#include <asio.hpp>

#include "fd_transfers.h"
#include "job_manager.h"
#include "log.h"
#include "pto/version.h"
#include "pto/worker.h"

namespace ptod {
namespace {

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

// The standard process_* metrics (Prometheus's client libraries export the
// same names): CPU time, memory, file descriptors, start time, from /proc.
void process_metrics(std::string& out) {
  static const long ticks = sysconf(_SC_CLK_TCK);
  static const long page = sysconf(_SC_PAGESIZE);
  double cpu_s = 0, start_s = 0;
  uint64_t vsize = 0, rss_pages = 0;
  if (std::ifstream f("/proc/self/stat"); f) {
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Fields after the command (which may hold spaces) start at the last ')'.
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::vector<std::string> fld((std::istream_iterator<std::string>(rest)), std::istream_iterator<std::string>());
    // fld[0] is field 3 (state): utime 14, stime 15, starttime 22, vsize 23, rss 24.
    if (fld.size() > 22) {
      cpu_s = double(std::stoull(fld[11]) + std::stoull(fld[12])) / double(ticks);
      vsize = std::stoull(fld[20]);
      rss_pages = std::stoull(fld[21]);
      double boot_s = 0;
      if (std::ifstream st("/proc/stat"); st)
        for (std::string key; st >> key;)
          if (key == "btime") {
            st >> boot_s;
            break;
          }
      start_s = boot_s + double(std::stoull(fld[19])) / double(ticks);
    }
  }
  uint64_t fds = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++fds;
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  out += fmt::format(
      "# HELP process_cpu_seconds_total User and system CPU time spent in seconds.\n"
      "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}\n"
      "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
      "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n"
      "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
      "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes {}\n"
      "# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds {}\n"
      "# HELP process_max_fds Maximum number of open file descriptors.\n# TYPE process_max_fds gauge\n"
      "process_max_fds {}\n"
      "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
      "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {:.2f}\n",
      cpu_s, rss_pages * uint64_t(page), vsize, fds, uint64_t(nofile.rlim_cur), start_s);
}

}  // namespace

namespace {

// The fd socket's requests by op, its refused connections, and its job loop's work.
void fd_socket_metrics(std::string& o, const FdSocketCounts& fd) {
  o += "# HELP ptod_fd_socket_requests_total Requests the fd socket served, by op.\n"
       "# TYPE ptod_fd_socket_requests_total counter\n";
  static constexpr const char* kOps[] = {"", "upload", "download", "buffer_write", "buffer_read", "submit"};
  static_assert(std::size(kOps) == std::tuple_size_v<decltype(fd.by_op)>);
  for (size_t op = 1; op < fd.by_op.size(); ++op)
    o += fmt::format("ptod_fd_socket_requests_total{{op=\"{}\"}} {}\n", kOps[op], fd.by_op[op]);
  o += fmt::format(
      "# HELP ptod_fd_socket_refused_total Connections to the fd socket closed at accept (too many open).\n"
      "# TYPE ptod_fd_socket_refused_total counter\nptod_fd_socket_refused_total {}\n",
      fd.refused);
  o += fmt::format(
      "# HELP ptod_fd_socket_loop_jobs_total Jobs through the fd socket run and answered by its job loop.\n"
      "# TYPE ptod_fd_socket_loop_jobs_total counter\nptod_fd_socket_loop_jobs_total {}\n"
      "# HELP ptod_fd_socket_handoffs_total Connections the fd socket's job loop handed to a thread of their own.\n"
      "# TYPE ptod_fd_socket_handoffs_total counter\nptod_fd_socket_handoffs_total {}\n",
      fd.loop_jobs, fd.handoffs);
}

}  // namespace

std::string render_metrics(pto::Worker& w, JobManager& jobs, const pto::RunnerPool& runners,
                           const FdSocketCounts* fd) {
  const pto::WorkerStats s = w.stats();
  const JobCounts j = jobs.counts();
  std::string o;
  o += fmt::format(
      "# HELP ptod_build_info The daemon's version and git revision (always 1).\n# TYPE ptod_build_info gauge\n"
      "ptod_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
      label_value(PTO_VERSION), label_value(PTO_GIT_REVISION));
  o += "# HELP ptod_jobs Jobs now queued or running.\n# TYPE ptod_jobs gauge\n";
  o += fmt::format("ptod_jobs{{state=\"queued\"}} {}\nptod_jobs{{state=\"running\"}} {}\n", j.queued, j.running);
  o += fmt::format(
      "# HELP ptod_jobs_submitted_total Jobs accepted (queued).\n# TYPE ptod_jobs_submitted_total counter\n"
      "ptod_jobs_submitted_total {}\n",
      j.submitted_total);
  o += "# HELP ptod_jobs_total Jobs that ended, by final state.\n# TYPE ptod_jobs_total counter\n";
  o += fmt::format(
      "ptod_jobs_total{{state=\"succeeded\"}} {}\nptod_jobs_total{{state=\"failed\"}} {}\n"
      "ptod_jobs_total{{state=\"cancelled\"}} {}\n",
      j.succeeded_total, j.failed_total, j.cancelled_total);
  o += fmt::format(
      "# HELP ptod_job_record_commits_total State database transactions that wrote job records.\n"
      "# TYPE ptod_job_record_commits_total counter\nptod_job_record_commits_total {}\n"
      "# HELP ptod_job_record_failures_total State database transactions of job records that failed (submits "
      "refused, jobs' ends retried until written).\n"
      "# TYPE ptod_job_record_failures_total counter\nptod_job_record_failures_total {}\n",
      j.record_commits_total, j.record_failures_total);
  o += "# HELP ptod_tasks_total Tasks that ended, by outcome.\n# TYPE ptod_tasks_total counter\n";
  o += fmt::format(
      "ptod_tasks_total{{outcome=\"succeeded\"}} {}\nptod_tasks_total{{outcome=\"failed\"}} {}\n"
      "ptod_tasks_total{{outcome=\"skipped\"}} {}\nptod_tasks_total{{outcome=\"stopped\"}} {}\n",
      s.tasks_succeeded, s.tasks_failed, s.tasks_skipped, s.tasks_stopped);
  o += fmt::format(
      "# HELP ptod_ready_tasks Ready tasks waiting for an idle child.\n# TYPE ptod_ready_tasks gauge\n"
      "ptod_ready_tasks {}\n",
      s.ready_queue_depth);
  histogram(o, "ptod_task_latency_seconds", "Task submit to final state.", s.task_latency);
  histogram(o, "ptod_mailbox_round_trip_seconds", "Dispatch written to completion seen.", s.mailbox_round_trip);
  o += "# HELP ptod_heap_ring_used_bytes Bytes in use per heap ring.\n# TYPE ptod_heap_ring_used_bytes gauge\n";
  for (int r = 0; r < 4; ++r) o += fmt::format("ptod_heap_ring_used_bytes{{ring=\"{}\"}} {}\n", r, s.heap_ring_used[r]);
  o += fmt::format(
      "# HELP ptod_heap_ring_size_bytes The size of each heap ring (all four are equal).\n"
      "# TYPE ptod_heap_ring_size_bytes gauge\nptod_heap_ring_size_bytes {}\n",
      s.heap_ring_bytes);
  o += fmt::format(
      "# HELP ptod_arena_size_bytes The tensor arena's capacity.\n# TYPE ptod_arena_size_bytes gauge\n"
      "ptod_arena_size_bytes {}\n"
      "# HELP ptod_arena_used_bytes Tensor arena bytes in use.\n# TYPE ptod_arena_used_bytes gauge\n"
      "ptod_arena_used_bytes {}\n"
      "# HELP ptod_arena_warm_bytes Pages of freed tensors kept for the next uploads ([worker] arena_warm_bytes).\n"
      "# TYPE ptod_arena_warm_bytes gauge\nptod_arena_warm_bytes {}\n",
      s.arena_bytes, s.arena_in_use, s.arena_warm);
  o += fmt::format(
      "# HELP ptod_child_restarts_total Children forked again after they died.\n"
      "# TYPE ptod_child_restarts_total counter\nptod_child_restarts_total {}\n",
      s.child_restarts);
  const pto::RunnerPool::Stats r = runners.stats();
  o += fmt::format(
      "# HELP ptod_runners_total Runner processes for orchestration libraries: started, ended by a crash, exit, "
      "timeout, lost heartbeat or malformed call, and jobs served by a warm one.\n# TYPE ptod_runners_total counter\n"
      "ptod_runners_total{{event=\"started\"}} {}\nptod_runners_total{{event=\"failed\"}} {}\n"
      "ptod_runners_total{{event=\"reused\"}} {}\n"
      "# HELP ptod_runners_idle Warm runners waiting for the next job of their library and principal.\n"
      "# TYPE ptod_runners_idle gauge\nptod_runners_idle {}\n",
      r.started, r.failed, r.reused, r.idle);
  // Level 4: the remote sessions.
  histogram(o, "ptod_remote_round_trip_seconds", "Remote task dispatch to completion seen.", s.remote_round_trip);
  o += fmt::format(
      "# HELP ptod_task_retries_total Tasks run again after ENDPOINT_FAILURE.\n"
      "# TYPE ptod_task_retries_total counter\nptod_task_retries_total {}\n",
      s.task_retries);
  std::string up, in_flight;
  for (const pto::ChildInfo& c : w.children())
    if (c.remote) {
      up += fmt::format("ptod_peer_up{{worker=\"{}\",peer=\"{}\"}} {}\n", c.index, label_value(c.address),
                        c.state == pto::ChildState::DEAD ? 0 : 1);
      in_flight += fmt::format("ptod_peer_tasks_in_flight{{worker=\"{}\"}} {}\n", c.index, c.in_flight);
    }
  if (!up.empty())
    o += "# HELP ptod_peer_up 1 while the session to the peer is READY.\n# TYPE ptod_peer_up gauge\n" + up +
         "# HELP ptod_peer_tasks_in_flight Tasks the peer holds.\n# TYPE ptod_peer_tasks_in_flight gauge\n" + in_flight;
  if (fd) fd_socket_metrics(o, *fd);
  process_metrics(o);
  return o;
}

std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char ch : v) {
    if (ch == '\\')
      out += "\\\\";
    else if (ch == '"')
      out += "\\\"";
    else if (ch == '\n')
      out += "\\n";
    else
      out += ch;
  }
  return out;
}

HttpReply metrics_http_reply(std::string_view request_line, const std::function<std::string()>& render) {
  // "METHOD TARGET VERSION"; only the path counts (a query string is ignored).
  const size_t sp1 = request_line.find(' ');
  const std::string_view method = request_line.substr(0, sp1);
  std::string_view target = sp1 == std::string_view::npos ? std::string_view() : request_line.substr(sp1 + 1);
  target = target.substr(0, target.find(' '));
  target = target.substr(0, target.find('?'));
  HttpReply r;
  if (sp1 == std::string_view::npos || target.empty()) {
    r.status = "400 Bad Request";
    r.body = "a request line is METHOD /path HTTP/1.x\n";
    return r;
  }
  if (target != "/metrics") {
    r.status = "404 Not Found";
    r.body = "metrics are at /metrics\n";
    return r;
  }
  if (method != "GET" && method != "HEAD") {
    r.status = "405 Method Not Allowed";
    r.extra_headers = "Allow: GET, HEAD\r\n";
    r.body = "/metrics answers GET and HEAD\n";
    return r;
  }
  r.status = "200 OK";
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = render();
  r.head_only = method == "HEAD";
  return r;
}

struct MetricsServer::Impl {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  Render render;

  asio::steady_timer retry{io};
  std::chrono::steady_clock::time_point last_warned{};

  void accept() {
    acceptor.async_accept([this](std::error_code ec, asio::ip::tcp::socket sock) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // closed: the daemon stops
      if (ec == asio::error::connection_aborted) return accept();               // the client went away first
      if (ec) {
        // Out of descriptors or memory for a moment (EMFILE, ENFILE, ENOBUFS,
        // ENOMEM): accept again once some may have closed. Returning stopped
        // the endpoint for good - scrapes timed out while ptod served on.
        // Said once per 10 s while it lasts.
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warned >= std::chrono::seconds(10)) {
          log("main")->warn("metrics: cannot accept a connection: {}; trying again every 100 ms", ec.message());
          last_warned = now;
        }
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](std::error_code e) {
          if (!e) accept();
        });
        return;
      }
      auto s = std::make_shared<asio::ip::tcp::socket>(std::move(sock));
      auto buf = std::make_shared<asio::streambuf>(8192);  // a request longer than 8 KiB is refused
      // A client that connects and says nothing is dropped after 2 s.
      auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(2));
      timer->async_wait([s](std::error_code e) {
        if (!e) {
          std::error_code ignore;
          (void)s->close(ignore);
        }
      });
      asio::async_read_until(*s, *buf, "\r\n\r\n", [this, s, buf, timer](std::error_code ec2, size_t) {
        timer->cancel();
        std::string line;
        if (!ec2) {
          std::istream is(buf.get());
          std::getline(is, line);
        }
        HttpReply r;
        if (ec2) {
          r.status = "400 Bad Request";
          r.body = "a request ends with an empty line and fits in 8 KiB\n";
        } else {
          if (!line.empty() && line.back() == '\r') line.pop_back();
          r = metrics_http_reply(line, render);
        }
        auto out = std::make_shared<std::string>("HTTP/1.0 " + r.status + "\r\nContent-Type: " + r.content_type +
                                                 "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n" +
                                                 r.extra_headers + "Connection: close\r\n\r\n" +
                                                 (r.head_only ? std::string() : r.body));
        asio::async_write(*s, asio::buffer(*out), [s, out](std::error_code, size_t) {
          std::error_code ignore;
          (void)s->shutdown(asio::ip::tcp::socket::shutdown_both, ignore);
        });
      });
      accept();
    });
  }
};

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& host, int port, Render render,
                                                    pto::Status* error) {
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->impl_ = std::make_unique<Impl>();
  m->impl_->render = std::move(render);
  try {
    asio::ip::tcp::resolver resolver(m->impl_->io);
    auto ep = *resolver.resolve(host, std::to_string(port)).begin();
    m->impl_->acceptor.open(ep.endpoint().protocol());
    m->impl_->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    m->impl_->acceptor.bind(ep.endpoint());
    m->impl_->acceptor.listen();
    m->port_ = m->impl_->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    *error = pto::Status::Error(pto::kInvalidConfig,
                                "[metrics] listen " + host + ":" + std::to_string(port) + ": " + e.what());
    return nullptr;
  }
  m->impl_->accept();
  m->thread_ = std::thread([impl = m->impl_.get()] { impl->io.run(); });
  return m;
}

MetricsServer::~MetricsServer() {
  if (impl_) {
    asio::post(impl_->io, [impl = impl_.get()] {
      std::error_code ec;
      (void)impl->acceptor.close(ec);
      impl->retry.cancel();
      impl->io.stop();
    });
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace ptod
