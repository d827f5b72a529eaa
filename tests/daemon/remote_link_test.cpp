// The coordinator's side of a session (GrpcRemoteLink) against a scripted
// peer: a real gRPC server on a unix socket in this process that speaks the
// session protocol as the test says — a unit test of the link, for the
// states a real ptod does not produce on demand (a peer that is NOT_READY
// for a while, a peer that answers in another protocol version).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "daemon_process.h"
#include "eventually.h"
#include "remote_link.h"

namespace v1 = pto::v1;
using pto_test::eventually;
using Clock = std::chrono::steady_clock;

namespace {

// Answers HELLO with not_ready_ms of NOT_READY, then READY in `version`,
// then HEALTH every 50 ms until the coordinator goes away.
class ScriptedPeer final : public v1::Session::Service {
 public:
  int not_ready_ms = 0;
  uint32_t version = 1;
  std::atomic<int> sessions{0};

  grpc::Status Open(grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::Frame, v1::Frame>* s) override {
    ++sessions;
    v1::Frame in;
    if (!s->Read(&in) || !in.has_hello()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no HELLO");
    std::mutex write_mu;
    uint64_t seq = 0;
    auto send = [&](v1::Frame f, uint32_t v) {
      std::lock_guard<std::mutex> g(write_mu);
      f.set_version(v);
      f.set_session(42);
      f.set_worker(in.worker());
      f.set_seq(++seq);
      return s->Write(f);
    };
    if (not_ready_ms > 0) {
      v1::Frame nr;
      nr.mutable_hello()->set_state(v1::Hello::NOT_READY);
      send(nr, version);
      std::this_thread::sleep_for(std::chrono::milliseconds(not_ready_ms));
    }
    v1::Frame r;
    r.mutable_hello()->set_state(v1::Hello::READY);
    r.mutable_hello()->set_credits(4);
    r.mutable_hello()->set_min_version(version);
    r.mutable_hello()->set_max_version(version);
    if (!send(r, version)) return grpc::Status::OK;
    std::atomic<bool> done{false};
    std::thread beats([&] {
      while (!done && !ctx->IsCancelled()) {
        v1::Frame h;
        h.mutable_health();
        if (!send(h, version)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    while (s->Read(&in)) {}
    done = true;
    beats.join();
    return grpc::Status::OK;
  }
};

struct Fixture {
  std::string dir = pto_test::make_temp_dir("ptod-link");
  ScriptedPeer peer;
  std::unique_ptr<grpc::Server> server;
  ptod::DaemonConfig cfg;
  std::shared_ptr<ptod::GrpcRemoteLink> link;
  Fixture() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + dir + "/peer.sock", grpc::InsecureServerCredentials());
    b.RegisterService(&peer);
    server = b.BuildAndStart();
  }
  void start() {
    ptod::DaemonConfig::Peer p;
    p.address = p.name = "unix:" + dir + "/peer.sock";
    link = std::make_shared<ptod::GrpcRemoteLink>(p, 0, cfg);
    REQUIRE(link->start([] {}).ok());
  }
  ~Fixture() {
    if (link) link->stop();
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    std::filesystem::remove_all(dir);
  }
};

}  // namespace

TEST_CASE("a peer that says NOT_READY is not used until it says READY") {
  Fixture f;
  REQUIRE(f.server);
  f.peer.not_ready_ms = 400;
  f.start();
  REQUIRE(eventually([&] { return f.link->state_text() == "peer not ready"; }, 3000));
  CHECK_FALSE(f.link->ready());
  REQUIRE(eventually([&] { return f.link->ready(); }, 5000));
  CHECK(f.link->credits() == 4);
  CHECK(f.link->state_text() == "ready");
  CHECK(f.peer.sessions == 1);
}

TEST_CASE("a peer that answers in another protocol version is refused by the coordinator") {
  Fixture f;
  REQUIRE(f.server);
  f.peer.version = 2;
  f.start();
  std::string state;
  REQUIRE(eventually([&] { return (state = f.link->state_text()).find("version") != std::string::npos; }, 5000));
  CHECK_THAT(state, Catch::Contains("version 2") && Catch::Contains("speaks 1"));
  CHECK_FALSE(f.link->ready());
}
