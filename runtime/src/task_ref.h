// Task ids. Each ring numbers its tasks 0,1,2,... (its own sequence); a task
// id names the ring and the sequence: id = seq << 2 | ring. Ids are what the
// API returns, what dep-list entries, TensorMap entries and ready queues hold,
// and what a core reports on completion.
#pragma once

#include <cstdint>

namespace pto2 {

inline constexpr uint64_t kRingBits = 2;
inline constexpr uint64_t kNoTask = ~0ull;

inline uint64_t make_task_id(uint32_t ring, uint64_t seq) { return (seq << kRingBits) | ring; }
inline uint32_t task_ring(uint64_t id) { return static_cast<uint32_t>(id & ((1u << kRingBits) - 1)); }
inline uint64_t task_seq(uint64_t id) { return id >> kRingBits; }

// Tensor::owner stores id + 1 so that 0 means "external buffer".
inline uint64_t owner_from_task(uint64_t id) { return id + 1; }
inline uint64_t task_from_owner(uint64_t owner) { return owner - 1; }

}  // namespace pto2
