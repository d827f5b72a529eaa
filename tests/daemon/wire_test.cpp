// The daemon's decoders of outside bytes, alone (docs/fuzzing.md): its
// config, names, a job's arguments and session frames. Each refusal names
// the value and the rule.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "config.h"
#include "idle_trim.h"
#include "names.h"
#include "pto/base/cpu_set.h"
#include "pto/base/crc32c.h"
#include "pto/base/freed_memory.h"
#include "pto/v1/ptod.pb.h"
#include "pto/v1/raw_fields.h"
#include "session_frames.h"
#include "session_wire.h"
#include "submit_args.h"
#include "wire_enums.h"

#include <cctype>

using namespace ptod;

TEST_CASE("daemon config: integer keys take only integers (a huge float is an error, not UB)") {
  DaemonConfig c;
  Status s = DaemonConfig::parse("[worker]\nchips = 1e30\n", "ptod.toml", &c);
  CHECK_THAT(s.message, Catch::Contains("[worker] chips: must be an integer"));
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse(std::string("[server]\n\xEF\xBB\xBE = 1\n"), "ptod.toml", &c).message,
             Catch::Contains("non-ASCII"));
  c = DaemonConfig{};
  REQUIRE(DaemonConfig::parse("[worker]\nchips = 3\n", "ptod.toml", &c).ok());
  CHECK(c.chips == 3);
}

TEST_CASE("CPU lists: ranges and numbers as taskset writes them - each fault named") {
  std::vector<int> cpus;
  REQUIRE(pto::parse_cpu_list("0-3,8", &cpus).ok());
  CHECK(cpus == std::vector<int>{0, 1, 2, 3, 8});
  REQUIRE(pto::parse_cpu_list("8 2-3, 2,", &cpus).ok());  // spaces, repeats, a trailing comma: sorted, once each
  CHECK(cpus == std::vector<int>{2, 3, 8});
  CHECK(pto::format_cpu_list(cpus) == "2-3,8");
  CHECK(pto::format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(pto::format_cpu_list({}).empty());
  CHECK_THAT(pto::parse_cpu_list("", &cpus).message, Catch::Contains("no CPU in it"));
  CHECK_THAT(pto::parse_cpu_list(" , ", &cpus).message, Catch::Contains("no CPU in it"));
  CHECK_THAT(pto::parse_cpu_list("1,x", &cpus).message, Catch::Contains("'x' is not a CPU number from 0 to 1023"));
  CHECK_THAT(pto::parse_cpu_list("-1", &cpus).message, Catch::Contains("'-1' is not a range"));
  CHECK_THAT(pto::parse_cpu_list("3-1", &cpus).message, Catch::Contains("the range '3-1' runs backwards"));
  CHECK_THAT(pto::parse_cpu_list("1024", &cpus).message, Catch::Contains("'1024' is not a CPU number"));
  CHECK_THAT(pto::parse_cpu_list("0-99999", &cpus).message, Catch::Contains("'0-99999' is not a range"));
  CHECK(cpus == std::vector<int>{2, 3, 8});  // a refused list leaves the output as it was
}

TEST_CASE("CPU lists: a process placed whole - the threads it already has go too, and come back") {
  const std::vector<int> mine = pto::allowed_cpus();
  if (mine.size() < 2) {
    WARN("one CPU: a move cannot be told from staying here");
    return;
  }
  std::atomic<pid_t> tid{0};
  std::atomic<bool> stop{false};
  std::thread other([&] {
    tid = gettid();
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (int i = 0; i < 5000 && tid == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(tid != 0);
  auto cpus_of = [&](pid_t t) {
    std::ifstream f("/proc/self/task/" + std::to_string(t) + "/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
    return std::string("?");
  };
  CHECK(cpus_of(tid) == pto::format_cpu_list(mine));
  const pto::Status moved = pto::run_process_on_cpus({mine.back()});
  const std::string there = cpus_of(tid);
  const pto::Status back = pto::run_process_on_cpus(mine);
  stop = true;
  other.join();
  REQUIRE(moved.ok());
  CHECK(there == std::to_string(mine.back()));
  REQUIRE(back.ok());
  CHECK(pto::allowed_cpus() == mine);
}

TEST_CASE("daemon config: [daemon] cpus and [worker] child_cpus - a list, a number or empty, CPUs this host has") {
  DaemonConfig c;
  REQUIRE(DaemonConfig::parse("[daemon]\ncpus = \"0\"\n[worker]\nchild_cpus = 0\n", "ptod.toml", &c).ok());
  CHECK(c.cpus == std::vector<int>{0});
  CHECK(c.child_cpus == std::vector<int>{0});
  CHECK_THAT(c.effective_toml(), Catch::Contains("child_cpus = \"0\"") && Catch::Contains("\ncpus = \"0\""));
  c = DaemonConfig{};
  REQUIRE(DaemonConfig::parse("[daemon]\ncpus = \"\"\n", "ptod.toml", &c).ok());  // as effective_toml() writes none
  CHECK(c.cpus.empty());
  CHECK_THAT(DaemonConfig::parse("[worker]\nchild_cpus = [1]\n", "ptod.toml", &c).message,
             Catch::Contains("[worker] child_cpus: must be a CPU list such as"));
  CHECK_THAT(DaemonConfig::parse("[daemon]\ncpus = \"2-1\"\n", "ptod.toml", &c).message,
             Catch::Contains("[daemon] cpus: CPU list \"2-1\": the range '2-1' runs backwards"));
  // validate(): CPUs this host has for ptod (online, in its cpuset), however
  // narrow the mask it was started with (taskset, CPUAffinity=).
  const std::vector<int> mine = pto::allowed_cpus(), here = pto::available_cpus();
  REQUIRE(!mine.empty());
  CHECK(std::includes(here.begin(), here.end(), mine.begin(), mine.end()));
  if (mine.size() < 2) WARN("one CPU: a mask narrower than the host's cannot be tried here");
  REQUIRE(pto::run_on_cpus({mine.front()}).ok());
  CHECK(pto::allowed_cpus() == std::vector<int>{mine.front()});
  CHECK(pto::available_cpus() == here);                          // not limited by the mask
  CHECK(pto::allowed_cpus() == std::vector<int>{mine.front()});  // which it left as it was
  c = DaemonConfig{};
  c.child_cpus = {mine.back()};
  const Status narrowed = c.validate();
  REQUIRE(pto::run_on_cpus(mine).ok());
  CHECK(narrowed.ok());
  c.cpus = {mine.front()};
  CHECK(c.validate().ok());
  c.child_cpus = {mine.back(), 1023};
  CHECK_THAT(c.validate().message, Catch::Contains("[worker] child_cpus = ") &&
                                       Catch::Contains("CPU 1023 not available here (offline, or outside ptod's "
                                                       "cpuset; CPUs available here: " +
                                                       pto::format_cpu_list(here) + ")"));
  // A mask the kernel would narrow is refused whole, and left as it was.
  const Status far = pto::run_on_cpus({mine.front(), 1023});
  CHECK_THAT(far.message, Catch::Contains("cannot run on CPUs " + std::to_string(mine.front()) +
                                          ",1023: CPU 1023 not available here"));
  CHECK(pto::allowed_cpus() == mine);
}

namespace {
// Page faults of ten rounds of eight 1 MiB messages, allocated, written and
// freed (the pattern of a tensor's chunks through gRPC), after a first round
// that sizes the heap; in a child of its own, so that `keep` (0: glibc's own
// thresholds) does not change this test process's allocator. -1: no answer.
[[maybe_unused]] long faults_of_message_rounds(uint64_t keep) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    long faults = -2;
    if (pto::keep_freed_memory(keep).ok()) {
      auto round = [] {
        void* p[8];
        for (void*& m : p) {
          m = std::malloc(1 << 20);
          if (m) std::memset(m, 1, 1 << 20);
        }
        for (void* m : p) std::free(m);
      };
      round();
      rusage before{}, after{};
      getrusage(RUSAGE_SELF, &before);
      for (int i = 0; i < 10; ++i) round();
      getrusage(RUSAGE_SELF, &after);
      faults = after.ru_minflt - before.ru_minflt;
    }
    (void)!write(fds[1], &faults, sizeof faults);
    _exit(0);
  }
  close(fds[1]);
  long faults = -1;
  if (pid < 0 || read(fds[0], &faults, sizeof faults) != sizeof faults) faults = -1;
  close(fds[0]);
  if (pid > 0) waitpid(pid, nullptr, 0);
  return faults;
}
}  // namespace

TEST_CASE("kept memory goes back once per idle spell ([daemon] malloc_idle_trim_s)") {
  DaemonConfig c;
  CHECK(c.malloc_idle_trim_s == 10);
  REQUIRE(DaemonConfig::parse("[daemon]\nmalloc_idle_trim_s = 0\n", "ptod.toml", &c).ok());
  CHECK(c.malloc_idle_trim_s == 0);
  CHECK_THAT(c.effective_toml(), Catch::Contains("\nmalloc_idle_trim_s = 0\n"));
  CHECK_THAT(DaemonConfig::parse("[daemon]\nmalloc_idle_trim_s = 86401\n", "ptod.toml", &c).message,
             Catch::Contains("[daemon] malloc_idle_trim_s: must be an integer in 0..86400 (got 86401)"));
  // Periods of 10 s; under 1% of a CPU (100 ms) is idle. RssAnon in kB.
  const uint64_t p = 10'000'000'000ull, idle = 50'000'000, busy = 100'000'000;
  IdleSpells s;
  CHECK(s.give_back(idle, p, 40000));  // start-up allocated: the first idle period gives back
  s.given_back(30000);
  CHECK_FALSE(s.give_back(idle, p, 30000));  // once per spell
  CHECK_FALSE(s.give_back(0, p, 31023));     // under 1 MiB above what was left
  CHECK_FALSE(s.give_back(busy, p, 90000));  // 1% is work
  CHECK_FALSE(s.give_back(busy * 50, p, 90000));
  CHECK(s.give_back(0, p, 90000));  // the next spell
  s.given_back(30500);
  CHECK_FALSE(s.give_back(idle, p, 30500));
  CHECK(s.give_back(idle, p, 31524));  // a light transfer: idle, but 1 MiB more resident
  s.given_back(-1);
  CHECK_FALSE(s.give_back(idle, p, 1 << 30));  // RssAnon unknown after the last: growth no longer tells
  CHECK_FALSE(s.give_back(idle, p, -1));
}

TEST_CASE("freed memory kept ([daemon] malloc_keep_bytes): freed messages' pages serve the next - faulted in without") {
  // Out of range: named, and nothing changed.
  CHECK_THAT(pto::keep_freed_memory(uint64_t{1} << 31).message,
             Catch::Contains("keep_freed_memory: 2147483648 bytes: must be 0 or in 67108864..2147483647"));
  CHECK_THAT(pto::keep_freed_memory(4u << 20).message, Catch::Contains("4194304 bytes: must be 0 or in"));
  DaemonConfig c;
  REQUIRE(DaemonConfig::parse("[daemon]\nmalloc_keep_bytes = 0\n", "ptod.toml", &c).ok());
  CHECK(c.malloc_keep_bytes == 0);
  CHECK_THAT(c.effective_toml(), Catch::Contains("\nmalloc_keep_bytes = 0\n"));
  CHECK_THAT(DaemonConfig::parse("[daemon]\nmalloc_keep_bytes = 1073741825\n", "ptod.toml", &c).message,
             Catch::Contains("[daemon] malloc_keep_bytes: must be an integer in 0..1073741824 (got 1073741825)"));
  CHECK_THAT(DaemonConfig::parse("[daemon]\nmalloc_keep_bytes = 4096\n", "ptod.toml", &c).message,
             Catch::Contains("[daemon] malloc_keep_bytes: must be 0 or in 67108864..1073741824 (got 4096)"));
  CHECK(DaemonConfig().malloc_keep_bytes == 64ull << 20);
#if defined(PTO_UNDER_ASAN)
  // AddressSanitizer's allocator is not glibc's: refused, and said so.
  CHECK_THAT(pto::keep_freed_memory(64ull << 20).message,
             Catch::Contains("was refused") && Catch::Contains("nothing changed"));
#elif defined(PTO_UNDER_TSAN)
  WARN("ThreadSanitizer's allocator takes mallopt and ignores it: no faults to compare");
#else
  // 10 rounds x 8 MiB = 20,480 pages. glibc's own thresholds give the heap's
  // freed top back each round, so every page faults in again (what held a
  // gRPC upload to 0.31-0.77 GB/s, docs/daemon.md "Memory ptod keeps").
  const long given_back = faults_of_message_rounds(0);
  const long kept = faults_of_message_rounds(64ull << 20);
  INFO("faults with glibc's thresholds " << given_back << ", with 64 MiB kept " << kept);
  REQUIRE(given_back >= 0);
  REQUIRE(kept >= 0);
  if (given_back < 2000) {
    // Huge pages for the heap, or thresholds set from outside (GLIBC_TUNABLES).
    WARN("the pattern hardly faults here even with glibc's thresholds: nothing to compare");
    return;
  }
  CHECK(kept * 20 < given_back);
#endif
}

namespace {
std::string tokens_error(const std::string& text, mode_t mode = 0600) {
  char dir[] = "/tmp/ptod-tokens-XXXXXX";
  if (!mkdtemp(dir)) return "no temp dir";
  const std::string path = std::string(dir) + "/tokens";
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  DaemonConfig c;
  c.tokens_file = path;
  Status s = c.validate();
  std::filesystem::remove_all(dir);
  return s.ok() ? "ok" : s.message;
}
}  // namespace

TEST_CASE("daemon config: the tokens file - name role token lines, owner-only, each rule named") {
  CHECK(tokens_error("# comment\nalice user 0123456789abcdef\n\nops admin fedcba9876543210 # trailing\n") == "ok");
  CHECK_THAT(tokens_error("alice user 0123456789abcdef\n", 0644), Catch::Contains("mode 0644"));
  CHECK_THAT(tokens_error("alice root 0123456789abcdef\n"),
             Catch::Contains("line 1: role 'root' is not user or admin"));
  CHECK_THAT(tokens_error("alice user short\n"), Catch::Contains("at least 16 characters"));
  CHECK_THAT(tokens_error("alice user 0123456789abcdef extra\n"), Catch::Contains("expected three fields"));
  CHECK_THAT(tokens_error("a b\n"), Catch::Contains("expected three fields"));
  CHECK_THAT(tokens_error("al ice user 0123456789abcdef\n"), Catch::Contains("expected three fields"));
  CHECK_THAT(tokens_error("al/ice user 0123456789abcdef\n"), Catch::Contains("principal name 'al/ice'"));
  CHECK_THAT(tokens_error("alice user 0123456789abcdef\nalice admin 0123456789abcdeg\n"),
             Catch::Contains("line 2: the name 'alice' appears twice"));
  CHECK_THAT(tokens_error("alice user 0123456789abcdef\nbob user 0123456789abcdef\n"),
             Catch::Contains("also another name's"));
}

TEST_CASE("daemon config: quotas - defaults and per principal, unknown keys named") {
  DaemonConfig c;
  REQUIRE(DaemonConfig::parse("[quotas]\narena_bytes = 1024\nqueued_jobs = 2\n[quotas.bob]\nqueued_jobs = 5\n",
                              "ptod.toml", &c)
              .ok());
  CHECK(c.quota_for("alice").arena_bytes == 1024);
  CHECK(c.quota_for("alice").queued_jobs == 2);
  CHECK(c.quota_for("bob").arena_bytes == 1024);  // unset keys take the section's
  CHECK(c.quota_for("bob").queued_jobs == 5);
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse("[quotas]\nbytes = 1\n", "ptod.toml", &c).message,
             Catch::Contains("[quotas]: unknown key 'bytes'"));
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse("[quotas.bob]\njobs = 1\n", "ptod.toml", &c).message,
             Catch::Contains("[quotas.bob]: unknown key 'jobs'"));
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse("[quotas]\nqueued_jobs = -1\n", "ptod.toml", &c).message,
             Catch::Contains("[quotas] queued_jobs: must be an integer in 0.."));
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse("[server]\nadmins = [\"a b\"]\n", "ptod.toml", &c).message,
             Catch::Contains("[server] admins: principal name 'a b'"));
  c = DaemonConfig{};
  CHECK_THAT(DaemonConfig::parse("[[peers]]\naddress = \"unix:/p.sock\"\nfd_transfers = \"yes\"\n", "ptod.toml", &c)
                 .message,
             Catch::Contains("[peers #0] fd_transfers: must be true or false"));
  c = DaemonConfig{};
  REQUIRE(DaemonConfig::parse("[[peers]]\naddress = \"unix:/p.sock\"\nfd_transfers = false\n", "ptod.toml", &c).ok());
  CHECK_FALSE(c.peers.at(0).fd_transfers);
}

TEST_CASE("daemon config: the shipped ptod.toml holds the defaults and names every key") {
  ptod::DaemonConfig parsed;
  const pto::Status loaded = ptod::DaemonConfig::load(DEFAULT_PTOD_TOML, &parsed);
  INFO(loaded.message);
  REQUIRE(loaded.ok());
  // Its values are the defaults: what it sets reads the same as nothing set.
  CHECK(parsed.effective_toml() == ptod::DaemonConfig().effective_toml());
  // Every key the effective configuration prints is in the file, set or shown commented.
  std::ifstream f(DEFAULT_PTOD_TOML);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream eff(ptod::DaemonConfig().effective_toml());
  int keys = 0;
  for (std::string line; std::getline(eff, line);) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    INFO("key " << key);
    CHECK((text.find("\n" + key + " = ") != std::string::npos || text.find("\n# " + key + " = ") != std::string::npos));
    ++keys;
  }
  CHECK(keys > 40);
  for (const char* key :
       {"address", "name", "workers", "token_file", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "fd_transfers"}) {
    INFO("[[peers]] key " << key);
    CHECK(text.find(std::string("\n# ") + key + " = ") != std::string::npos);
  }
}

TEST_CASE("names: at most 256 bytes of UTF-8 without control characters") {
  CHECK(check_name("tensor name", "").ok());
  CHECK(check_name("tensor name", "caf\xC3\xA9-1").ok());
  CHECK(check_name("tensor name", std::string(256, 'a')).ok());
  CHECK_THAT(check_name("tensor name", std::string(257, 'a')).message, Catch::Contains("257 bytes; at most 256"));
  CHECK_THAT(check_name("callable name", "a\nb").message, Catch::Contains("callable name: control character 0x0A"));
  CHECK_FALSE(check_name("x", "\x7F").ok());
  CHECK_FALSE(check_name("x", "\xC2\x85").ok());  // NEL, a C1 control
  CHECK_FALSE(check_name("x", "\xFF").ok());
  CHECK_FALSE(check_name("x", "\xE2\x82").ok());  // truncated sequence
}

TEST_CASE("a job's arguments: counts, tags and views are checked against the tensor") {
  alignas(64) static uint8_t buf[4096];
  TensorEntry t;
  t.id = 1;
  t.name.push_back('t');  // not = "t": GCC 12 -O2 with sanitizers warns falsely (-Wrestrict, PR 105651)
  t.tensor = pto::make_tensor(buf, {1024}, PTO_FLOAT32);
  t.bytes = sizeof buf;
  const ResolveTensor resolve = [&](const pto::v1::TensorRef& ref, pto::ContinuousTensor* out, TensorEntry* e) {
    *e = t;
    return TensorStore::view_of(t, ref.offset_bytes(), std::vector<uint32_t>(ref.shape().begin(), ref.shape().end()),
                                ref.dtype(), ref.has_dtype(), out);
  };
  pto::v1::TaskArgs a;
  auto* r = a.add_tensors();
  r->mutable_tensor()->set_id(1);
  r->set_offset_bytes(4000);
  r->add_shape(100);
  JobArgs j;
  CHECK_THAT(job_args_from_proto(a, resolve, &j).message,
             Catch::Contains("tensor 0") && Catch::Contains("exceeds tensor 't'"));
  r->clear_shape();
  r->set_offset_bytes(0);
  r->add_shape(65536);
  r->add_shape(65536);
  r->add_shape(65536);
  r->add_shape(65536);  // 2^64 elements: the product wraps
  j = JobArgs{};
  CHECK_THAT(job_args_from_proto(a, resolve, &j).message, Catch::Contains("overflows"));
  r->clear_shape();
  a.add_tags(static_cast<pto::v1::TensorTag>(99));
  j = JobArgs{};
  CHECK_THAT(job_args_from_proto(a, resolve, &j).message, Catch::Contains("unknown tag 99"));
  a.clear_tags();
  a.add_tags(pto::v1::OUTPUT);
  a.add_tags(pto::v1::INPUT);
  j = JobArgs{};
  CHECK_THAT(job_args_from_proto(a, resolve, &j).message, Catch::Contains("2 tags for 1 tensors"));
  a.mutable_tags()->RemoveLast();
  j = JobArgs{};
  REQUIRE(job_args_from_proto(a, resolve, &j).ok());
  CHECK(j.outputs.size() == 1);
  CHECK(j.pinned == std::vector<uint64_t>{1});
}

TEST_CASE("session frames: order and TASK tensors are checked") {
  pto::v1::Frame f;
  f.set_version(kSessionVersion);
  f.set_session(7);
  f.set_seq(3);
  CHECK(check_frame_order(f, 7, 3).empty());
  CHECK_THAT(check_frame_order(f, 7, 2), Catch::Contains("out of order"));
  CHECK_THAT(check_frame_order(f, 8, 3), Catch::Contains("frame of session"));
  f.set_version(9);
  CHECK_THAT(check_frame_order(f, 7, 3), Catch::Contains("protocol version 9"));
  pto::v1::RemoteTensor t;
  t.set_dtype(pto::v1::FLOAT32);
  t.add_shape(4);
  t.set_direction(pto::v1::DIR_IN);
  t.set_data(std::string(16, '\0'));
  std::vector<uint32_t> shape;
  uint64_t bytes = 0;
  CHECK(check_remote_tensor(t, &shape, &bytes).empty());
  CHECK(bytes == 16);
  t.set_data("short");
  CHECK_THAT(check_remote_tensor(t, &shape, &bytes), Catch::Contains("5 inline bytes for a 16-byte tensor"));
  t.add_shape(4294967295u);
  t.add_shape(4294967295u);
  CHECK_THAT(check_remote_tensor(t, &shape, &bytes), Catch::Contains("not a valid tensor"));
}

TEST_CASE("the wire's enums are the engine's: same values, same names") {
  // (wire_enums.h pins the values at compile time; this checks names too.)
  for (int d = 0; d < PTO_DTYPE_COUNT; ++d) {
    std::string wire = pto::v1::DataType_Name(static_cast<pto::v1::DataType>(d));
    for (char& c : wire) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    CHECK(wire == pto_dtype_name(d));
    CHECK(to_wire_dtype(d) == static_cast<pto::v1::DataType>(d));
  }
  for (auto o : {pto::Outcome::SUCCESS, pto::Outcome::TASK_FAILURE, pto::Outcome::ENDPOINT_FAILURE,
                 pto::Outcome::SKIPPED, pto::Outcome::STOPPED})
    CHECK(pto::v1::Outcome_Name(to_wire(o)) == pto::outcome_name(o));
  for (int t = 0; t <= pto::v1::NO_DEP; ++t)
    CHECK(pto::v1::TensorTag_Name(static_cast<pto::v1::TensorTag>(t)) ==
          pto::tag_name(from_wire(static_cast<pto::v1::TensorTag>(t))));
  CHECK(pto::v1::CallableKind_Name(to_wire(pto::CallableKind::NATIVE_BLOB)) ==
        pto::kind_name(pto::CallableKind::NATIVE_BLOB));
}

TEST_CASE("crc32c: three interleaved chains agree with the bitwise definition around every block boundary") {
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  std::vector<uint8_t> v(5 * 3 * 4096 + 77);
  uint32_t x = 12345;
  for (auto& b : v) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 16);
  for (size_t n : {size_t(3 * 4096 - 1), size_t(3 * 4096), size_t(3 * 4096 + 1), size_t(2 * 3 * 4096 + 8),
                   size_t(4 * 3 * 4096 + 13), v.size()})
    for (size_t start : {size_t(0), size_t(1), size_t(5)}) {
      if (start + n > v.size()) continue;
      INFO(n << " bytes from " << start);
      CHECK(pto::crc32c(0, v.data() + start, n) == bitwise(v.data() + start, n));
    }
  // Continued from a non-zero checksum across the chains.
  const uint32_t head = pto::crc32c(0, v.data(), 100);
  CHECK(pto::crc32c(head, v.data() + 100, 3 * 4096 * 2) == bitwise(v.data(), 100 + 3 * 4096 * 2));
}

TEST_CASE("crc32c: the standard check values - in pieces as whole") {
  const char* digits = "123456789";
  CHECK(pto::crc32c(0, digits, 9) == 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), rising(32);
  for (int i = 0; i < 32; ++i) rising[i] = static_cast<uint8_t>(i);
  CHECK(pto::crc32c(0, zeros.data(), 32) == 0x8A9136AAu);  // RFC 3720, B.4
  CHECK(pto::crc32c(0, ones.data(), 32) == 0x62A8AB43u);
  CHECK(pto::crc32c(0, rising.data(), 32) == 0x46DD794Eu);
  // Any split gives the same checksum (uploads arrive in chunks of any size).
  std::vector<uint8_t> big(100003);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint32_t whole = pto::crc32c(0, big.data(), big.size());
  for (size_t cut : {size_t(1), size_t(7), size_t(4096), size_t(65537)}) {
    uint32_t c = 0;
    for (size_t off = 0; off < big.size(); off += cut)
      c = pto::crc32c(c, big.data() + off, std::min(cut, big.size() - off));
    CHECK(c == whole);
  }
}

namespace {
// Every field as read_fields hands it over, pieces joined.
struct Fields : pto::v1::RawFieldSink {
  std::vector<std::pair<uint32_t, std::string>> seen;  // bytes fields
  std::vector<std::pair<uint32_t, uint64_t>> scalars;
  uint64_t announced = 0;
  int pieces = 0;
  bool begin(uint32_t f, uint64_t total) override {
    seen.emplace_back(f, "");
    announced = total;
    return true;
  }
  bool piece(uint32_t f, const uint8_t* p, size_t n) override {
    REQUIRE(seen.back().first == f);
    seen.back().second.append(reinterpret_cast<const char*>(p), n);
    ++pieces;
    return true;
  }
  bool scalar(uint32_t f, uint64_t v) override {
    scalars.emplace_back(f, v);
    return true;
  }
};
std::vector<pto::v1::Piece> split(const std::string& s, size_t every) {
  std::vector<pto::v1::Piece> out;
  for (size_t i = 0; i < s.size(); i += every)
    out.push_back({reinterpret_cast<const uint8_t*>(s.data()) + i, std::min(every, s.size() - i)});
  return out;
}
}  // namespace

TEST_CASE("raw chunk fields: a DownloadChunk read in pieces as protobuf wrote it - bytes handed over slice by slice") {
  pto::v1::DownloadChunk c;
  c.mutable_info()->set_bytes(300);
  c.set_data(std::string(300, 'x') + "yz");
  c.set_last(true);
  c.set_crc32c(0xdeadbeef);
  const std::string wire = c.SerializeAsString();
  for (size_t every : {size_t(1), size_t(7), size_t(64), wire.size()}) {
    INFO("pieces of " << every);
    Fields f;
    std::string why;
    REQUIRE(pto::v1::read_fields(split(wire, every), f, &why));
    REQUIRE(f.seen.size() == 2);
    CHECK(f.seen[0].first == 1);
    pto::v1::TensorInfo info;
    CHECK(info.ParseFromString(f.seen[0].second));
    CHECK(info.bytes() == 300);
    CHECK(f.seen[1] == std::pair<uint32_t, std::string>{2, c.data()});
    CHECK(f.announced == 302);
    REQUIRE(f.scalars.size() == 2);
    CHECK(f.scalars[0] == std::pair<uint32_t, uint64_t>{3, 1});
    CHECK(f.scalars[1] == std::pair<uint32_t, uint64_t>{4, 0xdeadbeef});
  }
  // What a sender puts in front of its own bytes is what protobuf writes.
  pto::v1::DownloadChunk d;
  d.set_data(std::string(200, 'a'));
  CHECK(d.SerializeAsString() == pto::v1::bytes_field_header(2, 200) + std::string(200, 'a'));
}

TEST_CASE("raw chunk fields: malformed bytes are refused with the fault and where it is") {
  auto refused = [](const std::string& wire) {
    Fields f;
    std::string why;
    CHECK_FALSE(pto::v1::read_fields(split(wire, 3), f, &why));
    return why;
  };
  CHECK_THAT(refused(std::string("\x12\x05"
                                 "abc",
                                 5)),
             Catch::Contains("a length of 5 past the end"));
  CHECK_THAT(refused(std::string("\x18\x80", 2)), Catch::Contains("truncated or overlong varint"));
  CHECK_THAT(refused(std::string("\x18"
                                 "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
                                 11)),
             Catch::Contains("truncated or overlong varint"));
  // A key or a length takes at most 5 bytes, as protobuf reads them: a
  // longer one is refused even when its value is small (a fuzzer's find:
  // a 6-byte key was read here and refused by protobuf).
  CHECK_THAT(refused(std::string("\xfd\xf7\xfe\xe8\x85\x00\x00\x00\x00\x08", 10)),
             Catch::Contains("overlong field key"));
  CHECK_THAT(refused(std::string("\x98\x80\x80\x80\x80\x00\x01", 7)), Catch::Contains("overlong field key"));
  CHECK_THAT(refused(std::string("\x12\x82\x80\x80\x80\x80\x00"
                                 "ab",
                                 9)),
             Catch::Contains("overlong length"));
  CHECK_THAT(refused(std::string("\x25\x01\x02", 3)), Catch::Contains("truncated fixed-size"));
  CHECK_THAT(refused(std::string("\x1b", 1)), Catch::Contains("wire type 3"));
  CHECK_THAT(refused(std::string("\x02\x00", 2)), Catch::Contains("field number 0"));
  CHECK_THAT(refused(std::string("\x18\x01\x12\x09"
                                 "ab",
                                 6)),
             Catch::Contains("at byte 2"));
  // A sink's refusal ends the walk without a fault of the bytes.
  struct No : Fields {
    bool scalar(uint32_t, uint64_t) override { return false; }
  } no;
  std::string why = "x";
  CHECK_FALSE(pto::v1::read_fields(split(std::string("\x18\x01", 2), 1), no, &why));
  CHECK(why.empty());
}

TEST_CASE("raw fields: a message split around one field - the rest and the field's pieces parse back to it") {
  pto::v1::Frame f;
  f.set_version(1);
  f.set_session(0xfeedfacecafe);
  f.set_seq(300);
  f.mutable_control()->set_op(pto::v1::Control::BUFFER_WRITE);
  f.mutable_control()->set_offset(7);
  f.mutable_control()->set_data(std::string(1000, 'd'));
  const std::string wire = f.SerializeAsString();
  for (size_t every : {size_t(1), size_t(5), size_t(333), wire.size()}) {
    INFO("pieces of " << every);
    pto::v1::Split frame, body;
    std::string why;
    REQUIRE(pto::v1::split_fields(split(wire, every), (1u << 12) | (1u << 13), &frame, &why));
    CHECK(frame.taken == 12);
    REQUIRE(frame.contents.size() == 1);
    REQUIRE(pto::v1::split_fields(frame.contents[0], 1u << 9, &body, &why));
    CHECK(body.taken == 9);
    REQUIRE(body.contents.size() == 1);
    std::string data;
    for (const auto& p : body.contents[0]) data.append(reinterpret_cast<const char*>(p.data), p.size);
    CHECK(data == f.control().data());
    pto::v1::Frame back;
    REQUIRE(back.ParseFromString(frame.rest));
    CHECK(back.seq() == 300);
    CHECK(back.session() == 0xfeedfacecafe);
    CHECK_FALSE(back.has_control());
    REQUIRE(back.mutable_control()->ParseFromString(body.rest));
    back.mutable_control()->set_data(data);
    CHECK(back.SerializeAsString() == wire);
  }
  // Two different picked fields, and malformed bytes, are refused.
  pto::v1::Split s;
  std::string why;
  CHECK_FALSE(pto::v1::split_fields(split(std::string("\x62\x00\x6a\x00", 4), 1), (1u << 12) | (1u << 13), &s, &why));
  CHECK_THAT(why, Catch::Contains("fields 12 and 13"));
  CHECK_FALSE(pto::v1::split_fields(split(std::string("\x62\x05"
                                                      "ab",
                                                      4),
                                          2),
                                    1u << 12, &s, &why));
  CHECK_THAT(why, Catch::Contains("past the end"));
}

namespace {
grpc::ByteBuffer cut(const std::string& s, size_t every) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < s.size(); i += every) slices.emplace_back(s.data() + i, std::min(every, s.size() - i));
  return grpc::ByteBuffer(slices.data(), slices.size());
}
std::string joined(const ptod::Payload& p) {
  std::string out(p.size, '\0');
  p.copy_to(out.data());
  return out;
}
}  // namespace

TEST_CASE(
    "session frames as raw bytes - a lent chunk is the data field protobuf reads - a received one stays in pieces") {
  std::string big(300 << 10, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + (i >> 9));
  for (const bool reply : {false, true}) {
    INFO((reply ? "control reply" : "control"));
    pto::v1::Frame f;
    f.set_version(1);
    f.set_seq(9);
    if (reply) {
      f.mutable_control_reply()->set_id(4);
      f.mutable_control_reply()->set_ok(true);
    } else {
      f.mutable_control()->set_id(4);
      f.mutable_control()->set_op(pto::v1::Control::BUFFER_WRITE);
      f.mutable_control()->set_offset(12345);
    }
    // Encoded with the chunk as a slice: what protobuf parses has it as data.
    const grpc::Slice chunk(big.data(), big.size());
    grpc::ByteBuffer bb = ptod::encode_frame(f, &chunk);
    std::vector<grpc::Slice> slices;
    REQUIRE(bb.Dump(&slices).ok());
    std::string wire;
    for (const auto& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
    pto::v1::Frame parsed;
    REQUIRE(parsed.ParseFromString(wire));
    CHECK(parsed.seq() == 9);
    CHECK((reply ? parsed.control_reply().data() : parsed.control().data()) == big);
    CHECK((reply ? parsed.control_reply().id() : parsed.control().id()) == 4);
    if (!reply) CHECK(parsed.control().offset() == 12345);
    // Decoded however it arrives: the same frame, the data in pieces.
    for (size_t every : {size_t(4096), size_t(65536 + 3), wire.size()}) {
      pto::v1::Frame got;
      ptod::Payload data;
      std::string why;
      REQUIRE(ptod::decode_frame(cut(wire, every), &got, &data, &why));
      CHECK(got.seq() == 9);
      CHECK((reply ? got.control_reply().data() : got.control().data()).empty());
      CHECK(data.size == big.size());
      CHECK(joined(data) == big);
      if (reply)
        got.mutable_control_reply()->set_data(big);
      else
        got.mutable_control()->set_data(big);
      CHECK(got.SerializeAsString() == parsed.SerializeAsString());
    }
    // A generated message's own encoding decodes the same way.
    pto::v1::Frame got;
    ptod::Payload data;
    std::string why;
    REQUIRE(ptod::decode_frame(cut(parsed.SerializeAsString(), 8192), &got, &data, &why));
    CHECK(joined(data) == big);
  }
  // Small frames and large frames of another body parse whole.
  pto::v1::Frame small;
  small.mutable_control()->set_data("abc");
  pto::v1::Frame got;
  ptod::Payload data;
  std::string why;
  REQUIRE(ptod::decode_frame(ptod::encode_frame(small), &got, &data, &why));
  CHECK(got.control().data() == "abc");
  CHECK(data.empty());
  pto::v1::Frame task;
  task.mutable_task()->add_tasks()->add_tensors()->set_data(big);
  REQUIRE(ptod::decode_frame(cut(task.SerializeAsString(), 4096), &got, &data, &why));
  CHECK(got.task().tasks(0).tensors(0).data() == big);
  CHECK(data.empty());
  // A control whose field runs past its own occurrence into the next one
  // (protobuf refuses it: occurrences merge, their bytes do not join).
  const std::string inner = pto::v1::bytes_field_header(9, big.size()) + big;
  const std::string across = std::string("\x62\x02\x52\x30", 4) + pto::v1::bytes_field_header(12, inner.size()) + inner;
  CHECK_FALSE(pto::v1::Frame().ParseFromString(across));
  CHECK_FALSE(ptod::decode_frame(cut(across, 4096), &got, &data, &why));
  CHECK_THAT(why, Catch::Contains("past the end"));
  // Bytes that are not a frame are refused, saying so.
  std::string junk = std::string("\x62\xff\xff\x7f", 4) + std::string(70000, 'x');
  CHECK_FALSE(ptod::decode_frame(cut(junk, 1000), &got, &data, &why));
  CHECK_THAT(why, Catch::Contains("malformed frame"));
}
