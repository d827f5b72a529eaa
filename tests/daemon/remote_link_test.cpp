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
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon_process.h"
#include "eventually.h"
#include "fd_channel.h"
#include "pto/worker.h"
#include "remote_fd_path.h"
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
  int answer_outcome = -1;  // >= 0: every TASK is answered at once with this outcome (on the wire, unchecked)
  // After READY: no HEALTH, and frames are read only while reads_allowed is
  // set, up to and including the next CONTROL (so a large one's write
  // blocks on flow control until the test lets it through).
  bool silent = false;
  std::atomic<bool> gated{false}, reads_allowed{false};
  // Remote buffers: BUFFER_ALLOC, _WRITE and _FREE are answered at once; a
  // BUFFER_READ sets read_seen and is answered with 0xAA bytes once
  // release_read is set.
  bool buffers = false;
  std::atomic<bool> read_seen{false}, release_read{false};
  std::atomic<int> sessions{0};

  grpc::Status Open(grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::Frame, v1::Frame>* s) override {
    ++sessions;
    v1::Frame in;
    if (!s->Read(&in) || !in.has_hello()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no HELLO");
    std::mutex write_mu;
    uint64_t seq = 0, buffer_ids = 0;
    std::vector<std::thread> replies;
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
      while (!silent && !done && !ctx->IsCancelled()) {
        v1::Frame h;
        h.mutable_health();
        if (!send(h, version)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    for (;;) {
      if (gated && !reads_allowed) {
        if (ctx->IsCancelled()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (!s->Read(&in)) break;
      if (gated && in.has_control()) reads_allowed = false;
      if (buffers && in.has_control()) {
        const v1::Control c = in.control();
        v1::Frame r;
        r.mutable_control_reply()->set_id(c.id());
        r.mutable_control_reply()->set_ok(true);
        if (c.op() == v1::Control::BUFFER_ALLOC) {
          r.mutable_control_reply()->set_buffer_id(++buffer_ids);
          r.mutable_control_reply()->set_generation(1);
        } else if (c.op() == v1::Control::BUFFER_READ) {
          read_seen = true;
          replies.emplace_back([&, r, bytes = c.bytes()]() mutable {
            while (!release_read && !ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            r.mutable_control_reply()->set_data(std::string(bytes, '\xaa'));
            send(r, version);
          });
          continue;
        }
        send(r, version);
        continue;
      }
      if (answer_outcome < 0 || !in.has_task()) continue;
      v1::Frame c;
      for (const auto& t : in.task().tasks()) {
        auto* x = c.mutable_completion()->add_completions();
        x->set_id(t.id());
        x->set_outcome(static_cast<v1::Outcome>(answer_outcome));
      }
      c.mutable_completion()->set_credits(static_cast<uint32_t>(in.task().tasks_size()));
      send(c, version);
    }
    done = true;
    beats.join();
    for (auto& t : replies) t.join();
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
    // The window the coordinator writes into stays gRPC's first one (64 KiB):
    // a 4 MiB frame waits until the peer reads it.
    b.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    b.SetMaxReceiveMessageSize(64 << 20);  // a remote-buffer chunk's frame is 4 MiB and more
    b.AddListeningPort("unix:" + dir + "/peer.sock", grpc::InsecureServerCredentials());
    b.RegisterService(&peer);
    server = b.BuildAndStart();
  }
  void start() {
    ptod::DaemonConfig::Peer p;
    p.address = p.name = "unix:" + dir + "/peer.sock";
    p.fd_transfers = false;  // no fd socket here: remote-buffer chunks go over the stream
    link = std::make_shared<ptod::GrpcRemoteLink>(p, 0, cfg);
    REQUIRE(link->start([] {}).ok());
  }
  // Waits up to ms for the link to hand back completions; false when none came.
  bool completions(std::vector<pto::RemoteCompletion>* got, int ms) {
    return eventually(
        [&] {
          link->poll(got);
          return !got->empty();
        },
        ms);
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

TEST_CASE(
    "a COMPLETION whose outcome is not an Outcome ends the session - its task comes back as an endpoint failure") {
  Fixture f;
  REQUIRE(f.server);
  f.peer.answer_outcome = 256;  // read as SUCCESS (256 & 0xff) before the link checked it
  f.start();
  REQUIRE(eventually([&] { return f.link->ready(); }, 5000));
  pto::RemoteTask t;
  t.seq = 1;
  t.task_id = 7;
  f.link->send(std::move(t));
  std::vector<pto::RemoteCompletion> got;
  REQUIRE(f.completions(&got, 5000));
  CHECK(got[0].seq == 1);
  CHECK(got[0].outcome == static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE));
  CHECK_THAT(got[0].message, Catch::Contains("protocol error") && Catch::Contains("outcome 256"));
}

// The writer takes queued frames and tasks together; when a frame before the
// tasks failed to go, the tasks were dropped: in neither the in-flight map nor
// the queue, so the session's end did not report them and the engine waited
// for them (task_timeout_ms, and their credit was never given back). Here the
// writer's round holds a 4 MiB chunk the silent peer never reads and a task;
// the watchdog ends the session and the task must come back.
TEST_CASE("a task queued behind a frame whose write fails comes back when the session ends") {
  Fixture f;
  REQUIRE(f.server);
  f.peer.silent = true;
  f.peer.gated = true;
  f.cfg.heartbeat_ms = 100;
  f.cfg.dead_after_ms = 5000;  // room for the steps below on a loaded machine
  f.start();
  REQUIRE(eventually([&] { return f.link->ready(); }, 5000));
  const uint64_t chunk = ptod::GrpcRemoteLink::kChunkBytes;
  std::vector<uint8_t> one(chunk, 1), two(chunk, 2);
  pto::RemoteBufferRef ref;
  ref.id = 1;
  ref.generation = 1;
  // The first chunk's write blocks (the peer reads nothing) with the writer's
  // lock held, so the second chunk and the task queue up behind it.
  std::thread a([&] { (void)f.link->buffer_write(ref, one.data(), chunk, 10000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread b([&] { (void)f.link->buffer_write(ref, two.data(), chunk, 10000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(f.link->ready());  // a slow run fails here plainly, not on the message below
  pto::RemoteTask t;
  t.seq = 5;
  f.link->send(std::move(t));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The peer reads the first chunk: the writer's next round takes the second
  // and the task together, and blocks on the second until the session ends.
  f.peer.reads_allowed = true;
  std::vector<pto::RemoteCompletion> got;
  const bool back = f.completions(&got, 15000);
  a.join();
  b.join();
  REQUIRE(back);
  CHECK(got[0].seq == 5);
  CHECK(got[0].outcome == static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE));
  CHECK_THAT(got[0].message, Catch::Contains("session lost"));
}

// A task whose output is staged in a remote buffer completes, its bytes are
// on their way back, and meanwhile the engine gives up on it (its run was
// cancelled, its time ran out) and frees its tensors: nothing may land in
// them after abandon() returned (the bytes were read straight into the
// tensor, whenever they came).
TEST_CASE("a staged output whose task is abandoned while it is read back is not written into its tensor") {
  Fixture f;
  REQUIRE(f.server);
  f.peer.buffers = true;
  f.peer.answer_outcome = 0;  // SUCCESS
  f.cfg.inline_limit_bytes = 1024;
  f.start();
  REQUIRE(eventually([&] { return f.link->ready(); }, 5000));
  std::vector<float> out(2048, 0.f);  // 8 KiB: above the inline limit, so staged
  pto::RemoteTask t;
  t.seq = 3;
  t.tensors.push_back(pto::make_tensor(out.data(), {2048}, PTO_FLOAT32));
  t.directions.push_back(pto::TensorDirection::OUT);
  t.buffers.emplace_back();
  f.link->send(std::move(t));
  REQUIRE(eventually([&] { return f.peer.read_seen.load(); }, 5000));
  f.link->abandon(3);
  f.peer.release_read = true;
  std::vector<pto::RemoteCompletion> got;
  REQUIRE(f.completions(&got, 5000));
  CHECK(got[0].seq == 3);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.f; }));
  CHECK(f.link->ready());
}

// Remote-buffer chunks travel as raw bytes both ways (session_wire.h): a
// slice over the caller's bytes out, the reply's bytes copied from gRPC's
// buffers straight into the caller's. Against a real peer ptod, sizes that
// cross chunk boundaries and the 64 KiB line between a parsed frame and a
// raw one, at offsets that are not aligned to anything.
namespace {

// Round trips, views, refusals on one link; the peer's answers are the same
// whichever way the bytes go.
void check_transfers(ptod::GrpcRemoteLink& l) {
  ptod::GrpcRemoteLink* link = &l;
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
}

std::shared_ptr<ptod::GrpcRemoteLink> open_link(const pto_test::DaemonProcess& peer, const ptod::DaemonConfig& cfg,
                                                bool fd_transfers, const std::string& token = "") {
  ptod::DaemonConfig::Peer p;
  p.address = p.name = peer.address();
  p.fd_transfers = fd_transfers;
  p.token = token;
  auto link = std::make_shared<ptod::GrpcRemoteLink>(p, 0, cfg);
  REQUIRE(link->start([] {}).ok());
  REQUIRE(eventually([&] { return link->ready(); }, 10000));
  return link;
}

// 0, 1, 2, ... in a byte pattern that differs per `seed`.
std::vector<uint8_t> pattern(uint64_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + (i >> 13) + seed * 7);
  return v;
}

}  // namespace

TEST_CASE("remote buffer bytes survive the raw chunk path - many chunks, odd sizes, views, a freed buffer") {
  pto_test::DaemonProcess peer({}, 1, 0);
  REQUIRE(peer.up());
  ptod::DaemonConfig cfg;
  auto link = open_link(peer, cfg, false);
  check_transfers(*link);
  CHECK(link->fd_path_bytes() == 0);  // fd_transfers = false: all over the stream
  link->stop();
}

TEST_CASE("remote buffer bytes of a unix-socket peer go through its fd socket, and over the stream without it") {
  pto_test::DaemonProcess peer({}, 1, 0);
  REQUIRE(peer.up());
  ptod::DaemonConfig cfg;
  auto link = open_link(peer, cfg, true);
  check_transfers(*link);
  // Every transfer that succeeded went through the fd socket (the refusals
  // came back from the stream, which answers for the peer).
  const uint64_t chunk = ptod::GrpcRemoteLink::kChunkBytes;
  uint64_t moved = 0;
  for (const uint64_t n : {uint64_t(1000), uint64_t(64 << 10), 3 * chunk + 12345})
    moved += 2 * n + 2 * (n - 340) + n;  // write, read, view read, view write, read
  CHECK(link->fd_path_bytes() == moved);
  // Without the fd socket (gone, or not this process's to open) the same
  // transfers go over the stream, bytes intact.
  const std::string fd_socket = pto::client::unix_socket_path(peer.address()) + ".fd";
  REQUIRE(std::filesystem::remove(fd_socket));
  check_transfers(*link);
  CHECK(link->fd_path_bytes() == moved);
  link->stop();
}

TEST_CASE("the fd socket moves a session's buffer for the session's principal only, in range, while it lives") {
  const std::string dir = pto_test::make_temp_dir("ptod-fd-buffers");
  pto_test::write_secret(dir + "/tokens", "alice user alice-token-0123456789\nbob user bob-token-0123456789ab\n");
  std::ofstream(dir + "/ptod.toml") << "[server]\ntokens_file = \"" << dir << "/tokens\"\n";
  pto_test::DaemonProcess peer({"--config", dir + "/ptod.toml"}, 1, 0);
  REQUIRE(peer.up());
  ptod::DaemonConfig cfg;
  // Alice's session; the stream checks what the fd socket did.
  auto link = open_link(peer, cfg, false, "alice-token-0123456789");
  const std::string socket = pto::client::unix_socket_path(peer.address());
  ptod::PeerFdPath path(socket, "alice-token-0123456789");
  // Three slots' worth and an odd tail: both slots reused, the last one short.
  const uint64_t n = 3 * ptod::PeerFdPath::kSlotBytes + 4097;
  pto::RemoteBufferRef ref;
  REQUIRE(link->buffer_alloc(n, &ref, 5000).ok());
  const std::vector<uint8_t> one = pattern(n, 1), two = pattern(n, 2);
  std::vector<uint8_t> back(n, 0);
  REQUIRE(path.transfer(ref, reinterpret_cast<char*>(const_cast<uint8_t*>(one.data())), n, true, 5000).ok());
  REQUIRE(link->buffer_read(ref, back.data(), n, 5000).ok());
  CHECK(back == one);
  REQUIRE(link->buffer_write(ref, two.data(), n, 5000).ok());
  REQUIRE(path.transfer(ref, reinterpret_cast<char*>(back.data()), n, false, 5000).ok());
  CHECK(back == two);

  // Refused, each naming why; the connection goes on serving.
  pto::RemoteBufferRef wrong = ref;
  wrong.generation ^= 1;
  pto::Status s = path.transfer(wrong, reinterpret_cast<char*>(back.data()), 100, false, 5000);
  CHECK_THAT(s.message, Catch::Contains("no live session of"));
  wrong = ref;
  wrong.offset = 5;
  s = path.transfer(wrong, reinterpret_cast<char*>(back.data()), n, false, 5000);
  CHECK_THAT(s.message, Catch::Contains("do not fit remote buffer"));
  // Bob's token, and this process's own user without one: not alice.
  ptod::PeerFdPath bob(socket, "bob-token-0123456789ab"), user(socket, "");
  s = bob.transfer(ref, reinterpret_cast<char*>(back.data()), 100, false, 5000);
  CHECK_THAT(s.message, Catch::Contains("no live session of bob"));
  s = user.transfer(ref, reinterpret_cast<char*>(back.data()), 100, false, 5000);
  CHECK_FALSE(s.ok());
  CHECK_THAT(s.message, Catch::Contains("no live session of"));
  REQUIRE(link->buffer_free(ref, 5000).ok());
  s = path.transfer(ref, reinterpret_cast<char*>(back.data()), 100, false, 5000);
  CHECK_THAT(s.message, Catch::Contains("not a live buffer"));
  REQUIRE(link->buffer_alloc(4096, &ref, 5000).ok());
  CHECK(path.transfer(ref, reinterpret_cast<char*>(back.data()), 4096, false, 5000).ok());
  link->stop();
  std::filesystem::remove_all(dir);
}
