// Shared by the paged-attention kernels: fp32, dense row-major views.
#pragma once

#include <cmath>

#include "pto2/kernel_abi.h"

inline float* pa_f32(int64_t* args, int i) { return static_cast<float*>(pto2_tensor_data(pto2_arg_tensor(args, i))); }

// The math of one KV block, shared by the per-block kernels and the SPMD
// (block_incore) kernels, which pick their block by block_idx.

// s[H, BS] = q[H, D] @ k[BS, D]^T * scale
inline void pa_qk(const float* q, const float* k, float* s, uint64_t H, uint64_t D, uint64_t BS, float scale) {
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t j = 0; j < BS; ++j) {
      float acc = 0.f;
      for (uint64_t d = 0; d < D; ++d) acc += q[h * D + d] * k[j * D + d];
      s[h * BS + j] = acc * scale;
    }
}

// m = rowmax(s[:, :valid]), p = exp(s - m) (0 past valid), l = rowsum(p)
inline void pa_sf(const float* s, float* p, float* m, float* l, uint64_t H, uint64_t BS, uint64_t valid) {
  for (uint64_t h = 0; h < H; ++h) {
    float mx = -INFINITY;
    for (uint64_t j = 0; j < valid; ++j) mx = std::fmax(mx, s[h * BS + j]);
    float sum = 0.f;
    for (uint64_t j = 0; j < BS; ++j) {
      const float e = j < valid ? std::exp(s[h * BS + j] - mx) : 0.f;
      p[h * BS + j] = e;
      sum += e;
    }
    m[h] = mx;
    l[h] = sum;
  }
}

// o[H, D] = p[H, BS] @ v[BS, D]
inline void pa_pv(const float* p, const float* v, float* o, uint64_t H, uint64_t BS, uint64_t D) {
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t d = 0; d < D; ++d) {
      float acc = 0.f;
      for (uint64_t j = 0; j < BS; ++j) acc += p[h * BS + j] * v[j * D + d];
      o[h * D + d] = acc;
    }
}
