// The coordinator's side of a session (GrpcRemoteLink) against a scripted
// peer: a real gRPC server on a unix socket in this process that speaks the
// session protocol as the test says — a unit test of the link, for the
// states a real ptod does not produce on demand (a peer that is NOT_READY
// for a while, a peer that answers in another protocol version). Remote-
// buffer transfers are checked against a real ptod peer.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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

// Remote-buffer chunks travel as raw bytes both ways (session_wire.h): a
// slice over the caller's bytes out, the reply's bytes copied from gRPC's
// buffers straight into the caller's. Against a real peer ptod, sizes that
// cross chunk boundaries and the 64 KiB line between a parsed frame and a
// raw one, at offsets that are not aligned to anything.
TEST_CASE("remote buffer bytes survive the raw chunk path - many chunks, odd sizes, views, a freed buffer") {
  pto_test::DaemonProcess peer({}, 1, 0);
  REQUIRE(peer.up());
  ptod::DaemonConfig cfg;
  ptod::DaemonConfig::Peer p;
  p.address = p.name = peer.address();
  auto link = std::make_shared<ptod::GrpcRemoteLink>(p, 0, cfg);
  REQUIRE(link->start([] {}).ok());
  REQUIRE(eventually([&] { return link->ready(); }, 10000));
  const uint64_t chunk = ptod::GrpcRemoteLink::kChunkBytes;
  for (const uint64_t n : {uint64_t(1000), uint64_t(64 << 10), 3 * chunk + 12345}) {
    INFO(n << " bytes");
    std::vector<uint8_t> host(n), back(n, 0);
    for (uint64_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
    pto::RemoteBufferRef ref;
    REQUIRE(link->buffer_alloc(n, &ref, 5000).ok());
    REQUIRE(link->buffer_write(ref, host.data(), n, 5000).ok());
    REQUIRE(link->buffer_read(ref, back.data(), n, 5000).ok());
    CHECK(back == host);
    // A view: bytes from an odd offset to 7 short of the end.
    pto::RemoteBufferRef view = ref;
    view.offset = 333;
    const uint64_t m = n - 333 - 7;
    std::vector<uint8_t> part(m, 0);
    REQUIRE(link->buffer_read(view, part.data(), m, 5000).ok());
    CHECK(std::equal(part.begin(), part.end(), host.begin() + 333));
    // A write into the view lands there and nowhere else.
    std::vector<uint8_t> ones(m, 0xa5);
    REQUIRE(link->buffer_write(view, ones.data(), m, 5000).ok());
    REQUIRE(link->buffer_read(ref, back.data(), n, 5000).ok());
    CHECK(std::equal(back.begin(), back.begin() + 333, host.begin()));
    CHECK(std::all_of(back.begin() + 333, back.end() - 7, [](uint8_t b) { return b == 0xa5; }));
    CHECK(std::equal(back.end() - 7, back.end(), host.end() - 7));
    // Past the end is refused by the peer, naming the buffer.
    view.offset = 1;
    pto::Status past = link->buffer_read(view, back.data(), n, 5000);
    CHECK_FALSE(past.ok());
    CHECK_THAT(past.message, Catch::Contains("do not fit remote buffer"));
    REQUIRE(link->buffer_free(ref, 5000).ok());
    pto::Status stale = link->buffer_read(ref, back.data(), n, 5000);
    CHECK_FALSE(stale.ok());
    CHECK_THAT(stale.message, Catch::Contains("not a live buffer"));
  }
  CHECK(link->ready());  // refusals are answers: the session stays up
  link->stop();
}
