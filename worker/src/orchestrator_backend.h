// What a pto::Orchestrator forwards to. In-process runs (Worker::run) use
// the engine's own run (LocalOrchestration, orchestrator.cpp); an
// orchestration in a runner process uses a backend that carries each call
// over the runner's channel to the engine (runner_channel.h). The calls and
// their semantics are those of pto::Orchestrator (pto/worker.h).
#pragma once

#include <string>
#include <vector>

#include "pto/worker.h"

namespace pto {

class OrchestratorBackend {
 public:
  virtual ~OrchestratorBackend() = default;
  // One task: `members` has one entry, or a group's (group = true).
  virtual SubmitResult submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members,
                              const CallConfig& cfg, const std::vector<int>& pinned, bool group) = 0;
  virtual Result<ContinuousTensor> alloc(const std::vector<uint32_t>& shape, int32_t dtype) = 0;
  virtual void scope_begin() = 0;
  virtual Status scope_end() = 0;
  virtual int scope_depth() const = 0;
  virtual CallableHandle find_callable(const std::string& name) const = 0;
  virtual bool cancelled() const = 0;
  virtual void fail(const std::string& message) = 0;
  virtual int level() const = 0;
  virtual int num_next_level() const = 0;
  virtual int num_sub_workers() const = 0;
};

// The one place an Orchestrator is made from a backend.
struct OrchestratorAccess {
  static Orchestrator make(OrchestratorBackend* b) { return Orchestrator(b); }
};

}  // namespace pto
