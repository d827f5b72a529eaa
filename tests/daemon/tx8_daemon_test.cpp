// ptod configured for tx8sim ([worker] platform): its chips are tx8sim, the
// worker tree says so (Workers and `ptoctl workers`), the batch-norm package
// runs as a job and matches a host computation, and an a2a3sim daemon
// refuses a package made for tx8sim.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "pto/client.h"

using namespace pto_test;
namespace v1 = pto::v1;

namespace {
constexpr uint32_t kPositions = 2 * 14 * 14, kChannels = 256;  // examples/batch_norm/kernels.toml
}

TEST_CASE("a tx8sim daemon runs the batch-norm package on its chips and shows the platform in its tree") {
  const std::string dir = make_temp_dir("ptod-tx8");
  std::ofstream(dir + "/ptod.toml") << "[worker]\nplatform = \"tx8sim\"\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"}, 2, 0);
  REQUIRE(d.up());
  auto c = connect(d);
  auto reg = c->register_chip(BATCH_NORM_CONFIG, "bn");
  INFO(reg.status.message << d.log());
  REQUIRE(reg.ok());

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.1f, 2.f);
  std::vector<float> x(kPositions * kChannels), p[4];
  for (float& v : x) v = u(rng) - 1.f;
  for (auto& q : p) {
    q.resize(kChannels);
    for (float& v : q) v = u(rng);
  }
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("bn");
  auto tx = c->upload("", {2, 14, 14, kChannels}, PTO_FLOAT32, x.data(), x.size() * 4);
  REQUIRE(tx.ok());
  *req.mutable_args()->add_tensors()->mutable_tensor() = tx.value.handle();
  req.mutable_args()->add_tags(v1::INPUT);
  for (auto& q : p) {
    auto t = c->upload("", {kChannels}, PTO_FLOAT32, q.data(), kChannels * 4);
    REQUIRE(t.ok());
    *req.mutable_args()->add_tensors()->mutable_tensor() = t.value.handle();
    req.mutable_args()->add_tags(v1::INPUT);
  }
  auto ty = c->alloc("", {2, 14, 14, kChannels}, PTO_FLOAT32);
  REQUIRE(ty.ok());
  *req.mutable_args()->add_tensors()->mutable_tensor() = ty.value.handle();
  req.mutable_args()->add_tags(v1::OUTPUT);
  const float eps = 1e-5f;
  uint32_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof(eps));
  req.mutable_args()->add_scalars(eps_bits);
  req.mutable_args()->add_scalars(16);
  req.mutable_args()->add_scalars(16);
  auto r = c->run(req);
  INFO(r.status.message << r.value.message() << d.log());
  REQUIRE(r.ok());
  REQUIRE(r.value.state() == v1::SUCCEEDED);
  CHECK(r.value.chip_tasks_completed() == 1);  // one block task: its 16 blocks are one chip task

  std::vector<uint8_t> got;
  REQUIRE(c->download(ty.value.handle(), &got).ok());
  REQUIRE(got.size() == x.size() * 4);
  for (uint32_t i = 0; i < kPositions * kChannels; ++i) {
    const uint32_t ch = i % kChannels;
    const double want = (double(x[i]) - p[2][ch]) / std::sqrt(double(p[3][ch]) + eps) * p[0][ch] + p[1][ch];
    float f;
    std::memcpy(&f, got.data() + 4 * i, 4);
    REQUIRE(f == Approx(want).epsilon(1e-5).margin(1e-5));
  }

  auto w = c->workers();
  REQUIRE(w.ok());
  int chips = 0;
  for (const auto& n : w.value.root().children())
    if (n.level() == 2) {
      ++chips;
      CHECK(n.platform() == "tx8sim");
    }
  CHECK(chips == 2);
  Output tree = run_command({PTOCTL_PATH, "workers"}, 30, {"PTOD_ADDRESS=" + d.address()});
  REQUIRE(tree.code == 0);
  CHECK_THAT(tree.text, Catch::Contains("chip 0") && Catch::Contains("chip 1") && Catch::Contains("tx8sim"));
}

TEST_CASE("an a2a3sim daemon refuses a package made for tx8sim, naming both") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  auto reg = c->register_chip(BATCH_NORM_CONFIG, "bn");
  REQUIRE_FALSE(reg.ok());
  CHECK_THAT(reg.status.message, Catch::Contains("the package is for tx8sim") && Catch::Contains("a2a3sim"));
  // The daemon keeps serving.
  CHECK(c->register_chip(VECTOR_CONFIG, "vector").ok());
}
