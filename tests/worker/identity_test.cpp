// Callable identity: fixed vectors for the canonical descriptor and its
// SHA-256, equality across processes, content (not path) hashing.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "pto/base/sha256.h"
#include "pto/callable.h"

using namespace pto;

namespace {
std::string hex(const std::vector<uint8_t>& v) {
  std::string s;
  char b[3];
  for (uint8_t x : v) {
    snprintf(b, sizeof b, "%02x", x);
    s += b;
  }
  return s;
}
std::string tmp_path(const char* stem) {
  return std::filesystem::temp_directory_path() / (std::string(stem) + "-" + std::to_string(getpid()) + ".so");
}
}  // namespace

TEST_CASE("fixed vectors - descriptor bytes and digests") {
  // Computed independently (Python hashlib) from the layout in docs/worker.md.
  const auto d = descriptor::function(EntryAbi::SUB, "hello");
  CHECK(hex(d) == "50544f2d43414c4c41424c45020004020500000068656c6c6f");
  CHECK(to_hex(sha256(d.data(), d.size())) == "5d7aa0cd56b412f7bf62e4d5d349ceb8d213b922b3cf14e6fda9b0be12d9e0fd");
  const Digest abc = sha256("abc", 3);
  CHECK(to_hex(abc) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
  const auto imp = descriptor::import_or_blob(CallableKind::NATIVE_IMPORT, EntryAbi::SUB, "f", abc);
  CHECK(to_hex(sha256(imp.data(), imp.size())) == "019663c0b61e0bc4349fe192ecfba8b77cf87a2cd0a9f86f774fcc05adc31dbc");
  const auto blob = descriptor::import_or_blob(CallableKind::NATIVE_BLOB, EntryAbi::SUB, "f", abc);
  CHECK(to_hex(sha256(blob.data(), blob.size())) == "575cafb1005364006532848fd204a33825322dd1c141e706606fe508c5a3b1e2");
  // A blob of the bytes "abc" with symbol f is exactly that descriptor.
  Callable c = NativeCallable::blob({'a', 'b', 'c'}, "f");
  REQUIRE(c.status.ok());
  CHECK(c.identity().hex() == "575cafb1005364006532848fd204a33825322dd1c141e706606fe508c5a3b1e2");
  CHECK(c.identity().kind == CallableKind::NATIVE_BLOB);
  CHECK(c.identity().target_namespace == TargetNamespace::LOCAL_NATIVE);
}

TEST_CASE("the same descriptor gives the same digest in another process") {
  const Callable chip = ChipCallable::from_config(VECTOR_CONFIG);
  const Callable imp = NativeCallable::import(NATIVE_SUBS, "pto_test_noop");
  REQUIRE(chip.status.ok());
  REQUIRE(imp.status.ok());
  CHECK(chip.identity().target_namespace == TargetNamespace::LOCAL_CHIP);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  if (pid == 0) {  // recompute from scratch in a fresh process image
    close(fds[0]);
    Digest a = ChipCallable::from_config(VECTOR_CONFIG).identity().digest;
    Digest b = NativeCallable::import(NATIVE_SUBS, "pto_test_noop").identity().digest;
    bool ok = write(fds[1], a.data(), 32) == 32 && write(fds[1], b.data(), 32) == 32;
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  Digest a{}, b{};
  REQUIRE(read(fds[0], a.data(), 32) == 32);
  REQUIRE(read(fds[0], b.data(), 32) == 32);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(a == chip.identity().digest);
  CHECK(b == imp.identity().digest);
  CHECK(a != b);
}

TEST_CASE("a native import is hashed by content - same bytes elsewhere match - a changed file does not") {
  const std::string copy = tmp_path("pto-identity");
  std::filesystem::copy_file(NATIVE_SUBS, copy, std::filesystem::copy_options::overwrite_existing);
  const auto original = NativeCallable::import(NATIVE_SUBS, "pto_test_noop").identity();
  const auto moved = NativeCallable::import(copy, "pto_test_noop").identity();
  CHECK(original == moved);
  CHECK_FALSE(NativeCallable::import(NATIVE_SUBS, "pto_test_fail").identity() == original);
  std::ofstream(copy, std::ios::app) << "x";
  CHECK_FALSE(NativeCallable::import(copy, "pto_test_noop").identity() == original);
  // The kind and the entry ABI are part of the identity.
  CHECK_FALSE(OrchestrationCallable::import(NATIVE_SUBS, "pto_test_noop").identity() == original);
  std::filesystem::remove(copy);
}

TEST_CASE("factory errors name the file and are carried to registration") {
  Callable c = ChipCallable::from_config("/nonexistent/kernels.toml");
  CHECK_FALSE(c.status.ok());
  CHECK_THAT(c.status.message, Catch::Contains("/nonexistent/kernels.toml"));
  CHECK_FALSE(NativeCallable::import(NATIVE_SUBS, "").status.ok());
  CHECK_FALSE(NativeCallable::blob({}, "f").status.ok());
  CHECK_FALSE(NativeCallable::function("", nullptr).status.ok());
}

TEST_CASE("the [runtime] section is part of a chip callable's identity") {
  // Two bundles that differ only in [runtime] are two callables: registering
  // the second must not silently drop its settings.
  const std::filesystem::path src = VECTOR_CONFIG;
  std::ifstream in(src);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = 0; (at = text.find("library = \"", at)) != std::string::npos;) {
    at += 11;
    text.insert(at, src.parent_path().string() + "/");
  }
  const std::string base = tmp_path("pto-runtime-a") + ".toml", other = tmp_path("pto-runtime-b") + ".toml",
                    same = tmp_path("pto-runtime-c") + ".toml";
  std::ofstream(base) << text;
  std::string changed = text;
  changed.replace(changed.find("[runtime]"), 9, "[runtime]\ntask_window = 4096");
  std::ofstream(other) << changed;
  std::ofstream(same) << text;  // another path, same content
  const Callable a = ChipCallable::from_config(base), b = ChipCallable::from_config(other),
                 c = ChipCallable::from_config(same);
  REQUIRE(a.status.ok());
  REQUIRE(b.status.ok());
  CHECK(a.identity().digest != b.identity().digest);
  CHECK(a.identity().digest == c.identity().digest);
  for (const auto& p : {base, other, same}) std::filesystem::remove(p);
}

namespace {
// One trial in a fresh process (its OpenSSL untouched): a thread hashes for
// the first time while this thread forks children that hash too. Returns the
// children that could not (killed by their alarm), or -1 on a setup error.
int fork_during_first_hash() {
  std::atomic<bool> done{false}, started{false};
  std::thread first([&] {
    started = true;
    const char text[] = "first use";
    (void)sha256(text, sizeof text);
    done = true;
  });
  while (!started.load()) std::this_thread::yield();
  int hung = 0;
  while (!done.load()) {
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      alarm(2);  // a child stuck on an inherited lock is killed, and counted
      const char text[] = "child";
      (void)sha256(text, sizeof text);
      _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) ++hung;
  }
  first.join();
  return hung;
}
}  // namespace

TEST_CASE("hashing is safe across fork - a child forked while another thread hashes for the first time can hash") {
  // The Worker forks replacement children from its scheduler thread while the
  // main thread may be hashing a library (register_callable); the child then
  // hashes what it installs. A hash that takes a library lock (OpenSSL's
  // first-use initialisation did) left that lock held in the child forever.
  // Each trial runs in a process of its own, where the hash is the first.
  int bad_trials = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(fork_during_first_hash() == 0 ? 0 : 1);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) ++bad_trials;
  }
  CHECK(bad_trials == 0);
}
