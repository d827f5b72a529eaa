// The external buffers the TensorMap has seen, by base address, and which of
// them overlap.
//
// The TensorMap keys its chains on a tensor's base address, which is exact for
// views of one buffer. Two external tensors over the same bytes through
// different bases (make_tensor_external(buf) and make_tensor_external(buf + 8),
// or views of them) would never meet in a chain. This index records, for every
// external base in use, the extent of the largest buffer seen at it and the
// other bases whose extents overlap it (its aliases); a lookup then also walks
// the chains of each alias, comparing absolute byte ranges.
//
// Cost: one open-addressing probe per external tensor per submit. The
// ordered index (std::map) is consulted only when a base is new or grows.
// Records of bases that no live task uses are pruned once the index has
// doubled since the last prune, and the whole index is cleared between runs.
//
// Orchestrator-private: no locking.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pto2/config.h"

namespace pto2 {

class ExternalBases {
 public:
  struct Base {
    uint64_t addr = 0;
    uint64_t end = 0;                   // [addr, end): the largest buffer seen at this base
    uint64_t next_seq[kMaxRings] = {};  // per ring: 1 + the newest seq of a task that used it
    std::vector<uint32_t> aliases;      // other live bases whose extents overlap this one
    bool live = false;
  };

  ExternalBases();

  // The record of the external buffer [addr, addr + bytes) used by task_id;
  // registers the base (finding its aliases) when it is new or grows.
  // last_alive: each ring's last_task_alive, for pruning dead records.
  uint32_t touch(uint64_t addr, uint64_t bytes, uint64_t task_id, const uint64_t* last_alive);
  const Base& at(uint32_t idx) const { return recs_[idx]; }

  // Forgets every base (between runs, when no task is alive).
  void clear();
  uint32_t live() const { return live_; }

 private:
  struct Slot {
    uint64_t addr;  // 0 = empty (an external never has base 0)
    uint32_t idx;
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  void reset();
  uint32_t find(uint64_t addr) const;
  void hash_insert(uint64_t addr, uint32_t idx);
  void hash_erase(uint64_t addr);
  void grow_table();
  uint32_t add(uint64_t addr, uint64_t end);
  void link_aliases(uint32_t idx);
  void unlink_aliases(uint32_t idx);
  void prune(const uint64_t* last_alive);

  std::vector<Base> recs_;
  std::vector<uint32_t> free_;
  std::vector<Slot> table_;
  uint64_t mask_ = 0;
  std::map<uint64_t, uint32_t> by_addr_;  // live bases by address, for overlap queries
  uint64_t max_extent_ = 0;               // longest extent registered since the last clear
  uint32_t live_ = 0;
  uint32_t prune_at_ = 0;
};

}  // namespace pto2
