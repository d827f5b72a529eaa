// Remote L3 sessions and level-4 clusters end to end: real ptod daemons as
// subprocesses (peers at level 3, a coordinator at level 4 with [[peers]]),
// driven with the client library, ptoctl, and a raw Session stream for the
// protocol's refusals. Detection times are measured and printed; no check
// depends on them beyond generous bounds.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"
#include "pto/v1/session.grpc.pb.h"
#include "sanitized.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;
using Clock = std::chrono::steady_clock;

namespace {

// A level-4 coordinator over the given peers (and local L3 children).
struct Coordinator {
  std::string dir;
  std::unique_ptr<DaemonProcess> d;
  Coordinator(const std::vector<const DaemonProcess*>& peers, int l3_children = 0, const std::string& peer_extra = "",
              const std::vector<std::string>& addresses = {}, const std::string& extra_toml = "") {
    dir = make_temp_dir("ptod-coord");
    std::ofstream f(dir + "/ptod.toml");
    f << extra_toml << "[worker]\nlevel = 4\nl3_children = " << l3_children << "\n";
    for (const DaemonProcess* p : peers) f << "[[peers]]\naddress = \"" << p->address() << "\"\n" << peer_extra;
    for (const std::string& a : addresses) f << "[[peers]]\naddress = \"" << a << "\"\n" << peer_extra;
    f.close();
    d = std::make_unique<DaemonProcess>(std::vector<std::string>{"--config", dir + "/ptod.toml"}, 1, 0);
  }
  ~Coordinator() {
    d.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

// The remote L3 nodes of a coordinator's worker tree.
std::vector<v1::WorkerNode> remote_nodes(Client& c) {
  std::vector<v1::WorkerNode> out;
  auto w = c.workers();
  for (const auto& n : w.value.root().children())
    if (n.name().find("[") != std::string::npos) out.push_back(n);
  return out;
}

bool all_peers_ready(Client& c, size_t n) {
  auto nodes = remote_nodes(c);
  if (nodes.size() != n) return false;
  for (const auto& x : nodes)
    if (x.state().rfind("idle", 0) != 0 && x.state().rfind("busy", 0) != 0) return false;
  return true;
}

v1::SubmitRequest sleep_job(uint64_t ms) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("sleep");
  req.mutable_args()->add_scalars(ms);
  return req;
}

// A client of a coordinator that is up with all its peers READY.
std::unique_ptr<Client> connect_ready(const Coordinator& c, size_t peers) {
  INFO(c.d->log());
  REQUIRE(c.d->up());
  auto cl = connect(*c.d);
  REQUIRE(eventually([&] { return all_peers_ready(*cl, peers); }, 15000));
  return cl;
}

// The peer whose session holds a task, by the socket in the node's name.
const DaemonProcess* busy_peer(Client& c, const std::vector<const DaemonProcess*>& peers) {
  for (const auto& n : remote_nodes(c))
    if (n.state().find("1/") != std::string::npos)
      for (const DaemonProcess* p : peers)
        if (n.name().find(p->address()) != std::string::npos) return p;
  return nullptr;
}

uint64_t chip_tasks(Client& peer) {
  uint64_t n = 0;
  const auto w = peer.workers();
  for (const auto& c : w.value.root().children())
    if (c.name().rfind("chip", 0) == 0) n += c.tasks_run();
  return n;
}

// A Session stream spoken by hand, to send what a coordinator never would.
struct RawSession {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Session::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::Frame, v1::Frame>> s;
  uint64_t seq = 0, session = 0;
  explicit RawSession(const std::string& address, const std::string& token = "") {
    channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    stub = v1::Session::NewStub(channel);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    s = stub->Open(&ctx);
  }
  bool send(v1::Frame f, bool header = true) {
    if (header) {
      f.set_version(1);
      f.set_session(session);
      f.set_seq(++seq);
    }
    return s->Write(f);
  }
  // The next frame that is not a heartbeat.
  bool next(v1::Frame* f) {
    while (s->Read(f))
      if (!f->has_health()) return true;
    return false;
  }
  bool hello() {
    v1::Frame h;
    h.mutable_hello()->set_min_version(1);
    h.mutable_hello()->set_max_version(1);
    v1::Frame r;
    if (!send(h) || !next(&r) || r.hello().state() != v1::Hello::READY) return false;
    session = r.session();
    return true;
  }
  grpc::Status finish() {
    s->WritesDone();
    return s->Finish();
  }
};

v1::Frame task_frame(const std::string& digest, uint64_t id, std::vector<uint64_t> scalars = {}) {
  v1::Frame f;
  auto* t = f.mutable_task()->add_tasks();
  t->set_id(id);
  t->set_digest(digest);
  for (uint64_t s : scalars) t->add_scalars(s);
  return f;
}

}  // namespace

TEST_CASE("a job spread over two remote L3 daemons and a local L3 child matches the reference") {
  DaemonProcess a({}, 1, 1), b({}, 1, 1);
  REQUIRE((a.up() && b.up()));
  Coordinator c({&a, &b}, 1);
  INFO(c.d->log());
  auto cl = connect_ready(c, 2);
  Output reg = run_command({PTOCTL_PATH, "--address", c.d->address(), "register", "import", CLUSTER_LIB, "pto_spread",
                            "--orchestration", "-n", "spread"});
  INFO(reg.text);
  REQUIRE(reg.code == 0);
  for (const char* example : {VECTOR_CONFIG, PAGED_ATTENTION_CONFIG}) {
    Output r = run_command(
        {PTOCTL_PATH, "--address", c.d->address(), "run-example", example, "--instances", "3", "--spread", "spread"},
        120);
    INFO(r.text);
    CHECK(r.code == 0);
    size_t passes = 0;
    for (size_t at = r.text.find(": PASS ("); at != std::string::npos; at = r.text.find(": PASS (", at + 1)) ++passes;
    CHECK(passes == 3);
  }
  // Each of the three L3 workers ran its share: the local child and both peers' chips.
  auto w = cl->workers();
  REQUIRE(w.ok());
  REQUIRE(w.value.root().children_size() == 3);
  for (const auto& n : w.value.root().children()) CHECK(n.tasks_run() == 2);
  // The local L3 child reports its own chip (as of its last task).
  const auto& local = w.value.root().children(0);
  CHECK(local.name() == "l3 0");
  REQUIRE(local.children_size() == 1);
  CHECK(local.children(0).name() == "chip 0");
  CHECK(local.children(0).tasks_run() == 2);
  CHECK(chip_tasks(*connect(a)) == 2);
  CHECK(chip_tasks(*connect(b)) == 2);
  // Metrics: the sessions and the remote round trips.
  const std::string m = http_get(c.d->metrics_port(), "/metrics");
  CHECK_THAT(m, Catch::Contains("ptod_peer_up{worker=\"1\",peer=\"peer " + a.address() + "\"} 1") &&
                    Catch::Contains("ptod_remote_round_trip_seconds_count 4") &&
                    Catch::Contains("ptod_task_retries_total 0"));
  // ptoctl workers shows the whole tree: L4, the L3 workers, the peers' chips.
  Output tree = run_command({PTOCTL_PATH, "--address", c.d->address(), "workers"});
  INFO(tree.text);
  CHECK_THAT(tree.text, Catch::Contains("level 4") && Catch::Contains("[peer " + a.address()) &&
                            Catch::Contains("[peer " + b.address()) && Catch::Contains("    chip 0"));
}

TEST_CASE("tensors above the inline limit travel through remote buffers and come back") {
  DaemonProcess a({}, 1, 1);
  REQUIRE(a.up());
  // 4 KiB inline limit: the examples' 64 KiB tensors are staged in buffers
  // on the peer; their bytes go through the peer's fd socket (a unix-socket
  // peer), or over the session's stream.
  for (const char* how : {"", "fd_transfers = false\n"}) {
    INFO("[[peers]] " << how);
    Coordinator c({&a}, 0, how, {}, "[session]\ninline_limit_bytes = 4096\n");
    INFO(c.d->log());
    auto cl = connect_ready(c, 1);
    for (const char* example : {VECTOR_CONFIG, PAGED_ATTENTION_CONFIG}) {
      Output r = run_command({PTOCTL_PATH, "--address", c.d->address(), "run-example", example}, 120);
      INFO(r.text);
      CHECK(r.code == 0);
      CHECK_THAT(r.text, Catch::Contains(": PASS ("));
    }
    // The fd socket never failed over to the stream (the link says so once
    // when it does).
    CHECK_FALSE(c.d->log().find("remote-buffer bytes go over the session's stream") != std::string::npos);
  }
}

// Not under a sanitizer: its instrumented kernel libraries make the examples' registrations larger than the
// 128 KiB messages this test needs (a registration travels in one message).
#ifndef PTO_SANITIZED
TEST_CASE("tasks whose tensors fit the inline limit but not one message together are split and staged") {
  // 128 KiB messages on both ends and the default 16 MiB inline limit: a frame carries 64 KiB of tensors, the
  // vector example's task two 64 KiB inputs, and paged attention queues many tasks at once. Before: they went
  // in one TASK frame past max_message_bytes, the stream broke, the session was lost and the job failed.
  const std::string dir = make_temp_dir("ptod-frames");
  std::ofstream(dir + "/peer.toml") << "[server]\nmax_message_bytes = 131072\n";
  DaemonProcess a({"--config", dir + "/peer.toml"}, 1, 1);
  REQUIRE(a.up());
  Coordinator c({&a}, 0, "fd_transfers = false\n", {}, "[server]\nmax_message_bytes = 131072\n");
  INFO(c.d->log());
  auto cl = connect_ready(c, 1);
  for (const char* example : {VECTOR_CONFIG, PAGED_ATTENTION_CONFIG}) {
    Output r = run_command({PTOCTL_PATH, "--address", c.d->address(), "run-example", example}, 120);
    INFO(r.text);
    CHECK(r.code == 0);
    CHECK_THAT(r.text, Catch::Contains(": PASS ("));
  }
  CHECK(c.d->log().find("lost") == std::string::npos);
  std::filesystem::remove_all(dir);
}
#endif

TEST_CASE("remote registration is all or nothing - one peer refusing leaves nothing registered anywhere") {
  const std::string dir = make_temp_dir("ptod-refuse");
  std::ofstream(dir + "/refuse.toml") << "[security]\nallow_chip_bundles = false\n";
  DaemonProcess a({}, 1, 1), b({"--config", dir + "/refuse.toml"}, 1, 1);
  REQUIRE((a.up() && b.up()));
  Coordinator c({&a, &b});
  auto cl = connect_ready(c, 2);
  auto r = cl->register_chip(VECTOR_CONFIG, "vector");
  REQUIRE_FALSE(r.ok());
  INFO(r.status.message);
  CHECK_THAT(r.status.message, Catch::Contains(b.address()) && Catch::Contains("allow_chip_bundles") &&
                                   Catch::Contains("aborted on the peers that had prepared it"));
  CHECK(cl->callables().value.callables_size() == 0);
  CHECK(connect(a)->callables().value.callables_size() == 0);
  CHECK(connect(b)->callables().value.callables_size() == 0);
  CHECK_THAT(a.log(), Catch::Contains("prepared") && Catch::Contains("aborted"));
  // Peer a kept no files of the aborted bundle.
  int bundles = 0;
  for (const auto& e : std::filesystem::directory_iterator(a.dir() + "/state/callables"))
    bundles += e.path().filename().string().rfind("bundle-", 0) == 0;
  CHECK(bundles == 0);
  // Registering on the willing peer only works.
  pto::client::Placement only_a;
  only_a.peers = {0};
  auto ok = cl->register_chip(VECTOR_CONFIG, "vector", only_a);
  INFO(ok.status.message);
  CHECK(ok.ok());
  CHECK(connect(a)->callables().value.callables_size() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("library bytes travel once - unregister removes it from every peer") {
  DaemonProcess a({}, 1, 1), b({}, 1, 1);
  REQUIRE((a.up() && b.up()));
  // Peer a has the example already (registered by its own user).
  REQUIRE(connect(a)->register_chip(VECTOR_CONFIG, "vector").ok());
  Coordinator c({&a, &b});
  auto cl = connect_ready(c, 2);
  auto r = cl->register_chip(VECTOR_CONFIG, "vector");
  INFO(r.status.message);
  REQUIRE(r.ok());
  const std::string log = c.d->log();
  INFO(log);
  CHECK_THAT(log,
             Catch::Contains("peer " + a.address() + ": prepared") && Catch::Contains("already held: no bytes sent"));
  CHECK_THAT(log, Catch::Contains("peer " + b.address() + ": prepared") && Catch::Contains("bytes sent)"));
  CHECK(connect(b)->callables().value.callables_size() == 1);
  v1::CallableRef ref;
  ref.set_name("vector");
  REQUIRE(cl->unregister(ref).ok());
  CHECK(connect(a)->callables().value.callables_size() == 0);
  CHECK(connect(b)->callables().value.callables_size() == 0);
  // A job for it now fails clearly at the coordinator.
  v1::SubmitRequest req;
  req.mutable_callable()->set_digest(r.value.identity().digest());
  auto late = cl->submit(req);
  CHECK_FALSE(late.ok());
  CHECK_THAT(late.status.message, Catch::Contains("not registered"));
}

TEST_CASE("a remote daemon killed mid-job is detected - the job fails clearly - the restarted peer is used again") {
  DaemonProcess a({}, 1, 1), b({}, 1, 1);
  REQUIRE((a.up() && b.up()));
  Coordinator c({&a, &b});
  auto cl = connect_ready(c, 2);
  auto reg = cl->register_chip(SLEEP_CONFIG, "sleep");
  INFO(reg.status.message);
  REQUIRE(reg.ok());
  auto sub = cl->submit(sleep_job(20000));
  REQUIRE(sub.ok());
  const DaemonProcess* victim = nullptr;
  REQUIRE(eventually([&] { return (victim = busy_peer(*cl, {&a, &b})) != nullptr; }, 15000));
  REQUIRE(victim == &a);  // both idle: the first L3 worker (peer a) takes it
  DaemonProcess& v = a;
  const auto t0 = Clock::now();
  kill(v.pid(), SIGKILL);
  auto r = cl->result(sub.value.job_id(), 10000);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("remote daemon SIGKILL -> job FAILED at the coordinator: %.1f ms\n", ms);
  REQUIRE(r.ok());
  CHECK(r.value.state() == v1::FAILED);
  CHECK(r.value.first_failure().outcome() == v1::ENDPOINT_FAILURE);
  CHECK_THAT(r.value.message(), Catch::Contains("session lost") && Catch::Contains(v.address()));
  CHECK(ms < 5000);  // the target is < 1 s (printed above); this bound only catches a hang
  CHECK(cl->health().value == "SERVING");

  // The peer comes back: a new session, the registration re-installed, used again.
  v.stop(SIGKILL);
  v.restart();
  REQUIRE(v.up());
  REQUIRE(eventually([&] { return all_peers_ready(*cl, 2); }, 15000));
  auto back = connect(v);
  CHECK(back->callables().value.callables_size() == 1);
  for (int i = 0; i < 2; ++i) {
    auto next = cl->run(sleep_job(1));
    REQUIRE(next.ok());
    CHECK(next.value.state() == v1::SUCCEEDED);
  }
  CHECK(chip_tasks(*back) == 2);  // both ran on the restarted peer a, the first idle L3 worker
  CHECK_THAT(c.d->log(), Catch::Contains("1 registration(s) re-installed"));
}

TEST_CASE("a retryable callable survives the loss of its peer - the run succeeds on the other one") {
  DaemonProcess a({}, 1, 1), b({}, 1, 1);
  REQUIRE((a.up() && b.up()));
  Coordinator c({&a, &b});
  auto cl = connect_ready(c, 2);
  pto::client::Placement retry;
  retry.max_retries = 2;
  REQUIRE(cl->register_chip(SLEEP_CONFIG, "sleep", retry).ok());
  auto sub = cl->submit(sleep_job(1500));
  REQUIRE(sub.ok());
  const DaemonProcess* victim = nullptr;
  REQUIRE(eventually([&] { return (victim = busy_peer(*cl, {&a, &b})) != nullptr; }, 15000));
  const DaemonProcess* survivor = victim == &a ? &b : &a;
  kill(victim->pid(), SIGKILL);
  auto r = cl->result(sub.value.job_id(), 20000);
  REQUIRE(r.ok());
  INFO(r.value.message());
  CHECK(r.value.state() == v1::SUCCEEDED);
  CHECK(chip_tasks(*connect(*survivor)) == 1);
}

TEST_CASE("a peer that stops answering is detected by heartbeats") {
  DaemonProcess a({}, 1, 1);
  REQUIRE(a.up());
  Coordinator c({&a});
  auto cl = connect_ready(c, 1);
  REQUIRE(cl->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto sub = cl->submit(sleep_job(20000));
  REQUIRE(sub.ok());
  REQUIRE(eventually([&] { return busy_peer(*cl, {&a}) != nullptr; }, 15000));
  // SIGSTOP: the connection stays open but nothing comes back.
  const auto t0 = Clock::now();
  kill(a.pid(), SIGSTOP);
  auto r = cl->result(sub.value.job_id(), 10000);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("peer SIGSTOPped -> job FAILED at the coordinator (heartbeat silence): %.1f ms\n", ms);
  kill(a.pid(), SIGCONT);
  REQUIRE(r.ok());
  CHECK(r.value.state() == v1::FAILED);
  CHECK_THAT(r.value.message(), Catch::Contains("no frame from the peer"));
  CHECK(ms < 5000);
  // Once it answers again the coordinator opens a new session.
  CHECK(eventually([&] { return all_peers_ready(*cl, 1); }, 15000));
}

TEST_CASE("malformed - out-of-order - wrong-version frames and late tasks are refused - the peer keeps serving") {
  const std::string dir = make_temp_dir("ptod-frames");
  std::ofstream(dir + "/one-credit.toml") << "[session]\ncredits = 1\n";
  DaemonProcess p({"--config", dir + "/one-credit.toml"}, 1, 1);
  REQUIRE(p.up());
  auto cl = connect(p);
  auto vec = cl->register_chip(VECTOR_CONFIG, "vector");
  REQUIRE(vec.ok());
  auto slp = cl->register_chip(SLEEP_CONFIG, "sleep");
  REQUIRE(slp.ok());
  v1::Frame f;
  {  // A version the peer does not speak: refused, naming both.
    RawSession s(p.address());
    v1::Frame h;
    h.set_version(2);
    h.set_seq(1);
    h.mutable_hello()->set_min_version(2);
    h.mutable_hello()->set_max_version(2);
    REQUIRE(s.send(h, false));
    REQUIRE(s.next(&f));
    CHECK(f.hello().state() == v1::Hello::REFUSED);
    CHECK_THAT(f.hello().message(), Catch::Contains("version 2") && Catch::Contains("version 1"));
    CHECK(s.finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  {  // The first frame must be HELLO.
    RawSession s(p.address());
    v1::Frame h;
    h.mutable_health();
    REQUIRE(s.send(h));
    REQUIRE(s.next(&f));
    CHECK(f.hello().state() == v1::Hello::REFUSED);
    CHECK_THAT(f.hello().message(), Catch::Contains("must be HELLO"));
    CHECK(s.finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // An unknown callable fails the task; after UNREGISTER a late task names the tombstone; then a frame out of order.
    RawSession s(p.address());
    REQUIRE(s.hello());
    REQUIRE(s.send(task_frame(std::string(32, '\xab'), 7)));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_completion());
    CHECK(f.completion().completions(0).id() == 7);
    CHECK(f.completion().completions(0).outcome() == v1::TASK_FAILURE);
    CHECK_THAT(f.completion().completions(0).failure().message(), Catch::Contains("not registered on this peer"));
    CHECK(f.completion().credits() == 1);
    v1::Frame u;
    u.mutable_control()->set_id(1);
    u.mutable_control()->set_op(v1::Control::UNREGISTER);
    u.mutable_control()->set_digest(vec.value.identity().digest());
    REQUIRE(s.send(u));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_control_reply());
    CHECK(f.control_reply().ok());
    REQUIRE(s.send(task_frame(vec.value.identity().digest(), 8)));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_completion());
    CHECK_THAT(f.completion().completions(0).failure().message(),
               Catch::Contains("not registered any more") && Catch::Contains("'vector' was unregistered"));
    v1::Frame skip;
    skip.mutable_health();
    s.seq += 5;
    REQUIRE(s.send(skip));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_shutdown());
    CHECK_THAT(f.shutdown().reason(), Catch::Contains("out of order"));
    CHECK(s.finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  {  // Another session's id.
    RawSession s(p.address());
    REQUIRE(s.hello());
    s.session ^= 1;
    v1::Frame h;
    h.mutable_health();
    REQUIRE(s.send(h));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_shutdown());
    CHECK_THAT(f.shutdown().reason(), Catch::Contains("frame of session"));
  }
  {  // A frame without a body.
    RawSession s(p.address());
    REQUIRE(s.hello());
    REQUIRE(s.send(v1::Frame()));
    REQUIRE(s.next(&f));
    REQUIRE(f.has_shutdown());
    CHECK_THAT(f.shutdown().reason(), Catch::Contains("no body"));
  }
  {  // More tasks than credits.
    RawSession s(p.address());
    REQUIRE(s.hello());
    v1::Frame two = task_frame(slp.value.identity().digest(), 1, {500});
    *two.mutable_task()->add_tasks() = task_frame(slp.value.identity().digest(), 2, {500}).task().tasks(0);
    REQUIRE(s.send(two));
    bool shut = false;
    while (!shut && s.next(&f)) shut = f.has_shutdown();
    REQUIRE(shut);
    CHECK_THAT(f.shutdown().reason(), Catch::Contains("beyond the 1 credits"));
  }
  // Still serving: a well-behaved session is READY and the API answers.
  RawSession good(p.address());
  CHECK(good.hello());
  CHECK(cl->version().ok());
  CHECK(cl->health().value == "SERVING");
  std::filesystem::remove_all(dir);
}

TEST_CASE("sessions between daemons need the token - TLS and mutual TLS between daemons") {
  const std::string dir = make_temp_dir("ptod-peer-auth");
  REQUIRE(make_test_pki(dir));
  write_secret(dir + "/token", "0123456789abcdef-peer-token\n");
  write_secret(dir + "/wrong", "0123456789abcdef-wrong-token\n");
  std::ofstream(dir + "/peer.toml") << "[server]\nlisten = [\"127.0.0.1:0\"]\ntls_cert = \"" << dir
                                    << "/server.pem\"\ntls_key = \"" << dir << "/server.key\"\ntls_client_ca = \""
                                    << dir << "/ca.pem\"\ntoken_file = \"" << dir << "/token\"\n";
  DaemonProcess p({"--config", dir + "/peer.toml"}, 1, 1);
  INFO(p.log());
  REQUIRE(p.up());
  {  // No token on the unix socket: refused.
    RawSession s(p.address());
    v1::Frame h;
    h.mutable_hello()->set_min_version(1);
    h.mutable_hello()->set_max_version(1);
    (void)s.send(h);
    v1::Frame f;
    CHECK_FALSE(s.next(&f));
    CHECK(s.finish().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  const std::string tcp = "127.0.0.1:" + std::to_string(p.grpc_port());
  const std::string tls =
      "tls_ca = \"" + dir + "/ca.pem\"\ntls_cert = \"" + dir + "/client.pem\"\ntls_key = \"" + dir + "/client.key\"\n";
  {  // The wrong token: the coordinator never gets a session and says why.
    Coordinator c({}, 0, tls + "token_file = \"" + dir + "/wrong\"\n", {tcp});
    REQUIRE(c.d->up());
    auto cl = connect(*c.d);
    std::string state;
    const bool refused = eventually(
        [&] {
          auto n = remote_nodes(*cl);
          state = n.empty() ? "" : n[0].state();
          return state.find("(16)") != std::string::npos;  // UNAUTHENTICATED
        },
        15000);
    std::printf("coordinator with the wrong token sees its peer as: %s\n", state.c_str());
    CHECK(refused);
    CHECK_FALSE(all_peers_ready(*cl, 1));
  }
  {  // The right token over mutual TLS: READY, and a job runs through it.
    Coordinator c({}, 0, tls + "token_file = \"" + dir + "/token\"\ntls_server_name = \"localhost\"\n", {tcp});
    INFO(c.d->log());
    auto cl = connect_ready(c, 1);
    Output r = run_command({PTOCTL_PATH, "--address", c.d->address(), "run-example", VECTOR_CONFIG}, 120);
    INFO(r.text);
    CHECK(r.code == 0);
    CHECK_THAT(r.text, Catch::Contains("f: PASS ("));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("between daemons the coordinator acts for the job's principal - where the peer trusts it") {
  const std::string dir = make_temp_dir("ptod-l4-principal");
  write_secret(dir + "/coord-token", "coordinator-token-0123456789\n");
  write_secret(dir + "/peer-tokens", "coord user coordinator-token-0123456789\n");
  write_secret(dir + "/coord-tokens", "alice user alice-token-0123456789\n");
  std::ofstream(dir + "/peer.toml") << "[server]\ntokens_file = \"" << dir << "/peer-tokens\"\n";
  const std::string coord_toml = "[server]\ntokens_file = \"" + dir + "/coord-tokens\"\n";
  pto::client::ClientOptions as_alice;
  as_alice.token = "alice-token-0123456789";
  auto run_as_alice = [&](const Coordinator& c) {
    as_alice.address = c.d->address();
    Client cl(as_alice);
    REQUIRE(eventually([&] { return all_peers_ready(cl, 1); }, 15000));
    REQUIRE(cl.register_chip(SLEEP_CONFIG, "sleep").ok());
    auto r = cl.run(sleep_job(1));
    REQUIRE(r.ok());
    INFO(r.value.message());
    CHECK(r.value.state() == v1::SUCCEEDED);
    CHECK(r.value.owner() == "alice");
  };
  {  // The coordinator reaches this peer as root (its unix socket): admin there, so alice's task runs as alice.
    DaemonProcess trusting({"--log-level", "debug"}, 1, 0);
    REQUIRE(trusting.up());
    Coordinator c({&trusting}, 0, "", {}, coord_toml);
    REQUIRE(c.d->up());
    run_as_alice(c);
    CHECK(eventually([&] { return trusting.log().find("runs as alice") != std::string::npos; }));
  }
  {  // Here the coordinator is the user "coord": the peer does not let it speak for others.
    DaemonProcess wary({"--config", dir + "/peer.toml", "--log-level", "debug"}, 1, 0);
    REQUIRE(wary.up());
    Coordinator c({&wary}, 0, "token_file = \"" + dir + "/coord-token\"\n", {}, coord_toml);
    REQUIRE(c.d->up());
    run_as_alice(c);
    CHECK(eventually([&] { return wary.log().find("runs as coord") != std::string::npos; }));
    CHECK(wary.log().find("runs as alice") == std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a session is held to its principal: another principal's callables are not told, run or unregistered") {
  const std::string dir = make_temp_dir("ptod-session-owner");
  write_secret(dir + "/tokens", "alice user alice-token-0123456789\ncoord user coord-token-0123456789\n");
  std::ofstream(dir + "/peer.toml") << "[server]\ntokens_file = \"" << dir
                                    << "/tokens\"\n[quotas.coord]\narena_bytes = 4096\n";
  DaemonProcess p({"--config", dir + "/peer.toml"}, 1, 1);
  REQUIRE(p.up());
  pto::client::ClientOptions o;
  o.address = p.address();
  o.token = "alice-token-0123456789";
  Client alice(o);
  auto vec = alice.register_chip(VECTOR_CONFIG, "vector");  // alice's, not published
  REQUIRE(vec.ok());
  RawSession s(p.address(), "coord-token-0123456789");
  REQUIRE(s.hello());
  v1::Frame f, q;
  q.mutable_control()->set_id(1);
  q.mutable_control()->set_op(v1::Control::QUERY);
  q.mutable_control()->set_digest(vec.value.identity().digest());
  REQUIRE(s.send(q));
  REQUIRE(s.next(&f));
  CHECK_FALSE(f.control_reply().present());  // not told
  REQUIRE(s.send(task_frame(vec.value.identity().digest(), 9)));
  REQUIRE(s.next(&f));
  REQUIRE(f.has_completion());
  CHECK(f.completion().completions(0).outcome() == v1::TASK_FAILURE);  // not run
  v1::Frame u;
  u.mutable_control()->set_id(2);
  u.mutable_control()->set_op(v1::Control::UNREGISTER);
  u.mutable_control()->set_digest(vec.value.identity().digest());
  REQUIRE(s.send(u));
  REQUIRE(s.next(&f));
  CHECK(alice.callables().value.callables_size() == 1);  // not removed
  // Remote buffers count against the session principal's arena quota.
  v1::Frame b;
  b.mutable_control()->set_id(3);
  b.mutable_control()->set_op(v1::Control::BUFFER_ALLOC);
  b.mutable_control()->set_bytes(8192);
  REQUIRE(s.send(b));
  REQUIRE(s.next(&f));
  CHECK_FALSE(f.control_reply().ok());
  CHECK_THAT(f.control_reply().message(), Catch::Contains("quota of 4096 bytes"));
  (void)s.finish();
  std::filesystem::remove_all(dir);
}

// A principal's remote buffers on a peer count against its arena quota
// together: each session counted only its own, so two sessions of one
// coordinator had twice the quota.
TEST_CASE("remote buffers of all of a principal's sessions count against its quota together") {
  const std::string dir = make_temp_dir("ptod-session-quota");
  write_secret(dir + "/tokens", "coord user coord-token-0123456789\n");
  std::ofstream(dir + "/peer.toml") << "[server]\ntokens_file = \"" << dir
                                    << "/tokens\"\n[quotas.coord]\narena_bytes = 8388608\n";
  DaemonProcess p({"--config", dir + "/peer.toml"}, 1, 1);
  REQUIRE(p.up());
  RawSession a(p.address(), "coord-token-0123456789"), b(p.address(), "coord-token-0123456789");
  REQUIRE(a.hello());
  REQUIRE(b.hello());
  v1::Frame alloc, f;
  alloc.mutable_control()->set_id(1);
  alloc.mutable_control()->set_op(v1::Control::BUFFER_ALLOC);
  alloc.mutable_control()->set_bytes(6 << 20);
  REQUIRE(a.send(alloc));
  REQUIRE(a.next(&f));
  CHECK(f.control_reply().ok());
  REQUIRE(b.send(alloc));
  REQUIRE(b.next(&f));
  CHECK_FALSE(f.control_reply().ok());
  CHECK_THAT(f.control_reply().message(),
             Catch::Contains("holds 6291456 bytes") && Catch::Contains("quota of 8388608 bytes"));
  alloc.mutable_control()->set_id(2);
  alloc.mutable_control()->set_bytes(2 << 20);  // what is left fits
  REQUIRE(b.send(alloc));
  REQUIRE(b.next(&f));
  CHECK(f.control_reply().ok());
  (void)a.finish();
  (void)b.finish();
  std::filesystem::remove_all(dir);
}

// A two-phase registration is its session's: a COMMIT from another session
// (a coordinator's stale one, or any client with a session) would make it
// visible behind its coordinator's back, and that coordinator's ABORT - one
// of its other peers refused - would then leave it registered here alone.
TEST_CASE("a session commits only what it prepared - another session's prepared registration stays its own") {
  DaemonProcess p({}, 1, 1);
  REQUIRE(p.up());
  auto cl = connect(p);
  v1::RegisterRequest req;
  req.set_name("add_one");
  req.set_abi(v1::ABI_SUB);
  req.mutable_native_import()->set_library_path(NATIVE_SUBS);
  req.mutable_native_import()->set_symbol("pto_test_add_one");
  RawSession a(p.address()), b(p.address());
  REQUIRE(a.hello());
  REQUIRE(b.hello());
  v1::Frame f, prep;
  prep.mutable_control()->set_op(v1::Control::PREPARE);
  *prep.mutable_control()->mutable_request() = req;
  // The peer names the digest it computes: the first PREPARE, with a digest
  // that is not it, is refused and undone; the second uses it.
  prep.mutable_control()->set_id(1);
  prep.mutable_control()->set_digest(std::string(32, '\0'));
  REQUIRE(a.send(prep));
  REQUIRE(a.next(&f));
  CHECK_FALSE(f.control_reply().ok());
  INFO(f.control_reply().message());
  const std::string digest = f.control_reply().digest();
  REQUIRE(digest.size() == 32);
  prep.mutable_control()->set_id(2);
  prep.mutable_control()->set_digest(digest);
  REQUIRE(a.send(prep));
  REQUIRE(a.next(&f));
  REQUIRE(f.control_reply().ok());
  v1::Frame commit;
  commit.mutable_control()->set_id(1);
  commit.mutable_control()->set_op(v1::Control::COMMIT);
  commit.mutable_control()->set_digest(digest);
  REQUIRE(b.send(commit));
  REQUIRE(b.next(&f));
  CHECK_FALSE(f.control_reply().ok());
  CHECK_THAT(f.control_reply().message(), Catch::Contains("did not prepare it"));
  CHECK(cl->callables().value.callables_size() == 0);
  v1::Frame abort;
  abort.mutable_control()->set_id(3);
  abort.mutable_control()->set_op(v1::Control::ABORT);
  abort.mutable_control()->set_digest(digest);
  REQUIRE(a.send(abort));
  REQUIRE(a.next(&f));
  CHECK(f.control_reply().ok());
  CHECK(cl->callables().value.callables_size() == 0);  // all or nothing: nothing stays
  // Its own session commits it.
  prep.mutable_control()->set_id(4);
  REQUIRE(a.send(prep));
  REQUIRE(a.next(&f));
  REQUIRE(f.control_reply().ok());
  commit.mutable_control()->set_id(5);
  REQUIRE(a.send(commit));
  REQUIRE(a.next(&f));
  CHECK(f.control_reply().ok());
  CHECK(cl->callables().value.callables_size() == 1);
  (void)a.finish();
  (void)b.finish();
}

// The peer waits for a coordinator's HELLO before its watchdog runs: a
// coordinator (with the token) that opened the stream and said nothing held a
// server thread for as long as it liked - 128 such streams stop every RPC.
TEST_CASE("a session whose coordinator says no HELLO is ended by the peer after dead_after_ms") {
  DaemonProcess p({}, 1, 1);
  REQUIRE(p.up());
  RawSession silent(p.address());
  const auto t0 = std::chrono::steady_clock::now();
  v1::Frame f;
  CHECK_FALSE(silent.s->Read(&f));  // ended by the peer, not by the stream's 30 s deadline
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(silent.s->Finish().error_code() == grpc::StatusCode::CANCELLED);
  // Logged as the handler returns, which may be just after the client heard.
  CHECK(eventually([&] { return p.log().find("no HELLO within 1 s") != std::string::npos; }, 5000));
  RawSession good(p.address());  // one that says it is served
  CHECK(good.hello());
  (void)good.finish();
}

// After the session's end the peer's writer flushes what is queued for the
// coordinator; one that stopped reading held that Write, its thread and the
// session's buffers, as long as its stream lived (the watchdog stops at the
// end). Now cancelled dead_after_ms after the end. The test's thread keeps
// making calls meanwhile, as a live coordinator process would: its
// channel's socket is read, so what is stuck is the stream's flow control.
TEST_CASE("a coordinator that stops reading after its session ended does not hold the peer's writer") {
  DaemonProcess p({}, 1, 1);
  REQUIRE(p.up());
  auto cl = connect(p);
  RawSession s(p.address());
  REQUIRE(s.hello());
  v1::Frame alloc, f;
  alloc.mutable_control()->set_id(1);
  alloc.mutable_control()->set_op(v1::Control::BUFFER_ALLOC);
  alloc.mutable_control()->set_bytes(64 << 20);
  REQUIRE(s.send(alloc));
  REQUIRE(s.next(&f));
  REQUIRE(f.control_reply().ok());
  // 64 MiB of replies the coordinator never reads, then its end.
  for (int i = 0; i < 16; ++i) {
    v1::Frame r;
    r.mutable_control()->set_id(2 + i);
    r.mutable_control()->set_op(v1::Control::BUFFER_READ);
    r.mutable_control()->set_buffer_id(f.control_reply().buffer_id());
    r.mutable_control()->set_generation(f.control_reply().generation());
    r.mutable_control()->set_offset(uint64_t(i) << 22);
    r.mutable_control()->set_bytes(4 << 20);
    REQUIRE(s.send(r));
  }
  REQUIRE(s.s->WritesDone());
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(s.session));
  const std::string ended = std::string("session ") + id + " ended";
  CHECK(eventually(
      [&] {
        (void)cl->version();  // a live process: its gRPC sockets are read
        return p.log().find(ended) != std::string::npos;
      },
      10000));
  CHECK_THAT(p.log(), Catch::Contains("took no frames"));
  s.ctx.TryCancel();  // what it did not read is of no interest
  (void)s.s->Finish();
}
