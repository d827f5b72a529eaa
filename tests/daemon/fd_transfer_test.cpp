// The fd socket (docs/proto.md, "The fd socket"): tensors moved between a
// client's memfd and the daemon's arena without crossing a socket. The real
// ptod; the client library, ptoctl, and raw requests on the socket for what
// a well-behaved client never sends.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "pto/base/fd_passing.h"
#include "pto/client.h"

using namespace pto_test;
namespace v1 = pto::v1;
using SC = grpc::StatusCode;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

v1::TensorHandle named(const std::string& name) {
  v1::TensorHandle h;
  h.set_name(name);
  return h;
}

std::unique_ptr<pto::client::Client> client(const std::string& address, bool fd_transfers, const std::string& token = "") {
  pto::client::ClientOptions o;
  o.address = address;
  o.timeout = std::chrono::seconds(30);
  o.fd_transfers = fd_transfers;
  o.fd_jobs = fd_transfers;  // false: nothing through the fd socket
  o.token = token;
  return std::make_unique<pto::client::Client>(o);
}

// A raw connection to the fd socket: one request with an optional
// descriptor, the reply (or a closed connection).
struct Raw {
  int s = -1;
  bool connected = false;
  // Off the test's main thread, `must` is false (Catch2 is not thread-safe):
  // the caller checks `connected`.
  explicit Raw(const std::string& path, bool must = true) {
    s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    connected = ::connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    if (must) REQUIRE(connected);
    reply_within(10);
  }
  ~Raw() { ::close(s); }
  void reply_within(int seconds) {
    const timeval bound{seconds, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  }
  // Sends `bytes` as one frame's content (a length prefix unless raw) with `fd` attached.
  void send(const std::string& bytes, int fd, bool prefix = true) {
    std::string frame = bytes;
    if (prefix) {
      const auto n = static_cast<uint32_t>(bytes.size());
      frame.insert(0, std::string{char(n), char(n >> 8), char(n >> 16), char(n >> 24)});
    }
    REQUIRE(pto::send_with_fd(s, frame.data(), frame.size(), fd) == ssize_t(frame.size()));
  }
  // The reply; false when the daemon closed the connection instead.
  bool reply(v1::FdReply* r) {
    uint8_t head[4];
    if (::recv(s, head, 4, MSG_WAITALL) != 4) return false;
    const uint32_t n = head[0] | head[1] << 8 | head[2] << 16 | uint32_t(head[3]) << 24;
    std::string body(n, '\0');
    if (n && ::recv(s, body.data(), n, MSG_WAITALL) != ssize_t(n)) return false;
    return r->ParseFromString(body);
  }
  // The same without asserting: false when the request could not be sent
  // or no reply came (a connection the daemon refused and closed).
  bool try_call(const v1::FdRequest& req, int fd, v1::FdReply* r) {
    std::string frame = req.SerializeAsString();
    const auto n = static_cast<uint32_t>(frame.size());
    frame.insert(0, std::string{char(n), char(n >> 8), char(n >> 16), char(n >> 24)});
    return pto::send_with_fd(s, frame.data(), frame.size(), fd) == ssize_t(frame.size()) && reply(r);
  }
  v1::FdReply call(const v1::FdRequest& req, int fd) {
    send(req.SerializeAsString(), fd);
    v1::FdReply r;
    REQUIRE(reply(&r));
    return r;
  }
};

// A daemon whose tokens name two principals, alice and bob.
std::unique_ptr<DaemonProcess> with_alice_and_bob(const char* tag) {
  const std::string dir = make_temp_dir(tag);
  write_secret(dir + "/tokens", "alice user alice-token-0123456789\nbob user bob-token-0123456789ab\n");
  std::ofstream(dir + "/ptod.toml") << "[server]\ntokens_file = \"" << dir << "/tokens\"\n";
  auto d = std::make_unique<DaemonProcess>(std::vector<std::string>{"--config", dir + "/ptod.toml"});
  REQUIRE(d->up());
  return d;
}

int sealed_memfd(uint64_t bytes, bool seal = true) {
  const int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, off_t(bytes)) == 0);
  if (seal) REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

v1::FdRequest upload_of(const std::string& name, uint32_t elems) {
  v1::FdRequest req;
  req.set_op(v1::FdRequest::UPLOAD);
  req.set_name(name);
  req.add_shape(elems);
  req.set_dtype(v1::UINT8);
  return req;
}

}  // namespace

TEST_CASE("through the fd socket: from plain memory and from a shared buffer, byte-identical both ways and over gRPC") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = client(d.address(), true);
  auto g = client(d.address(), false);
  REQUIRE(c->fd_socket());
  REQUIRE_FALSE(g->fd_socket());
  const uint32_t n = 3u << 20;  // larger than the client's first staging buffer (1 MiB)
  const std::vector<uint8_t> bytes = random_bytes(n, 7);

  // Plain memory in, gRPC out; gRPC in, the fd socket out.
  auto up = c->upload("a", {n}, PTO_UINT8, bytes.data(), n);
  INFO(up.status.message);
  REQUIRE(up.ok());
  CHECK(up.value.bytes() == n);
  std::vector<uint8_t> back;
  REQUIRE(g->download(named("a"), &back).ok());
  CHECK(back == bytes);
  REQUIRE(g->upload("b", {n}, PTO_UINT8, bytes.data(), n).ok());
  back.clear();
  auto down = c->download(named("b"), &back);
  INFO(down.status.message);
  REQUIRE(down.ok());
  CHECK(back == bytes);
  CHECK(down.value.handle().name() == "b");

  // A shared buffer: the daemon copies straight from and into its pages.
  auto shared = pto::client::SharedBuffer::create(2 * uint64_t(n));
  REQUIRE(shared.ok());
  std::memcpy(static_cast<uint8_t*>(shared.value.data()) + n, bytes.data(), n);
  REQUIRE(c->upload("s", {n}, PTO_UINT8, shared.value, n).ok());
  std::memset(shared.value.data(), 0, 2 * uint64_t(n));
  REQUIRE(c->download(named("s"), shared.value).ok());
  CHECK(std::memcmp(shared.value.data(), bytes.data(), n) == 0);
  // Too small a buffer: OUT_OF_RANGE, naming the sizes.
  auto small = pto::client::SharedBuffer::create(n / 2);
  REQUIRE(small.ok());
  auto refused = c->download(named("s"), small.value);
  CHECK(static_cast<SC>(refused.status.code) == SC::OUT_OF_RANGE);
  CHECK_THAT(refused.status.message, Catch::Contains("do not fit"));
  // Without the fd socket a shared buffer is refused, not silently copied.
  auto no_fd = g->upload("t", {n}, PTO_UINT8, shared.value);
  CHECK(static_cast<SC>(no_fd.status.code) == SC::FAILED_PRECONDITION);

  // ptoctl goes through it too.
  const std::string npy = d.dir() + "/x.npy";
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output dl = run_command({PTOCTL_PATH, "download", "a", "-o", npy}, 60, env);
  INFO(dl.text);
  CHECK(dl.code == 0);
  CHECK_THAT(dl.text, Catch::Contains("moved through the fd socket"));
  Output ul = run_command({PTOCTL_PATH, "upload", npy, "--name", "a2"}, 60, env);
  INFO(ul.text);
  CHECK(ul.code == 0);
  CHECK_THAT(ul.text, Catch::Contains("moved through the fd socket"));
  back.clear();
  REQUIRE(g->download(named("a2"), &back).ok());
  CHECK(back == bytes);
  // A tensor by its id: the plain number ptoctl prints (no '#' for a shell to
  // take as a comment); '#ID' still reads; a name of digits alone is refused.
  Output ul2 = run_command({PTOCTL_PATH, "upload", npy}, 60, env);
  INFO(ul2.text);
  REQUIRE(ul2.code == 0);
  const std::string id = ul2.text.substr(0, ul2.text.find(' '));
  REQUIRE(!id.empty());
  CHECK(id.find_first_not_of("0123456789") == std::string::npos);
  CHECK(run_command({PTOCTL_PATH, "download", id, "-o", npy + ".2"}, 60, env).code == 0);
  CHECK(run_command({PTOCTL_PATH, "free", "#" + id}, 60, env).code == 0);
  Output digits = run_command({PTOCTL_PATH, "upload", npy, "--name", "42"}, 60, env);
  CHECK(digits.code == 1);
  CHECK_THAT(digits.text, Catch::Contains("only digits"));
}

TEST_CASE("the fd socket refuses what is not a sealed memfd, short buffers, bad checksums and bad frames") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";  // "unix:" + the socket
  {
    Raw raw(path);
    // A regular file, and a memfd without the seal.
    const std::string file = d.dir() + "/plain";
    std::ofstream(file) << std::string(4096, 'x');
    const int pf = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    v1::FdReply r = raw.call(upload_of("p", 16), pf);
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("must be a memfd sealed against shrinking"));
    ::close(pf);
    const int unsealed = sealed_memfd(4096, false);
    r = raw.call(upload_of("p", 16), unsealed);
    CHECK_THAT(r.message(), Catch::Contains("must be a memfd sealed against shrinking"));
    ::close(unsealed);
    // Too short for the tensor, from its offset.
    const int m = sealed_memfd(4096);
    v1::FdRequest big = upload_of("p", 4000);
    big.set_fd_offset(1000);
    r = raw.call(big, m);
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("the memfd holds 4096 bytes; 4000 from offset 1000 do not fit"));
    // A checksum that does not match: DATA_LOSS, and no tensor (its name is free).
    v1::FdRequest crc = upload_of("p", 16);
    crc.set_check_crc32c(true);
    crc.set_crc32c(12345);
    r = raw.call(crc, m);
    CHECK(static_cast<SC>(r.code()) == SC::DATA_LOSS);
    r = raw.call(upload_of("p", 16), m);
    CHECK(r.code() == 0);
    CHECK(r.tensor().handle().name() == "p");
    // No descriptor; an unknown op.
    r = raw.call(upload_of("q", 16), -1);
    CHECK_THAT(r.message(), Catch::Contains("no descriptor came with the request"));
    v1::FdRequest odd = upload_of("q", 16);
    odd.set_op(static_cast<v1::FdRequest::Op>(7));
    r = raw.call(odd, m);
    CHECK_THAT(r.message(), Catch::Contains("op 7 is none of UPLOAD (1), DOWNLOAD (2), BUFFER_WRITE (3)"));
    // Remote-buffer chunks (a coordinator's session's; remote_link_test has
    // them moving): the buffer named, 1..64 MiB, fitting the memfd, held by
    // a live session of the caller.
    v1::FdRequest chunk;
    chunk.set_op(v1::FdRequest::BUFFER_WRITE);
    chunk.set_buffer_id(1);
    chunk.set_generation(0);
    chunk.set_bytes(16);
    r = raw.call(chunk, m);
    CHECK_THAT(r.message(), Catch::Contains("names buffer 1 of generation 0: both must be non-zero"));
    chunk.set_generation(77);
    chunk.set_bytes((64u << 20) + 1);
    r = raw.call(chunk, m);
    CHECK_THAT(r.message(), Catch::Contains("a remote-buffer chunk of 67108865 bytes: must be 1..67108864"));
    chunk.set_bytes(8192);
    r = raw.call(chunk, m);
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("the memfd holds 4096 bytes; 8192 from offset 0 do not fit"));
    chunk.set_op(v1::FdRequest::BUFFER_READ);
    chunk.set_bytes(16);
    r = raw.call(chunk, m);
    CHECK(static_cast<SC>(r.code()) == SC::NOT_FOUND);
    CHECK_THAT(r.message(), Catch::Contains("remote buffer 1 (generation 000000000000004d): no live session of"));
    // A frame longer than the limit: refused and the connection closed.
    raw.send(std::string("\xff\xff\xff\x7f", 4), m, false);
    REQUIRE(raw.reply(&r));
    CHECK_THAT(r.message(), Catch::Contains("at most 65536"));
    CHECK_FALSE(raw.reply(&r));
    ::close(m);
  }
  {
    // Bytes that are not an FdRequest: refused, the connection closed.
    Raw raw(path);
    raw.send(std::string(40, '\xff'), -1);
    v1::FdReply r;
    REQUIRE(raw.reply(&r));
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("a request of 40 bytes that is not an FdRequest"));
    CHECK_FALSE(raw.reply(&r));
  }
  // The daemon goes on serving, through either way.
  auto c = client(d.address(), true);
  const std::vector<uint8_t> bytes = random_bytes(1000, 3);
  REQUIRE(c->upload("after", {1000}, PTO_UINT8, bytes.data(), 1000).ok());
  std::vector<uint8_t> back;
  REQUIRE(c->download(named("after"), &back).ok());
  CHECK(back == bytes);
}

TEST_CASE("the fd socket knows principals: a tensor is its owner's, an unknown token is refused") {
  auto daemon = with_alice_and_bob("ptod-fd-tenants");
  DaemonProcess& d = *daemon;
  auto alice = client(d.address(), true, "alice-token-0123456789");
  auto bob = client(d.address(), true, "bob-token-0123456789ab");
  const std::vector<uint8_t> bytes = random_bytes(4096, 5);
  auto up = alice->upload("mine", {4096}, PTO_UINT8, bytes.data(), bytes.size());
  REQUIRE(up.ok());
  CHECK(up.value.owner() == "alice");
  std::vector<uint8_t> back;
  auto theirs = bob->download(named("mine"), &back);
  CHECK(static_cast<SC>(theirs.status.code) == SC::NOT_FOUND);
  v1::TensorHandle by_id;
  by_id.set_id(up.value.handle().id());
  CHECK(static_cast<SC>(bob->download(by_id, &back).status.code) == SC::NOT_FOUND);
  REQUIRE(alice->download(by_id, &back).ok());
  CHECK(back == bytes);
  auto stranger = client(d.address(), true, "no-such-token-000000000");
  CHECK(static_cast<SC>(stranger->upload("x", {4096}, PTO_UINT8, bytes.data(), bytes.size()).status.code) ==
        SC::UNAUTHENTICATED);
  // Logged, as a refused gRPC request or fd submit is (it was not before).
  CHECK(eventually([&] { return d.log().find("request from fd socket (uid") != std::string::npos; }, 5000));
}

namespace {

v1::SubmitRequest job_of(const std::string& callable, uint32_t wait_ms) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name(callable);
  req.set_wait_ms(wait_ms);
  return req;
}

v1::FdRequest submit_of(const std::string& callable, uint32_t wait_ms) {
  v1::FdRequest req;
  req.set_op(v1::FdRequest::SUBMIT);
  *req.mutable_submit() = job_of(callable, wait_ms);
  return req;
}

// A client's waiting job succeeded.
void succeeds(pto::client::Client& c, const v1::SubmitRequest& job) {
  auto r = c.submit(job);
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(r.value.result().state() == v1::SUCCEEDED);
}

long fd_submits(const DaemonProcess& d) { return d.metric("ptod_fd_socket_requests_total{op=\"submit\"}"); }
// Jobs the fd socket's job loop answered, and connections it handed to a thread.
long loop_jobs(const DaemonProcess& d) { return d.metric("ptod_fd_socket_loop_jobs_total"); }
long handoffs(const DaemonProcess& d) { return d.metric("ptod_fd_socket_handoffs_total"); }
long record_commits(const DaemonProcess& d) { return d.metric("ptod_job_record_commits_total"); }

// Connections' jobs from threads: each connection had no problem and its
// `each` replies, and every job id is its own.
template <class Ids>
void check_replies(const std::vector<std::string>& problems, const std::vector<Ids>& ids, int each) {
  std::set<uint64_t> all;
  for (size_t i = 0; i < ids.size(); ++i) {
    INFO("connection " << i << ": " << problems[i]);
    CHECK(problems[i].empty());
    CHECK(ids[i].size() == size_t(each));
    all.insert(ids[i].begin(), ids[i].end());
  }
  CHECK(all.size() == ids.size() * size_t(each));
}

// Submits no-op jobs on `raw` until one is answered by the job loop (a job
// not ended within the loop's round goes to a thread, and so does the next
// one): then the connection waits in the loop. False after 300 jobs (a
// loaded host hands many to threads).
bool in_loop(const DaemonProcess& d, Raw& raw) {
  for (int i = 0; i < 300; ++i) {
    const long before = loop_jobs(d);
    v1::FdRequest req;
    req.set_op(v1::FdRequest::SUBMIT);
    req.mutable_submit()->mutable_callable()->set_name("noop");
    req.mutable_submit()->set_wait_ms(10000);
    v1::FdReply r;
    if (!raw.try_call(req, -1, &r) || r.submit().state() != v1::SUCCEEDED) return false;
    if (loop_jobs(d) > before) return true;
  }
  return false;
}

// A loopback TCP socket whose last close() waits for its linger time (30 s):
// data queued that its peer - open, never reading - does not take.
struct LingeringSocket {
  int s = -1, peer = -1, listener = -1;
  LingeringSocket() {
    const int small = 4096;
    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(setsockopt(listener, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0);  // the peer inherits it
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener, 1) == 0);
    REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
    REQUIRE(::connect(s, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    peer = ::accept(listener, nullptr, nullptr);
    REQUIRE(peer >= 0);
    // Until both buffers are full: five tries 20 ms apart take nothing.
    const std::string chunk(65536, 'x');
    for (int idle = 0; idle < 5;) {
      if (::send(s, chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
        idle = 0;
      } else {
        ++idle;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    const linger l{1, 30};
    REQUIRE(setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l) == 0);
  }
  // The test's copy, while the daemon's is on its way (in a socket's
  // queue): the daemon's is then the last, and its close the one that
  // waits (until the peer closes, at the end of the block).
  void close_own() { ::close(std::exchange(s, -1)); }
  ~LingeringSocket() {
    for (int fd : {s, peer, listener})
      if (fd >= 0) ::close(fd);
  }
};

// A request frame with descriptors attached to its first bytes.
void send_with_fds(int c, const v1::FdRequest& req, const std::vector<int>& fds) {
  std::string frame = req.SerializeAsString();
  const auto n = static_cast<uint32_t>(frame.size());
  frame.insert(0, std::string{char(n), char(n >> 8), char(n >> 16), char(n >> 24)});
  iovec iov{frame.data(), frame.size()};
  std::vector<char> control(CMSG_SPACE(fds.size() * sizeof(int)));
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control.data();
  m.msg_controllen = control.size();
  cmsghdr* h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(h), fds.data(), fds.size() * sizeof(int));
  REQUIRE(::sendmsg(c, &m, MSG_NOSIGNAL) == ssize_t(frame.size()));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("jobs through the fd socket: Jobs.Submit's answers, the connecting user's jobs, the client's way there") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(fd_submits(d) == 0);
  Raw raw(path);
  // Waiting: the job's end in the reply, its record there for a gRPC client
  // of the same user afterwards.
  v1::FdReply r = raw.call(submit_of("noop", 10000), -1);
  REQUIRE(r.code() == 0);
  CHECK(r.submit().job_id() > 0);
  CHECK(r.submit().state() == v1::SUCCEEDED);
  CHECK(r.submit().result().state() == v1::SUCCEEDED);
  auto seen = g->result(r.submit().job_id());
  REQUIRE(seen.ok());
  CHECK(seen.value.state() == v1::SUCCEEDED);
  // Not waiting: queued, then it ends as any job does.
  r = raw.call(submit_of("noop", 0), -1);
  REQUIRE(r.code() == 0);
  CHECK(r.submit().state() == v1::QUEUED);
  CHECK_FALSE(r.submit().has_result());
  auto later = g->result(r.submit().job_id(), 10000);
  REQUIRE(later.ok());
  CHECK(later.value.state() == v1::SUCCEEDED);
  // A descriptor that comes with a job is closed, the job runs.
  const int m = sealed_memfd(4096);
  r = raw.call(submit_of("noop", 10000), m);
  ::close(m);
  CHECK(r.code() == 0);
  CHECK(r.submit().result().state() == v1::SUCCEEDED);
  CHECK(fd_submits(d) == 3);
  // Refusals are gRPC's, word for word: an unknown callable, and a SUBMIT
  // without its job (the connection stays).
  r = raw.call(submit_of("no-such-callable", 10000), -1);
  auto by_grpc = g->submit(job_of("no-such-callable", 10000));
  REQUIRE_FALSE(by_grpc.ok());
  CHECK(r.code() == by_grpc.status.code);
  CHECK(r.message() == by_grpc.status.message);
  CHECK_THAT(r.message(), Catch::Contains("no-such-callable"));
  v1::FdRequest empty;
  empty.set_op(v1::FdRequest::SUBMIT);
  r = raw.call(empty, -1);
  CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
  CHECK_THAT(r.message(), Catch::Contains("a SUBMIT carries no job"));
  CHECK(fd_submits(d) == 4);  // the unknown callable's came through; the empty one did not
  // The client library: submit() takes the fd socket on a unix socket,
  // gRPC when told so.
  auto c = client(d.address(), true);
  const v1::SubmitRequest noop = job_of("noop", 10000);
  succeeds(*c, noop);
  CHECK(fd_submits(d) == 5);
  succeeds(*g, noop);
  CHECK(fd_submits(d) == 5);
  // A request larger than a frame (64 KiB; no job the daemon takes is)
  // goes through gRPC, which answers it.
  v1::SubmitRequest large = noop;
  large.set_label(std::string(70000, 'x'));
  auto big = c->submit(large);
  CHECK_FALSE(big.ok());
  CHECK_THAT(big.status.message, Catch::Contains("label: 70000 bytes; at most 256"));
  CHECK(fd_submits(d) == 5);
}

TEST_CASE("jobs through the fd socket belong to the token's principal, a drain refuses them as gRPC does") {
  auto daemon = with_alice_and_bob("ptod-fd-jobs");
  DaemonProcess& d = *daemon;
  auto alice = client(d.address(), true, "alice-token-0123456789");
  auto bob = client(d.address(), true, "bob-token-0123456789ab");
  REQUIRE(alice->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  v1::SubmitRequest nap = job_of("sleep", 10000);
  nap.mutable_args()->add_scalars(1);
  auto mine = alice->submit(nap);
  REQUIRE(mine.ok());
  CHECK(mine.value.result().state() == v1::SUCCEEDED);
  CHECK(fd_submits(d) == 1);
  auto listed = alice->result(mine.value.job_id());
  REQUIRE(listed.ok());
  CHECK(listed.value.owner() == "alice");
  CHECK(static_cast<SC>(bob->result(mine.value.job_id()).status.code) == SC::NOT_FOUND);
  // An unknown token: refused as gRPC refuses it, word for word.
  auto stranger = client(d.address(), true, "no-such-token-000000000");
  auto by_fd = stranger->submit(nap);
  auto by_grpc = client(d.address(), false, "no-such-token-000000000")->submit(nap);
  CHECK(static_cast<SC>(by_fd.status.code) == SC::UNAUTHENTICATED);
  CHECK(by_fd.status.code == by_grpc.status.code);
  CHECK(by_fd.status.message == by_grpc.status.message);
  // A waiting job through the fd socket while the daemon drains: it ends,
  // and the next one is refused, UNAVAILABLE, as through gRPC.
  v1::SubmitRequest long_nap = nap;
  long_nap.mutable_args()->set_scalars(0, 2000);  // the drain waits for it: room for bob's submit
  auto waiting = std::async(std::launch::async, [&] { return alice->submit(long_nap); });
  REQUIRE(eventually(
      [&] {
        auto l = alice->jobs();
        return l.ok() && l.value.jobs_size() > 0 && l.value.jobs(0).state() == v1::RUNNING;
      },
      10000));
  CHECK(fd_submits(d) == 3);  // the stranger's came (and was refused), then this one
  ::kill(d.pid(), SIGTERM);
  REQUIRE(eventually([&] { return bob->health().value == "NOT_SERVING"; }, 5000));
  auto refused = bob->submit(nap);
  CHECK(static_cast<SC>(refused.status.code) == SC::UNAVAILABLE);
  CHECK_THAT(refused.status.message, Catch::Contains("the daemon is draining"));
  auto w = waiting.get();
  REQUIRE(w.ok());
  CHECK(w.value.result().state() == v1::SUCCEEDED);
  CHECK(d.stop(0) == 0);  // already stopping: just wait
}

TEST_CASE("a connection past the fd socket's bound per user is told it was refused, and a job takes gRPC instead") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  // The bound (16 per user) taken by connections that each sent a job.
  std::vector<std::unique_ptr<Raw>> held;
  for (int i = 0; i < 16; ++i) {
    held.push_back(std::make_unique<Raw>(path));
    CHECK(held.back()->call(submit_of("noop", 10000), -1).submit().result().state() == v1::SUCCEEDED);
  }
  Raw one_more(path);
  v1::FdReply r;
  REQUIRE(one_more.reply(&r));  // said at accept, before any request
  CHECK(r.refused());
  CHECK(static_cast<SC>(r.code()) == SC::RESOURCE_EXHAUSTED);
  CHECK_THAT(r.message(), Catch::Contains("16 of uid"));
  CHECK_FALSE(one_more.reply(&r));  // then closed
  // The client's job: refused on the fd socket, so through gRPC.
  succeeds(*client(d.address(), true), job_of("noop", 10000));
  CHECK(fd_submits(d) == 16);
  // one_more, and the client's connection (twice when its first send
  // already found the connection closed and it connected again).
  const long refused = d.metric("ptod_fd_socket_refused_total");
  CHECK(refused >= 2);
  CHECK(refused <= 3);
  // A slot freed, the fd socket serves again.
  held.pop_back();
  REQUIRE(eventually([&] {
    Raw again(path);
    v1::FdReply a;
    return again.try_call(submit_of("noop", 10000), -1, &a) && !a.refused() && a.code() == 0;
  }));
}

// A waiting SUBMIT's thread looks for its client between the job's changes:
// clients that hang up while their jobs run give their connections back (they
// were held until the jobs ended, so 16 of them locked their user out).
TEST_CASE("clients that hang up while their jobs are waited for free their fd socket connections - the jobs go on") {
  DaemonProcess d({}, 1, 2);
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  v1::FdRequest nap = submit_of("sleep", 60000);
  nap.mutable_submit()->mutable_args()->add_scalars(60000);  // cancelled at the end
  {
    std::vector<std::unique_ptr<Raw>> gone;
    for (int i = 0; i < 16; ++i) {
      gone.push_back(std::make_unique<Raw>(path));
      gone.back()->send(nap.SerializeAsString(), -1);
    }
    REQUIRE(eventually([&] { return fd_submits(d) == 16; }, 10000));
    // Past the first look (a client gone by then is noticed at once): the
    // threads are in their long wait for the jobs' ends.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }  // all 16 hang up, their jobs queued or running
  REQUIRE(eventually(
      [&] {
        Raw again(path);
        v1::FdReply a;
        return again.try_call(submit_of("noop", 0), -1, &a) && !a.refused() && a.code() == 0;
      },
      5000));  // held until the jobs ended before
  auto listed = g->jobs();
  REQUIRE(listed.ok());
  int going = 0;
  for (const auto& j : listed.value.jobs())
    if (j.state() == v1::QUEUED || j.state() == v1::RUNNING) {
      ++going;
      CHECK(g->cancel(j.job_id()).ok());
    }
  CHECK(going >= 16);  // the sleeps were not cancelled by the hang-ups (and the noop may wait behind them)
}

// A connection's thread waits up to 10 s for the rest of a request that
// began; stop() joins it. With drain_timeout_s = 1 the whole stop may take
// 3 s: the wait overran it and the backstop ended the daemon with exit 1,
// before it synced its tensors and marked the stop clean.
TEST_CASE("a stop is not held up by a request still coming in on the fd socket - the daemon stops cleanly in time") {
  const std::string dir = make_temp_dir("ptod-fd-stop");
  std::ofstream(dir + "/ptod.toml") << "[daemon]\ndrain_timeout_s = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  Raw raw(d.address().substr(5) + ".fd");
  raw.send(std::string("\x10\x00", 2), -1, false);              // 2 of a length's 4 bytes
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its thread waits for the rest
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(d.stop(SIGTERM) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_THAT(d.log(), !Catch::Contains("overran") && Catch::Contains("stopped"));
  std::filesystem::remove_all(dir);
}

// After its first job a connection waits in the job loop (fd_job_loop.cpp)
// with the others: many clients' jobs answered together, each its own; what
// is not a job, a frame that comes in parts and a job that runs long go to
// a thread of the connection's own, and the loop goes on meanwhile.
TEST_CASE("the fd socket's job loop: many connections' jobs, a transfer between jobs, a frame in parts, a long job") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());

  // Eight connections, 40 waiting jobs each at once: every reply is the
  // job's end, every job id its own.
  constexpr int kConns = 8, kJobs = 40;
  // One round: every connection's jobs, each answered SUCCEEDED with an id
  // of its own; the loop's jobs and the record commits it took.
  struct Round {
    long loop = 0, commits = 0;
  };
  const auto round = [&] {
    std::vector<std::vector<uint64_t>> ids(kConns);
    std::vector<std::string> problems(kConns);
    const long loop_before = loop_jobs(d), submits_before = fd_submits(d), commits_before = record_commits(d);
    REQUIRE(commits_before >= 0);
    {
      std::vector<std::thread> ts;
      for (int i = 0; i < kConns; ++i)
        ts.emplace_back([&, i] {
          Raw raw(path, false);
          if (!raw.connected) {
            problems[size_t(i)] = "cannot connect";
            return;
          }
          for (int j = 0; j < kJobs; ++j) {
            v1::FdReply r;
            if (!raw.try_call(submit_of("noop", 10000), -1, &r)) {
              problems[size_t(i)] = "no reply";
              return;
            }
            if (r.code() != 0 || r.submit().state() != v1::SUCCEEDED) {
              problems[size_t(i)] = r.message() + " / " + v1::JobState_Name(r.submit().state());
              return;
            }
            ids[size_t(i)].push_back(r.submit().job_id());
          }
        });
      for (auto& t : ts) t.join();
    }
    check_replies(problems, ids, kJobs);
    CHECK(fd_submits(d) - submits_before == kConns * kJobs);
    return Round{loop_jobs(d) - loop_before, record_commits(d) - commits_before};
  };
  // Each connection's first job by its thread, the rest by the loop but for
  // those not ended within a round's 2 ms (and the next on their
  // connections). A round's ends share the commit before its first answer.
  // Measured: 54-58 commits for the 320 jobs, 130-147 beside three busy
  // loops (with a commit per wave 84-163, also under ASan); 278-320 when
  // each end committed apart. A loaded host hands most jobs to threads,
  // each its own commit: up to three rounds, until one shows the loop's.
  Round last;
  std::string rounds;
  for (int i = 0; i < 3 && (last.loop == 0 || last.commits * 4 >= kConns * kJobs * 3); ++i) {
    last = round();
    rounds += " " + std::to_string(last.loop) + " by the loop, " + std::to_string(last.commits) + " commits;";
  }
  INFO("rounds of " << kConns * kJobs << " jobs:" << rounds);
  CHECK(last.loop > 0);
  CHECK(last.loop <= kConns * (kJobs - 1));
  CHECK(last.commits > 0);
  CHECK(last.commits * 4 < kConns * kJobs * 3);

  // One connection: a job, then an upload (its descriptor: to a thread of
  // its own, which keeps the connection from then on with its mapped
  // memfd), then a job again.
  Raw raw(path);
  REQUIRE(in_loop(d, raw));
  long handed = handoffs(d);
  const std::vector<uint8_t> bytes = random_bytes(4096, 11);
  const int m = sealed_memfd(bytes.size());
  REQUIRE(::pwrite(m, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
  v1::FdReply up = raw.call(upload_of("between", uint32_t(bytes.size())), m);
  ::close(m);
  INFO(up.message());
  REQUIRE(up.code() == 0);
  std::vector<uint8_t> back;
  REQUIRE(g->download(named("between"), &back).ok());
  CHECK(back == bytes);
  CHECK(handoffs(d) == handed + 1);
  const long by_loop = loop_jobs(d);
  REQUIRE(raw.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);
  REQUIRE(raw.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);
  CHECK(loop_jobs(d) == by_loop);  // its thread answered them

  // A job's frame in two parts, the second 500 ms later, on a connection in
  // the loop: its thread waits for the rest and answers it whole.
  Raw fresh(path);
  REQUIRE(in_loop(d, fresh));
  handed = handoffs(d);
  std::string frame = submit_of("noop", 10000).SerializeAsString();
  const auto n = static_cast<uint32_t>(frame.size());
  frame.insert(0, std::string{char(n), char(n >> 8), char(n >> 16), char(n >> 24)});
  fresh.send(frame.substr(0, 6), -1, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  fresh.send(frame.substr(6), -1, false);
  v1::FdReply parts;
  REQUIRE(fresh.reply(&parts));
  CHECK(parts.code() == 0);
  CHECK(parts.submit().state() == v1::SUCCEEDED);
  CHECK(handoffs(d) == handed + 1);
  REQUIRE(fresh.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);

  // A job of 1.5 s on a connection in the loop: another connection's jobs
  // are answered meanwhile, and then the long one's end.
  Raw slow(path);
  REQUIRE(in_loop(d, slow));
  handed = handoffs(d);
  v1::FdRequest nap = submit_of("sleep", 10000);
  nap.mutable_submit()->mutable_args()->add_scalars(1500);
  const auto t0 = std::chrono::steady_clock::now();
  auto long_one = std::async(std::launch::async, [&] {
    v1::FdReply r;
    const bool ok = slow.try_call(nap, -1, &r);
    return std::make_pair(ok, r);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int j = 0; j < 5; ++j) REQUIRE(fresh.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1400));
  auto [ok, r] = long_one.get();
  REQUIRE(ok);
  CHECK(r.submit().state() == v1::SUCCEEDED);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(1500));
  CHECK(handoffs(d) >= handed + 1);  // the long job
  // And that connection goes on with jobs, in the loop again.
  CHECK(in_loop(d, slow));

  // A frame cut short, then the client gone: the others go on.
  {
    Raw cut(path);
    REQUIRE(cut.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);
    cut.send(frame.substr(0, 5), -1, false);
  }
  CHECK(fresh.call(submit_of("noop", 10000), -1).submit().state() == v1::SUCCEEDED);
}

// One job runs at a time ([jobs] max_running = 1): the loop starts a round's
// jobs one wave of one at a time; what its 2 ms do not reach waits for the
// next round. Every job still ends, each answered on its own connection.
TEST_CASE("the fd socket's job loop with one job at a time: jobs beyond a round's waves start in the next") {
  const std::string dir = make_temp_dir("ptod-fd-waves");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  constexpr int kConns = 4, kRounds = 3;
  std::vector<std::unique_ptr<Raw>> conns;
  for (int i = 0; i < kConns; ++i) {
    conns.push_back(std::make_unique<Raw>(path));
    REQUIRE(in_loop(d, *conns.back()));
  }
  v1::FdRequest nap = submit_of("sleep", 10000);
  nap.mutable_submit()->mutable_args()->add_scalars(5);
  std::vector<std::string> problems(kConns);
  std::vector<std::set<uint64_t>> ids(kConns);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < kConns; ++i)
    ts.emplace_back([&, i] {
      for (int j = 0; j < kRounds; ++j) {
        v1::FdReply r;
        if (!conns[size_t(i)]->try_call(nap, -1, &r) || r.code() != 0 || r.submit().state() != v1::SUCCEEDED) {
          problems[size_t(i)] = r.message();
          return;
        }
        ids[size_t(i)].insert(r.submit().job_id());
      }
    });
  for (auto& t : ts) t.join();
  // One at a time: the twelve 5 ms naps took 60 ms at least.
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(kConns * kRounds * 5));
  check_replies(problems, ids, kRounds);
  for (auto& c : conns) CHECK(in_loop(d, *c));  // back in the loop, each
}

// The daemon closed a client's descriptors where they arrived: an extra one
// on the job loop's thread (the loop stopped for every fd-socket job client
// until that close() returned), a refused one on the connection's thread
// before its reply (and stop() joins that thread), those still queued in a
// connection it closed (the kernel closes them) on the closing thread. A close can wait as long
// as the client wants: a TCP socket with SO_LINGER and data its peer does
// not take waits its linger time (here 30 s; Raw gives up after 10 s; the
// fix answers in milliseconds, the 300 ms naps aside).
TEST_CASE("a client's descriptor whose close() would wait holds up neither the job loop nor a reply") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  auto g = client(d.address(), false);
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(g->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  // A job of 300 ms first, so that the daemon reads the request with the
  // socket only after the test closed its own copy.
  v1::FdRequest nap = submit_of("sleep", 10000);
  nap.mutable_submit()->mutable_args()->add_scalars(300);
  v1::FdReply r;
  {
    Raw other(path), sender(path);
    REQUIRE(in_loop(d, other));
    REQUIRE(in_loop(d, sender));
    LingeringSocket ls;
    const int m = sealed_memfd(4096);
    // A job with two descriptors, read by the loop once the nap's
    // connection is back in it: the memfd is kept (and the connection
    // handed to a thread, which closes it), the socket is let go of on the
    // loop's thread.
    const auto t0 = std::chrono::steady_clock::now();
    sender.send(nap.SerializeAsString(), -1);
    send_with_fds(sender.s, submit_of("noop", 10000), {m, ls.s});
    ::close(m);
    ls.close_own();
    REQUIRE(sender.reply(&r));  // the nap
    REQUIRE(sender.reply(&r));
    CHECK(r.code() == 0);
    CHECK(r.submit().result().state() == v1::SUCCEEDED);
    // Another client's job through the loop meanwhile.
    REQUIRE(other.try_call(submit_of("noop", 10000), -1, &r));
    CHECK(r.submit().state() == v1::SUCCEEDED);
    CHECK(seconds_since(t0) < 8);
  }
  {
    // A transfer whose descriptor is the socket, after a nap: refused at once.
    Raw raw(path);
    LingeringSocket ls;
    const auto t0 = std::chrono::steady_clock::now();
    raw.send(nap.SerializeAsString(), -1);
    raw.send(upload_of("x", 4096).SerializeAsString(), ls.s);
    ls.close_own();
    REQUIRE(raw.reply(&r));  // the nap
    REQUIRE(raw.reply(&r));
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("must be a memfd"));
    CHECK(seconds_since(t0) < 8);
    // Neither a memfd nor a TCP socket: closed on a closer thread - closed
    // all the same (the pipe's reader sees its end), though one closer
    // waits on the socket.
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    raw.send(upload_of("x", 4096).SerializeAsString(), p[1]);
    ::close(p[1]);
    REQUIRE(raw.reply(&r));
    CHECK_THAT(r.message(), Catch::Contains("must be a memfd"));
    pollfd end{p[0], POLLIN, 0};
    CHECK(::poll(&end, 1, 5000) == 1);
    char byte = 0;
    CHECK(::read(p[0], &byte, 1) == 0);
    ::close(p[0]);
  }
  {
    // A connection the loop closes with a descriptor still queued in it:
    // a job, then a byte carrying the socket, then the client goes - the
    // job's answer finds it gone, and the loop closes the connection.
    Raw other(path), leaving(path);
    REQUIRE(in_loop(d, other));
    REQUIRE(in_loop(d, leaving));
    LingeringSocket ls;
    const auto t0 = std::chrono::steady_clock::now();
    leaving.send(submit_of("noop", 10000).SerializeAsString(), -1);
    REQUIRE(pto::send_with_fd(leaving.s, "x", 1, ls.s) == 1);
    ls.close_own();
    ::close(std::exchange(leaving.s, -1));
    REQUIRE(other.try_call(submit_of("noop", 10000), -1, &r));
    CHECK(r.submit().state() == v1::SUCCEEDED);
    CHECK(seconds_since(t0) < 8);
  }
  // More than 4 descriptors with one request: refused, the connection closed.
  {
    Raw raw(path);
    std::vector<int> fds;
    for (int i = 0; i < 5; ++i) fds.push_back(sealed_memfd(4096));
    send_with_fds(raw.s, upload_of("y", 4096), fds);
    for (int fd : fds) ::close(fd);
    REQUIRE(raw.reply(&r));
    CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.message(), Catch::Contains("a request with 5 descriptors: at most 4"));
    CHECK_FALSE(raw.reply(&r));
  }
}

// A frame not whole 10 s after its first byte (FdTransfers::kFrameTimeout):
// refused, its reply naming what came, the connection closed - one whose
// length's bytes are cut short and one whose body is.
TEST_CASE("the fd socket refuses a request cut short in its 10 s, naming the bytes that came") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string path = d.address().substr(5) + ".fd";
  Raw head(path);
  Raw body(path);
  head.reply_within(20);
  body.reply_within(20);
  const auto t0 = std::chrono::steady_clock::now();
  head.send(std::string("\x64\x00", 2), -1, false);
  body.send(std::string("\x64\x00\x00\x00", 4) + std::string(10, '\x01'), -1, false);
  v1::FdReply r;
  REQUIRE(head.reply(&r));
  CHECK(static_cast<SC>(r.code()) == SC::INVALID_ARGUMENT);
  CHECK_THAT(r.message(),
             Catch::Contains("a request cut short: 2 of its 4 length bytes came in the 10 s a request has"));
  CHECK_FALSE(head.reply(&r));
  REQUIRE(body.reply(&r));
  CHECK_THAT(r.message(), Catch::Contains("a request cut short: 10 of its 100 bytes came in the 10 s a request has"));
  CHECK_FALSE(body.reply(&r));
  CHECK(seconds_since(t0) >= 9.5);
}
