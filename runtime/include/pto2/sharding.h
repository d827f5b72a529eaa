// Sharding search: how a block task spreads one output over the tiles of a
// spatial chip (tx8sim, docs/tx8sim.md "Sharding"). Header-only C, so the
// orchestration that picks the block count and the kernel that finds its
// share compute the same plan from the same shape.
//
// The search follows the TX8 compiler's: every factorisation of the tile
// count over the output's dimensions (each dimension's factor from 1 up, the
// product exactly `tiles`), plus "no sharding"; each scored by its effective
// parallelism — per dimension the smaller of the factor and the most shards
// the dimension allows (the last dimension only in whole alignment units),
// multiplied. The best score wins; among equals the first in enumeration
// order (the innermost dimensions split first). The compiler ranks by the
// score's log2 rounded up (`level`); we keep the exact product, which orders
// the same levels and breaks ties inside one.
#pragma once

#include <stdint.h>

#include "pto2/orchestration_api.h"

struct PTO2ShardPlan {
  int32_t ndim;
  int32_t factor[PTO2_MAX_DIMS];     // the chosen factorisation (product = tiles, or all 1)
  int32_t effective[PTO2_MAX_DIMS];  // shards per dimension actually used: min(factor, most allowed)
  int32_t blocks;                    // product of effective: the block task's block_dim
  int32_t level;                     // ceil(log2(blocks)), the compiler's score
};

// The most shards dimension d of `shape` allows: shape[d], or on the last
// dimension ceil(shape / align) when align > 1.
static inline uint32_t pto2_shard_max(const uint32_t* shape, int32_t ndim, int32_t d, uint32_t align) {
  if (d == ndim - 1 && align > 1) return (uint32_t)(((uint64_t)shape[d] + align - 1) / align);
  return shape[d];
}

static inline int32_t pto2_shard_score(const uint32_t* shape, int32_t ndim, const int32_t* factor, uint32_t align,
                                       int32_t* effective) {
  int32_t blocks = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    const uint32_t most = pto2_shard_max(shape, ndim, d, align);
    const int32_t e = (uint32_t)factor[d] < most ? factor[d] : (int32_t)(most ? most : 1);
    if (effective) effective[d] = e;
    blocks *= e;
  }
  return blocks;
}

static inline int32_t pto2_ceil_log2(int32_t v) {
  int32_t l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

// Recursion over dimensions: factor[d] from 1 to what is left of `tiles`.
// allowed: bit d set = dimension d may be sharded.
static inline void pto2_shard_search_dim(const uint32_t* shape, int32_t ndim, uint32_t align, uint32_t allowed,
                                         int32_t tiles, int32_t d, int32_t product, int32_t* factor,
                                         struct PTO2ShardPlan* best) {
  if (d == ndim) {
    if (product != tiles) return;
    int32_t eff[PTO2_MAX_DIMS];
    const int32_t blocks = pto2_shard_score(shape, ndim, factor, align, eff);
    if (blocks > best->blocks) {
      best->blocks = blocks;
      for (int32_t i = 0; i < ndim; ++i) {
        best->factor[i] = factor[i];
        best->effective[i] = eff[i];
      }
    }
    return;
  }
  const int32_t top = (allowed >> d) & 1u ? tiles / product : 1;
  for (int32_t f = 1; f <= top; ++f) {
    if (product * f > tiles || tiles % (product * f) != 0) continue;
    factor[d] = f;
    pto2_shard_search_dim(shape, ndim, align, allowed, tiles, d + 1, product * f, factor, best);
  }
  factor[d] = 1;
}

// The plan for an output of `shape` over `tiles` tiles. align: elements per
// alignment unit of the last dimension (1 = none); allowed: the dimensions
// that may be sharded (bit d; ~0u = all).
static inline struct PTO2ShardPlan pto2_shard_search(const uint32_t* shape, int32_t ndim, int32_t tiles, uint32_t align,
                                                     uint32_t allowed) {
  struct PTO2ShardPlan best;
  memset(&best, 0, sizeof(best));
  if (ndim < 1) ndim = 1;
  if (ndim > PTO2_MAX_DIMS) ndim = PTO2_MAX_DIMS;
  best.ndim = ndim;
  for (int32_t i = 0; i < ndim; ++i) best.factor[i] = best.effective[i] = 1;
  best.blocks = 1;  // "no sharding": always a candidate
  int32_t factor[PTO2_MAX_DIMS] = {1, 1, 1, 1};
  if (tiles > 1) pto2_shard_search_dim(shape, ndim, align, allowed, tiles, 0, 1, factor, &best);
  best.level = pto2_ceil_log2(best.blocks);
  return best;
}

// The naive plan the search is measured against: the outermost dimension cut
// into min(tiles, shape[0]) equal parts.
static inline struct PTO2ShardPlan pto2_shard_naive(const uint32_t* shape, int32_t ndim, int32_t tiles) {
  struct PTO2ShardPlan p;
  memset(&p, 0, sizeof(p));
  p.ndim = ndim < 1 ? 1 : (ndim > PTO2_MAX_DIMS ? PTO2_MAX_DIMS : ndim);
  for (int32_t i = 0; i < p.ndim; ++i) p.factor[i] = p.effective[i] = 1;
  if (tiles < 1) tiles = 1;
  p.factor[0] = tiles;
  p.effective[0] = (uint32_t)tiles < shape[0] ? tiles : (shape[0] ? (int32_t)shape[0] : 1);
  p.blocks = p.effective[0];
  p.level = pto2_ceil_log2(p.blocks);
  return p;
}

// Block block_idx's share of dimension d: [*begin, *end). Shards are as even
// as the dimension allows; on the last dimension they are whole alignment
// units (the last shard takes the remainder).
static inline void pto2_shard_range(const struct PTO2ShardPlan* plan, const uint32_t* shape, uint32_t align,
                                    int32_t block_idx, int32_t d, uint32_t* begin, uint32_t* end) {
  const int32_t ndim = plan->ndim < PTO2_MAX_DIMS ? plan->ndim : PTO2_MAX_DIMS;
  if (d < 0 || d >= ndim) {
    *begin = *end = 0;
    return;
  }
  int32_t coord = block_idx < 0 ? 0 : block_idx;
  for (int32_t i = ndim - 1; i > d; --i) {
    const int32_t e = plan->effective[i & (PTO2_MAX_DIMS - 1)];
    coord /= e > 0 ? e : 1;
  }
  const uint32_t n = plan->effective[d] > 0 ? (uint32_t)plan->effective[d] : 1;
  const uint32_t unit = (d == plan->ndim - 1 && align > 1) ? align : 1;
  const uint32_t units = (uint32_t)(((uint64_t)shape[d] + unit - 1) / unit);
  coord %= (int32_t)n;
  const uint64_t lo = (uint64_t)units * (uint32_t)coord / n * unit;
  const uint64_t hi = (uint64_t)units * (uint32_t)(coord + 1) / n * unit;
  *begin = lo < shape[d] ? (uint32_t)lo : shape[d];
  *end = hi < shape[d] ? (uint32_t)hi : shape[d];
}
