// What ptoctl shows while it follows a job (submit, watch, run-example): on a
// terminal one live line — state, a bar of the chip's own tasks (or of the
// job's tasks when it has no chip work), counts, elapsed time, rate, and the
// place in the queue while it waits — fitted to the terminal's width and
// redrawn in place; elsewhere a line per state change. And what Ctrl-C does
// meanwhile: the job goes on in the daemon, so ptoctl says how to follow or
// cancel it, or cancels it (--cancel-on-interrupt).
#pragma once

#include <cstdint>
#include <string>

#include "pto/client.h"

namespace ptoctl {

// The live line for `ev`, at most `width - 1` columns (a full last column
// would wrap on some terminals). `elapsed_s`: since ptoctl began following;
// `running_s`: since it first saw the job RUNNING (0 before), for the rate.
std::string progress_line(const pto::v1::JobEvent& ev, int width, double elapsed_s, double running_s);

class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool json);
  void operator()(const pto::v1::JobEvent& ev);

 private:
  bool json_, tty_;
  pto::v1::JobState last_ = pto::v1::JOB_STATE_UNSPECIFIED;
  uint64_t start_ns_ = 0, running_ns_ = 0;
};

// Called first in main, before any thread exists: SIGINT is then taken by a
// thread of ptoctl's own. Without a job being followed it ends ptoctl (exit
// 130, as the default would); while one is, it prints how to watch or cancel
// it — or, with cancel set, cancels it through `client` and says so — then
// exits 130.
void take_interrupts();
void follow_job(uint64_t job_id, pto::client::Client* client, bool cancel);
// For a command's length: Ctrl-C may use `client` (cancel), and after the
// command nothing is followed and the client is no longer touched.
class Following {
 public:
  Following(uint64_t job_id, pto::client::Client& client, bool cancel) { follow_job(job_id, &client, cancel); }
  ~Following();
  Following(const Following&) = delete;
  Following& operator=(const Following&) = delete;
};

}  // namespace ptoctl
