// Where what user code prints goes while it runs for a run that asked for a
// log (RunOptions::log_file, docs/worker.md "Logs"). A child's task writes
// into a memfd of the child's own (fds 1 and 2 pointed at it for the task):
// the child's heartbeat thread appends what arrived to the log about every
// 100 ms and frees those pages, the task's end appends the rest — so a task
// that writes nothing touches no file, a running task's output shows within
// ~100 ms, and a task that crashes loses at most its last ~100 ms of output.
// A runner (one job per process) writes straight into its job's log. Every
// log stops growing at kMaxLogBytes, with one line saying so.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace pto {

inline constexpr uint64_t kMaxLogBytes = uint64_t(64) << 20;

class OutputCapture {
 public:
  ~OutputCapture();
  // The task starts: fds 1 and 2 point at the memfd; its output is for `path`
  // ("" = not captured: nothing changes). If a descriptor cannot be made,
  // capture is off for good and the streams stay the child's.
  void begin(const char* path);
  // The task ended: the streams back, the rest of its output appended.
  void end();
  // What the running task wrote since the last look, appended (heartbeat).
  void drain();
  // In a process forked while a task was captured (an L3 child's inner
  // Worker replacing a child): fds 1 and 2 back to what they were before the
  // capture, so the new process never writes into another task's log.
  static void restore_streams_after_fork();

 private:
  void drain_locked();
  std::mutex mu_;
  int saved_out_ = -1, saved_err_ = -1, buf_fd_ = -1;
  std::string path_;
  uint64_t copied_ = 0;  // bytes of the memfd already appended to path_
  bool active_ = false, disabled_ = false;
};

// The runner's streams straight into `path` (stdout line-buffered so a
// follower sees lines as they come); enforce_log_cap (from its heartbeat)
// sends them to /dev/null once the file reached kMaxLogBytes.
bool redirect_streams_to(const std::string& path);  // false: the file did not open, nothing changed
void enforce_log_cap(const std::string& path);

}  // namespace pto
