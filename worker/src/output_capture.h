// Where what user code prints goes while it runs for a run that asked for a
// log (RunOptions::log_file, docs/worker.md "Logs"). A child's task writes
// into a memfd of the child's own (fds 1 and 2 pointed at it for the task):
// the child's heartbeat thread appends what arrived to the log about every
// 100 ms and frees those pages, the task's end appends the rest — so a task
// that writes nothing touches no file, a running task's output shows within
// ~100 ms, and a task that crashes loses at most its last ~100 ms of output.
// The streams stay on the memfd after a task, for the next captured one
// (no dup2 between back-to-back tasks); the child puts them back before it
// parks, serves a control request, shutdown or an uncaptured task, and after
// a task that pointed them elsewhere (checked once the task is answered,
// off the path of its answer: after_task). The memfd is never truncated while the
// fds point at it: offsets mark what is dealt with.
// A runner (one job per process) writes straight into its job's log. Every
// log stops growing at kMaxLogBytes, with one line saying so.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace pto {

inline constexpr uint64_t kMaxLogBytes = uint64_t(64) << 20;

class OutputCapture {
 public:
  ~OutputCapture();
  // The task starts: fds 1 and 2 point at the memfd; its output is for `path`
  // ("" = not captured: the streams are the child's own, as release()). If a
  // descriptor cannot be made, capture is off for good and the streams stay
  // the child's.
  void begin(const char* path);
  // The task ended: the rest of its output appended (a task that wrote
  // nothing costs one lseek). True when the task's output reached its log
  // (the file was opened to append: it exists). The streams stay on the
  // memfd until release().
  bool end();
  // After the task's answer, before the next request is taken: a task that
  // pointed fd 1 or 2 elsewhere (freopen, dup2) must not take the next tasks'
  // output with it - the child's own streams again, and the next captured
  // task redirects them afresh. Two fstats, which the answer need not wait for.
  void after_task();
  // Between tasks: fds 1 and 2 back to the child's own streams, with what
  // was written to them since the last task (to stderr). Idempotent.
  void release();
  // What the running task wrote since the last look, appended (heartbeat;
  // skipped when the task thread holds the lock).
  void drain();
  // In a process forked while fds 1 and 2 pointed at the memfd (an L3
  // child's inner Worker replacing a child): they go back to what they were
  // before the capture, so the new process never writes into a task's log.
  static void restore_streams_after_fork();

 private:
  // A hot child's memfd offset grows (over punched-out pages) until a release
  // rewinds it; begin() releases first past this.
  static constexpr off_t kRewindAt = off_t(1) << 30;
  void drain_locked(off_t end);  // end: the memfd's offset, what the task wrote so far
  void release_locked();
  void forward_locked(off_t end);  // [copied_, end), written between tasks, to stderr
  bool on_memfd(int fd) const;
  std::mutex mu_;
  int saved_out_ = -1, saved_err_ = -1, buf_fd_ = -1;
  dev_t buf_dev_ = 0;
  ino_t buf_ino_ = 0;
  std::string path_;
  uint64_t copied_ = 0;  // the memfd's bytes below this offset are dealt with (in a log, or forwarded)
  bool active_ = false, disabled_ = false;
  bool appended_ = false;    // the task begun last opened its log to append
  bool redirected_ = false;  // fds 1 and 2 point at the memfd
};

// The runner's streams straight into `path` (stdout line-buffered so a
// follower sees lines as they come); enforce_log_cap (from its heartbeat)
// sends them to /dev/null once the file reached kMaxLogBytes.
bool redirect_streams_to(const std::string& path);  // false: the file did not open, nothing changed
void enforce_log_cap(const std::string& path);

}  // namespace pto
