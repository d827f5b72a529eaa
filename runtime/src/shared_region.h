// The shared region (docs/runtime.md §2): one contiguous, 64-byte aligned block that
// orchestrator and scheduler threads communicate through.
//
//   offset 0   SharedHeader        flow-control watermarks per ring, config, flags
//              per ring r:
//                TaskDescriptor[window_r]       written by the orchestrator
//                TaskSlotState[window_r]        scheduler-side state of each slot
//                DepListEntry[dep_pool_r + 1]   entry 0 is the NULL sentinel
//
// Every array starts on a 64-byte boundary; sizes come from RuntimeConfig.
// docs/runtime.md has the same picture with the field owners.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pto2/config.h"
#include "pto2/orchestration_api.h"

namespace pto2 {

inline constexpr uint64_t kAlign = 64;                // PTO2_ALIGN_SIZE
inline constexpr uint64_t kOutputAlign = 1024;        // PTO2_PACKED_OUTPUT_ALIGN
inline constexpr uint32_t kRegionMagic = 0x50544F32;  // "PTO2"
inline constexpr uint32_t kRegionVersion = 1;

inline constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// Flow control of one ring (docs/runtime.md §4). Orchestrator-written and
// scheduler-written fields sit on separate cache lines.
struct RingFlowControl {
  // --- written by the orchestrator ---
  alignas(64) std::atomic<uint64_t> current_task_index{0};  // task ring head: next seq (published at step 8)
  std::atomic<uint64_t> heap_top{0};                        // heap ring allocation position (virtual, monotonic)
  std::atomic<uint64_t> dep_top{0};                         // dep-pool allocation position (virtual, monotonic)
  // --- written by scheduler threads ---
  alignas(64) std::atomic<uint64_t> last_task_alive{0};  // task ring tail: oldest not-yet-retired seq
  std::atomic<uint64_t> heap_tail{0};                    // heap reclaimed up to here (virtual)
  std::atomic<uint64_t> dep_tail{0};                     // dep entries reclaimed up to here (virtual)
  std::atomic<uint32_t> advance_lock{0};                 // one thread advances last_task_alive at a time
  std::atomic<uint64_t> next_scan_index{0};              // incremental scan claim position
  // --- set once at init ---
  alignas(64) uint64_t task_window_size = 0;
  uint64_t heap_size = 0;
  uint64_t dep_pool_size = 0;
  uint64_t descriptors_offset = 0;  // byte offsets inside the region
  uint64_t slot_states_offset = 0;
  uint64_t dep_pool_offset = 0;
};

struct SharedHeader {
  uint32_t magic = kRegionMagic;
  uint32_t version = kRegionVersion;
  uint32_t num_rings = kMaxRings;
  uint64_t total_size = 0;
  alignas(64) std::atomic<uint32_t> orchestrator_done{0};
  RingFlowControl rings[kMaxRings];
};

enum ParamKind : uint8_t {
  kParamInput = 0,
  kParamOutput = 1,
  kParamInOut = 2,
  kParamScalar = 3,
  kParamPipeIn = 4,
  kParamPipeOut = 5
};

// Written by the orchestrator during submit; read-only for schedulers after
// the task is published. Tensor parameters are copied in, so a kernel's
// args[i] can point at tensors[i].
struct alignas(64) TaskDescriptor {
  uint64_t task_id = 0;
  int32_t kernel_id = 0;
  int32_t worker_type = 0;  // PTO2WorkerType, or kWorkerDummy
  uint64_t function_bin_addr = 0;
  int32_t num_params = 0;
  int32_t fanin_count = 0;  // producers this task waits for (edges)
  int32_t fanin_head = 0;   // dep-list of those producers (released when this task completes)
  // Dep-list entries its submit reserved: 2 per producer it may link (+1 for
  // a block's lifetime reference). What it used depends on which producers
  // had completed (§6), so a sizing probe counts a held task at this.
  int32_t dep_reserved = 0;
  uint64_t packed_buffer_base = 0;  // this task's outputs, packed in one heap allocation
  uint64_t packed_buffer_end = 0;
  uint64_t heap_end_pos = 0;  // heap_top after this task's allocation (tail moves here on retire)
  uint64_t dep_end_pos = 0;   // dep_top after this task's entries (tail moves here on retire)
  uint64_t submit_ns = 0;     // profiling: when it was published
  // The chip's programming model (docs/runtime.md §15).
  int32_t cluster_id = -1;  // -1: any core; >= 0: only the cores of this cluster
  int32_t group_id = -1;    // the function group (one cluster allocation) it belongs to
  int32_t block_dim = 1;    // dispatches of this descriptor (a batch descriptor: block_dim > 1)
  int32_t block_base = 0;   // logical block of the first dispatch (an expanded block: its block_idx)
  int32_t block_num = 1;    // logical blocks of the SPMD call, as the kernel sees them
  bool uses_pipes = false;  // names a PIPE_IN / PIPE_OUT parameter
  uint8_t param_kind[PTO2_MAX_PARAMS] = {};
  // The kernel's argument array; the slot after the last argument belongs to
  // the platform (a2a3sim puts the kernel context there).
  int64_t args[PTO2_MAX_PARAMS + 1] = {};
  Tensor tensors[PTO2_MAX_PARAMS] = {};
};
inline constexpr int32_t kWorkerDummy = 2;

// Slot states (docs/runtime.md §6).
enum SlotState : uint32_t { kSlotInitial = 0, kSlotReady = 1, kSlotCompleted = 2, kSlotConsumed = 3 };

// Scheduler-side state of a slot, one cache line each so neighbouring tasks
// completed by different threads do not share lines. Its initial state is all
// zero bytes — what a fresh anonymous mapping holds — so the region commits a
// slot's page only when the ring first reaches it (docs/runtime.md §2).
struct alignas(64) TaskSlotState {
  std::atomic<uint32_t> state{kSlotInitial};
  std::atomic<int32_t> fanin_pending{0};     // producers not yet completed, +1 while submit is in progress
  std::atomic<int32_t> refs{0};              // fanout references: owning scope + own completion + one per consumer
  std::atomic<uint32_t> fanout_lock{0};      // docs/runtime.md §6, fanout lock
  int32_t fanout_head = 0;                   // consumers (dep-list), guarded by fanout_lock
  int32_t fanout_count = 0;                  // consumers linked, guarded by fanout_lock
  bool completed = false;                    // guarded by fanout_lock
  uint64_t ready_ns = 0;                     // profiling: written by whoever makes it ready, before queueing it
  // task id | kRootBit for roots, written before publish. A scanner matches
  // it only against a value with kRootBit set, so 0 (a slot never used) and
  // kNoScanId (a slot being filled) both mean "nothing to claim".
  std::atomic<uint64_t> scan_id{0};
  // A batch descriptor (block_dim > 1): the next block to dispatch, touched
  // only by the scheduler holding the task's one ready-queue entry, and the
  // blocks still to finish (the last one completes the task).
  uint32_t next_block = 0;
  std::atomic<uint32_t> blocks_left{0};
  static constexpr uint64_t kNoScanId = ~0ull;
  static constexpr uint64_t kRootBit = 1ull << 63;
};

struct DepListEntry {
  uint64_t task_id;  // kNoTask in the sentinel
  int32_t next;      // index of the next entry; 0 ends the list
  int32_t pad;
};

// Byte layout for a config (docs/runtime.md §2).
struct SharedRegionLayout {
  uint64_t header_bytes = 0;
  uint64_t descriptors_offset[kMaxRings] = {};
  uint64_t slot_states_offset[kMaxRings] = {};
  uint64_t dep_pool_offset[kMaxRings] = {};
  uint64_t total_bytes = 0;
  static SharedRegionLayout compute(const RuntimeConfig& config);
};

// Owns the mapping. Memory is reserved with mmap and committed as pages are
// touched, so a large window costs address space, not RSS, until used.
class SharedRegion {
 public:
  explicit SharedRegion(const RuntimeConfig& config);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  bool valid() const { return base_ != nullptr; }
  // Forget the mapping without unmapping it (see RuntimeState::leak_mappings).
  void leak() { base_ = nullptr; }
  SharedHeader* header() { return reinterpret_cast<SharedHeader*>(base_); }
  TaskDescriptor* descriptors(int ring) { return at<TaskDescriptor>(layout_.descriptors_offset[ring]); }
  TaskSlotState* slot_states(int ring) { return at<TaskSlotState>(layout_.slot_states_offset[ring]); }
  DepListEntry* dep_pool(int ring) { return at<DepListEntry>(layout_.dep_pool_offset[ring]); }
  const SharedRegionLayout& layout() const { return layout_; }

 private:
  template <typename T>
  T* at(uint64_t off) {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + off);
  }
  SharedRegionLayout layout_;
  void* base_ = nullptr;
};

}  // namespace pto2
