// Orchestrations in runner processes (docs/worker.md, "Runners").
//
// Worker::run calls an orchestration function on the caller's thread: right
// for a program's own code, wrong for a service that runs libraries its
// clients bring. A RunnerPool runs such a library's orchestration in a
// runner: a process forked from this one, so it maps the Worker's arena and
// heap rings at the same addresses. A runner whose job ended cleanly is kept
// warm for `idle_ms` and serves the next job with the same library, symbol
// and reuse key (ptod: the principal and the callable's digest) — no fork,
// the library already loaded; any other job gets a fresh runner. Each Orchestrator
// call the library makes crosses the runner's channel and is made here, on
// the run's thread, with the same semantics (the library cannot tell). A
// crash, exit(), abort or hang of the library's code ends its runner, never
// this process: the run fails with a message naming the callable and the
// signal or exit status. The runner also stops when the run is cancelled or
// its deadline passes, and when its heartbeat stops (SIGSTOP).
//
// Loading a library to check it (registration) happens in a runner too, so
// a constructor that crashes or never returns costs a runner, bounded by
// load_timeout_ms.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "pto/worker.h"

namespace pto {

struct RunnerConfig {
  uint32_t load_timeout_ms = 10000;     // dlopen + dlsym (the library's constructors) must finish within this
  uint32_t liveness_timeout_ms = 2000;  // a runner whose heartbeat stops this long is killed (0 = off)
  uint32_t spin_us = 50;                // either side spins this long before parking
  // A runner whose job ended cleanly waits this long for the next job with
  // the same library, symbol and reuse key, then is killed (0 = a fresh
  // runner for every job).
  uint32_t idle_ms = 10000;
  uint32_t max_idle = 4;  // warm runners kept at most; the longest idle goes first
  // A runner older than this is not kept (its copy-on-write share of this
  // process's memory only grows), nor one the library left threads in.
  uint32_t max_age_s = 600;
};

class RunnerPool {
 public:
  explicit RunnerPool(RunnerConfig cfg = {});
  ~RunnerPool();  // kills the warm runners
  RunnerPool(const RunnerPool&) = delete;
  RunnerPool& operator=(const RunnerPool&) = delete;

  // Loads `path` and looks up `symbol` in a fresh runner; the error names
  // the library and what went wrong (missing symbol, crash, timeout).
  Status check_library(const std::string& path, const std::string& symbol) const;

  // The orchestration path:symbol (the OrchestrationEntryFn ABI,
  // pto/callable.h) as an orchestration function for Worker::run or
  // Worker::submit: it runs the library in a runner — a warm one that last
  // ran this library and symbol with the same `reuse_key`, else a fresh one
  // — and serves its calls. `name` labels messages. Jobs whose code must not
  // share a process get different reuse keys: ptod passes the job's
  // principal and the callable's digest (a library rebuilt at the same path
  // is another callable, never served by the old code).
  // `log_file` non-empty: what the runner writes to stdout and stderr goes
  // there (a job's log).
  OrchestrationFunction orchestration(const std::string& path, const std::string& symbol, const std::string& name,
                                      const std::string& log_file = "", const std::string& reuse_key = "") const;

  struct Stats {
    uint64_t started = 0;  // runners forked
    uint64_t failed = 0;   // ended by a crash, exit, timeout, lost heartbeat or a malformed call
    uint64_t reused = 0;   // jobs served by a warm runner
    uint64_t idle = 0;     // warm runners now
  };
  Stats stats() const;

 private:
  class Warm;
  const RunnerConfig cfg_;
  mutable std::atomic<uint64_t> started_{0}, failed_{0}, reused_{0};
  std::unique_ptr<Warm> warm_;
};

}  // namespace pto
