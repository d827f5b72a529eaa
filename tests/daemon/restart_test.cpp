// What ptod acknowledged survives its crash (docs/daemon.md, "State" and
// "Durability"): after SIGKILL and a restart on the same state directory the
// registrations are back (a library that changed on disk is refused), the
// tensors download byte-identical and are usable by jobs, the job records
// are there, and the jobs that were queued or running are FAILED
// "interrupted: the daemon stopped" instead of vanishing. A registration is
// forgotten only when its content is surely gone, and a database that cannot
// be read stops the start rather than losing what it names.
#include <sqlite3.h>
#include <sys/resource.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"
#include "pto/package/chip_package.h"

using namespace pto_test;
namespace v1 = pto::v1;
using SC = grpc::StatusCode;

namespace {

v1::SubmitRequest sleep_job(uint64_t ms) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("sleep");
  req.mutable_args()->add_scalars(ms);
  return req;
}

v1::SubmitRequest job_of(const std::string& callable) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name(callable);
  return req;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

v1::TensorHandle by_id(uint64_t id) {
  v1::TensorHandle h;
  h.set_id(id);
  return h;
}

std::string digest_of(const pto::client::Client& c, const std::string& name) {
  auto l = const_cast<pto::client::Client&>(c).callables();
  if (!l.ok()) return "";
  for (const auto& ci : l.value.callables())
    if (ci.name() == name) return ci.identity().digest();
  return "";
}

// The daemon's state database, edited as a host's reboot would leave it.
bool set_meta(const std::string& db_path, const std::string& key, const std::string& value) {
  sqlite3* db = nullptr;
  if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) return false;
  const std::string sql = "UPDATE meta SET value = '" + value + "' WHERE key = '" + key + "'";
  const bool ok = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK && sqlite3_changes(db) == 1;
  sqlite3_close(db);
  return ok;
}

// Runs SQL on the daemon's state database (the daemon stopped), as an
// operator's repair, a restored backup or a damaged disk would.
bool edit_db(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) return false;
  const bool ok = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
  sqlite3_close(db);
  return ok;
}

// A full disk, as the daemon meets it: a file-size limit of one byte makes
// every write it does to its files fail (EFBIG; ptod ignores SIGXFSZ), the
// state database's first. Returns the limit it had.
rlimit disk_full(const DaemonProcess& d) {
  rlimit was{};
  REQUIRE(prlimit(d.pid(), RLIMIT_FSIZE, nullptr, &was) == 0);
  const rlimit full{1, was.rlim_max};
  REQUIRE(prlimit(d.pid(), RLIMIT_FSIZE, &full, nullptr) == 0);
  return was;
}

}  // namespace

TEST_CASE("after SIGKILL and a restart: registrations, tensors byte-identical, job records - interrupted jobs FAILED") {
  const std::string libs = make_temp_dir("ptod-libs");
  std::filesystem::copy_file(NATIVE_SUBS, libs + "/libsubs.so");
  std::filesystem::copy_file(NATIVE_SUBS, libs + "/libchanging.so");
  const std::string conf = libs + "/ptod.toml";
  std::ofstream(conf) << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", conf});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  REQUIRE(c->register_import(libs + "/libsubs.so", "pto_test_add_one", "add_one").ok());
  REQUIRE(c->register_import(libs + "/libchanging.so", "pto_test_noop", "changing").ok());
  const std::string vector_digest = digest_of(*c, "vector"), add_one_digest = digest_of(*c, "add_one");

  // Three tensors of different sizes and dtypes.
  std::vector<uint8_t> t1(4096 * 4);  // floats (add_one adds to them below), the others any bytes
  for (int i = 0; i < 4096; ++i) {
    const float v = static_cast<float>(i % 1000) * 0.25f - 100.f;
    std::memcpy(t1.data() + 4 * i, &v, 4);
  }
  const std::vector<uint8_t> t2 = random_bytes(1 << 20, 2), t3 = random_bytes(100, 3);
  auto u1 = c->upload("x", {4096}, PTO_FLOAT32, t1.data(), t1.size());
  auto u2 = c->upload("big", {512, 512}, PTO_FLOAT32, t2.data(), t2.size());
  auto u3 = c->upload("", {100}, PTO_UINT8, t3.data(), t3.size());
  REQUIRE((u1.ok() && u2.ok() && u3.ok()));

  // One job done, one running, two queued behind it (max_running = 1).
  auto done = c->run(sleep_job(1));
  REQUIRE(done.ok());
  REQUIRE(done.value.state() == v1::SUCCEEDED);
  auto running = c->submit(sleep_job(60000));
  REQUIRE(running.ok());
  REQUIRE(eventually([&] {
    auto r = c->result(running.value.job_id());
    return r.ok() && r.value.state() == v1::RUNNING;
  }));
  auto q1 = c->submit(sleep_job(1)), q2 = c->submit(sleep_job(1));
  REQUIRE((q1.ok() && q2.ok()));
  REQUIRE(c->result(q2.value.job_id()).value.state() == v1::QUEUED);

  // A library changes on disk while the daemon is down.
  std::ofstream(libs + "/libchanging.so", std::ios::app) << "tampered";
  c = restart(d);

  // Registrations: back, by name and digest; the changed one refused.
  CHECK(digest_of(*c, "vector") == vector_digest);
  CHECK(digest_of(*c, "add_one") == add_one_digest);
  CHECK_FALSE(digest_of(*c, "sleep").empty());
  CHECK(digest_of(*c, "changing").empty());
  CHECK_THAT(d.log(), Catch::Contains("('changing')") && Catch::Contains("is not restored") &&
                          Catch::Contains("its files changed since it was registered"));

  // Tensors: the same ids, byte-identical.
  auto list = c->tensors();
  REQUIRE(list.ok());
  CHECK(list.value.tensors_size() == 3);
  using Uploaded = std::pair<const v1::TensorInfo*, const std::vector<uint8_t>*>;
  for (const auto& [info, bytes] : {Uploaded{&u1.value, &t1}, Uploaded{&u2.value, &t2}, Uploaded{&u3.value, &t3}}) {
    std::vector<uint8_t> got;
    auto r = c->download(by_id(info->handle().id()), &got);
    INFO("tensor " << info->handle().id() << ": " << r.status.message);
    REQUIRE(r.ok());
    CHECK(got == *bytes);
  }

  // Job records: the finished one as it ended; the running and queued ones FAILED.
  auto r_done = c->result(done.value.job_id());
  REQUIRE(r_done.ok());
  CHECK(r_done.value.state() == v1::SUCCEEDED);
  for (uint64_t id : {running.value.job_id(), q1.value.job_id(), q2.value.job_id()}) {
    auto r = c->result(id);
    INFO("job " << id);
    REQUIRE(r.ok());
    CHECK(r.value.state() == v1::FAILED);
    CHECK(r.value.message() == "interrupted: the daemon stopped");
    CHECK(r.value.end_time_ms() >= r.value.submit_time_ms());
  }
  auto jobs = c->jobs(10);
  REQUIRE(jobs.ok());
  CHECK(jobs.value.jobs_size() == 4);

  // A restored tensor is usable by a child: add_one writes it in place.
  v1::SubmitRequest add;
  add.mutable_callable()->set_name("add_one");
  add.mutable_args()->add_tensors()->mutable_tensor()->set_name("x");
  add.mutable_args()->add_tags(v1::INOUT);
  auto r_add = c->run(add);
  REQUIRE(r_add.ok());
  INFO(r_add.value.message());
  REQUIRE(r_add.value.state() == v1::SUCCEEDED);
  CHECK(r_add.value.job_id() > q2.value.job_id());  // ids go on
  std::vector<uint8_t> got;
  REQUIRE(c->download(by_id(u1.value.handle().id()), &got).ok());
  for (int i = 0; i < 4096; i += 511) {
    float before, after;
    std::memcpy(&before, t1.data() + 4 * i, 4);
    std::memcpy(&after, got.data() + 4 * i, 4);
    CHECK(after == before + 1.f);
  }
  // New tensors never take a restored one's id.
  auto fresh = c->alloc("", {4}, PTO_FLOAT32);
  REQUIRE(fresh.ok());
  CHECK(fresh.value.handle().id() > u3.value.handle().id());
  std::filesystem::remove_all(libs);
}

TEST_CASE("a freed tensor stays freed and an unregistered callable stays gone after a restart") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  const std::vector<uint8_t> a = random_bytes(64, 4);
  auto keep = c->upload("keep", {16}, PTO_FLOAT32, a.data(), a.size());
  auto gone = c->upload("gone", {16}, PTO_FLOAT32, a.data(), a.size());
  REQUIRE((keep.ok() && gone.ok()));
  REQUIRE(c->free(gone.value.handle()).ok());
  v1::CallableRef ref;
  ref.set_name("sleep");
  REQUIRE(c->unregister(ref).ok());
  c = restart(d);
  auto list = c->tensors();
  REQUIRE(list.ok());
  REQUIRE(list.value.tensors_size() == 1);
  CHECK(list.value.tensors(0).handle().name() == "keep");
  CHECK(c->callables().value.callables_size() == 0);
  CHECK(std::filesystem::is_empty(d.dir() + "/state/callables"));
}

TEST_CASE("a registration this daemon's settings refuse at a start stays recorded - back once they allow it") {
  const std::string conf_dir = make_temp_dir("ptod-conf");
  const std::string conf = conf_dir + "/ptod.toml";
  std::ofstream(conf) << "[security]\nallow_chip_bundles = true\n";
  DaemonProcess d({"--config", conf});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  const std::string digest = digest_of(*c, "sleep");
  std::ofstream(conf) << "[security]\nallow_chip_bundles = false\n";
  c = restart(d);
  CHECK(digest_of(*c, "sleep").empty());  // not available while refused...
  CHECK_THAT(d.log(), Catch::Contains("chip bundles are refused by this daemon") &&
                          Catch::Contains("it stays recorded and is tried again at the next start"));
  CHECK_FALSE(std::filesystem::is_empty(d.dir() + "/state/callables"));
  std::ofstream(conf) << "[security]\nallow_chip_bundles = true\n";
  c = restart(d);
  CHECK(digest_of(*c, "sleep") == digest);  // ...and back, files and all (forgotten before)
  auto r = c->run(sleep_job(1));
  REQUIRE(r.ok());
  CHECK(r.value.state() == v1::SUCCEEDED);
  std::filesystem::remove_all(conf_dir);
}

TEST_CASE("a chip bundle whose configuration a client wrote in its own words survives two restarts") {
  // The daemon stores a bundle's files under the digest of its configuration
  // as it writes it; restored, the bundle is stored again under that name.
  pto::package::ChipBundle b;
  REQUIRE(pto::package::bundle_package(SLEEP_CONFIG, &b).ok());
  v1::RegisterRequest req;
  req.set_name("sleep");
  req.set_abi(v1::ABI_CHIP);
  req.mutable_chip()->set_config_toml("# written by hand\n" + b.config_toml);
  for (auto& [file, bytes] : b.libraries) (*req.mutable_chip()->mutable_libraries())[file] = bytes;
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_callable(req).ok());
  const std::string digest = digest_of(*c, "sleep");
  REQUIRE_FALSE(digest.empty());
  for (int i = 0; i < 2; ++i) {  // before: back after the first, forgotten at the second
    c = restart(d);
    CHECK(digest_of(*c, "sleep") == digest);
  }
  auto r = c->run(sleep_job(1));
  REQUIRE(r.ok());
  CHECK(r.value.state() == v1::SUCCEEDED);
}

TEST_CASE("a registrations table that cannot be read stops the start - no stored callable file is removed") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  const std::string digest = digest_of(*c, "sleep");
  REQUIRE(d.stop(SIGTERM) == 0);
  const std::string db = d.dir() + "/state/ptod.db";
  REQUIRE(edit_db(db, "ALTER TABLE callables RENAME TO callables_saved; CREATE TABLE callables (digest TEXT);"));
  d.restart();
  CHECK_FALSE(d.up());
  CHECK(d.exit_code() == 1);
  CHECK_THAT(d.log(), Catch::Contains("the registrations cannot be read"));
  // Before: it served with no registration and swept their stored files.
  CHECK_FALSE(std::filesystem::is_empty(d.dir() + "/state/callables"));
  REQUIRE(edit_db(db, "DROP TABLE callables; ALTER TABLE callables_saved RENAME TO callables;"));
  c = restart(d);
  CHECK(digest_of(*c, "sleep") == digest);
}

TEST_CASE("an id sequence set back in the state database never gives a new tensor a stored tensor's id") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  const std::vector<uint8_t> a = random_bytes(64, 5), b = random_bytes(64, 6);
  auto first = c->upload("first", {16}, PTO_FLOAT32, a.data(), a.size());
  REQUIRE(first.ok());
  REQUIRE(d.stop(SIGTERM) == 0);
  REQUIRE(edit_db(d.dir() + "/state/ptod.db", "DELETE FROM sequences;"));
  c = restart(d);
  auto second = c->upload("second", {16}, PTO_FLOAT32, b.data(), b.size());
  REQUIRE(second.ok());
  CHECK(second.value.handle().id() > first.value.handle().id());
  auto list = c->tensors();
  REQUIRE(list.ok());
  CHECK(list.value.tensors_size() == 2);  // before: the second replaced the first
  std::vector<uint8_t> back;
  REQUIRE(c->download(by_id(first.value.handle().id()), &back).ok());
  CHECK(back == a);
}

TEST_CASE("after a host restart without a clean stop, tensors not fsynced are dropped - durable ones are kept") {
  for (bool durable : {false, true}) {
    DYNAMIC_SECTION((durable ? "[daemon] durable = true" : "[daemon] durable = false")) {
      const std::string dir = make_temp_dir("ptod-durable");
      const std::string conf = dir + "/ptod.toml";
      std::ofstream(conf) << "[daemon]\ndurable = " << (durable ? "true" : "false") << "\n";
      DaemonProcess d({"--config", conf});
      REQUIRE(d.up());
      auto c = connect(d);
      const std::vector<uint8_t> a = random_bytes(4096, 5);
      REQUIRE(c->upload("t", {1024}, PTO_FLOAT32, a.data(), a.size()).ok());
      d.stop(SIGKILL);
      // As if the host had rebooted since: another boot id, no clean stop.
      REQUIRE(set_meta(d.dir() + "/state/ptod.db", "boot_id", "another-boot"));
      c = restart(d);
      auto list = c->tensors();
      REQUIRE(list.ok());
      if (durable) {
        REQUIRE(list.value.tensors_size() == 1);
        std::vector<uint8_t> got;
        REQUIRE(c->download(list.value.tensors(0).handle(), &got).ok());
        CHECK(got == a);
      } else {
        CHECK(list.value.tensors_size() == 0);
        CHECK_THAT(d.log(), Catch::Contains("the host restarted since the last daemon ran") &&
                                Catch::Contains("were not fsynced"));
      }
      std::filesystem::remove_all(dir);
    }
  }
}

TEST_CASE("a clean stop writes every tensor to disk: a host restart after it loses none") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  const std::vector<uint8_t> a = random_bytes(4096, 6);
  REQUIRE(c->upload("t", {1024}, PTO_FLOAT32, a.data(), a.size()).ok());
  REQUIRE(d.stop(SIGTERM) == 0);
  REQUIRE(set_meta(d.dir() + "/state/ptod.db", "boot_id", "another-boot"));
  d.launch();
  REQUIRE(d.up());
  REQUIRE(eventually([&] { return connect(d)->health().value == "SERVING"; }));
  std::vector<uint8_t> got;
  v1::TensorHandle h;
  h.set_name("t");
  REQUIRE(connect(d)->download(h, &got).ok());
  CHECK(got == a);
}

TEST_CASE("a job whose Submit waited and answered before it ended survives SIGKILL - so does one that ended in time") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  // Ended within the wait: its record went with its end.
  v1::SubmitRequest quick = sleep_job(1);
  quick.set_wait_ms(30000);
  auto q = c->submit(quick);
  REQUIRE(q.ok());
  REQUIRE(q.value.state() == v1::SUCCEEDED);
  // Still running when the wait ran out: the reply came only after its
  // record was committed (nothing else commits meanwhile).
  v1::SubmitRequest slow = sleep_job(60000);
  slow.set_wait_ms(300);
  auto s = c->submit(slow);
  REQUIRE(s.ok());
  REQUIRE((s.value.state() == v1::QUEUED || s.value.state() == v1::RUNNING));
  c = restart(d);
  auto rq = c->result(q.value.job_id());
  REQUIRE(rq.ok());
  CHECK(rq.value.state() == v1::SUCCEEDED);
  auto rs = c->result(s.value.job_id());
  INFO(rs.status.message);
  REQUIRE(rs.ok());
  CHECK(rs.value.state() == v1::FAILED);
  CHECK(rs.value.message() == "interrupted: the daemon stopped");
}

// Jobs through the fd socket from several connections at once: the job loop
// drives them together and commits their ends with its first answer. Every
// job answered as ended is so after SIGKILL.
TEST_CASE("jobs the fd socket's job loop answered as ended survive SIGKILL - their ends committed before the replies") {
  DaemonProcess d;
  REQUIRE(d.up());
  REQUIRE(connect(d)->register_chip(SLEEP_CONFIG, "sleep").ok());
  constexpr int kConns = 4, kJobs = 10;
  std::vector<std::vector<uint64_t>> ids(kConns);
  std::vector<std::string> problems(kConns);
  // The loop answers a job that ended within its round's 2 ms drive; one it
  // hands to a thread is answered there. On a loaded host every job of a
  // round of 40 may take longer (CI: none of 36 did), so rounds go on, at
  // most 20, until the loop has answered some - else the test would check
  // only the threads' commits.
  int rounds = 0;
  for (; rounds < 20 && d.metric("ptod_fd_socket_loop_jobs_total") <= 0; ++rounds) {
    std::vector<std::thread> ts;
    for (int i = 0; i < kConns; ++i)
      ts.emplace_back([&, i] {
        if (!problems[size_t(i)].empty()) return;
        auto c = connect(d);
        for (int j = 0; j < kJobs; ++j) {
          v1::SubmitRequest req = sleep_job(0);
          req.set_wait_ms(30000);
          auto r = c->submit(req);
          if (!r.ok() || r.value.state() != v1::SUCCEEDED) {
            problems[size_t(i)] = r.status.message + " / " + v1::JobState_Name(r.value.state());
            return;
          }
          ids[size_t(i)].push_back(r.value.job_id());
        }
      });
    for (auto& t : ts) t.join();
  }
  // The loop answered some (a connection's first job is its thread's).
  INFO(rounds << " rounds; jobs handed to threads: " << d.metric("ptod_fd_socket_handoffs_total"));
  CHECK(d.metric("ptod_fd_socket_loop_jobs_total") > 0);
  auto c = restart(d);
  for (int i = 0; i < kConns; ++i) {
    INFO("connection " << i << ": " << problems[size_t(i)]);
    CHECK(problems[size_t(i)].empty());
    for (uint64_t id : ids[size_t(i)]) {
      auto r = c->result(id);
      INFO("job " << id << ": " << r.status.message);
      REQUIRE(r.ok());
      CHECK(r.value.state() == v1::SUCCEEDED);
    }
  }
}

TEST_CASE("a job's end is not shown while its record cannot be written - once it is, it survives SIGKILL") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  // Its client waits for it (Submit with wait_ms): the job id comes with the reply.
  const long commits_before = d.metric("ptod_job_record_commits_total");
  pto::client::Result<v1::SubmitReply> waited;
  std::thread waiter([&] {
    v1::SubmitRequest req = sleep_job(2000);
    req.set_wait_ms(30000);
    waited = connect(d)->submit(req);
  });
  // Running, and its first record committed (the handler flushes it once
  // the job has run for 50 ms): it is acknowledged.
  uint64_t id = 0;
  REQUIRE(eventually([&] {
    auto l = c->jobs(10);
    if (l.ok() && l.value.jobs_size() == 1 && l.value.jobs(0).state() == v1::RUNNING) id = l.value.jobs(0).job_id();
    return id != 0 && d.metric("ptod_job_record_commits_total") > commits_before;
  }));
  const long failed_before = d.metric("ptod_job_record_failures_total");
  REQUIRE(failed_before >= 0);
  const rlimit was = disk_full(d);
  // The run ends after 2 s; its record's commit fails, and fails again.
  CHECK(eventually([&] { return d.metric("ptod_job_record_failures_total") >= failed_before + 2; }, 10000));
  auto during = c->result(id);
  REQUIRE(during.ok());
  CHECK(during.value.state() == v1::RUNNING);  // not SUCCEEDED: that is on no disk yet
  auto refused = c->submit(sleep_job(1));      // not acknowledged: its record cannot be written either
  CHECK_FALSE(refused.ok());
  CHECK(refused.status.code == int(SC::INTERNAL));  // it did not happen
  CHECK_THAT(refused.status.message, Catch::Contains("its record is not written"));
  // A quick job whose caller waits: the handler's flush fails. The caller is
  // told the job is cancelled unless it ended already, and where to look.
  v1::SubmitRequest quick = sleep_job(0);
  quick.set_wait_ms(10000);
  auto q = c->submit(quick);
  CHECK_FALSE(q.ok());
  CHECK(q.status.code == int(SC::UNKNOWN));  // it may have run
  const uint64_t quick_id = id + 2;  // ids in submission order: the refused one took id + 1
  CHECK_THAT(q.status.message, Catch::Contains("job " + std::to_string(quick_id) +
                                               ": its record could not be "
                                               "written") &&
                                   Catch::Contains("Result shows how it ended once its record is written"));
  REQUIRE(prlimit(d.pid(), RLIMIT_FSIZE, &was, nullptr) == 0);
  // The waiting caller of the first job is answered once its end is written.
  waiter.join();
  REQUIRE(waited.ok());
  CHECK(waited.value.job_id() == id);
  CHECK(waited.value.state() == v1::SUCCEEDED);
  // The quick job as its caller was told: written, ended or cancelled (a
  // sleep of 0 ms usually ends before the handler's flush).
  v1::JobState quick_state = v1::JOB_STATE_UNSPECIFIED;
  CHECK(eventually([&] {
    auto r = c->result(quick_id);
    if (r.ok()) quick_state = r.value.state();
    return quick_state == v1::SUCCEEDED || quick_state == v1::CANCELLED;
  }));
  // A retry within kRetryMost (2 s) writes it; then the end is shown.
  CHECK(eventually(
      [&] {
        auto r = c->result(id);
        return r.ok() && r.value.state() == v1::SUCCEEDED;
      },
      10000));
  CHECK_THAT(d.log(), Catch::Contains("its final record is written,") && Catch::Contains("failed commits later"));
  c = restart(d);
  auto after = c->result(id);
  REQUIRE(after.ok());
  CHECK(after.value.state() == v1::SUCCEEDED);
  CHECK(c->result(quick_id).value.state() == quick_state);
  CHECK(c->jobs(10).value.jobs_size() == 2);  // the refused job left no record
}

// A batch that waits runs its first jobs before the last are made; its
// records are committed while it waits and flushed before it answers
// (docs/daemon.md, "Batches"). When that commit fails, the batch is not
// acknowledged: the caller is told which jobs they were and that they are
// cancelled unless they ended - asking again would run them twice.
TEST_CASE("a waited batch whose records cannot be written is refused naming its jobs - they read as they ended") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  // A first job reserves a block of ids (JobIds::kBlock, 1,000): the
  // batch's need no write of their own.
  v1::SubmitRequest warm = sleep_job(0);
  warm.set_wait_ms(10000);
  REQUIRE(c->submit(warm).ok());
  const long failed_before = d.metric("ptod_job_record_failures_total");
  REQUIRE(failed_before >= 0);
  const rlimit was = disk_full(d);
  constexpr int kJobs = 100;
  v1::SubmitBatchRequest batch;
  for (int i = 0; i < kJobs; ++i) *batch.add_jobs() = sleep_job(0);
  batch.set_wait_ms(20000);
  auto r = c->submit_batch(batch);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status.code == int(SC::UNKNOWN));  // not "did not happen": some may have run
  INFO(r.status.message);
  CHECK_THAT(r.status.message, Catch::StartsWith("the batch's 100 jobs are ") &&
                                   Catch::Contains("; the records of 100 of them (") &&
                                   Catch::Contains(") could not be written (") &&
                                   Catch::Contains("those are cancelled unless they ended already"));
  // The jobs it names: "are first-last;", and the same range not written.
  const std::string& m = r.status.message;
  const size_t at = m.find(" are ") + 5, dash = m.find('-', at);
  REQUIRE(dash != std::string::npos);
  const uint64_t first = std::stoull(m.substr(at)), last = std::stoull(m.substr(dash + 1));
  CHECK(last - first + 1 == kJobs);
  CHECK_THAT(m, Catch::Contains("of them (" + std::to_string(first) + "-" + std::to_string(last) + ")"));
  CHECK(d.metric("ptod_job_record_failures_total") > failed_before);
  REQUIRE(prlimit(d.pid(), RLIMIT_FSIZE, &was, nullptr) == 0);
  // Their ends are written by the retries (within kRetryMost, 2 s): each
  // job reads SUCCEEDED (it ran before the failed commit) or CANCELLED.
  std::map<uint64_t, v1::JobState> seen;
  CHECK(eventually(
      [&] {
        seen.clear();
        auto l = c->jobs(1000);
        if (!l.ok()) return false;
        for (const auto& j : l.value.jobs())
          if (j.job_id() >= first && (j.state() == v1::SUCCEEDED || j.state() == v1::CANCELLED))
            seen[j.job_id()] = j.state();
        return seen.size() == size_t(kJobs);
      },
      10000));
  CHECK(seen.begin()->first == first);
  CHECK(seen.rbegin()->first == last);
  c = restart(d);
  auto after = c->jobs(1000);
  REQUIRE(after.ok());
  CHECK(after.value.jobs_size() == kJobs + 1);  // and the first job
  for (const auto& j : after.value.jobs())
    if (j.job_id() >= first) CHECK(j.state() == seen[j.job_id()]);
}

TEST_CASE("a daemon stopped while a job's end cannot be written drains within its bound - the job reads interrupted") {
  const std::string conf = make_temp_dir("ptod-conf") + "/ptod.toml";
  std::ofstream(conf) << "[daemon]\ndrain_timeout_s = 5\n";
  DaemonProcess d({"--config", conf});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto job = c->submit(sleep_job(3000));
  REQUIRE(job.ok());
  const uint64_t id = job.value.job_id();
  REQUIRE(eventually([&] {
    auto r = c->result(id);
    return r.ok() && r.value.state() == v1::RUNNING;
  }));
  (void)disk_full(d);
  REQUIRE(eventually([&] { return d.metric("ptod_job_record_failures_total") >= 1; }, 10000));
  // The drain does not wait for an end that waits for the disk: the daemon
  // stops well inside drain_timeout_s (a drain that overran it would exit 1
  // after drain_timeout_s + 2 s).
  const auto t0 = std::chrono::steady_clock::now();
  const int code = d.stop(SIGTERM);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4));
  CHECK(code == 0);
  c = restart(d);
  auto after = c->result(id);
  REQUIRE(after.ok());
  CHECK(after.value.state() == v1::FAILED);  // its end was never shown: it reads as a job the daemon stopped
  CHECK(after.value.message() == "interrupted: the daemon stopped");
  std::filesystem::remove_all(std::filesystem::path(conf).parent_path());
}

TEST_CASE(
    "a restart keeps the finished jobs retained as they ended and every job acknowledged - beyond retain_finished") {
  const std::string conf = make_temp_dir("ptod-conf") + "/ptod.toml";
  std::ofstream(conf) << "[jobs]\nmax_running = 2\nretain_finished = 2\n";
  DaemonProcess d({"--config", conf}, 2);
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto state_of = [&](uint64_t id) {
    auto r = c->result(id);
    return r.ok() ? r.value.state() : v1::JobState(-1);
  };
  // A (the lowest id) ends after B and C: retained are C and A, B trimmed.
  auto a = c->submit(sleep_job(1500));
  REQUIRE(a.ok());
  REQUIRE(eventually([&] { return state_of(a.value.job_id()) == v1::RUNNING; }));
  auto b = c->run(sleep_job(1));
  auto cc = c->run(sleep_job(1));
  REQUIRE((b.ok() && cc.ok()));
  REQUIRE(eventually([&] { return state_of(a.value.job_id()) == v1::SUCCEEDED; }, 30000));
  auto ra = c->result(a.value.job_id());
  REQUIRE(ra.ok());
  REQUIRE(b.value.end_time_ms() <= ra.value.end_time_ms());  // B and C ran beside A, on the other chip
  CHECK_FALSE(c->result(b.value.job_id()).ok());
  // The restart keeps what the daemon kept (it used to keep the newest ids:
  // B back, A gone).
  c = restart(d);
  CHECK(state_of(a.value.job_id()) == v1::SUCCEEDED);
  CHECK(state_of(cc.value.job_id()) == v1::SUCCEEDED);
  CHECK_FALSE(c->result(b.value.job_id()).ok());

  // Two running and three queued: five jobs acknowledged, more than
  // retain_finished. Each is there after a crash, interrupted (it used to
  // keep the newest two).
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  std::vector<uint64_t> live;
  for (uint64_t ms : {60000, 60000, 1, 1, 1}) {
    auto s = c->submit(sleep_job(ms));
    REQUIRE(s.ok());
    live.push_back(s.value.job_id());
  }
  REQUIRE(eventually([&] { return state_of(live[0]) == v1::RUNNING && state_of(live[1]) == v1::RUNNING; }));
  CHECK(state_of(live[4]) == v1::QUEUED);
  c = restart(d);
  for (uint64_t id : live) {
    INFO("job " << id);
    auto r = c->result(id);
    INFO(r.status.message);
    REQUIRE(r.ok());
    CHECK(r.value.state() == v1::FAILED);
    CHECK(r.value.message() == "interrupted: the daemon stopped");
  }
  // Each job that ends from here on lets go of two of the oldest, down to
  // retain_finished (the first end used to drop all beyond it at once).
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  REQUIRE(c->run(sleep_job(1)).ok());
  CHECK_FALSE(c->result(live[0]).ok());
  CHECK_FALSE(c->result(live[1]).ok());
  for (size_t i = 2; i < live.size(); ++i) CHECK(state_of(live[i]) == v1::FAILED);
  for (int i = 0; i < 2; ++i) REQUIRE(c->run(sleep_job(1)).ok());
  for (uint64_t id : live) CHECK_FALSE(c->result(id).ok());
  auto left = c->jobs(100);
  REQUIRE(left.ok());
  CHECK(left.value.jobs_size() == 2);  // retain_finished again
}

TEST_CASE(
    "tensors a clean stop wrote to disk survive a later crash and host restart - those a job changed since do not") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  const std::vector<uint8_t> kept = random_bytes(4096, 7);
  std::vector<float> changed(1024, 1.0f);
  REQUIRE(c->upload("kept", {1024}, PTO_FLOAT32, kept.data(), kept.size()).ok());
  REQUIRE(c->upload("changed", {1024}, PTO_FLOAT32, changed.data(), changed.size() * 4).ok());
  REQUIRE(d.stop(SIGTERM) == 0);  // clean: both tensors' bytes are on disk
  d.launch();
  REQUIRE(d.up());
  REQUIRE(eventually([&] { return connect(d)->health().value == "SERVING"; }));
  c = connect(d);
  // A job changes one of them (not fsynced: [daemon] durable = false).
  v1::SubmitRequest job;
  job.mutable_callable()->set_name("add_one");
  job.mutable_args()->add_tensors()->mutable_tensor()->set_name("changed");
  job.mutable_args()->add_tags(v1::INOUT);
  auto r = c->run(job);
  REQUIRE(r.ok());
  REQUIRE(r.value.state() == v1::SUCCEEDED);
  // Then the host goes down without a clean stop.
  d.stop(SIGKILL);
  REQUIRE(set_meta(d.dir() + "/state/ptod.db", "boot_id", "another-boot"));
  c = restart(d);
  // The untouched one is kept, byte-identical (it used to be dropped as
  // never fsynced); the changed one's bytes on disk may be older than the
  // job's: dropped.
  v1::TensorHandle h;
  h.set_name("kept");
  std::vector<uint8_t> got;
  auto k = c->download(h, &got);
  INFO(k.status.message << "\n" << d.log());
  REQUIRE(k.ok());
  CHECK(got == kept);
  h.set_name("changed");
  CHECK_FALSE(c->download(h, &got).ok());
  CHECK_THAT(d.log(), Catch::Contains("'changed'") && Catch::Contains("were not fsynced"));
}

TEST_CASE("jobs refused because their record cannot be written are never counted as submitted") {
  // Before: a job was counted in ptod_jobs_submitted_total as it was admitted and taken back when its record
  // could not be written - a counter that went down, read by Prometheus as a reset (a rate() spike).
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->run(job_of("noop")).ok());
  const long before = d.metric("ptod_jobs_submitted_total");
  REQUIRE(before == 1);
  const rlimit was = disk_full(d);
  std::atomic<bool> done{false};
  std::vector<long> seen;
  std::thread scraper([&] {
    while (!done.load()) seen.push_back(d.metric("ptod_jobs_submitted_total"));
  });
  int refused = 0;
  for (int i = 0; i < 300; ++i) refused += !c->submit(job_of("noop")).ok();
  done = true;
  scraper.join();
  REQUIRE(prlimit(d.pid(), RLIMIT_FSIZE, &was, nullptr) == 0);
  CHECK(refused == 300);
  INFO(seen.size() << " scrapes");
  for (long v : seen) CHECK(v == before);
  CHECK(d.metric("ptod_jobs_submitted_total") == before);
}
