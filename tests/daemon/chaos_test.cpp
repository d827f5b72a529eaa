// Chaos against the real daemon (docs/daemon.md, "Isolation"): a stream of
// mixed jobs — chip jobs of the vector example, the paged-attention example
// through ptoctl (golden-checked), sub jobs, orchestrations in runners, long
// sleeps — from several clients for PTO_CHAOS_S seconds
// (default 60) while random children are SIGKILLed and SIGSTOPped. Every
// job must end (SUCCEEDED with a correct output, or FAILED / CANCELLED with a
// message); the daemon stays healthy; afterwards no zombie, no leaked
// shared-memory segment, and its memory, threads and descriptors are flat.
#include <dirent.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;

namespace {

constexpr uint32_t N = 16384;

long proc_field(int pid, const char* key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return -1;
}

// Children of `pid` that are zombies.
int zombies_of(int pid) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (std::atoi(e->d_name) <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    const auto p = line.rfind(')');
    char state = 0;
    int ppid = 0;
    if (p != std::string::npos && std::sscanf(line.c_str() + p + 2, "%c %d", &state, &ppid) == 2 && ppid == pid &&
        state == 'Z')
      ++n;
  }
  closedir(d);
  return n;
}

int shm_segments_of(int pid) {
  int n = 0;
  const std::string prefix = "pto-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

std::vector<int> child_pids(Client& c) {
  std::vector<int> out;
  auto w = c.workers();
  if (w.ok())
    for (const auto& n : w.value.root().children())
      if (n.pid() > 0 && n.state() != "dead") out.push_back(n.pid());
  return out;
}

int fd_count(int pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return n;
}

float vector_f(float a, float b) { return (a + b + 1.f) * (a + b + 2.f); }

struct Tally {
  std::mutex mu;
  std::map<std::string, int> by_state;
  std::vector<std::string> problems;
  void add(const std::string& kind, const v1::JobResult& r) {
    std::lock_guard<std::mutex> g(mu);
    ++by_state[kind + " " + v1::JobState_Name(r.state())];
    if (r.state() != v1::SUCCEEDED && r.message().empty())
      problems.push_back(kind + ": job " + std::to_string(r.job_id()) + " ended " + v1::JobState_Name(r.state()) +
                         " without a message");
  }
  void problem(const std::string& p) {
    std::lock_guard<std::mutex> g(mu);
    problems.push_back(p);
  }
};

// One client: its own tensors, a random mix of jobs until `stop`.
void client_loop(const DaemonProcess& d, int id, std::atomic<bool>& stop, Tally& tally) {
  pto::client::ClientOptions o;  // calls may wait for a job up to 60 s
  o.address = d.address();
  o.timeout = std::chrono::seconds(90);
  auto c = std::make_unique<pto::client::Client>(o);
  std::mt19937 rng(1234 + id);
  std::vector<float> a(N), b(N), nan(N, std::nanf(""));
  for (uint32_t i = 0; i < N; ++i) a[i] = 0.001f * float((i + id) % 101), b[i] = 0.5f - 0.002f * float(i % 67);
  const std::string s = std::to_string(id);
  if (!c->upload("a" + s, {N}, PTO_FLOAT32, a.data(), N * 4).ok() ||
      !c->upload("b" + s, {N}, PTO_FLOAT32, b.data(), N * 4).ok() || !c->alloc("x" + s, {4}, PTO_FLOAT32).ok())
    return tally.problem("client " + s + ": setup failed");
  auto tensor = [&](v1::SubmitRequest& r, const std::string& name, v1::TensorTag tag) {
    r.mutable_args()->add_tensors()->mutable_tensor()->set_name(name);
    r.mutable_args()->add_tags(tag);
  };
  for (int round = 0; !stop; ++round) {
    v1::SubmitRequest req;
    std::string kind;
    // Each vector job writes a fresh tensor that starts as NaN: a stale or
    // unwritten result cannot pass.
    const std::string f = "f" + s + "-" + std::to_string(round);
    if (rng() % 8 == 0) {
      // The paged-attention example end to end (register, upload, run,
      // download, golden) by ptoctl: PASS, or a failed job that says why —
      // never a wrong output.
      const Output r = run_command({PTOCTL_PATH, "--address", d.address(), "run-example", PAGED_ATTENTION_CONFIG}, 120);
      const bool passed = r.code == 0 && r.text.find(": PASS (") != std::string::npos;
      if (r.text.find(": FAIL (") != std::string::npos)
        tally.problem("paged attention: a wrong output: " + r.text);
      else if (!passed && r.text.find("FAILED") == std::string::npos)
        tally.problem("paged attention: exit " + std::to_string(r.code) + " without a failed job: " + r.text);
      v1::JobResult fake;
      fake.set_state(passed ? v1::SUCCEEDED : v1::FAILED);
      fake.set_message(passed ? "" : r.text);
      tally.add("paged_attention", fake);
      continue;
    }
    switch (rng() % 4) {
      case 0:
        kind = "vector";
        if (!c->upload(f, {N}, PTO_FLOAT32, nan.data(), N * 4).ok()) {
          tally.problem("vector: upload failed");
          continue;
        }
        req.mutable_callable()->set_name("vector");
        tensor(req, "a" + s, v1::INPUT);
        tensor(req, "b" + s, v1::INPUT);
        tensor(req, f, v1::OUTPUT_EXISTING);
        req.mutable_args()->add_scalars(N);
        break;
      case 1:
        kind = "add_one";
        req.mutable_callable()->set_name("add_one");
        tensor(req, "x" + s, v1::INOUT);
        break;
      case 2:
        kind = "orchestration";
        req.mutable_callable()->set_name("pto_test_orch_subs");
        tensor(req, "x" + s, v1::INOUT);
        req.mutable_args()->add_scalars(20);
        break;
      default:
        kind = "sleep";
        req.mutable_callable()->set_name("sleep");
        req.mutable_args()->add_scalars(rng() % 200);
        break;
    }
    auto sub = c->submit(req);
    if (!sub.ok()) {
      tally.problem(kind + ": submit failed: " + sub.status.message);
      continue;
    }
    auto r = c->result(sub.value.job_id(), 60000);
    if (!r.ok() || (r.value.state() != v1::SUCCEEDED && r.value.state() != v1::FAILED &&
                    r.value.state() != v1::CANCELLED)) {
      // What the daemon said meanwhile (its log lines of the last 60 s are the
      // tail of its log: the warnings about children, the job's own lines).
      const std::string log = d.log();
      const size_t from = log.size() > 6000 ? log.size() - 6000 : 0;
      tally.problem(kind + ": job " + std::to_string(sub.value.job_id()) + " did not end within 60 s (" +
                    (r.ok() ? v1::JobState_Name(r.value.state()) + ", " + std::to_string(r.value.tasks_submitted()) +
                                  " tasks submitted"
                            : r.status.message) +
                    "); the daemon's log ends:\n" + log.substr(from));
      continue;
    }
    tally.add(kind, r.value);
    if (kind == "vector" && r.value.state() == v1::SUCCEEDED) {
      std::vector<uint8_t> got;
      v1::TensorHandle h;
      h.set_name(f);
      if (!c->download(h, &got).ok()) {
        tally.problem("vector: download failed");
        continue;
      }
      for (uint32_t i = 0; i < N; i += 7) {
        float f;
        std::memcpy(&f, got.data() + 4 * i, 4);
        if (!(std::fabs(f - vector_f(a[i], b[i])) <= 1e-4f * std::fabs(vector_f(a[i], b[i])) + 1e-5f)) {
          tally.problem("vector: job " + std::to_string(r.value.job_id()) + " SUCCEEDED with a wrong f[" +
                        std::to_string(i) + "]");
          break;
        }
      }
    }
    if (kind == "vector") {
      v1::TensorHandle h;
      h.set_name(f);
      (void)c->free(h);
    }
  }
}

}  // namespace

TEST_CASE("chaos: mixed jobs while random children are killed and stopped - every job ends, outputs are right") {
  const char* env = std::getenv("PTO_CHAOS_S");
  const int seconds = env ? std::atoi(env) : 60;
  const std::string dir = make_temp_dir("ptod-chaos");
  std::ofstream(dir + "/ptod.toml") << "[worker]\nliveness_timeout_ms = 1000\n[daemon]\ndrain_timeout_s = 5\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"}, /*chips=*/2, /*subs=*/2);
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  REQUIRE(c->register_import(RUNNER_ORCHS, "pto_test_orch_subs", "pto_test_orch_subs", true).ok());

  Tally tally;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) clients.emplace_back([&, i] { client_loop(d, i, stop, tally); });
  std::mt19937 rng(99);
  int kills = 0, stops = 0;
  long rss_warm = -1, threads_warm = -1;
  int fds_warm = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 350));
    const std::vector<int> pids = child_pids(*c);
    if (!pids.empty()) {
      const int pid = pids[rng() % pids.size()];
      const bool sigstop = rng() % 3 == 0;  // a stopped child is found by its heartbeat and killed
      if (kill(pid, sigstop ? SIGSTOP : SIGKILL) == 0) ++(sigstop ? stops : kills);
    }
    if (rss_warm < 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(seconds / 4)) {
      rss_warm = proc_field(d.pid(), "VmRSS:");
      threads_warm = proc_field(d.pid(), "Threads:");
      fds_warm = fd_count(d.pid());
    }
  }
  stop = true;
  for (auto& t : clients) t.join();
  // Quiet again: every child back and idle, the daemon serving.
  CHECK(eventually(
      [&] {
        auto w = c->workers();
        if (!w.ok()) return false;
        for (const auto& n : w.value.root().children())
          if (n.state() != "idle") return false;
        return true;
      },
      15000));
  auto health = c->health();
  REQUIRE(health.ok());
  CHECK(health.value == "SERVING");
  const long rss_end = proc_field(d.pid(), "VmRSS:"), threads_end = proc_field(d.pid(), "Threads:");
  const int fds_end = fd_count(d.pid());
  std::string summary;
  for (const auto& [k, n] : tally.by_state) summary += k + " " + std::to_string(n) + "; ";
  INFO(kills << " SIGKILLs, " << stops << " SIGSTOPs; jobs: " << summary << "rss " << rss_warm << " -> " << rss_end
             << " kB; threads " << threads_warm << " -> " << threads_end << "; fds " << fds_warm
             << " -> " << fds_end);
  for (const auto& p : tally.problems) UNSCOPED_INFO(p);
  CHECK(tally.problems.empty());
  int succeeded = 0;
  for (const auto& [k, n] : tally.by_state) succeeded += k.find("SUCCEEDED") != std::string::npos ? n : 0;
  CHECK(succeeded > 20);
  CHECK(kills + stops > seconds);
  // A child killed in the last moments still reads "idle" until the Worker's
  // next liveness scan (about every 100 ms while idle) reaps and replaces it:
  // no zombie may outlive a few of those.
  CHECK(eventually([&] { return zombies_of(d.pid()) == 0; }, 3000));
  // Flat: no growth with the jobs and restarts. AddressSanitizer holds freed
  // blocks back (its quarantine, 256 MiB by default) before it reuses them,
  // so there the daemon grows by up to that much with no leak (191 -> 405 MiB
  // seen; 33 -> 35 MiB from the same test in a Release build).
#if defined(PTO_UNDER_ASAN)
  constexpr long kQuarantineKb = 256 * 1024;
#else
  constexpr long kQuarantineKb = 0;
#endif
  CHECK(rss_end < rss_warm + 64 * 1024 + kQuarantineKb);
  // Flat: a busy moment can hold a few more (a job's stream, a runner's
  // thread), not one per restart or per job.
  CHECK(threads_end <= threads_warm + 8);
  CHECK(fds_end <= fds_warm + 8);
  const int daemon_pid = d.pid();
  const auto s0 = std::chrono::steady_clock::now();
  CHECK(d.stop(SIGTERM, 30) == 0);
  CHECK(std::chrono::steady_clock::now() - s0 < std::chrono::seconds(5 + 2));  // the drain's bound
  CHECK(shm_segments_of(daemon_pid) == 0);
  std::filesystem::remove_all(dir);
}
