#include <catch2/catch.hpp>

#include <cstdlib>

#include "pto2/config.h"

using namespace pto2;

namespace {
struct Env {
  Env(const char* k, const char* v) : key(k) { setenv(k, v, 1); }
  ~Env() { unsetenv(key); }
  const char* key;
};
}  // namespace

TEST_CASE("defaults follow the reference design and validate", "[config]") {
  RuntimeConfig c;
  CHECK(c.task_window == 65536);
  CHECK(c.heap_size == (1ull << 30));
  CHECK(c.dep_pool_size == 131072);
  CHECK(c.tensormap_pool_size == 131072);
  // Consistent defaults: a scope of window - 1 tasks with two tensors and one
  // producer each fits both pools.
  CHECK(c.tensormap_pool_size >= 2 * (c.task_window - 1));
  CHECK(c.dep_pool_size >= 2 * (c.task_window - 1));
  CHECK(c.ready_queue_shards == 3);
  CHECK(c.validate().ok());
  CHECK(c.resolved_scheduler_threads() >= 1);
}

TEST_CASE("invalid values are rejected with a message naming the value", "[config]") {
  RuntimeConfig c;
  c.task_window = 12;
  Status s = c.validate();
  CHECK(s.code == kInvalidConfig);
  CHECK_THAT(s.message, Catch::Contains("12") && Catch::Contains("power of two"));
  c = RuntimeConfig{};
  c.task_window = 2;
  CHECK_THAT(c.validate().message, Catch::Contains(">= 4"));
  c = RuntimeConfig{};
  c.heap_size = 512;
  CHECK_THAT(c.validate().message, Catch::Contains("512") && Catch::Contains("1024"));
  c = RuntimeConfig{};
  c.dep_pool_size = 8;
  CHECK_THAT(c.validate().message, Catch::Contains("PTO2_RING_DEP_POOL"));
  c = RuntimeConfig{};
  c.ready_queue_shards = 0;
  CHECK_THAT(c.validate().message, Catch::Contains("PTO2_READY_QUEUE_SHARDS"));
}

TEST_CASE("environment variables override the struct", "[config]") {
  Env a("PTO2_RING_TASK_WINDOW", "16");
  Env b("PTO2_RING_HEAP", "64k");
  Env c("PTO2_RING_DEP_POOL", "128");
  Env d("PTO2_READY_QUEUE_SHARDS", "2");
  RuntimeConfig cfg;
  REQUIRE(cfg.apply_env().ok());
  CHECK(cfg.task_window == 16);
  CHECK(cfg.heap_size == 65536);
  CHECK(cfg.dep_pool_size == 128);
  CHECK(cfg.ready_queue_shards == 2);
}

TEST_CASE("a bad environment value names the variable and the value", "[config]") {
  {
    Env a("PTO2_RING_TASK_WINDOW", "100");
    RuntimeConfig cfg;
    const Status s = cfg.apply_env();
    CHECK(s.code == kInvalidConfig);
    CHECK_THAT(s.message, Catch::Contains("PTO2_RING_TASK_WINDOW") && Catch::Contains("100"));
  }
  {
    Env a("PTO2_RING_HEAP", "lots");
    RuntimeConfig cfg;
    const Status s = cfg.apply_env();
    CHECK_THAT(s.message, Catch::Contains("PTO2_RING_HEAP='lots'"));
  }
  {
    Env a("PTO2_RING_HEAP", "-5");
    RuntimeConfig cfg;
    CHECK_FALSE(cfg.apply_env().ok());
  }
  {
    // 17179869185 GiB is 2^64 + 1 GiB: before, it wrapped to exactly 1 GiB and was taken.
    Env a("PTO2_RING_HEAP", "17179869185g");
    RuntimeConfig cfg;
    const Status s = cfg.apply_env();
    CHECK(s.code == kInvalidConfig);
    CHECK_THAT(s.message, Catch::Contains("PTO2_RING_HEAP='17179869185g'") && Catch::Contains("below 2^64"));
  }
}
