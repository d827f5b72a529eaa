// A task of a run as the engine tracks it: a node of the task graph
// (TaskGraph), with its arguments encoded for the mailbox, its edges, its
// references and its outcome. Nodes live in their run's state (run_state.h)
// until the run has ended and every node of it is consumed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pto/worker.h"

namespace pto {

struct RunState;

struct TaskNode {
  uint64_t id = 0;
  RunState* run = nullptr;
  bool next_level = false;  // else a sub task
  CallableIdentity callable;
  CallConfig config;
  std::vector<std::vector<uint8_t>> blobs;         // one encoded args blob per group member
  std::vector<int> pinned;                         // per member: endpoint index within its kind, or -1
  std::vector<std::vector<TensorDirection>> dirs;  // per member, per tensor (remote endpoints copy by it)
  std::shared_ptr<const std::vector<uint8_t>> allowed;  // next-level endpoints holding the callable; null = all
  uint32_t retries_left = 0;         // ENDPOINT_FAILURE retries on another endpoint (single-member tasks)
  int avoid = -1;                    // the endpoint index its last attempt failed on
  bool uses_remote_buffer = false;   // pinned to the worker that holds the buffer; never retried
  enum class State { kPending, kReady, kRunning, kFinal } state = State::kPending;
  int fanin = 0;                                   // producers not final yet (+1 while submit is wiring)
  std::vector<std::pair<TaskNode*, bool>> fanout;  // consumer, reads our data (poisons)
  bool poisoned = false;
  std::string poison;  // why (names the failed upstream task)
  Outcome outcome = Outcome::SUCCESS;
  TaskFailure failure;  // the member failure that decided the outcome
  int members_left = 0;
  int refs = 0;                         // scope + self-not-final + consumers holding our buffers
  std::vector<TaskNode*> holds;         // producers found through the TensorMap
  std::vector<TaskNode*> buffer_holds;  // owners of the heap-ring buffers this task touches
  int ring = -1;
  uint64_t heap_start = 0, heap_end = 0;  // address of the allocation, ring position of its end
  bool consumed = false;
  // TensorMap entries this node is in: (lo, hi) regions it wrote, and read.
  std::vector<std::pair<uint64_t, uint64_t>> written, read;
  int scope_depth = 0;
  uint64_t submit_ns = 0;
};

}  // namespace pto
