// ptod's gRPC server itself, end to end: its own grpc.health.v1.Health
// service (Check, Watch, the drain) and the threads it serves calls on. The
// real daemon binary as a subprocess on a temporary socket.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "pto/client.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;

TEST_CASE("health: Check and Watch per service - a watcher is told NOT_SERVING at the drain, then its stream ends") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse reply;
  for (const char* svc : {"", "pto.v1.Jobs", "pto.v1.Tensors", "pto.v1.Session"}) {
    grpc::ClientContext ctx;
    req.set_service(svc);
    REQUIRE(stub->Check(&ctx, req, &reply).ok());
    CHECK(reply.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    grpc::ClientContext ctx;
    req.set_service("no.such.Service");
    const grpc::Status s = stub->Check(&ctx, req, &reply);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK_THAT(s.error_message(), Catch::Contains("no.such.Service"));
  }
  {  // An unknown name is watched as SERVICE_UNKNOWN; the client may leave.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto w = stub->Watch(&ctx, req);
    REQUIRE(w->Read(&reply));
    CHECK(reply.status() == grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN);
    ctx.TryCancel();
    CHECK(w->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  // A running job keeps the drain going while the watcher reads.
  v1::SubmitRequest job;
  job.mutable_callable()->set_name("sleep");
  job.mutable_args()->add_scalars(2000);  // ms: room for the watch and the signal
  auto sub = c->submit(job);
  REQUIRE(sub.ok());
  REQUIRE(eventually([&] { return c->result(sub.value.job_id()).value.state() == v1::RUNNING; }, 10000));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  req.set_service("pto.v1.Jobs");
  auto w = stub->Watch(&ctx, req);
  REQUIRE(w->Read(&reply));
  CHECK(reply.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  const auto t0 = std::chrono::steady_clock::now();
  kill(d.pid(), SIGTERM);
  REQUIRE(w->Read(&reply));
  CHECK(reply.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  CHECK_FALSE(w->Read(&reply));  // the stream ends with the daemon's stop
  const grpc::Status end = w->Finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("the watch ended " << s << " s after SIGTERM: " << end.error_code() << " " << end.error_message());
  CHECK(end.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(s < 10);
  CHECK(d.stop(0) == 0);
}

TEST_CASE("ptod serves every call on its own gRPC threads - no callback-queue threads of gRPC's") {
  // A callback method (or gRPC's built-in health service, one) makes gRPC
  // poll the daemon's sockets from two more threads ("nexting_thread"), and
  // each call then crossed one more thread (docs/daemon.md).
  DaemonProcess d;
  REQUIRE(d.up());
  pto::client::ClientOptions o;
  o.address = d.address();
  o.timeout = std::chrono::seconds(30);
  o.fd_transfers = false;  // the tensor over gRPC: the Download method
  Client c(o);
  const std::vector<float> x(4096, 1.5f);
  auto t = c.upload("", {4096}, PTO_FLOAT32, x.data(), x.size() * 4);
  REQUIRE(t.ok());
  std::vector<uint8_t> got;
  REQUIRE(c.download(t.value.handle(), &got).ok());
  REQUIRE(got.size() == x.size() * 4);
  CHECK(std::memcmp(got.data(), x.data(), got.size()) == 0);
  REQUIRE(c.health().value == "SERVING");
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(d.pid()) + "/task", ec)) {
    std::ifstream f(e.path() / "comm");
    std::string name;
    std::getline(f, name);
    names.push_back(name);
  }
  REQUIRE_FALSE(names.empty());
  for (const std::string& n : names) {
    INFO("a thread of ptod: " << n);
    CHECK(n != "nexting_thread");
  }
  CHECK(d.stop() == 0);
}
