// ptoctl's options and exit codes (docs/daemon.md, "ptoctl"): an option it
// could not honour is refused at once, exit 2, naming it - never accepted and
// dropped; a daemon that does not answer in time is exit 3 whichever way the
// request went; a file it writes is one numpy reads.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon_process.h"

using namespace pto_test;

namespace {

Output ptoctl(const DaemonProcess& d, std::vector<std::string> args, int timeout_s = 30) {
  args.insert(args.begin(), PTOCTL_PATH);
  return run_command(args, timeout_s, {"PTOD_ADDRESS=" + d.address()});
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("ptoctl refuses an option it could not honour - exit 2 naming it, before any call") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::string dir = d.dir();
  auto refused = [&](std::vector<std::string> args, const std::string& says) {
    Output o = ptoctl(d, std::move(args));
    INFO(o.text);
    CHECK(o.code == 2);
    CHECK_THAT(o.text, Catch::Contains(says));
  };
  // 0 s: every gRPC call failed at once (exit 3), the fd socket's waits had no bound.
  refused({"--timeout", "0", "version"}, "--timeout");
  refused({"--timeout", "-5", "jobs"}, "--timeout");
  // TLS files that cannot be read, or TLS options without --tls, were dropped.
  refused({"--tls", "--tls-ca", dir + "/no-ca.pem", "version"}, "no-ca.pem");
  refused({"--tls-ca", dir + "/ptod.log", "version"}, "--tls");
  std::ofstream(dir + "/c.pem") << "x";
  refused({"--tls", "--tls-cert", dir + "/c.pem", "version"}, "--tls-key");
  // An empty token file sent no token: the call ran as the socket's user.
  std::ofstream(dir + "/empty-token");
  refused({"--token-file", dir + "/empty-token", "version"}, "holds no token");
  // Numbers past their type: a throw (exit 1, "internal error") or a wrap.
  refused({"jobs", "--since", "99999999999999999999s"}, "--since");
  refused({"jobs", "--since", "300000000000000d"}, "--since");
  refused({"jobs", "--limit", "-1"}, "--limit");  // 0 stays the daemon's default
  // Ctrl-C has no job to cancel when ptoctl does not wait for one.
  refused({"submit", "x", "--count", "2", "--cancel-on-interrupt"}, "--cancel-on-interrupt with --count 2");
  refused({"submit", "x", "-d", "--cancel-on-interrupt"}, "--cancel-on-interrupt");
  // The daemon saw none of these.
  Output ok = ptoctl(d, {"--timeout", "5", "jobs", "--since", "90s", "--limit", "3"});
  INFO(ok.text);
  CHECK(ok.code == 0);
}

TEST_CASE("ptoctl: a daemon that does not answer on the fd socket is exit 3, as over gRPC - not a lost reply") {
  DaemonProcess d;
  REQUIRE(d.up());
  Output alloc = ptoctl(d, {"alloc", "--shape", "16", "--dtype", "float32", "-n", "x"});
  REQUIRE(alloc.code == 0);
  const std::string npy = d.dir() + "/x.npy";
  Output dl = ptoctl(d, {"download", "x", "-o", npy});
  INFO(dl.text);
  REQUIRE(dl.code == 0);
  REQUIRE_THAT(dl.text, Catch::Contains("through the fd socket"));
  REQUIRE(kill(d.pid(), SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  Output up = ptoctl(d, {"--timeout", "2", "upload", npy, "--name", "y"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill(d.pid(), SIGCONT);
  INFO(up.text);
  CHECK(up.code == 3);  // before: 1, "the reply was lost (Resource temporarily unavailable)"
  CHECK_THAT(up.text, Catch::Contains("no reply within 2000 ms") && Catch::Contains("DEADLINE_EXCEEDED"));
  CHECK(s < 20);
}

TEST_CASE("ptoctl download of a bfloat16 tensor writes a file numpy reads - its 16-bit patterns, said so") {
  DaemonProcess d;
  REQUIRE(d.up());
  REQUIRE(ptoctl(d, {"alloc", "--shape", "4", "--dtype", "bfloat16", "-n", "b"}).code == 0);
  const std::string npy = d.dir() + "/b.npy";
  Output dl = ptoctl(d, {"download", "b", "-o", npy});
  INFO(dl.text);
  CHECK(dl.code == 0);
  CHECK_THAT(dl.text, Catch::Contains("bfloat16") && Catch::Contains("<u2"));
  const std::string file = read_text(npy);
  CHECK(file.find("'descr': '<u2'") != std::string::npos);  // before: '' (numpy.load refused it)
  CHECK((file.size() - 8) % 64 == 0);                       // a header of 64-byte blocks, then 4 x 2 bytes
  CHECK_FALSE(std::filesystem::exists(npy + ".part"));
}
