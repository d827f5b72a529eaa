// What one ptod owns on the file system and what it refuses (docs/daemon.md,
// "State"): one daemon per state directory, a socket path replaced only when
// stale and never when it is not a socket, secrets only their owner can
// read, no stored callable file that no registration names.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

using namespace pto_test;
namespace v1 = pto::v1;

namespace {

// ptod on `state` and `socket` that is expected to refuse to start.
Output start(const std::string& state, const std::string& socket, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {PTOD_PATH, "--state-dir", state, "--socket", socket, "--metrics", "off"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv, 30);
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

}  // namespace

TEST_CASE("a second ptod on the same state directory exits 1 naming the holder - the first goes on") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string other_socket = d.dir() + "/other.sock";
  Output second = start(d.dir() + "/state", other_socket);
  INFO(second.text);
  CHECK(second.code == 1);
  CHECK_THAT(second.text,
             Catch::Contains("state directory " + d.dir() + "/state is in use by pid " + std::to_string(d.pid())));
  CHECK_FALSE(std::filesystem::exists(other_socket));
  auto c = connect(d);
  CHECK(c->health().value == "SERVING");
  // Killed, the lock goes with it: the same directory starts again.
  d.restart();
  REQUIRE(d.up());
  // (A client's first call may still meet the old connection: gRPC shares it.)
  CHECK(eventually([&] { return connect(d)->health().value == "SERVING"; }));
}

TEST_CASE("a socket a daemon answers on is not taken over - a stale one is replaced") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string socket = d.dir() + "/ptod.sock";
  const std::string state2 = make_temp_dir("ptod-state2");
  Output second = start(state2, socket);
  INFO(second.text);
  CHECK(second.code == 1);
  CHECK_THAT(second.text, Catch::Contains("socket '" + socket + "' is in use"));
  auto c = connect(d);
  CHECK(c->health().value == "SERVING");  // still reachable: its socket was not unlinked
  // SIGKILL leaves the socket file behind; the next start replaces it.
  d.restart();
  REQUIRE(d.up());
  // (A client's first call may still meet the old connection: gRPC shares it.)
  CHECK(eventually([&] { return connect(d)->health().value == "SERVING"; }));
  std::filesystem::remove_all(state2);
}

TEST_CASE("a socket path that is not a socket is never removed") {
  const std::string dir = make_temp_dir("ptod-notsock");
  write_file(dir + "/precious", "data that is not a socket\n", 0644);
  Output r = start(dir + "/state", dir + "/precious");
  INFO(r.text);
  CHECK(r.code == 1);
  CHECK_THAT(r.text, Catch::Contains("'" + dir + "/precious' exists and is not a socket"));
  std::ifstream f(dir + "/precious");
  std::string line;
  std::getline(f, line);
  CHECK(line == "data that is not a socket");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a token or key file open to group or others is refused at start, naming it and its mode") {
  const std::string dir = make_temp_dir("ptod-secret");
  write_file(dir + "/token", "0123456789abcdef-secret-token\n", 0644);
  Output r = start(dir + "/state", dir + "/s.sock", {"--token-file", dir + "/token"});
  INFO(r.text);
  CHECK(r.code == 1);
  CHECK_THAT(r.text, Catch::Contains("[server] token_file '" + dir + "/token'") && Catch::Contains("mode 0644") &&
                         Catch::Contains("chmod 600"));
  // A peer's token file is held to the same rule.
  chmod((dir + "/token").c_str(), 0640);
  write_file(dir + "/l4.toml",
             "[worker]\nlevel = 4\nl3_children = 0\n[[peers]]\naddress = \"unix:" + dir +
                 "/peer.sock\"\ntoken_file = \"" + dir + "/token\"\n",
             0644);
  Output p = start(dir + "/state", dir + "/s.sock", {"--config", dir + "/l4.toml"});
  INFO(p.text);
  CHECK(p.code == 1);
  CHECK_THAT(p.text, Catch::Contains("token_file '" + dir + "/token'") && Catch::Contains("mode 0640"));
  // Owner-only: it starts.
  chmod((dir + "/token").c_str(), 0600);
  DaemonProcess ok({"--token-file", dir + "/token"});
  CHECK(ok.up());
  std::filesystem::remove_all(dir);
}

TEST_CASE("startup removes stored callable files that no registration names - and keeps those one does") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  const std::string callables = d.dir() + "/state/callables";
  std::set<std::string> registered;
  for (const auto& e : std::filesystem::directory_iterator(callables)) registered.insert(e.path().filename());
  REQUIRE(registered.size() == 1);
  // Debris: what a daemon killed in the middle of a registration leaves.
  std::filesystem::create_directories(callables + "/bundle-0123456789abcdef");
  std::ofstream(callables + "/blob-feedface.so") << "half a library";
  d.restart();
  REQUIRE(d.up());
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(callables)) left.insert(e.path().filename());
  CHECK(left == registered);
  CHECK_THAT(d.log(), Catch::Contains("removed 2 stored callable file(s)"));
}

TEST_CASE("job ids are never reused across a restart - a job's trace is never overwritten") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto job = [](const std::string& name) {
    v1::SubmitRequest r;
    r.mutable_callable()->set_name(name);
    r.mutable_args()->add_scalars(1);  // ms
    r.mutable_config()->set_enable_profiling(true);
    return r;
  };
  uint64_t last = 0;
  std::string trace;
  {
    auto c = connect(d);
    REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
    for (int i = 0; i < 3; ++i) {
      auto r = c->run(job("sleep"));
      REQUIRE(r.ok());
      REQUIRE(r.value.state() == v1::SUCCEEDED);
      CHECK(r.value.job_id() > last);
      last = r.value.job_id();
      trace = r.value.trace_path();
    }
  }
  REQUIRE(std::filesystem::exists(trace));
  const auto size = std::filesystem::file_size(trace);
  CHECK(std::filesystem::exists(d.dir() + "/state/ptod.db"));
  d.restart();  // SIGKILL, then the same state directory
  REQUIRE(d.up());
  REQUIRE(eventually([&] { return connect(d)->health().value == "SERVING"; }));
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto r = c->run(job("sleep"));
  REQUIRE(r.ok());
  INFO("before the restart the last id was " << last << "; after it " << r.value.job_id());
  CHECK(r.value.job_id() > last);
  CHECK(r.value.trace_path() != trace);
  CHECK(std::filesystem::file_size(trace) == size);  // the old job's trace is as it was
  // A result for an old id is that job's, as it ended.
  auto old = c->result(last);
  REQUIRE(old.ok());
  CHECK(old.value.job_id() == last);
  CHECK(old.value.state() == v1::SUCCEEDED);
  CHECK(old.value.trace_path() == trace);
}
