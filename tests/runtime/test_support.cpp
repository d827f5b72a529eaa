#include "test_support.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace pto2::test {

namespace {

std::atomic<ExecLog*> g_log{nullptr};
std::atomic<uint64_t> g_clock{0};

const Tensor* T(int64_t* args, int i) { return reinterpret_cast<const Tensor*>(args[i]); }

template <typename E>
E& at(const Tensor* t, uint64_t i) {
  // i-th element of the view in row-major order.
  uint64_t rest = i, elem = 0;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    const uint64_t idx = rest % t->shapes[d];
    rest /= t->shapes[d];
    elem += (t->offsets[d] + idx) * pto2_tensor_stride(t, d);
  }
  return reinterpret_cast<E*>(t->addr)[elem];
}

void stamp_start(int64_t tag) {
  if (ExecLog* log = g_log.load(std::memory_order_acquire)) {
    if (tag >= 0 && static_cast<size_t>(tag) < log->start.size())
      log->start[tag].store(g_clock.fetch_add(1) + 1, std::memory_order_relaxed);
  }
}
void stamp_end(int64_t tag) {
  if (ExecLog* log = g_log.load(std::memory_order_acquire)) {
    if (tag >= 0 && static_cast<size_t>(tag) < log->end.size())
      log->end[tag].store(g_clock.fetch_add(1) + 1, std::memory_order_relaxed);
  }
}

// args: [0]=in0 [1]=in1 [2]=out
void k_add(int64_t* a) {
  const uint64_t n = pto2_tensor_numel(T(a, 2));
  for (uint64_t i = 0; i < n; ++i) at<float>(T(a, 2), i) = at<float>(T(a, 0), i) + at<float>(T(a, 1), i);
}
// args: [0]=in [1]=scalar (float bits) [2]=out
void k_add_scalar(int64_t* a) {
  float s;
  const uint32_t bits = static_cast<uint32_t>(a[1]);
  std::memcpy(&s, &bits, sizeof(s));
  const uint64_t n = pto2_tensor_numel(T(a, 2));
  for (uint64_t i = 0; i < n; ++i) at<float>(T(a, 2), i) = at<float>(T(a, 0), i) + s;
}
void k_mul(int64_t* a) {
  const uint64_t n = pto2_tensor_numel(T(a, 2));
  for (uint64_t i = 0; i < n; ++i) at<float>(T(a, 2), i) = at<float>(T(a, 0), i) * at<float>(T(a, 1), i);
}
// args: [0]=A (M×K) [1]=B (K×N) [2]=C (M×N, INOUT)
void k_mat_acc(int64_t* a) {
  const Tensor *A = T(a, 0), *B = T(a, 1), *C = T(a, 2);
  const uint32_t M = A->shapes[0], K = A->shapes[1], N = B->shapes[1];
  for (uint32_t i = 0; i < M; ++i)
    for (uint32_t j = 0; j < N; ++j) {
      float acc = 0;
      for (uint32_t k = 0; k < K; ++k) acc += at<float>(A, i * K + k) * at<float>(B, k * N + j);
      at<float>(C, i * N + j) += acc;
    }
}
// args: [0]=v (INOUT int64) [1]=u (INPUT int64) [2]=tag
void k_mix(int64_t* a) {
  stamp_start(a[2]);
  const Tensor *v = T(a, 0), *u = T(a, 1);
  const uint64_t n = pto2_tensor_numel(v), m = pto2_tensor_numel(u);
  for (uint64_t i = 0; i < n; ++i) at<int64_t>(v, i) = mix_step(at<int64_t>(v, i), at<int64_t>(u, i % m), a[2]);
  stamp_end(a[2]);
}
void k_fill(int64_t* a) {
  const uint64_t n = pto2_tensor_numel(T(a, 0));
  for (uint64_t i = 0; i < n; ++i) at<int64_t>(T(a, 0), i) = a[1];
}
void k_slow_copy(int64_t* a) {
  std::this_thread::sleep_for(std::chrono::microseconds(a[2]));
  const uint64_t n = pto2_tensor_numel(T(a, 1));
  for (uint64_t i = 0; i < n; ++i) at<int64_t>(T(a, 1), i) = at<int64_t>(T(a, 0), i);
}
// args: any; the last one is the tag (scalar)
void k_record(int64_t* a, int n) {
  stamp_start(a[n - 1]);
  stamp_end(a[n - 1]);
}

}  // namespace

void set_exec_log(ExecLog* log) { g_log.store(log, std::memory_order_release); }
uint64_t exec_clock() { return g_clock.load(); }

void register_test_kernels(HostThreadPlatform& p) {
  p.register_kernel(kAdd, WorkerType::kVector, k_add);
  p.register_kernel(kAddScalar, WorkerType::kVector, k_add_scalar);
  p.register_kernel(kMul, WorkerType::kVector, k_mul);
  p.register_kernel(kMatAcc, WorkerType::kCube, k_mat_acc);
  p.register_kernel(kMix, WorkerType::kVector, k_mix);
  p.register_kernel(kMixCube, WorkerType::kCube, k_mix);
  p.register_kernel(kFill, WorkerType::kVector, k_fill);
  p.register_kernel(kSlowCopy, WorkerType::kVector, k_slow_copy);
  // kRecord: the tag is args[0] (a single scalar param) on either core type.
  p.register_kernel(kRecord, WorkerType::kVector, [](int64_t* a) { k_record(a, 1); });
  p.register_kernel(kRecord, WorkerType::kCube, [](int64_t* a) { k_record(a, 1); });
}

RuntimeConfig small_config(int scheduler_threads) {
  RuntimeConfig c;
  c.task_window = 1024;
  c.heap_size = 1 << 20;
  c.dep_pool_size = 4096;
  c.tensormap_pool_size = 4096;
  c.tensormap_buckets = 1024;
  c.scheduler_threads = scheduler_threads;
  c.stall_timeout_ms = 20000;
  return c;
}

Chip::Chip(RuntimeConfig config, int executor_threads, int cube, int vector)
    : platform(HostThreadPlatformConfig{cube, vector, executor_threads, 50}) {
  register_test_kernels(platform);
  runtime = Runtime::create(config, platform, &create_status);
}

}  // namespace pto2::test
