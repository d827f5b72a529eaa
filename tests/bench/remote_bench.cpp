// Remote L3 sessions (docs/remote.md): a level-4 Worker in this process,
// its next-level workers two real ptod peers reached through the gRPC link.
// Prints the round trip of a no-op remote task, pipelined remote tasks per
// second on one session and across two, remote-buffer transfer rates (through
// the peer's fd socket, and over the session's stream as to a peer on
// another host), and how
// long a lost peer takes to be noticed. Never fails on a time. Arguments are
// passed to the peers' ptod (e.g. --config FILE with a [worker] spin_us).
// REMOTE_BENCH_ONLY=latency or =buffers runs that part alone (A/B runs).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "pto/base/freed_memory.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"
#include "remote_fd_path.h"
#include "remote_link.h"

using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

std::string socket_path(const pto_test::DaemonProcess& d) { return d.address(); }

struct Cluster {
  ptod::DaemonConfig cfg;  // the links' settings: heartbeat, dead_after, inline limit
  std::unique_ptr<pto::Worker> w;
  std::vector<std::shared_ptr<ptod::GrpcRemoteLink>> links;
  pto::CallableHandle noop;

  // fd: remote-buffer bytes through the peers' fd sockets ([[peers]]
  // fd_transfers); false: over the sessions' streams.
  bool start(const std::vector<const pto_test::DaemonProcess*>& peers, bool fd = true) {
    pto::WorkerConfig wc;
    wc.level = 4;
    wc.spin_us = 50;
    wc.buffer_arena_bytes = 1ull << 30;
    w = std::make_unique<pto::Worker>(wc);
    for (size_t i = 0; i < peers.size(); ++i) {
      ptod::DaemonConfig::Peer p;
      p.address = p.name = socket_path(*peers[i]);
      p.fd_transfers = fd;
      links.push_back(std::make_shared<ptod::GrpcRemoteLink>(p, static_cast<uint32_t>(i), cfg));
      if (!w->add_remote_worker(links.back()).ok()) return false;
    }
    if (pto::Status s = w->init(); !s.ok()) {
      std::fprintf(stderr, "init: %s\n", s.message.c_str());
      return false;
    }
    // The no-op: an orchestration the peers load (examples/cluster), sent as
    // the RegisterRequest a coordinator daemon would forward.
    pto::v1::RegisterRequest req;
    req.set_abi(pto::v1::ABI_ORCHESTRATION);
    req.mutable_native_import()->set_library_path(BENCH_CLUSTER_LIB);
    req.mutable_native_import()->set_symbol("pto_noop");
    pto::CallableOptions o;
    o.remote_payload = req.SerializeAsString();
    const pto::Callable c = pto::OrchestrationCallable::import(BENCH_CLUSTER_LIB, "pto_noop");
    noop = w->register_remote_callable(c.identity(), pto::EntryAbi::ORCHESTRATION, o);
    if (!noop.ok()) std::fprintf(stderr, "register: %s\n", noop.status.message.c_str());
    return noop.ok();
  }
};

void round_trip(Cluster& c) {
  std::vector<double> us;
  for (int i = 0; i < 3000; ++i) {
    const auto t0 = Clock::now();
    pto::RunResult r = c.w->run([&](pto::Orchestrator& o, const pto::TaskArgsView&, const pto::CallConfig&) {
      o.submit_next_level(c.noop, pto::TaskArgs(), {}, 0);
    });
    if (!r.ok()) {
      std::fprintf(stderr, "run failed: %s\n", r.status.message.c_str());
      return;
    }
    if (i >= 200) us.push_back(us_since(t0));
  }
  std::sort(us.begin(), us.end());
  const pto::WorkerStats st = c.w->stats();
  std::printf(
      "remote no-op task, run() with one task, unix socket: p50 %.0f us, p99 %.0f us   [target <= 150 us; "
      "Ray sync task ~1 ms]\n",
      us[us.size() / 2], us[us.size() * 99 / 100]);
  std::printf("  of which dispatch -> completion seen (engine histogram): p50 <= %.0f us, p99 <= %.0f us\n",
              st.remote_round_trip.percentile_ns(0.5) / 1e3, st.remote_round_trip.percentile_ns(0.99) / 1e3);
}

void pipelined(Cluster& c, int workers, int tasks) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    pto::RunResult r = c.w->run([&](pto::Orchestrator& o, const pto::TaskArgsView&, const pto::CallConfig&) {
      for (int i = 0; i < tasks; ++i) o.submit_next_level(c.noop, pto::TaskArgs(), {}, workers == 1 ? 0 : -1);
    });
    const double s = us_since(t0) / 1e6;
    if (!r.ok()) {
      std::fprintf(stderr, "run failed: %s\n", r.status.message.c_str());
      return;
    }
    best = std::max(best, tasks / s);
  }
  std::printf(
      "pipelined no-op remote tasks, %d session(s), %d per run: %.0f tasks/s (best of 3)   [target >= 50k/s; "
      "Ray ~8k async tasks/s per client; the reference keeps 1 task in flight per endpoint]\n",
      workers, tasks, best);
}

// Two rounds: the first buffer on the peer's fresh arena pages, the second
// on the pages the first left warm when freed ([worker] arena_warm_bytes).
void bulk(Cluster& c, uint64_t mib, bool fd) {
  const uint32_t n = static_cast<uint32_t>(mib << 20);
  std::vector<uint8_t> host(n), back(n);
  for (uint32_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 7);
  for (const char* pages : {"fresh", "warm"}) {
    auto buf = c.w->alloc_remote(0, {n}, PTO_UINT8);
    if (!buf.ok()) {
      std::fprintf(stderr, "alloc_remote: %s\n", buf.status.message.c_str());
      return;
    }
    auto t0 = Clock::now();
    pto::Status ws = c.w->write_remote(buf.value, host.data());
    const double w_s = us_since(t0) / 1e6;
    t0 = Clock::now();
    pto::Status rs = c.w->read_remote(buf.value, back.data());
    const double r_s = us_since(t0) / 1e6;
    (void)c.w->free_remote(buf.value);
    if (!ws.ok() || !rs.ok() || back != host) {
      std::fprintf(stderr, "bulk transfer failed: %s %s\n", ws.message.c_str(), rs.message.c_str());
      return;
    }
    if (fd)
      std::printf(
          "remote buffer, %llu MiB, unix socket, through the peer's fd socket (%llu MiB chunks in a shared memfd, 2 in "
          "flight), %s arena pages on the peer: write %.2f GB/s, read %.2f GB/s (bytes checked)   [target >= 1.5 "
          "GB/s]\n",
          (unsigned long long)mib, (unsigned long long)(ptod::PeerFdPath::kSlotBytes >> 20), pages, n / w_s / 1e9,
          n / r_s / 1e9);
    else
      std::printf(
          "remote buffer, %llu MiB, unix socket, over the session's stream ([[peers]] fd_transfers = false; %llu MiB "
          "chunks, a sliding window of %d in flight; the way a peer on another host is reached), %s arena pages on "
          "the peer: write %.2f GB/s, read %.2f GB/s (bytes checked)\n",
          (unsigned long long)mib, (unsigned long long)(ptod::GrpcRemoteLink::kChunkBytes >> 20),
          ptod::GrpcRemoteLink::kChunkWindow, pages, n / w_s / 1e9, n / r_s / 1e9);
    std::fill(back.begin(), back.end(), 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // This process is the coordinator, which in service is a ptod: it keeps
  // freed memory as ptod does ([daemon] malloc_keep_bytes), so the stream's
  // chunks read from a peer land in pages kept from the last ones.
  if (pto::Status s = pto::keep_freed_memory(64ull << 20); !s.ok()) std::fprintf(stderr, "%s\n", s.message.c_str());
  // Extra ptod flags for the peers (e.g. --config FILE), after the bench's own.
  std::vector<std::string> extra(argv + 1, argv + argc);
  pto_test::DaemonProcess a(extra, 1, 0), b(extra, 1, 0);
  if (!a.up() || !b.up()) {
    std::fprintf(stderr, "a peer did not start:\n%s\n%s\n", a.log().c_str(), b.log().c_str());
    return 1;
  }
  std::printf(
      "remote bench: a level-4 Worker here (keeping 64 MiB of freed memory, as ptod does), 2 ptod peers (1 chip each) "
      "over unix sockets, 2 vCPUs shared\n");
  {
    Cluster one;
    if (!one.start({&a})) return 1;
    const char* only_env = std::getenv("REMOTE_BENCH_ONLY");
    const std::string only = only_env ? only_env : "";
    if (only.empty() || only == "latency") round_trip(one);
    if (only.empty()) pipelined(one, 1, 20000);
    if (only.empty() || only == "buffers") {
      bulk(one, 256, true);
      Cluster stream;  // on the other peer, whose arena pages are still fresh
      if (!stream.start({&b}, false)) return 1;
      bulk(stream, 256, false);
    }
    if (!only.empty()) return 0;
  }
  Cluster two;
  if (!two.start({&a, &b})) return 1;
  pipelined(two, 2, 20000);

  // Failure detection: a peer that dies (the connection closes) and a peer
  // that hangs (only the heartbeats tell).
  auto t0 = Clock::now();
  kill(b.pid(), SIGSTOP);
  while (two.links[1]->ready() && us_since(t0) < 5e6) usleep(200);
  std::printf(
      "peer hung (SIGSTOP) -> session declared lost: %.0f ms   [heartbeat %u ms, dead after %u ms; target "
      "<= 1 s; the reference needs 30 s]\n",
      us_since(t0) / 1e3, two.cfg.heartbeat_ms, two.cfg.dead_after_ms);
  kill(b.pid(), SIGCONT);
  while (!two.links[1]->ready() && us_since(t0) < 10e6) usleep(1000);
  t0 = Clock::now();
  kill(a.pid(), SIGKILL);
  while (two.links[0]->ready() && us_since(t0) < 5e6) usleep(100);
  std::printf("peer killed (SIGKILL) -> session declared lost: %.1f ms\n", us_since(t0) / 1e3);
  return 0;
}
