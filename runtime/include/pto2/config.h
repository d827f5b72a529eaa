// Runtime configuration: a struct with the reference design's defaults and
// its environment variables layered on top (docs/runtime.md §10).
#pragma once

#include <cstdint>
#include <string>

#include "pto2/errors.h"

namespace pto2 {

inline constexpr int kMaxRings = 4;  // ring = min(scope depth, 3)

// How a block_incore task (block_dim > 1) is submitted (docs/runtime.md §15).
enum class BlockMode : int32_t {
  kBatch = 0,   // one batch descriptor dispatched block_dim times (the default)
  kExpand = 1,  // the baseline: block_dim tasks and a join task
};

// What PTO2_CAPTURE regions do (docs/runtime.md §16).
enum class CaptureMode : int32_t {
  kReplay = 0,  // record on first execution, replay on later ones (the default)
  kOff = 1,     // always run the region's code as plain submission
  kVerify = 2,  // always run the code, record it, and warn where it differs from the last recording
};

struct RuntimeConfig {
  // Per ring (one ring per scope depth 0..3): task slots, output heap bytes,
  // dependency-list entries. The defaults are consistent with one another:
  // a scope that fits the window (up to window - 1 tasks held at once) with
  // up to two tensors and one producer per task fits both pools.
  uint64_t task_window = 65536;           // PTO2_RING_TASK_WINDOW: power of two, >= 4
  uint64_t heap_size = 1ull << 30;        // PTO2_RING_HEAP: bytes, >= 1024 (address space; committed on use)
  uint64_t dep_pool_size = 131072;        // PTO2_RING_DEP_POOL: entries, >= 16 (an edge takes 2)
  uint64_t tensormap_pool_size = 131072;  // PTO2_TENSORMAP_POOL: entries, >= 16 (one per tensor parameter)
  // PTO2_TENSORMAP_BUCKETS: power of two. The seed uses 65536; 4096 keeps the
  // bucket heads (32 B each) in L2, and chain truncation keeps chains short.
  // Measured: 0.60 -> 0.43 us per contended submit (docs/runtime.md).
  uint64_t tensormap_buckets = 4096;
  int32_t ready_queue_shards = 3;                   // PTO2_READY_QUEUE_SHARDS: 1..16
  int32_t scheduler_threads = 0;                    // PTO2_SCHEDULER_THREADS: 1..16; 0 = min(3, CPUs - 1), at least 1
  uint32_t cleanup_interval = 64;                   // retired tasks between TensorMap batch cleanups
  uint32_t blocked_warn_ms = 1000;                  // period of BLOCKED warnings while back-pressured
  uint32_t stall_timeout_ms = 60000;                // fail a run when nothing completes for this long (0 = never)
  uint32_t spin_before_park_us = 50;                // idle spin budget before a thread parks
  bool profiling = false;                           // per-task timestamps in RunResult::records (PTO2_PROFILING=1)
  BlockMode block_mode = BlockMode::kBatch;         // PTO2_BLOCK_MODE=batch|expand
  CaptureMode capture_mode = CaptureMode::kReplay;  // PTO2_CAPTURE_MODE=replay|off|verify
  // PTO2_CAPTURE_CACHE_TASKS: recorded tasks kept across all captured regions
  // (least recently used regions are dropped first); >= 1.
  uint64_t capture_cache_tasks = 1u << 20;

  // Rejects values that break the rules above; the message names the value.
  Status validate() const;

  // Overrides fields from PTO2_* environment variables. A malformed or
  // invalid value is an error naming the variable and the value.
  Status apply_env();

  // The scheduler thread count this config resolves to on this machine.
  int32_t resolved_scheduler_threads() const;
};

}  // namespace pto2
