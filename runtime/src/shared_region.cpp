#include "shared_region.h"

#include <new>

#include <sys/mman.h>

namespace pto2 {

SharedRegionLayout SharedRegionLayout::compute(const RuntimeConfig& config) {
  SharedRegionLayout l;
  l.header_bytes = align_up(sizeof(SharedHeader), kAlign);
  uint64_t off = l.header_bytes;
  for (int r = 0; r < kMaxRings; ++r) {
    l.descriptors_offset[r] = off;
    off += align_up(config.task_window * sizeof(TaskDescriptor), kAlign);
    l.slot_states_offset[r] = off;
    off += align_up(config.task_window * sizeof(TaskSlotState), kAlign);
    l.dep_pool_offset[r] = off;
    off += align_up((config.dep_pool_size + 1) * sizeof(DepListEntry), kAlign);
  }
  l.total_bytes = off;
  return l;
}

SharedRegion::SharedRegion(const RuntimeConfig& config) : layout_(SharedRegionLayout::compute(config)) {
  void* p =
      mmap(nullptr, layout_.total_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  base_ = p;
  // Anonymous pages are zero, and all-zero is the initial state of a slot
  // (TaskSlotState); descriptors and slot states are (re)initialised when a
  // slot is allocated. So only the header and the sentinel are built here:
  // touching every slot state cost 16 MiB of page faults at start-up with the
  // default window (about 4 ms of pto2-run's 11).
  auto* h = new (base_) SharedHeader();
  h->total_size = layout_.total_bytes;
  for (int r = 0; r < kMaxRings; ++r) {
    RingFlowControl& fc = h->rings[r];
    fc.task_window_size = config.task_window;
    fc.heap_size = config.heap_size;
    fc.dep_pool_size = config.dep_pool_size;
    fc.descriptors_offset = layout_.descriptors_offset[r];
    fc.slot_states_offset = layout_.slot_states_offset[r];
    fc.dep_pool_offset = layout_.dep_pool_offset[r];
    DepListEntry* pool = dep_pool(r);
    pool[0].task_id = ~0ull;  // NULL sentinel: task -1, next 0
    pool[0].next = 0;
  }
}

SharedRegion::~SharedRegion() {
  if (base_) munmap(base_, layout_.total_bytes);
}

}  // namespace pto2
