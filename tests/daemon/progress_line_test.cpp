// ptoctl's live progress line: fitted to the width, the chip's own tasks when
// the job has them, the queue position while it waits, elapsed time and rate.
#include <catch2/catch.hpp>
#include <string>

#include "progress.h"

namespace v1 = pto::v1;

namespace {
v1::JobEvent event(v1::JobState state, uint64_t done, uint64_t total, uint64_t chip_done, uint64_t chip_total) {
  v1::JobEvent e;
  e.set_job_id(12);
  e.set_state(state);
  e.set_tasks_done(done);
  e.set_tasks_total(total);
  e.set_chip_tasks_done(chip_done);
  e.set_chip_tasks_total(chip_total);
  return e;
}
}  // namespace

TEST_CASE("progress line: the chip's tasks with a bar, elapsed time and rate, within the width") {
  const std::string l = ptoctl::progress_line(event(v1::RUNNING, 0, 1, 250, 1000), 100, 2.5, 2.0);
  CHECK(l == "job 12 RUNNING [##########..............................] 250/1000 chip tasks, 2.5 s, 125/s");
  CHECK(l.size() <= 99);
  for (int width : {120, 80, 60, 40, 30, 20, 8, 1, 0}) {
    const std::string w = ptoctl::progress_line(event(v1::RUNNING, 0, 1, 250, 1000), width, 2.5, 2.0);
    INFO(width << ": " << w);
    CHECK(int(w.size()) <= std::max(0, width - 1));
  }
  // Narrow: the bar goes first, the counts stay.
  CHECK(ptoctl::progress_line(event(v1::RUNNING, 0, 1, 250, 1000), 60, 2.5, 2.0) ==
        "job 12 RUNNING 250/1000 chip tasks, 2.5 s, 125/s");
}

TEST_CASE("progress line: a job without chip work counts its tasks - a queued job shows its place") {
  CHECK(ptoctl::progress_line(event(v1::RUNNING, 3, 10, 0, 0), 70, 1.0, 1.0) ==
        "job 12 RUNNING [########.....................] 3/10 tasks, 1.0 s, 3/s");
  v1::JobEvent q = event(v1::QUEUED, 0, 0, 0, 0);
  q.set_queue_position(4);
  CHECK(ptoctl::progress_line(q, 80, 0.4, 0) == "job 12 QUEUED 4 ahead, 0.4 s");
  // At 80 columns: 79 used, the bar taking what the words leave.
  const std::string done = ptoctl::progress_line(event(v1::SUCCEEDED, 1, 1, 1000, 1000), 80, 75, 74);
  CHECK(done == "job 12 SUCCEEDED [" + std::string(26, '#') + "] 1000/1000 chip tasks, 1m15s, 14/s");
  CHECK(done.size() == 79);
}
