// ptod from a client's side (issue 5's figures): a real daemon subprocess,
//   * a trivial job (one no-op sub task), submit -> result in one call, p50 / p99,
//     over the unix socket (through the fd socket, the client's way there, and
//     through gRPC) and over TCP loopback; an empty chip job likewise
//   * jobs per second with 1 and 8 concurrent clients, and in batches of
//     1,000 jobs per SubmitBatch call, each with the context switches of the
//     daemon and its children per job and the daemon's own CPU time per job; batches and one client again with a
//     second ptod placed apart from its children ([daemon] cpus, [worker]
//     child_cpus), in turns with the first
//   * upload and download bandwidth of a 256 MiB tensor: over gRPC in 1 MiB /
//     4 MiB chunks, and through the fd socket from plain memory and from a
//     SharedBuffer
//   * fairness: a one-task job's latency while a long job (2,000 sub tasks
//     of 1 ms, an orchestration in a runner) runs, against its idle latency
// Anchors: Ray ~1 ms per synchronous task (981 tasks/s); a gRPC C++ unary call
// on TCP loopback ~60 us (112-131 us measured on this kind of
// machine). Figures only: nothing fails on a time. PTOD_BENCH_ONLY=bandwidth
// runs the tensor transfers alone, PTOD_BENCH_ONLY=jobs the job figures alone
// (latency, jobs per second, batches, and a second ptod placed apart from its
// children), PTOD_BENCH_ONLY=batch the batches alone,
// PTOD_BENCH_ONLY=clients the jobs per second of 1 and 8 clients alone,
// PTOD_BENCH_ONLY=latency the unary floor and a trivial job's latency alone,
// PTOD_BENCH_ONLY=fairness the one-task job beside a long one alone,
// PTOD_BENCH_ONLY=placement a ptod placed apart from its children against
// one not placed alone;
// PTOD_BENCH_FD_JOBS=0 sends every job through gRPC.
// The jobs against the floor, the chip job against the sub job, and 8 clients
// against one are also measured in turns (alternating), which the
// VM's phases do not skew.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon_process.h"
#include "pto/base/cpu_set.h"
#include "pto/base/freed_memory.h"
#include "pto/client.h"
#include "thread_switches.h"

using Clock = std::chrono::steady_clock;
using pto::client::Client;
namespace v1 = pto::v1;

namespace {

// fd_jobs: a job through the fd socket (the client's default on a unix
// socket) or, false, through gRPC's Jobs.Submit. PTOD_BENCH_FD_JOBS=0 sends
// every job through gRPC (the figures as before the fd socket took jobs).
pto::client::ClientOptions options(const std::string& address, bool fd_jobs = true) {
  static const bool no_fd_jobs = [] {
    const char* e = std::getenv("PTOD_BENCH_FD_JOBS");
    return e && std::string(e) == "0";
  }();
  pto::client::ClientOptions o;
  o.address = address;
  o.fd_jobs = fd_jobs && !no_fd_jobs;
  o.timeout = std::chrono::seconds(30);
  return o;
}

v1::SubmitRequest trivial() {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("noop");
  req.set_wait_ms(10000);
  return req;
}

// The daemon's histogram `name` (cumulative counts by upper bound, seconds)
// from its metrics endpoint.
std::vector<std::pair<double, double>> histogram(int metrics_port, const std::string& name) {
  std::vector<std::pair<double, double>> out;
  const std::string text = pto_test::http_get(metrics_port, "/metrics");
  const std::string key = name + "_bucket{le=\"";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t le = at + key.size();
    const size_t close = text.find('"', le);
    if (close == std::string::npos || close + 2 >= text.size()) break;
    const std::string bound = text.substr(le, close - le);
    out.emplace_back(bound == "+Inf" ? 1e30 : std::atof(bound.c_str()), std::atof(text.c_str() + close + 2));
  }
  return out;
}

// "<= N us": the bucket bound under which half of what was added between two
// readings of a histogram lies; "n/a" when nothing was added (or no reading).
std::string median_between(const std::vector<std::pair<double, double>>& before,
                           const std::vector<std::pair<double, double>>& after) {
  if (before.size() != after.size() || after.empty()) return "n/a (no metrics)";
  const double total = after.back().second - before.back().second;
  if (total <= 0) return "n/a (no tasks)";
  for (size_t i = 0; i < after.size(); ++i)
    if (after[i].second - before[i].second >= total / 2)
      return after[i].first >= 1e30 ? "above the last bucket"
                                     : "<= " + std::to_string(std::lround(after[i].first * 1e6)) + " us";
  return "n/a";
}

int g_metrics_port = 0;  // the daemon's, for the task figures beside a latency
pid_t g_daemon_pid = -1;  // for the context switches beside a rate (this VM's swings move them far less)

constexpr char kRoundTrips[] = "ptod_mailbox_round_trip_seconds";

double latency(const char* what, const std::string& address, const v1::SubmitRequest& job = trivial(),
               bool fd_jobs = true) {
  const auto trips0 = histogram(g_metrics_port, kRoundTrips);
  Client c(options(address, fd_jobs));
  std::vector<double> us;
  for (int i = 0; i < 2200; ++i) {
    const auto t0 = Clock::now();
    auto r = c.submit(job);
    const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!r.ok() || r.value.result().state() != v1::SUCCEEDED) {
      std::fprintf(stderr, "job failed: %s\n", r.status.message.c_str());
      std::exit(1);
    }
    if (i >= 200) us.push_back(d);  // the first 200 warm the channel and the children
  }
  std::sort(us.begin(), us.end());
  std::printf(
      "trivial job, submit -> result, %s: p50 %.0f us, p99 %.0f us (%zu jobs)   [target p50 <= 300 us; "
      "Ray sync task ~1000 us]\n",
      what, us[us.size() / 2], us[us.size() * 99 / 100], us.size());
  // How much of it the child's task takes (dispatch written -> completion
  // seen, a parked child's wake-up included), over the whole phase: the 200
  // warm-up jobs too.
  std::printf("  of which the task's mailbox round trip: p50 %s\n",
              median_between(trips0, histogram(g_metrics_port, kRoundTrips)).c_str());
  return us[us.size() / 2];
}

// The floor under a job: one unary call that does nothing (Node.Version).
double unary_floor(const char* what, const std::string& address) {
  Client c(options(address));
  std::vector<double> us;
  for (int i = 0; i < 2200; ++i) {
    const auto t0 = Clock::now();
    if (!c.version().ok()) std::exit(1);
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("gRPC unary floor (Node.Version), %s: p50 %.0f us, p99 %.0f us\n", what, us[us.size() / 2],
              us[us.size() * 99 / 100]);
  return us[us.size() / 2];
}

// Calls taken in turns, 2,000 rounds after 200 to warm up: p50 of each.
// A ratio or a difference of figures measured in the same moments is not
// moved by the VM's slow and quick phases, which move figures measured one
// after the other by up to 30 %.
std::vector<double> in_turns(const std::vector<std::function<bool()>>& calls) {
  std::vector<std::vector<double>> us(calls.size());
  for (int i = 0; i < 2200; ++i)
    for (size_t k = 0; k < calls.size(); ++k) {
      const auto t0 = Clock::now();
      if (!calls[k]()) {
        std::fprintf(stderr, "a call taken in turns failed\n");
        std::exit(1);
      }
      if (i >= 200) us[k].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  std::vector<double> p50;
  for (auto& u : us) {
    std::sort(u.begin(), u.end());
    p50.push_back(u[u.size() / 2]);
  }
  return p50;
}

bool run_ok(Client& c, const v1::SubmitRequest& job) {
  auto r = c.submit(job);
  return r.ok() && r.value.result().state() == v1::SUCCEEDED;
}

struct Rate {
  double jobs_per_s = 0;
  double switches_per_job = 0;  // the daemon's and its children's context switches
  double daemon_cpu_us_per_job = 0;  // the daemon process's own CPU time (its children's spin left out)
};

// Jobs per second from `clients` clients, each submitting `batch` jobs per
// call (1: Submit with wait_ms; more: SubmitBatch with wait_ms), over
// `seconds` after a 0.3 s warm-up; `daemon`: the pid whose process tree's
// context switches are counted.
Rate measure_rate(int clients, int batch, const std::string& address, pid_t daemon, double seconds) {
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  v1::SubmitBatchRequest many;
  many.set_wait_ms(30000);
  for (int i = 0; i < batch; ++i) {
    *many.add_jobs() = trivial();
    many.mutable_jobs(i)->set_wait_ms(0);
  }
  for (int i = 0; i < clients; ++i)
    ts.emplace_back([&] {
      Client c(options(address));
      while (!stop.load()) {
        if (batch == 1) {
          auto r = c.submit(trivial());
          if (r.ok() && r.value.result().state() == v1::SUCCEEDED) ++done;
          continue;
        }
        auto r = c.submit_batch(many);
        if (!r.ok()) {
          std::fprintf(stderr, "batch failed: %s\n", r.status.message.c_str());
          std::exit(1);
        }
        for (const auto& j : r.value.jobs()) done += j.result().state() == v1::SUCCEEDED;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // warm up
  const uint64_t d0 = done.load();
  const uint64_t s0 = pto_test::process_tree_switches(daemon);
  const uint64_t c0 = pto_test::process_cpu_ns(daemon);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t d1 = done.load();
  const uint64_t s1 = pto_test::process_tree_switches(daemon);
  const uint64_t c1 = pto_test::process_cpu_ns(daemon);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  for (auto& t : ts) t.join();
  Rate r;
  r.jobs_per_s = double(d1 - d0) / secs;
  if (d1 > d0) {
    r.switches_per_job = double(s1 - s0) / double(d1 - d0);
    if (c1 >= c0) r.daemon_cpu_us_per_job = double(c1 - c0) / 1e3 / double(d1 - d0);  // else /proc was not read
  }
  return r;
}

// The same over 2 s against the bench's daemon, printed.
double throughput(int clients, int batch, const std::string& address) {
  const Rate r = measure_rate(clients, batch, address, g_daemon_pid, 2.0);
  std::printf("trivial jobs per second, %d client(s), %d job(s) per call: %.0f   [Ray: ~981 sync tasks/s per client]\n",
              clients, batch, r.jobs_per_s);
  if (r.jobs_per_s > 0)
    std::printf(
        "  context switches of the daemon and its children: %.2f per job; the daemon's CPU time: %.1f us per "
        "job\n",
        r.switches_per_job, r.daemon_cpu_us_per_job);
  return r.jobs_per_s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// 1 and 8 clients in turns: eight clients connected once, one or all eight
// submitting, the phases alternating (kRounds of each, 0.5 s apart from a
// settling 50 ms), so that the VM's slow and quick phases fall on both.
// Prints the medians and the median of the rounds' ratios.
void clients_in_turns(const std::string& address) {
  constexpr int kClients = 8, kRounds = 6;
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  int active = 1;  // under mu: clients [0, active) submit
  std::vector<std::thread> ts;
  for (int i = 0; i < kClients; ++i)
    ts.emplace_back([&, i] {
      Client c(options(address));
      while (!stop.load()) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop.load() || i < active; });
          if (stop.load() || i >= active) continue;
        }
        auto r = c.submit(trivial());
        if (r.ok() && r.value.result().state() == v1::SUCCEEDED) ++done;
      }
    });
  auto phase = [&](int n) {
    {
      std::lock_guard<std::mutex> g(mu);
      active = n;
    }
    cv.notify_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t d0 = done.load();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return double(done.load() - d0) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  phase(kClients);  // warm-up: every client has connected and run a job
  std::vector<double> one, eight, ratio;
  for (int r = 0; r < kRounds; ++r) {
    one.push_back(phase(1));
    eight.push_back(phase(kClients));
    ratio.push_back(eight.back() / one.back());
  }
  stop = true;
  cv.notify_all();
  for (auto& t : ts) t.join();
  std::printf(
      "the same in turns (1 and 8 clients alternating, %d rounds of 0.5 s): 1 client %.0f, 8 clients %.0f jobs/s, "
      "8 / 1: %.2fx (rounds %.2fx-%.2fx)   [target >= 1.5x]\n",
      kRounds, median(one), median(eight), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
      *std::max_element(ratio.begin(), ratio.end()));
}

// Seconds of the fastest of three runs of fn, each after an untimed `before`.
template <class B, class F>
double best_of_3(B&& before, F&& fn) {
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    before();
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}
template <class F>
double best_of_3(F&& fn) {
  return best_of_3([] {}, fn);
}

void must(const pto::client::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s failed: %s\n", what, s.message.c_str());
  std::exit(1);
}

// A "Name:   N kB" line of /proc/PID/status; 0 if there is none.
uint64_t status_kb(pid_t pid, const std::string& name) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(name, 0) == 0) return std::strtoull(line.c_str() + name.size(), nullptr, 10);
  return 0;
}

void bandwidth(const std::string& address) {
  const uint32_t n = 64u << 20;  // 64 Mi floats = 256 MiB
  const double gb = double(n) * 4 / 1e9;
  std::vector<float> data(n, 1.5f);
  std::vector<uint8_t> back;
  // Over the gRPC stream (the fd socket turned off).
  auto grpc_options = options(address);
  grpc_options.fd_transfers = false;
  Client g(grpc_options);
  double grpc_up = 0, grpc_down = 0;
  for (uint32_t chunk : {1u << 20, 4u << 20}) {
    v1::TensorHandle h;
    const auto free_last = [&] {
      if (h.id()) must(g.free(h), "free");
    };
    const double up = best_of_3(free_last, [&] {
      auto t = g.upload("", {n}, PTO_FLOAT32, data.data(), uint64_t(n) * 4, chunk);
      must(t.status, "upload");
      h = t.value.handle();
    });
    const double down = best_of_3([&] { must(g.download(h, &back, chunk).status, "download"); });
    must(g.free(h), "free");
    std::printf("256 MiB tensor over gRPC, %u MiB chunks, unix socket: upload %.2f GB/s, download %.2f GB/s   "
                "[target >= 2 GB/s]\n",
                chunk >> 20, gb / up, gb / down);
    grpc_up = gb / up, grpc_down = gb / down;
  }
  // What the transfers left in the daemon: the heap it keeps for the next
  // messages ([daemon] malloc_keep_bytes), besides the tensors' own pages.
  std::printf("ptod's anonymous memory after them: %.0f MiB (kB RssAnon of /proc/PID/status)\n",
              double(status_kb(g_daemon_pid, "RssAnon:")) / 1024);
  // Through the fd socket: from plain memory (one copy into the client's
  // staging memfd, one in the daemon), and from a SharedBuffer (the daemon's
  // copy only).
  Client c(options(address));
  if (!c.fd_socket()) {
    std::printf("fd socket: not available at %s\n", address.c_str());
    return;
  }
  v1::TensorHandle h;
  const auto free_last = [&] {
    if (h.id()) must(c.free(h), "free");
  };
  const double up = best_of_3(free_last, [&] {
    auto t = c.upload("", {n}, PTO_FLOAT32, data.data(), uint64_t(n) * 4);
    must(t.status, "upload");
    h = t.value.handle();
  });
  const double down = best_of_3([&] { must(c.download(h, &back).status, "download"); });
  must(c.free(h), "free");
  std::printf("256 MiB tensor through the fd socket, from/to a std::vector: upload %.2f GB/s (%.2fx gRPC), download "
              "%.2f GB/s (%.2fx gRPC)\n",
              gb / up, gb / up / grpc_up, gb / down, gb / down / grpc_down);
  auto shared = pto::client::SharedBuffer::create(uint64_t(n) * 4);
  must(shared.status, "a shared buffer");
  std::memset(shared.value.data(), 0x3f, uint64_t(n) * 4);  // its pages exist, as a buffer in use has
  // Into fresh arena pages, once: beside a tensor held at the arena's start,
  // the upload lands where no tensor has been (new page-cache pages). The
  // best of 3 below lands on the pages the held one leaves warm when freed
  // ([worker] arena_warm_bytes; with 0, every upload is a fresh one).
  auto held = c.upload("", {n}, PTO_FLOAT32, shared.value);
  must(held.status, "upload");
  const auto f0 = Clock::now();
  auto fresh = c.upload("", {n}, PTO_FLOAT32, shared.value);
  must(fresh.status, "upload");
  const double fresh_up = std::chrono::duration<double>(Clock::now() - f0).count();
  must(c.free(held.value.handle()), "free");  // first: its pages are the ones kept warm
  must(c.free(fresh.value.handle()), "free");
  h = {};
  const double zup = best_of_3(free_last, [&] {
    auto t = c.upload("", {n}, PTO_FLOAT32, shared.value);
    must(t.status, "upload");
    h = t.value.handle();
  });
  const double zdown = best_of_3([&] { must(c.download(h, shared.value).status, "download"); });
  must(c.free(h), "free");
  std::printf("256 MiB tensor through the fd socket, from/to a SharedBuffer (zero-copy here): upload %.2f GB/s "
              "(%.2fx gRPC), download %.2f GB/s (%.2fx gRPC)   [target >= 8 GB/s]\n",
              gb / zup, gb / zup / grpc_up, gb / zdown, gb / zdown / grpc_down);
  std::printf("  that upload into fresh arena pages (no freed tensor's there): %.2f GB/s, once; warm / fresh %.2fx\n",
              gb / fresh_up, fresh_up / zup);
}

// p50 of a one-task job's submit -> result latency over `n` jobs.
// One-task jobs one after another: p50, p99 and the slowest, in us.
struct OneTask {
  double p50, p99, max;
};
OneTask one_task_jobs(Client& c, int n) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto r = c.submit(trivial());
    if (!r.ok() || r.value.result().state() != v1::SUCCEEDED) std::exit(1);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100], us.back()};
}

void fairness(const std::string& address) {
  Client c(options(address));
  const double idle = one_task_jobs(c, 200).p50;
  v1::SubmitRequest big;
  big.mutable_callable()->set_name("sleeps");
  big.mutable_args()->add_scalars(2000);  // tasks
  big.mutable_args()->add_scalars(1);     // ms each
  auto job = c.submit(big);
  if (!job.ok()) std::exit(1);
  for (;;) {  // until the long job is well under way
    auto r = c.result(job.value.job_id());
    if (r.ok() && r.value.tasks_submitted() > 100) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const OneTask beside = one_task_jobs(c, 200);
  const double busy = beside.p50;
  auto r = c.result(job.value.job_id());
  const bool still_running = r.ok() && r.value.state() == v1::RUNNING;
  (void)c.cancel(job.value.job_id());
  // The target: at most twice the idle latency plus one task of the long job
  // (1 ms) — the one-task job waits for at most one of its tasks.
  const double bound = 2 * idle + 1000;
  std::printf(
      "fairness: one-task job p50 %.0f us idle, %.0f us beside a 2,000-task job%s: %.2fx idle; %.2fx the target "
      "bound (2 x idle + one 1 ms task = %.0f us); beside it p99 %.0f us, slowest %.0f us\n",
      idle, busy, still_running ? "" : " (which had ended: figure not valid)", busy / idle, busy / bound, bound,
      beside.p99, beside.max);
}

// The bench's callables, published: the TCP clients are another principal
// ("anonymous"). False (and a message) on failure.
bool register_callables(const std::string& address) {
  Client admin(options(address));
  pto::client::Placement everyone;
  everyone.publish = true;
  for (auto [symbol, name] : {std::pair{"pto_test_noop", "noop"}, {"pto_test_sleep", "sleep"}}) {
    auto reg = admin.register_import(BENCH_NATIVE_SUBS, symbol, name, false, everyone);
    if (!reg.ok()) {
      std::fprintf(stderr, "register: %s\n", reg.status.message.c_str());
      return false;
    }
  }
  if (auto reg = admin.register_chip(BENCH_SLEEP_CONFIG, "empty_chip", everyone); !reg.ok()) {
    std::fprintf(stderr, "register: %s\n", reg.status.message.c_str());
    return false;
  }
  if (auto reg = admin.register_import(BENCH_RUNNER_ORCHS, "pto_test_orch_sleeps", "sleeps", true, everyone);
      !reg.ok()) {
    std::fprintf(stderr, "register: %s\n", reg.status.message.c_str());
    return false;
  }
  return true;
}

// A second ptod placed apart from its children ([daemon] cpus: the first CPU
// this process may use; [worker] child_cpus: the others) against the
// bench's daemon, which is not placed: batches of 1,000 jobs and one client's
// jobs one per call, in turns (each measured on both daemons, alternating,
// kRounds times), so that the VM's slow and quick phases fall on both.
void placement(const std::string& address, const std::vector<std::string>& flags) {
  const std::vector<int> cpus = pto::allowed_cpus();
  if (cpus.size() < 2) {
    std::printf("placement: not measured, this process may use one CPU\n");
    return;
  }
  for (const std::string& f : flags)
    if (f.rfind("--cpus", 0) == 0 || f.rfind("--child-cpus", 0) == 0) {
      std::printf("placement: not measured, the bench's own ptod is placed (%s)\n", f.c_str());
      return;
    }
  const std::string mine = std::to_string(cpus.front());
  const std::string theirs = pto::format_cpu_list(std::vector<int>(cpus.begin() + 1, cpus.end()));
  std::vector<std::string> placed_flags = flags;
  placed_flags.insert(placed_flags.end(), {"--cpus", mine, "--child-cpus", theirs});
  pto_test::DaemonProcess placed(placed_flags, 1, 2);
  if (!placed.up()) {
    std::fprintf(stderr, "the placed ptod did not start:\n%s\n", placed.log().c_str());
    return;
  }
  if (!register_callables(placed.address())) return;
  constexpr int kRounds = 3;
  constexpr double kSeconds = 1.5;       // a batch's jobs count when its call returns: ~30 calls a window
  std::vector<double> batch[2], one[2];  // [0]: not placed, [1]: placed
  double switches[2] = {0, 0}, cpu[2] = {0, 0};
  for (int r = 0; r < kRounds; ++r)
    for (int i = 0; i < 2; ++i) {
      const int p = (r + i) % 2;  // each goes first in turn
      const std::string& at = p ? placed.address() : address;
      const pid_t pid = p ? placed.pid() : g_daemon_pid;
      const Rate b = measure_rate(1, 1000, at, pid, kSeconds);
      batch[p].push_back(b.jobs_per_s);
      switches[p] += b.switches_per_job / kRounds;
      cpu[p] += b.daemon_cpu_us_per_job / kRounds;
      one[p].push_back(measure_rate(1, 1, at, pid, kSeconds).jobs_per_s);
    }
  auto ratios = [](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r;
    for (size_t i = 0; i < a.size(); ++i) r.push_back(a[i] / b[i]);
    return r;
  };
  const std::vector<double> br = ratios(batch[1], batch[0]), orr = ratios(one[1], one[0]);
  std::printf(
      "ptod on CPU %s and its children on CPU %s, against ptod not placed, in turns (%d rounds of %.1f s each):\n"
      "  batches of 1,000: %.0f jobs/s against %.0f (%.2fx, rounds %.2fx-%.2fx; context switches per job %.2f "
      "against %.2f; the daemon's CPU time per job %.1f against %.1f us)   [target >= 50,000 jobs/s]\n"
      "  one client, one job per call: %.0f jobs/s against %.0f (%.2fx, rounds %.2fx-%.2fx)\n",
      mine.c_str(), theirs.c_str(), kRounds, kSeconds, median(batch[1]), median(batch[0]), median(br),
      *std::min_element(br.begin(), br.end()), *std::max_element(br.begin(), br.end()), switches[1], switches[0],
      cpu[1], cpu[0], median(one[1]), median(one[0]), median(orr), *std::min_element(orr.begin(), orr.end()),
      *std::max_element(orr.begin(), orr.end()));
  (void)placed.stop();
}

}  // namespace

int main(int argc, char** argv) {
  // As ptoctl does: the downloads' chunks land in pages kept from the last
  // one (docs/daemon.md, "Memory ptod keeps"); ptod keeps its own.
  if (pto::Status s = pto::keep_freed_memory(64ull << 20); !s.ok()) std::fprintf(stderr, "%s\n", s.message.c_str());
  // Extra ptod flags may follow, e.g. --config spin.toml.
  std::vector<std::string> flags = {"--listen", "127.0.0.1:0"};
  for (int i = 1; i < argc; ++i) flags.push_back(argv[i]);
  pto_test::DaemonProcess d(flags, 1, 2);
  if (!d.up()) {
    std::fprintf(stderr, "ptod did not start:\n%s\n", d.log().c_str());
    return 1;
  }
  g_metrics_port = d.metrics_port();
  g_daemon_pid = d.pid();
  if (!register_callables(d.address())) return 1;
  std::printf(
      "ptod bench: 1 chip, 2 sub workers; a trivial job = one no-op sub task; this client keeps 64 MiB of freed "
      "memory, as ptoctl does\n");
  // PTOD_BENCH_ONLY=bandwidth or =jobs: one part alone (quicker A/B runs).
  const char* only_env = std::getenv("PTOD_BENCH_ONLY");
  const std::string only = only_env ? only_env : "";
  if (only == "bandwidth") {
    bandwidth(d.address());
    return d.stop() == 0 ? 0 : 1;
  }
  if (only == "fairness") {
    fairness(d.address());
    return d.stop() == 0 ? 0 : 1;
  }
  if (only == "batch") {
    throughput(1, 1000, d.address());
    return d.stop() == 0 ? 0 : 1;
  }
  if (only == "placement") {
    placement(d.address(), flags);
    return d.stop() == 0 ? 0 : 1;
  }
  if (only == "clients") {
    const double one = throughput(1, 1, d.address());
    std::printf("8 clients / 1 client: %.2fx   [target >= 1.5x]\n", throughput(8, 1, d.address()) / one);
    clients_in_turns(d.address());
    return d.stop() == 0 ? 0 : 1;
  }
  // A local client's job goes through the fd socket (the client's default
  // on a unix socket); the same job through gRPC's Jobs.Submit beside it.
  const double floor_us = unary_floor("unix socket", d.address());
  const double job_us = latency("unix socket, through the fd socket", d.address());
  const double grpc_job_us = latency("unix socket, through gRPC", d.address(), trivial(), false);
  std::printf(
      "trivial job p50 / unary floor p50, unix socket: %.2fx through the fd socket, %.2fx through gRPC   "
      "[target <= 1.3x]\n",
      job_us / floor_us, grpc_job_us / floor_us);
  const v1::SubmitRequest job = trivial();
  {
    Client fd_client(options(d.address())), grpc_client(options(d.address(), false));
    const std::vector<double> p = in_turns({[&] { return grpc_client.version().ok(); },
                                            [&] { return run_ok(grpc_client, job); },
                                            [&] { return run_ok(fd_client, job); }});
    std::printf(
        "the same in turns (a unary call, a job through gRPC, one through the fd socket; 2000 rounds): floor p50 "
        "%.0f us, job p50 %.0f us through gRPC (%.2fx), %.0f us through the fd socket (%.2fx)   [target <= 1.3x]\n",
        p[0], p[1], p[1] / p[0], p[2], p[2] / p[0]);
  }
  if (only == "latency") return d.stop() == 0 ? 0 : 1;
  latency("TCP loopback", "127.0.0.1:" + std::to_string(d.grpc_port()));
  // Warm chip tasks through the daemon: an empty chip job (the chip's L2
  // runtime runs an orchestration that submits nothing) against the no-op
  // sub job, in the same run.
  v1::SubmitRequest chip_job = trivial();
  chip_job.mutable_callable()->set_name("empty_chip");
  chip_job.mutable_args()->add_scalars(0);
  const double chip_us = latency("unix socket, empty chip job", d.address(), chip_job);
  std::printf("empty chip job p50 - no-op sub job p50: %.0f us (the chip task's own cost through ptod)\n",
              chip_us - job_us);
  Client c(options(d.address()));
  const std::vector<double> p = in_turns({[&] { return run_ok(c, job); }, [&] { return run_ok(c, chip_job); }});
  const double sub_p = p[0], chip_p = p[1];
  std::printf("the same in turns (a sub job, then a chip job; 2000 pairs): %.0f us - %.0f us = %.0f us\n", chip_p,
              sub_p, chip_p - sub_p);
  const double one = throughput(1, 1, d.address());
  const double eight = throughput(8, 1, d.address());
  std::printf("8 clients / 1 client: %.2fx   [target >= 1.5x]\n", eight / one);
  clients_in_turns(d.address());
  const double batched = throughput(1, 1000, d.address());
  std::printf("batched submission / one job per call: %.2fx (%.0f jobs/s)   [target >= 50,000 jobs/s]\n",
              batched / one, batched);
  placement(d.address(), flags);
  if (only == "jobs") return d.stop() == 0 ? 0 : 1;
  bandwidth(d.address());
  fairness(d.address());
  return d.stop() == 0 ? 0 : 1;
}
