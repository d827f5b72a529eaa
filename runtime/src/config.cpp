#include "pto2/config.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace pto2 {

namespace {

constexpr uint64_t kMaxDepPool = (1ull << 28) - 1;  // dep links keep the index in 29 bits

bool parse_u64(const char* text, uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text) return false;
  uint64_t mult = 1;
  if (*end == 'k' || *end == 'K')
    mult = 1ull << 10, ++end;
  else if (*end == 'm' || *end == 'M')
    mult = 1ull << 20, ++end;
  else if (*end == 'g' || *end == 'G')
    mult = 1ull << 30, ++end;
  if (*end != '\0') return false;
  // 17179869185g wrapped to exactly 1 GiB, a valid heap: past 2^64 is not a number.
  if (static_cast<uint64_t>(v) > UINT64_MAX / mult) return false;
  *out = static_cast<uint64_t>(v) * mult;
  return true;
}

}  // namespace

Status RuntimeConfig::validate() const {
  auto bad = [](std::string m) { return Status::Error(kInvalidConfig, std::move(m)); };
  if (task_window < 4 || !std::has_single_bit(task_window))
    return bad(fmt::format("task_window (PTO2_RING_TASK_WINDOW) = {}: must be a power of two >= 4", task_window));
  if (task_window > (1ull << 24))
    return bad(fmt::format("task_window (PTO2_RING_TASK_WINDOW) = {}: must be <= {}", task_window, 1ull << 24));
  if (heap_size < 1024) return bad(fmt::format("heap_size (PTO2_RING_HEAP) = {}: must be >= 1024 bytes", heap_size));
  if (heap_size > (1ull << 40))
    return bad(fmt::format("heap_size (PTO2_RING_HEAP) = {}: must be <= {} (1 TiB)", heap_size, 1ull << 40));
  if (heap_size % 1024 != 0)
    return bad(
        fmt::format("heap_size (PTO2_RING_HEAP) = {}: must be a multiple of 1024 (the output alignment)", heap_size));
  if (dep_pool_size < 16 || dep_pool_size > kMaxDepPool)
    return bad(fmt::format("dep_pool_size (PTO2_RING_DEP_POOL) = {}: must be in 16..{}", dep_pool_size, kMaxDepPool));
  if (tensormap_pool_size < 16 || tensormap_pool_size > (1ull << 30))
    return bad(fmt::format("tensormap_pool_size (PTO2_TENSORMAP_POOL) = {}: must be in 16..{}", tensormap_pool_size,
                           1ull << 30));
  if (tensormap_buckets < 1 || !std::has_single_bit(tensormap_buckets) || tensormap_buckets > (1ull << 26))
    return bad(fmt::format("tensormap_buckets (PTO2_TENSORMAP_BUCKETS) = {}: must be a power of two in 1..{}",
                           tensormap_buckets, 1ull << 26));
  if (ready_queue_shards < 1 || ready_queue_shards > 16)
    return bad(fmt::format("ready_queue_shards (PTO2_READY_QUEUE_SHARDS) = {}: must be in 1..16", ready_queue_shards));
  if (scheduler_threads < 0 || scheduler_threads > 16)
    return bad(fmt::format("scheduler_threads (PTO2_SCHEDULER_THREADS) = {}: must be in 0..16 (0 = automatic)",
                           scheduler_threads));
  if (cleanup_interval < 1) return bad(fmt::format("cleanup_interval = {}: must be >= 1", cleanup_interval));
  if (blocked_warn_ms < 1) return bad(fmt::format("blocked_warn_ms = {}: must be >= 1", blocked_warn_ms));
  if (capture_cache_tasks < 1 || capture_cache_tasks > (1ull << 32))
    return bad(fmt::format("capture_cache_tasks (PTO2_CAPTURE_CACHE_TASKS) = {}: must be in 1..{}", capture_cache_tasks,
                           1ull << 32));
  return Status::Ok();
}

Status RuntimeConfig::apply_env() {
  struct Var {
    const char* name;
    uint64_t* u64;
    int32_t* i32;
  };
  uint64_t shards = static_cast<uint64_t>(ready_queue_shards);
  uint64_t threads = static_cast<uint64_t>(scheduler_threads);
  const Var vars[] = {
      {"PTO2_RING_TASK_WINDOW", &task_window, nullptr},
      {"PTO2_RING_HEAP", &heap_size, nullptr},
      {"PTO2_RING_DEP_POOL", &dep_pool_size, nullptr},
      {"PTO2_TENSORMAP_POOL", &tensormap_pool_size, nullptr},
      {"PTO2_TENSORMAP_BUCKETS", &tensormap_buckets, nullptr},
      {"PTO2_READY_QUEUE_SHARDS", &shards, nullptr},
      {"PTO2_SCHEDULER_THREADS", &threads, nullptr},
      {"PTO2_CAPTURE_CACHE_TASKS", &capture_cache_tasks, nullptr},
  };
  for (const Var& v : vars) {
    // Nothing in the runtime sets the environment, so reading it is safe.
    const char* text = std::getenv(v.name);  // NOLINT(concurrency-mt-unsafe)
    if (text == nullptr) continue;
    uint64_t value = 0;
    if (!parse_u64(text, &value))
      return Status::Error(
          kInvalidConfig,
          fmt::format("{}='{}': not a non-negative integer below 2^64 (suffixes k, m, g allowed)", v.name, text));
    *v.u64 = value;
  }
  if (shards > 1024 || threads > 1024)
    return Status::Error(kInvalidConfig, fmt::format("PTO2_READY_QUEUE_SHARDS={} / PTO2_SCHEDULER_THREADS={}: too "
                                                     "large",
                                                     shards, threads));
  if (const char* p = std::getenv("PTO2_PROFILING")) {  // NOLINT(concurrency-mt-unsafe): as above
    if (std::string(p) != "0" && std::string(p) != "1")
      return Status::Error(kInvalidConfig, fmt::format("PTO2_PROFILING='{}': must be 0 or 1", p));
    profiling = std::string(p) == "1";
  }
  if (const char* m = std::getenv("PTO2_BLOCK_MODE")) {  // NOLINT(concurrency-mt-unsafe): as above
    if (std::string(m) == "batch")
      block_mode = BlockMode::kBatch;
    else if (std::string(m) == "expand")
      block_mode = BlockMode::kExpand;
    else
      return Status::Error(kInvalidConfig, fmt::format("PTO2_BLOCK_MODE='{}': must be batch or expand", m));
  }
  if (const char* m = std::getenv("PTO2_CAPTURE_MODE")) {  // NOLINT(concurrency-mt-unsafe): as above
    if (std::string(m) == "replay")
      capture_mode = CaptureMode::kReplay;
    else if (std::string(m) == "off")
      capture_mode = CaptureMode::kOff;
    else if (std::string(m) == "verify")
      capture_mode = CaptureMode::kVerify;
    else
      return Status::Error(kInvalidConfig, fmt::format("PTO2_CAPTURE_MODE='{}': must be replay, off or verify", m));
  }
  ready_queue_shards = static_cast<int32_t>(shards);
  scheduler_threads = static_cast<int32_t>(threads);
  return validate();
}

int32_t RuntimeConfig::resolved_scheduler_threads() const {
  if (scheduler_threads > 0) return scheduler_threads;
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cpus - 1, 1, 3);
}

}  // namespace pto2
