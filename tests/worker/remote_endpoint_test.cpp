// The engine's side of remote L3 workers, with a scripted RemoteLink (a unit
// test of the scheduler's remote endpoints; the gRPC link and real peers are
// tested end to end in tests/daemon/remote_test.cpp). The link records what
// the engine sends and the test decides when and how each task completes, so
// credits, byte-range ordering on remote buffers, retries and two-phase
// registration are checked exactly, without timing.
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "eventually.h"
#include "pto/worker.h"

using namespace pto;

namespace {

class ScriptedLink : public RemoteLink {
 public:
  explicit ScriptedLink(std::string name, uint32_t credits = 4) : name_(std::move(name)), credits_(credits) {}
  std::string label() const override { return "peer " + name_; }
  Status start(std::function<void()> wake) override {
    std::lock_guard<std::mutex> g(mu_);
    wake_ = std::move(wake);
    ready_ = true;
    return Status::Ok();
  }
  void stop() override {
    std::lock_guard<std::mutex> g(mu_);
    ready_ = false;
  }
  bool ready() const override {
    std::lock_guard<std::mutex> g(mu_);
    return ready_;
  }
  std::string state_text() const override { return ready() ? "ready" : "down"; }
  uint32_t credits() const override { return credits_; }
  void send(RemoteTask&& t) override {
    std::lock_guard<std::mutex> g(mu_);
    sent_.push_back(std::move(t));
    cv_.notify_all();
  }
  void abandon(uint64_t) override {}
  bool has_completions() const override {
    std::lock_guard<std::mutex> g(mu_);
    ++polls_;
    cv_.notify_all();
    return !done_.empty();
  }
  void poll(std::vector<RemoteCompletion>* out) override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& c : done_) out->push_back(c);
    done_.clear();
  }
  Status prepare(const CallableIdentity&, const std::string& payload, uint32_t) override {
    std::lock_guard<std::mutex> g(mu_);
    calls_.push_back("prepare " + payload);
    return refuse_ ? Status::Error(kWorkerChildFailed, "refused by script") : Status::Ok();
  }
  Status commit(const CallableIdentity&, uint32_t) override { return note("commit"); }
  Status abort(const CallableIdentity&, uint32_t) override { return note("abort"); }
  Status unregister(const CallableIdentity&, uint32_t) override { return note("unregister"); }
  Status buffer_alloc(uint64_t bytes, RemoteBufferRef* out, uint32_t) override {
    std::lock_guard<std::mutex> g(mu_);
    out->id = ++next_buffer_;
    out->generation = 7;
    buffers_[out->id].assign(bytes, 0);
    return Status::Ok();
  }
  Status buffer_free(const RemoteBufferRef& b, uint32_t) override {
    std::lock_guard<std::mutex> g(mu_);
    buffers_.erase(b.id);
    return Status::Ok();
  }
  Status buffer_write(const RemoteBufferRef& b, const void* src, uint64_t bytes, uint32_t) override {
    std::lock_guard<std::mutex> g(mu_);
    std::memcpy(buffers_.at(b.id).data() + b.offset, src, bytes);
    return Status::Ok();
  }
  Status buffer_read(const RemoteBufferRef& b, void* dst, uint64_t bytes, uint32_t) override {
    std::lock_guard<std::mutex> g(mu_);
    std::memcpy(dst, buffers_.at(b.id).data() + b.offset, bytes);
    return Status::Ok();
  }
  std::vector<PeerChild> peer_children() const override { return {}; }

  // Test side.
  bool wait_sent(size_t n, int ms = 10000) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return sent_.size() >= n; });
  }
  // Each scheduler round begins by asking every endpoint for completions, then
  // dispatches. Two more asks after this call: a whole round began and ended
  // since, so a task that round could send has been sent.
  bool wait_round(int ms = 10000) {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t until = polls_ + 2;
    return cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return polls_ >= until; });
  }
  size_t sent_count() {
    std::lock_guard<std::mutex> g(mu_);
    return sent_.size();
  }
  RemoteTask sent(size_t i) {
    std::lock_guard<std::mutex> g(mu_);
    return sent_.at(i);
  }
  void complete(size_t i, Outcome o = Outcome::SUCCESS, const std::string& msg = "") {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> g(mu_);
      done_.push_back({sent_.at(i).seq, static_cast<uint8_t>(o), o == Outcome::SUCCESS ? "" : "chip 0", msg});
      wake = wake_;
    }
    wake();
  }
  void set_refuse(bool r) {
    std::lock_guard<std::mutex> g(mu_);
    refuse_ = r;
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }

 private:
  Status note(const std::string& what) {
    std::lock_guard<std::mutex> g(mu_);
    calls_.push_back(what);
    return Status::Ok();
  }
  const std::string name_;
  const uint32_t credits_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable uint64_t polls_ = 0;  // has_completions calls: scheduler rounds
  std::function<void()> wake_;
  bool ready_ = false, refuse_ = false;
  std::vector<RemoteTask> sent_;
  std::vector<RemoteCompletion> done_;
  std::vector<std::string> calls_;
  std::map<uint64_t, std::vector<uint8_t>> buffers_;
  uint64_t next_buffer_ = 0;
};

WorkerConfig l4_config() {
  WorkerConfig c;
  c.level = 4;
  c.spin_us = 5;
  c.heap_ring_bytes = 1 << 20;
  c.buffer_arena_bytes = 4 << 20;
  return c;
}

CallableIdentity test_identity(uint8_t tag) {
  CallableIdentity id;
  id.digest.fill(tag);
  id.kind = CallableKind::CHIP;
  return id;
}

CallableOptions remote(uint32_t retries = 0) {
  CallableOptions o;
  o.remote_payload = "payload";
  o.max_retries = retries;
  return o;
}

}  // namespace

TEST_CASE("a remote worker holds several tasks at once - up to its credits") {
  auto link = std::make_shared<ScriptedLink>("a", 3);
  Worker w(l4_config());
  REQUIRE(w.add_remote_worker(link).ok());
  REQUIRE(w.init().ok());
  CallableHandle h = w.register_remote_callable(test_identity(1), EntryAbi::CHIP, remote());
  REQUIRE(h.ok());
  RunHandle run = w.submit([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    for (int i = 0; i < 5; ++i) o.submit_next_level(h, TaskArgs().add_scalar(i));
  });
  REQUIRE(link->wait_sent(3));
  // All five are queued (submit holds the lock until a ready task is queued) and a round has looked at them since.
  REQUIRE(pto_test::eventually([&] { return w.progress().submitted == 5; }));
  REQUIRE(link->wait_round());
  CHECK(link->sent_count() == 3);  // the fourth waits for a credit
  link->complete(0);
  REQUIRE(link->wait_sent(4));
  link->complete(1);
  REQUIRE(link->wait_sent(5));
  for (size_t i = 2; i < 5; ++i) link->complete(i);
  REQUIRE(run.wait(std::chrono::seconds(10)));
  CHECK(run.result().ok());
  CHECK(run.result().tasks_succeeded == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(link->sent(i).scalars == std::vector<uint64_t>{i});
  CHECK(link->calls() == std::vector<std::string>{"prepare payload", "commit"});
}

TEST_CASE("tasks on remote buffers are ordered by byte-range overlap - not by start address") {
  auto link = std::make_shared<ScriptedLink>("a", 8);
  Worker w(l4_config());
  REQUIRE(w.add_remote_worker(link).ok());
  REQUIRE(w.init().ok());
  CallableHandle h = w.register_remote_callable(test_identity(2), EntryAbi::CHIP, remote());
  REQUIRE(h.ok());
  auto buf = w.alloc_remote(0, {4096}, PTO_FLOAT32);  // 16 KiB on the peer
  REQUIRE(buf.ok());
  auto view = [&](uint32_t first, uint32_t n) {
    return make_tensor(reinterpret_cast<void*>(buf.value.data + first * 4), {n}, PTO_FLOAT32);
  };
  std::vector<float> host(4096);
  for (int i = 0; i < 4096; ++i) host[i] = float(i);
  REQUIRE(w.write_remote(buf.value, host.data()).ok());
  RunHandle run = w.submit([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    o.submit_next_level(h, TaskArgs().add_tensor(view(0, 1024), OUT));       // t1 writes [0, 1024)
    o.submit_next_level(h, TaskArgs().add_tensor(view(512, 1024), IN));      // t2 reads [512, 1536): after t1
    o.submit_next_level(h, TaskArgs().add_tensor(view(2048, 1024), INOUT));  // t3 disjoint: with t1
  });
  REQUIRE(link->wait_sent(2));
  // All three are submitted (t2 queued if it were ready) and a round has looked at the queue since.
  REQUIRE(pto_test::eventually([&] { return w.progress().submitted == 3; }));
  REQUIRE(link->wait_round());
  REQUIRE(link->sent_count() == 2);
  CHECK(link->sent(0).buffers[0].offset == 0);
  CHECK(link->sent(1).buffers[0].offset == 2048 * 4);  // t3 went alongside t1; t2 waits
  CHECK(link->sent(0).buffers[0].id != 0);
  CHECK(link->sent(0).directions[0] == TensorDirection::OUT);
  link->complete(0);
  REQUIRE(link->wait_sent(3));
  CHECK(link->sent(2).buffers[0].offset == 512 * 4);
  CHECK(link->sent(2).directions[0] == TensorDirection::IN);
  link->complete(1);
  link->complete(2);
  REQUIRE(run.wait(std::chrono::seconds(10)));
  CHECK(run.result().ok());
  std::vector<float> back(1024);
  REQUIRE(w.read_remote(view(100, 1024), back.data()).ok());
  CHECK(back[0] == 100.f);
  CHECK(back[1023] == 1123.f);
  // A freed buffer cannot be used any more.
  REQUIRE(w.free_remote(buf.value).ok());
  RunResult r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    o.submit_next_level(h, TaskArgs().add_tensor(view(0, 16), IN));
  });
  CHECK_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("not inside a live remote buffer"));
}

TEST_CASE("a lost remote task fails its consumers - a retryable one runs again on another worker") {
  auto a = std::make_shared<ScriptedLink>("a", 1), b = std::make_shared<ScriptedLink>("b", 1);
  Worker w(l4_config());
  REQUIRE(w.add_remote_worker(a).ok());
  REQUIRE(w.add_remote_worker(b).ok());
  REQUIRE(w.init().ok());
  CallableHandle once = w.register_remote_callable(test_identity(3), EntryAbi::CHIP, remote(0));
  CallableHandle again = w.register_remote_callable(test_identity(4), EntryAbi::CHIP, remote(2));
  REQUIRE((once.ok() && again.ok()));
  auto t = w.alloc({256}, PTO_FLOAT32);
  REQUIRE(t.ok());

  RunHandle run = w.submit([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    o.submit_next_level(again, TaskArgs().add_tensor(t.value, OUT), {}, 0);
  });
  REQUIRE(a->wait_sent(1));
  a->complete(0, Outcome::ENDPOINT_FAILURE, "session lost: scripted");
  REQUIRE(b->wait_sent(1));  // retried on the other worker, though it was placed on a
  b->complete(0);
  REQUIRE(run.wait(std::chrono::seconds(10)));
  CHECK(run.result().ok());
  CHECK(run.result().tasks_retried == 1);

  run = w.submit([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    o.submit_next_level(once, TaskArgs().add_tensor(t.value, OUT), {}, 0);
    o.submit_next_level(once, TaskArgs().add_tensor(t.value, IN), {}, 1);  // reads what the first writes
  });
  REQUIRE(a->wait_sent(2));
  a->complete(1, Outcome::ENDPOINT_FAILURE, "session lost: scripted");
  REQUIRE(run.wait(std::chrono::seconds(10)));
  const RunResult& r = run.result();
  CHECK_FALSE(r.ok());
  REQUIRE(r.first_failure);
  CHECK(r.first_failure->outcome == Outcome::ENDPOINT_FAILURE);
  CHECK_THAT(r.first_failure->worker, Catch::Contains("peer a"));
  CHECK_THAT(r.first_failure->message, Catch::Contains("session lost: scripted"));
  CHECK(r.tasks_skipped == 1);  // the consumer was poisoned, never sent
  CHECK(b->sent_count() == 1);
}

TEST_CASE("two-phase remote registration aborts everywhere when one peer refuses") {
  auto a = std::make_shared<ScriptedLink>("a"), b = std::make_shared<ScriptedLink>("b");
  Worker w(l4_config());
  REQUIRE(w.add_remote_worker(a).ok());
  REQUIRE(w.add_remote_worker(b).ok());
  REQUIRE(w.init().ok());
  b->set_refuse(true);
  CallableHandle h = w.register_remote_callable(test_identity(5), EntryAbi::CHIP, remote());
  REQUIRE_FALSE(h.ok());
  CHECK_THAT(h.status.message, Catch::Contains("peer b") && Catch::Contains("refused by script"));
  CHECK(a->calls() == std::vector<std::string>{"prepare payload", "abort"});
  RunResult r =
      w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) { o.submit_next_level(h, TaskArgs()); });
  CHECK_FALSE(r.ok());
  // Registered on a alone, then unregistered: a tombstone names it at the next submit.
  CallableOptions only_a = remote();
  only_a.remote_workers = {0};
  CallableHandle h2 = w.register_remote_callable(test_identity(5), EntryAbi::CHIP, only_a);
  REQUIRE(h2.ok());
  REQUIRE(w.unregister_callable(h2).ok());
  CHECK(a->calls().back() == "unregister");
  r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) { o.submit_next_level(h2, TaskArgs()); });
  CHECK_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("it was unregistered"));
}
