// A Worker whose chips are tx8sim (WorkerConfig::platform): two linked
// chips run the vector and batch-norm packages, the worker tree names the
// platform, a package for the other chip is refused, and so is a2a3sim's
// block_dim. Golden checks compare computed outputs.
#include <cmath>
#include <cstring>
#include <random>

#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

constexpr uint32_t N = 16384;  // the vector example's size

// The batch-norm example's arguments (examples/batch_norm/kernels.toml).
constexpr uint32_t kPositions = 2 * 14 * 14, kChannels = 256;

float bn_ref(float x, float scale, float shift, float mean, float var, float eps) {
  return static_cast<float>((double(x) - mean) / std::sqrt(double(var) + eps) * scale + shift);
}

}  // namespace

TEST_CASE("two tx8sim chips run the vector and batch-norm packages, and the tree shows the platform") {
  Worker w({.level = 3, .num_chips = 2, .num_sub_workers = 0, .platform = "tx8sim"});
  auto vec = w.register_callable(ChipCallable::from_config(VECTOR_CONFIG));
  REQUIRE(vec.ok());
  auto bn = w.register_callable(ChipCallable::from_config(BATCH_NORM_CONFIG));
  INFO(bn.status.message);
  REQUIRE(bn.ok());
  REQUIRE(w.init().ok());

  ContinuousTensor a[2], b[2], f[2];
  for (int c = 0; c < 2; ++c) {
    a[c] = alloc_f32(w, N);
    b[c] = alloc_f32(w, N);
    f[c] = alloc_f32(w, N);
    fill(a[c], -1.f + c, 0.01f);
    fill(b[c], 0.5f * c, -0.02f);
  }
  auto alloc = [&](std::vector<uint32_t> shape) {
    auto t = w.alloc(shape, PTO_FLOAT32);
    REQUIRE(t.ok());
    return t.value;
  };
  ContinuousTensor x = alloc({2, 14, 14, kChannels}), y = alloc({2, 14, 14, kChannels});
  ContinuousTensor p[4] = {alloc({kChannels}), alloc({kChannels}), alloc({kChannels}), alloc({kChannels})};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.1f, 2.f);
  for (uint32_t i = 0; i < kPositions * kChannels; ++i) f32(x)[i] = u(rng) - 1.f;
  for (auto& t : p)
    for (uint32_t i = 0; i < kChannels; ++i) f32(t)[i] = u(rng);  // var > 0
  const float eps = 1e-5f;
  uint32_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof(eps));

  RunResult r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig& cfg) {
    for (int c = 0; c < 2; ++c) {
      TaskArgs t;
      t.add_tensor(a[c], IN).add_tensor(b[c], IN).add_tensor(f[c], OUT).add_scalar(N);
      REQUIRE(o.submit_next_level(vec, t, cfg, c).ok());
    }
    TaskArgs t;
    t.add_tensor(x, IN);
    for (auto& q : p) t.add_tensor(q, IN);
    t.add_tensor(y, OUT).add_scalar(eps_bits).add_scalar(16).add_scalar(16);
    REQUIRE(o.submit_next_level(bn, t, cfg, 1).ok());
    return 0;
  });
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(r.tasks_succeeded == 3);
  for (int c = 0; c < 2; ++c)
    for (uint32_t i = 0; i < N; ++i)
      REQUIRE(f32(f[c])[i] == Approx(vector_f(f32(a[c])[i], f32(b[c])[i])).epsilon(1e-5));
  for (uint32_t i = 0; i < kPositions * kChannels; ++i) {
    const uint32_t ch = i % kChannels;
    REQUIRE(f32(y)[i] == Approx(bn_ref(f32(x)[i], f32(p[0])[ch], f32(p[1])[ch], f32(p[2])[ch], f32(p[3])[ch], eps))
                             .epsilon(1e-5)
                             .margin(1e-5));
  }
  int chips = 0;
  for (const ChildInfo& c : w.children()) {
    if (c.kind != ChildKind::CHIP) continue;
    ++chips;
    CHECK(c.platform == "tx8sim");
  }
  CHECK(chips == 2);
  REQUIRE(w.close().ok());
}

TEST_CASE("a package for tx8sim is refused by a2a3sim chips, and block_dim by tx8sim chips") {
  {
    Worker w({.level = 3, .num_chips = 1});
    REQUIRE(w.init().ok());
    auto bn = w.register_callable(ChipCallable::from_config(BATCH_NORM_CONFIG));
    CHECK_FALSE(bn.ok());
    CHECK_THAT(bn.status.message, Catch::Contains("the package is for tx8sim") && Catch::Contains("a2a3sim"));
    REQUIRE(w.close().ok());
  }
  Worker w({.level = 3, .num_chips = 1, .platform = "tx8sim"});
  auto vec = w.register_callable(ChipCallable::from_config(VECTOR_CONFIG));
  REQUIRE(w.init().ok());
  ContinuousTensor a = alloc_f32(w, N), b = alloc_f32(w, N), f = alloc_f32(w, N);
  RunResult r = w.run(
      [&](Orchestrator& o, const TaskArgsView&, const CallConfig& cfg) {
        TaskArgs t;
        t.add_tensor(a, IN).add_tensor(b, IN).add_tensor(f, OUT).add_scalar(N);
        return o.submit_next_level(vec, t, cfg).ok() ? 0 : 1;
      },
      {}, CallConfig{.block_dim = 4});
  CHECK_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("block_dim is a2a3sim's clusters; this chip is tx8sim"));
  REQUIRE(w.close().ok());
  WorkerConfig bad{.level = 3, .num_chips = 1, .platform = "tx9"};
  CHECK_THAT(bad.validate().message, Catch::Contains("platform 'tx9' is unknown (known: a2a3sim, tx8sim)"));
}
