// Batched submission (Jobs.SubmitBatch, docs/proto.md): many jobs in one
// call, each with its own arguments, id and result; all queued or none; what
// was acknowledged survives a SIGKILL of the daemon. The real ptod, its
// children and the client library.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

using namespace pto_test;
namespace v1 = pto::v1;

namespace {

v1::SubmitRequest job(const std::string& callable) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name(callable);
  return req;
}

v1::SubmitRequest on_tensor(const std::string& callable, const std::string& tensor) {
  v1::SubmitRequest req = job(callable);
  req.mutable_args()->add_tensors()->mutable_tensor()->set_name(tensor);
  req.mutable_args()->add_tags(v1::INOUT);
  return req;
}

v1::SubmitRequest sleep_job(uint64_t ms) {
  v1::SubmitRequest req = job("sleep");
  req.mutable_args()->add_scalars(ms);
  return req;
}

size_t job_count(pto::client::Client& c) {
  auto l = c.jobs(1000);
  REQUIRE(l.ok());
  return static_cast<size_t>(l.value.jobs_size());
}

// A tensor's name ("t" + i, spelled so that GCC 12 sees no overlap in it).
std::string tensor_name(int i) {
  std::string s = std::to_string(i);
  s.insert(s.begin(), 't');
  return s;
}

}  // namespace

TEST_CASE("a batch runs every job with its own arguments, id and result - a failing job fails alone") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_fail", "fail").ok());
  constexpr int kJobs = 48;
  constexpr uint32_t kLen = 1024;
  v1::SubmitBatchRequest batch;
  for (int i = 0; i < kJobs; ++i) {
    std::vector<float> x(kLen, float(i));
    const std::string name = tensor_name(i);
    REQUIRE(c->upload(name, {kLen}, PTO_FLOAT32, x.data(), kLen * 4).ok());
    *batch.add_jobs() = i == 17 ? job("fail") : on_tensor("add_one", name);
  }
  batch.set_wait_ms(60000);
  auto r = c->submit_batch(batch);
  INFO(r.status.message << "\n" << d.log());
  REQUIRE(r.ok());
  REQUIRE(r.value.jobs_size() == kJobs);
  for (int i = 0; i < kJobs; ++i) {
    const v1::SubmitReply& one = r.value.jobs(i);
    if (i > 0) CHECK(one.job_id() > r.value.jobs(i - 1).job_id());  // ids in the request's order
    CHECK(one.result().job_id() == one.job_id());
    if (i == 17) {
      CHECK(one.state() == v1::FAILED);
      CHECK_THAT(one.result().first_failure().message(), Catch::Contains("deliberate failure from pto_test_fail"));
      continue;
    }
    CHECK(one.state() == v1::SUCCEEDED);
    CHECK(one.result().callable() == "add_one");
    std::vector<uint8_t> got;
    v1::TensorHandle h;
    h.set_name(tensor_name(i));
    REQUIRE(c->download(h, &got).ok());
    REQUIRE(got.size() == kLen * 4);
    float v[kLen];
    std::memcpy(v, got.data(), sizeof v);
    for (uint32_t k = 0; k < kLen; k += 97) REQUIRE(v[k] == float(i) + 1.0f);
  }
  // Each is a job of its own afterwards too.
  auto one = c->result(r.value.jobs(3).job_id());
  REQUIRE(one.ok());
  CHECK(one.value.state() == v1::SUCCEEDED);
}

TEST_CASE("a batch is queued whole or not at all - the refusal names the job and releases the tensors") {
  const std::string dir = make_temp_dir("ptod-batch");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_queued = 8\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  std::vector<float> x(64, 1.0f);
  REQUIRE(c->upload("x", {64}, PTO_FLOAT32, x.data(), 64 * 4).ok());
  const size_t before = job_count(*c);

  // An unknown callable at index 2: nothing is queued, the tensor the first
  // jobs pinned is free again.
  v1::SubmitBatchRequest bad;
  *bad.add_jobs() = on_tensor("add_one", "x");
  *bad.add_jobs() = on_tensor("add_one", "x");
  *bad.add_jobs() = job("no_such_callable");
  auto r = c->submit_batch(bad);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::StartsWith("jobs[2]: ") && Catch::Contains("no_such_callable"));
  CHECK(job_count(*c) == before);

  // wait_ms belongs to the batch.
  v1::SubmitBatchRequest waits;
  *waits.add_jobs() = job("add_one");
  *waits.add_jobs() = job("add_one");
  waits.mutable_jobs(1)->set_wait_ms(10);
  r = c->submit_batch(waits);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status.code == int(grpc::StatusCode::INVALID_ARGUMENT));
  CHECK_THAT(r.status.message, Catch::Contains("jobs[1]: wait_ms is 10"));

  // Sizes: none, and more than the limit.
  r = c->submit_batch(v1::SubmitBatchRequest());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("a batch holds 1 to 10000 jobs, not 0"));
  v1::SubmitBatchRequest huge;
  for (int i = 0; i < 10001; ++i) *huge.add_jobs() = job("add_one");
  r = c->submit_batch(huge);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("not 10001"));

  // More than the queue holds ([jobs] max_queued = 8): refused whole, the
  // tensor released.
  v1::SubmitBatchRequest nine;
  for (int i = 0; i < 9; ++i) *nine.add_jobs() = on_tensor("add_one", "x");
  r = c->submit_batch(nine);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status.code == int(grpc::StatusCode::RESOURCE_EXHAUSTED));
  CHECK_THAT(r.status.message, Catch::Contains("9 more do not fit") && Catch::Contains("max_queued = 8"));
  CHECK(job_count(*c) == before);
  v1::TensorHandle h;
  h.set_name("x");
  CHECK(c->free(h).ok());  // no job holds it
}

TEST_CASE("a batch's jobs survive SIGKILL once acknowledged - ended ones keep their results, the rest are interrupted") {
  const std::string dir = make_temp_dir("ptod-batch-kill");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());

  v1::SubmitBatchRequest finished;
  for (int i = 0; i < 200; ++i) *finished.add_jobs() = job("noop");
  finished.set_wait_ms(60000);
  auto done = c->submit_batch(finished);
  REQUIRE(done.ok());
  for (const auto& j : done.value.jobs()) REQUIRE(j.state() == v1::SUCCEEDED);

  // One long job runs; the rest of its batch is queued behind it.
  v1::SubmitBatchRequest pending;
  *pending.add_jobs() = sleep_job(60000);
  for (int i = 0; i < 20; ++i) *pending.add_jobs() = job("noop");
  auto queued = c->submit_batch(pending);
  REQUIRE(queued.ok());
  REQUIRE(queued.value.jobs_size() == 21);

  c = restart(d);
  for (const auto& j : done.value.jobs()) {
    auto r = c->result(j.job_id());
    REQUIRE(r.ok());
    REQUIRE(r.value.state() == v1::SUCCEEDED);
  }
  for (const auto& j : queued.value.jobs()) {
    auto r = c->result(j.job_id());
    REQUIRE(r.ok());
    CHECK(r.value.state() == v1::FAILED);
    CHECK(r.value.message() == "interrupted: the daemon stopped");
  }
}

// A batch whose caller waits has its jobs' ends committed by that caller
// (docs/daemon.md, "State"): every kBatchCommitEvery (10 ms) while it waits,
// so others see a job's end long before the batch's last job ends.
TEST_CASE("a waited batch's ended jobs are seen by others while its last job still runs") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  v1::SubmitBatchRequest batch;
  constexpr int kQuick = 20;
  for (int i = 0; i < kQuick; ++i) *batch.add_jobs() = job("noop");
  *batch.add_jobs() = sleep_job(4000);
  batch.set_wait_ms(60000);
  std::atomic<bool> returned{false};
  pto::client::Result<v1::SubmitBatchReply> r;
  std::thread t([&] {
    r = connect(d)->submit_batch(batch);
    returned = true;
  });
  const auto succeeded = [&] {
    auto l = c->jobs(1000);
    if (!l.ok()) return 0;
    int n = 0;
    for (const auto& j : l.value.jobs()) n += j.state() == v1::SUCCEEDED;
    return n;
  };
  const bool seen = eventually([&] { return succeeded() == kQuick; }, 3000);
  const bool early = !returned;
  t.join();
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(seen);
  CHECK(early);
  for (const auto& j : r.value.jobs()) CHECK(j.state() == v1::SUCCEEDED);
}

TEST_CASE("a batch whose wait runs out answers the ended jobs with their results, the others as they stand") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  v1::SubmitBatchRequest batch;
  constexpr int kQuick = 6;
  for (int i = 0; i < kQuick; ++i) *batch.add_jobs() = job("noop");
  *batch.add_jobs() = sleep_job(5000);
  batch.set_wait_ms(1000);
  auto r = c->submit_batch(batch);
  INFO(r.status.message);
  REQUIRE(r.ok());
  REQUIRE(r.value.jobs_size() == kQuick + 1);
  for (int i = 0; i < kQuick; ++i) {
    const v1::SubmitReply& one = r.value.jobs(i);
    CHECK(one.state() == v1::SUCCEEDED);
    CHECK(one.result().job_id() == one.job_id());
    CHECK(one.result().state() == v1::SUCCEEDED);
    CHECK(one.result().callable() == "noop");
  }
  const v1::SubmitReply& last = r.value.jobs(kQuick);
  CHECK(last.state() == v1::RUNNING);
  CHECK_FALSE(last.has_result());
  REQUIRE(c->cancel(last.job_id()).ok());
}

// A waited batch is queued in chunks, its first jobs running while the rest
// are made (docs/daemon.md, "Jobs"): a job submitted meanwhile must still
// queue behind all of them, as its queue position counts them.
TEST_CASE("a waited batch larger than retain_finished answers every job with its result") {
  // Before: the first jobs to end were trimmed (retain_finished) before the reply was made, and their replies
  // said QUEUED, without a result.
  const std::string dir = make_temp_dir("ptod-batch-retain");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nretain_finished = 5\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_fail", "fail").ok());
  constexpr int kJobs = 40;
  v1::SubmitBatchRequest batch;
  for (int i = 0; i < kJobs; ++i) *batch.add_jobs() = job(i == 3 ? "fail" : "noop");
  batch.set_wait_ms(60000);
  auto r = c->submit_batch(batch);
  INFO(r.status.message);
  REQUIRE(r.ok());
  REQUIRE(r.value.jobs_size() == kJobs);
  for (int i = 0; i < kJobs; ++i) {
    INFO("job " << i);
    const v1::SubmitReply& one = r.value.jobs(i);
    CHECK(one.state() == (i == 3 ? v1::FAILED : v1::SUCCEEDED));
    CHECK(one.has_result());
    CHECK(one.result().state() == one.state());
  }
  // Once answered, they are trimmed as any other: retain_finished jobs are kept.
  CHECK(eventually([&] { return job_count(*c) == 5; }));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a job submitted while a batch is being queued starts after every job of the batch") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  constexpr int kJobs = 1000;  // [jobs] max_queued is 1,024
  v1::SubmitBatchRequest batch;
  for (int i = 0; i < kJobs; ++i) *batch.add_jobs() = job("noop");
  batch.set_wait_ms(60000);
  int conclusive = 0;
  // Tried with growing delays: the single job counts when it was admitted
  // after the batch (a higher id) and before the batch's call returned.
  for (int delay_us : {200, 500, 1000, 1500, 2000, 3000}) {
    pto::client::Result<v1::SubmitBatchReply> b;
    std::atomic<bool> returned{false};
    std::thread t([&] {
      b = connect(d)->submit_batch(batch);
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    v1::SubmitRequest one = job("noop");
    one.set_wait_ms(60000);
    auto s = c->submit(one);
    const bool during = !returned;
    t.join();
    INFO(b.status.message << " / " << s.status.message);
    REQUIRE(b.ok());
    REQUIRE(s.ok());
    REQUIRE(s.value.state() == v1::SUCCEEDED);
    const uint64_t last_id = b.value.jobs(kJobs - 1).job_id();
    if (!during || s.value.job_id() < last_id) continue;
    ++conclusive;
    // Its start against the batch's (ms): at most the batch's last two
    // (its width, two sub workers) may read later - their run threads were
    // still waking when it began on its own caller's thread.
    int later = 0;
    for (const auto& j : b.value.jobs()) later += j.result().start_time_ms() > s.value.result().start_time_ms();
    INFO("delay " << delay_us << " us: " << later << " of the batch's jobs started after the single job");
    CHECK(later <= 2);
  }
  WARN(conclusive << " of 6 tries submitted the single job while the batch was being queued");
}

TEST_CASE("a batch's sub jobs run at most as many at once as there are sub workers, though more slots are free") {
  // Two sub workers, [jobs] max_running 4 (the default): more than two of
  // the batch's jobs at once would only wait for a sub worker inside the
  // Worker, holding its run thread and slot (docs/daemon.md, "Jobs").
  DaemonProcess d({}, /*chips=*/1, /*subs=*/2);
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  v1::SubmitBatchRequest batch;
  for (int i = 0; i < 6; ++i) *batch.add_jobs() = sleep_job(150);
  batch.set_wait_ms(60000);
  auto r = c->submit_batch(batch);
  INFO(r.status.message << "\n" << d.log());
  REQUIRE(r.ok());
  REQUIRE(r.value.jobs_size() == 6);
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [start, end), wall-clock ms
  for (const auto& j : r.value.jobs()) {
    REQUIRE(j.result().state() == v1::SUCCEEDED);
    spans.emplace_back(j.result().start_time_ms(), j.result().end_time_ms());
  }
  // The most jobs running at one job's start (a job's end is recorded before
  // the next one of the batch starts).
  int most = 0;
  for (const auto& [start, end] : spans) {
    int running = 0;
    for (const auto& [s2, e2] : spans) running += s2 <= start && start < e2;
    most = std::max(most, running);
  }
  CHECK(most == 2);
  // Started in order: two jobs taken by two run threads at once may record
  // their starts a few ms apart either way (an ASan run read job 4 3 ms
  // before job 3); one started out of turn would be a 150 ms job early.
  for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].first + 75 >= spans[i - 1].first);
}

TEST_CASE("ptoctl submit --count N sends N copies in one call and sums up their states") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_fail", "fail").ok());
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output ok = run_command({PTOCTL_PATH, "submit", "noop", "--count", "50"}, 60, env);
  INFO(ok.text);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.text, Catch::Contains("50 jobs (") && Catch::Contains(": 50 SUCCEEDED"));
  Output failed = run_command({PTOCTL_PATH, "submit", "fail", "--count", "3"}, 60, env);
  INFO(failed.text);
  CHECK(failed.code == 1);
  CHECK_THAT(failed.text, Catch::Contains(": 3 FAILED"));
  Output ids = run_command({PTOCTL_PATH, "submit", "noop", "--count", "4", "-d"}, 60, env);
  CHECK(ids.code == 0);
  CHECK(std::count(ids.text.begin(), ids.text.end(), '\n') == 4);
  Output bad = run_command({PTOCTL_PATH, "submit", "noop", "--count", "10001"}, 60, env);
  CHECK(bad.code == 2);

  // ptoctl jobs filters on the daemon's side (ListJobsRequest).
  REQUIRE(run_command({PTOCTL_PATH, "submit", "noop", "--label", "tagged"}, 60, env).code == 0);
  const auto rows = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n') - 1; };
  Output failed_jobs = run_command({PTOCTL_PATH, "jobs", "--state", "failed"}, 60, env);
  INFO(failed_jobs.text);
  CHECK(failed_jobs.code == 0);
  CHECK_THAT(failed_jobs.text, Catch::StartsWith("ID "));  // a header row
  CHECK(rows(failed_jobs.text) == 3);
  CHECK(failed_jobs.text.find("SUCCEEDED") == std::string::npos);
  Output labelled = run_command({PTOCTL_PATH, "jobs", "--callable", "noop", "--label", "tagged"}, 60, env);
  CHECK(rows(labelled.text) == 1);
  CHECK(rows(run_command({PTOCTL_PATH, "jobs", "--callable", "fail", "--limit", "2"}, 60, env).text) == 2);
  CHECK(rows(run_command({PTOCTL_PATH, "jobs", "--since", "1h", "--limit", "1000"}, 60, env).text) == 58);
  CHECK(run_command({PTOCTL_PATH, "jobs", "--since", "1x"}, 60, env).code == 2);
}
