// Tensor integrity (docs/daemon.md, "Tensors"; docs/proto.md, Upload): a
// tensor exists for list, jobs and download only once its upload completed
// and its CRC-32C matched; a mismatch, a missing trailer or a short upload
// leaves nothing behind; an upload that stalls is dropped and its space
// released; a download carries the checksum of its bytes.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/base/crc32c.h"
#include "pto/client.h"
#include "pto/v1/ptod.grpc.pb.h"

using namespace pto_test;
namespace v1 = pto::v1;
using SC = grpc::StatusCode;

namespace {

// An upload driven by hand: header, chunks and trailer when the test says.
struct RawUpload {
  std::unique_ptr<v1::Tensors::Stub> stub;
  grpc::ClientContext ctx;
  v1::TensorInfo reply;
  std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> w;
  RawUpload(const DaemonProcess& d, const std::string& name, uint32_t elements, int deadline_s = 60) {
    stub = v1::Tensors::NewStub(grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    w = stub->Upload(&ctx, &reply);
    v1::UploadChunk h;
    h.mutable_header()->set_name(name);
    h.mutable_header()->add_shape(elements);
    h.mutable_header()->set_dtype(v1::FLOAT32);
    REQUIRE(w->Write(h));
  }
  bool data(const void* p, size_t n) {
    v1::UploadChunk c;
    c.set_data(p, n);
    return w->Write(c);
  }
  bool trailer(uint32_t crc) {
    v1::UploadChunk c;
    c.mutable_trailer()->set_crc32c(crc);
    return w->Write(c);
  }
  grpc::Status finish() {
    w->WritesDone();
    return w->Finish();
  }
  // The status without half-closing: what a client that stalls sees.
  grpc::Status wait() { return w->Finish(); }
};

v1::TensorHandle named(const std::string& n) {
  v1::TensorHandle h;
  h.set_name(n);
  return h;
}

// A download in 1 MiB chunks, read (or not) as the test says.
struct RawDownload {
  std::unique_ptr<v1::Tensors::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::DownloadChunk>> r;
  RawDownload(const DaemonProcess& d, const std::string& name) {
    stub = v1::Tensors::NewStub(grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::DownloadRequest req;
    *req.mutable_tensor() = named(name);
    req.set_chunk_bytes(1u << 20);
    r = stub->Download(&ctx, req);
  }
};

// A client of d; fd: through the fd socket where it can, else over gRPC alone.
pto::client::ClientOptions client_options(const DaemonProcess& d, bool fd) {
  pto::client::ClientOptions o;
  o.address = d.address();
  o.timeout = std::chrono::seconds(30);
  o.fd_transfers = fd;
  return o;
}

bool listed(pto::client::Client& c, const std::string& name) {
  auto l = c.tensors();
  if (!l.ok()) return false;
  for (const auto& t : l.value.tensors())
    if (t.handle().name() == name) return true;
  return false;
}

}  // namespace

TEST_CASE("a tensor exists only once its upload completed and its checksum matched") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f;
  RawUpload up(d, "half", 4096);
  REQUIRE(up.data(x.data(), 8192));  // half of it
  // Meanwhile it exists for nobody: not listed, not downloadable, not usable, its name taken.
  REQUIRE(eventually([&] {
    std::vector<uint8_t> got;
    auto r = c->download(named("half"), &got);
    return !r.ok() && r.status.message.find("still being uploaded") != std::string::npos;
  }));
  CHECK_FALSE(listed(*c, "half"));
  v1::SubmitRequest job;
  job.mutable_callable()->set_name("add_one");
  job.mutable_args()->add_tensors()->mutable_tensor()->set_name("half");
  job.mutable_args()->add_tags(v1::INOUT);
  auto sub = c->submit(job);
  CHECK_FALSE(sub.ok());
  CHECK(sub.status.code == int(SC::NOT_FOUND));
  auto again = c->upload("half", {4}, PTO_FLOAT32, x.data(), 16);
  CHECK_FALSE(again.ok());
  CHECK_THAT(again.status.message, Catch::Contains("'half' exists"));
  // The rest and the trailer: now it exists, byte-identical.
  REQUIRE(up.data(x.data() + 2048, 8192));
  REQUIRE(up.trailer(pto::crc32c(0, x.data(), 16384)));
  grpc::Status s = up.finish();
  INFO(s.error_message());
  REQUIRE(s.ok());
  CHECK(listed(*c, "half"));
  std::vector<uint8_t> got;
  REQUIRE(c->download(named("half"), &got).ok());
  REQUIRE(got.size() == 16384);
  CHECK(std::memcmp(got.data(), x.data(), 16384) == 0);
}

TEST_CASE("a wrong checksum, a missing trailer or a short upload leaves no tensor") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  std::vector<float> x(1024, 1.5f);
  {
    RawUpload up(d, "bad", 1024);
    REQUIRE(up.data(x.data(), 4096));
    REQUIRE(up.trailer(pto::crc32c(0, x.data(), 4096) ^ 1));
    grpc::Status s = up.finish();
    CHECK(s.error_code() == SC::DATA_LOSS);
    CHECK_THAT(s.error_message(), Catch::Contains("CRC-32C"));
  }
  {
    RawUpload up(d, "bad", 1024);  // the name is free again
    REQUIRE(up.data(x.data(), 4096));
    grpc::Status s = up.finish();
    CHECK(s.error_code() == SC::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("no trailer"));
  }
  {
    RawUpload up(d, "bad", 1024);
    REQUIRE(up.data(x.data(), 100));
    REQUIRE(up.trailer(pto::crc32c(0, x.data(), 100)));
    grpc::Status s = up.finish();
    CHECK(s.error_code() == SC::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("100 bytes received"));
  }
  CHECK_FALSE(listed(*c, "bad"));
  // The client library sends the trailer itself.
  REQUIRE(c->upload("bad", {1024}, PTO_FLOAT32, x.data(), 4096).ok());
  CHECK(listed(*c, "bad"));
}

TEST_CASE("an upload that stalls is dropped after upload_idle_timeout_s and its space released") {
  // 3 s: the two stalled uploads are held long enough for the probe below
  // to see each of them started, also on a loaded machine.
  const std::string dir = make_temp_dir("ptod-stall");
  std::ofstream(dir + "/ptod.toml") << "[server]\nupload_idle_timeout_s = 3\n[worker]\narena_bytes = 67108864\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  // Two uploads of 24 MiB that send only their header hold 48 of the 64 MiB.
  RawUpload a(d, "a", 6 << 20), b(d, "b", 6 << 20);
  // Each is seen started (its space reserved) before the timeout drops it.
  // Not "both at once" (a probe allocation that no longer fits): under load
  // that window was missed in CI — the second stream's header can reach the
  // daemon late — and the release below does not need it.
  for (const char* name : {"a", "b"}) {
    INFO(name);
    REQUIRE(eventually([&] {
      std::vector<uint8_t> got;
      auto r = c->download(named(name), &got);
      return !r.ok() && r.status.message.find("still being uploaded") != std::string::npos;
    }));
  }
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status sa = a.wait(), sb = b.wait();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(sa.error_message() << " after " << s << " s");
  CHECK(sa.error_code() == SC::CANCELLED);
  CHECK(sb.error_code() == SC::CANCELLED);
  CHECK(s < 5);  // at most 1.25 bounds after the header
  // The client hears CANCELLED when the watch cancels; the handler then
  // logs and releases the space (moments later).
  CHECK(eventually([&] { return d.log().find("nothing received for 3 s") != std::string::npos; }));
  CHECK(eventually([&] { return c->alloc("probe", {6 << 20}, PTO_FLOAT32).ok(); }));
  CHECK(eventually([&] { return c->alloc("probe2", {6 << 20}, PTO_FLOAT32).ok(); }));
  std::filesystem::remove_all(dir);
}

namespace {
// Seconds of CPU a process used so far (its utime + stime, /proc/PID/stat).
double cpu_seconds(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));  // past "pid (comm) "
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}
}  // namespace

TEST_CASE("a call watched with a limit of a few seconds does not keep the daemon busy") {
  // Before: the watch looked every limit / 4 in whole seconds - 0 for a limit of 1..3 s - and spun a core for
  // as long as such a call was open.
  const std::string dir = make_temp_dir("ptod-stall-cpu");
  std::ofstream(dir + "/ptod.toml") << "[server]\nupload_idle_timeout_s = 3\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  RawUpload a(d, "a", 1 << 20);  // its header only: watched until it is dropped, 3 s on
  REQUIRE(eventually([&] {
    std::vector<uint8_t> got;
    auto r = c->download(named("a"), &got);
    return !r.ok() && r.status.message.find("still being uploaded") != std::string::npos;
  }));
  const double before = cpu_seconds(d.pid());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const double used = cpu_seconds(d.pid()) - before;
  INFO("ptod used " << used << " s of CPU in 1.5 s");
  CHECK(used < 0.2);                              // before: 0.43 s on a quiet machine; now 0
  CHECK(a.wait().error_code() == SC::CANCELLED);  // and the watch still drops it
  std::filesystem::remove_all(dir);
}

TEST_CASE("an upload whose call ends before its client half-closed leaves no tensor - also when its trailer came") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  std::vector<float> x(1024, 0.5f);
  // Every byte and the trailer, then neither WritesDone nor more: the
  // call's deadline ends it and its client hears DEADLINE_EXCEEDED. The
  // daemon used to commit the tensor all the same (the trailer had come).
  RawUpload up(d, "late", 1024, 3);
  REQUIRE(up.data(x.data(), 4096));
  REQUIRE(up.trailer(pto::crc32c(0, x.data(), 4096)));
  grpc::Status s = up.wait();
  CHECK(s.error_code() == SC::DEADLINE_EXCEEDED);
  // Its space comes back once the handler sees the call ended; nothing stays.
  CHECK(eventually([&] {
    auto l = c->tensors();
    return l.ok() && l.value.tensors_size() == 0 && l.value.arena_in_use() == 0;
  }));
  CHECK_FALSE(listed(*c, "late"));
  CHECK(eventually([&] { return d.log().find("its call ended before the client half-closed") != std::string::npos; }));
  // The name is free: an upload that half-closes gets it.
  REQUIRE(c->upload("late", {1024}, PTO_FLOAT32, x.data(), 4096).ok());
  CHECK(listed(*c, "late"));
}

TEST_CASE("a freed tensor's pages are kept warm for the next upload - an Alloc there never shows its bytes") {
  DaemonProcess d;
  REQUIRE(d.up());
  const uint32_t n = 64 * 1024;  // 256 KiB
  std::vector<float> secret(n, 1.5f), other(n);
  for (uint32_t i = 0; i < n; ++i) other[i] = float(i % 1000);
  for (bool fd : {false, true}) {
    INFO("through the fd socket: " << fd);
    pto::client::Client k(client_options(d, fd));
    auto a = k.upload("", {n}, PTO_FLOAT32, secret.data(), n * 4);
    REQUIRE(a.ok());
    REQUIRE(k.free(a.value.handle()).ok());
    // The metric counts the kept pages.
    CHECK_THAT(http_get(d.metrics_port(), "/metrics"), Catch::Contains("ptod_arena_warm_bytes 262144"));
    // An upload over them: exactly its own bytes.
    auto b = k.upload("", {n}, PTO_FLOAT32, other.data(), n * 4);
    REQUIRE(b.ok());
    std::vector<uint8_t> got;
    REQUIRE(k.download(b.value.handle(), &got).ok());
    REQUIRE(got.size() == n * 4);
    CHECK(std::memcmp(got.data(), other.data(), n * 4) == 0);
    REQUIRE(k.free(b.value.handle()).ok());
    // An Alloc over them: zeros.
    auto z = k.alloc("", {n}, PTO_FLOAT32);
    REQUIRE(z.ok());
    REQUIRE(k.download(z.value.handle(), &got).ok());
    REQUIRE(got.size() == n * 4);
    CHECK(std::all_of(got.begin(), got.end(), [](uint8_t v) { return v == 0; }));
    REQUIRE(k.free(z.value.handle()).ok());
    // z's download lent its pages to gRPC: they come back, warm, once gRPC
    // lets go of them, which may be after the Free returned. The next round's
    // upload must find them there, or it takes fresh pages.
    CHECK(eventually([&] {
      return http_get(d.metrics_port(), "/metrics").find("ptod_arena_warm_bytes 262144") != std::string::npos;
    }));
  }
}

TEST_CASE("a tensor downloaded over gRPC can be freed at once - its range returns once gRPC lets go of its pages") {
  DaemonProcess d;
  REQUIRE(d.up());
  pto::client::Client k(client_options(d, false));
  const uint32_t n = 1 << 20;  // 4 MiB: several chunks
  std::vector<float> x(n);
  for (uint32_t i = 0; i < n; ++i) x[i] = float(i % 4099);
  for (int round = 0; round < 10; ++round) {
    INFO("round " << round);
    auto t = k.upload("", {n}, PTO_FLOAT32, x.data(), n * 4);
    REQUIRE(t.ok());
    std::vector<uint8_t> got;
    REQUIRE(k.download(t.value.handle(), &got).ok());
    REQUIRE(got.size() == n * 4);
    CHECK(std::memcmp(got.data(), x.data(), n * 4) == 0);
    auto f = k.free(t.value.handle());
    INFO(f.message);
    REQUIRE(f.ok());
  }
  REQUIRE(eventually([&] {
    auto l = k.tensors();
    return l.ok() && l.value.tensors_size() == 0 && l.value.arena_in_use() == 0;
  }));
}

TEST_CASE("a download its client abandons mid-stream unpins the tensor - a Free then succeeds, the daemon serves on") {
  DaemonProcess d;
  REQUIRE(d.up());
  pto::client::Client k(client_options(d, false));
  const uint32_t n = 16u << 20;  // 64 MiB in 1 MiB chunks: far more than the connection's windows hold
  std::vector<float> x(n, 2.5f);
  auto t = k.upload("big", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4);
  REQUIRE(t.ok());
  {
    RawDownload dl(d, "big");
    auto& r = dl.r;
    v1::DownloadChunk chunk;
    REQUIRE(r->Read(&chunk));
    CHECK(chunk.has_info());
    // While it is under way the tensor is pinned.
    auto busy = k.free(named("big"));
    CHECK(busy.code == static_cast<int>(SC::FAILED_PRECONDITION));
    dl.ctx.TryCancel();
    while (r->Read(&chunk)) {}
    CHECK(r->Finish().error_code() == SC::CANCELLED);
  }
  // The daemon's handler notices the client gone and lets go of its pin.
  REQUIRE(eventually([&] { return k.free(named("big")).ok(); }, 10000));
  REQUIRE(eventually([&] {
    auto l = k.tensors();
    return l.ok() && l.value.tensors_size() == 0 && l.value.arena_in_use() == 0;
  }));
  auto again = k.upload("", {4}, PTO_FLOAT32, x.data(), 16);
  REQUIRE(again.ok());
  std::vector<uint8_t> got;
  REQUIRE(k.download(again.value.handle(), &got).ok());
  CHECK(std::memcmp(got.data(), x.data(), 16) == 0);
}

TEST_CASE("a download whose client reads nothing is cancelled after write_stall_timeout_s - its tensor unpinned") {
  const std::string dir = make_temp_dir("ptod-stall");
  // 3 s: the pin is seen before the watch can cancel, also on a loaded
  // machine, and a reading client's every 1 MiB write finishes well within it.
  std::ofstream(dir + "/ptod.toml") << "[server]\nwrite_stall_timeout_s = 3\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  pto::client::Client k(client_options(d, false));
  const uint32_t n = 16u << 20;  // 64 MiB in 1 MiB chunks: far more than the connection's windows hold
  std::vector<float> x(n, 1.25f);
  REQUIRE(k.upload("big", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4).ok());
  RawDownload dl(d, "big");
  auto& r = dl.r;
  v1::DownloadChunk chunk;
  REQUIRE(r->Read(&chunk));
  CHECK(chunk.has_info());
  // Read no further: the daemon's write waits for the client, the tensor
  // pinned. It used to wait so until the daemon stopped.
  CHECK(k.free(named("big")).code == static_cast<int>(SC::FAILED_PRECONDITION));
  REQUIRE(eventually([&] { return k.free(named("big")).ok(); }, 15000));
  CHECK_THAT(d.log(), Catch::Contains("the client read nothing for 3 s ([server] write_stall_timeout_s)"));
  // The client reads what had come, then the end of the call.
  while (r->Read(&chunk)) {}
  CHECK(r->Finish().error_code() == SC::CANCELLED);
  // A client that reads is served in full under the same limit.
  auto t = k.upload("", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4);
  REQUIRE(t.ok());
  std::vector<uint8_t> got;
  REQUIRE(k.download(t.value.handle(), &got).ok());
  REQUIRE(got.size() == uint64_t(n) * 4);
  CHECK(std::memcmp(got.data(), x.data(), got.size()) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a gRPC upload the daemon refuses after its header returns at once - the caller's bytes let go") {
  DaemonProcess d;
  REQUIRE(d.up());
  pto::client::Client k(client_options(d, false));
  const uint32_t n = 16u << 20;  // 64 MiB: more than the flow-control windows hold
  std::vector<float> x(n, 2.f);
  REQUIRE(k.upload("taken", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4, 4u << 20).ok());
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = k.upload("taken", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4, 4u << 20);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.status.message << " after " << s << " s");
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.status.message, Catch::Contains("'taken' exists"));
    CHECK(s < 5);  // the slices still queued go with the call, not after a timeout
  }
}

namespace {
// kB of a process's resident anonymous memory (/proc/PID/status), or -1.
long rss_anon_kb(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}
}  // namespace

TEST_CASE("an idle ptod gives the freed memory it kept for gRPC's messages back to the kernel") {
  // 4 x 2 x 32 MiB up and down over gRPC in 4 MiB chunks: each chunk's
  // messages are freed into ptod's arenas, which keep them
  // (malloc_keep_bytes). Once ptod has been idle for malloc_idle_trim_s they
  // go back; with 0 they stay.
  const std::string dir = make_temp_dir("ptod-trim");
  std::ofstream(dir + "/trim.toml") << "[daemon]\nmalloc_idle_trim_s = 1\n";
  std::ofstream(dir + "/keep.toml") << "[daemon]\nmalloc_idle_trim_s = 0\n";
  const uint32_t n = 8u << 20;  // floats: 32 MiB
  std::vector<float> x(n);
  for (uint32_t i = 0; i < n; ++i) x[i] = float(i % 8191);
  long settled[2] = {0, 0}, peak[2] = {0, 0};
  for (int trim : {0, 1}) {
    INFO((trim ? "malloc_idle_trim_s = 1" : "malloc_idle_trim_s = 0"));
    DaemonProcess d({"--config", dir + (trim ? "/trim.toml" : "/keep.toml")});
    REQUIRE(d.up());
    // Four clients at once: ptod's handlers run on several threads, whose
    // messages land in several arenas.
    std::atomic<int> good{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < 4; ++c)
      clients.emplace_back([&] {
        pto::client::Client k(client_options(d, false));
        for (int round = 0; round < 2; ++round) {
          auto t = k.upload("", {n}, PTO_FLOAT32, x.data(), uint64_t(n) * 4);
          std::vector<uint8_t> got;
          if (!t.ok() || !k.download(t.value.handle(), &got).ok() || got.size() != uint64_t(n) * 4 ||
              std::memcmp(got.data(), x.data(), got.size()) != 0 || !k.free(t.value.handle()).ok())
            return;
        }
        ++good;
      });
    for (auto& c : clients) c.join();
    REQUIRE(good.load() == 4);
    peak[trim] = rss_anon_kb(d.pid());
    [[maybe_unused]] const size_t log_before = d.log().size();  // the start-up's own give-back may be logged before
    // Idle: at least one idle second after the transfers, then the trim at
    // the next tick (within 2 s); 4 s covers it on a loaded machine.
    std::this_thread::sleep_for(std::chrono::seconds(4));
    settled[trim] = rss_anon_kb(d.pid());
#if !defined(PTO_UNDER_ASAN)
    if (trim)
      CHECK_THAT(d.log().substr(log_before),
                 Catch::Contains("idle for 1 s: freed memory given back to the kernel (RssAnon"));
#endif
  }
  INFO("ptod's RssAnon after the transfers / 4 s later, kB: kept " << peak[0] << " / " << settled[0] << ", trimmed "
                                                                   << peak[1] << " / " << settled[1]);
#if defined(PTO_UNDER_ASAN)
  // AddressSanitizer's allocator refuses malloc_keep_bytes and keeps its own
  // freed memory: neither ptod's glibc thresholds nor malloc_trim apply.
  WARN("given-back memory not checked under AddressSanitizer");
#else
  // Kept: most of the 4 MiB messages' memory is still there.
  CHECK(settled[0] > peak[0] - 2048);
  // Given back: more than 2 MiB of it (6-27 MiB in 11 runs, while the kept
  // daemon's moved by 4 kB at most; glibc's malloc_trim does not reach the
  // free top of a thread's arena, which holds the rest).
  CHECK(settled[1] < peak[1] - 2048);
#endif
}
