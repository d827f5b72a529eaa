#include "output_capture.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

namespace pto {
namespace {

// The streams as they were before a capture began, for a process forked
// while fds 1 and 2 point at the memfd (restore_streams_after_fork); -1 otherwise.
std::atomic<int> g_saved_out{-1}, g_saved_err{-1};

constexpr char kCapped[] = "\n[pto: this job's log reached its limit of 64 MiB; further output is dropped]\n";

// Appends at most what keeps `log` under kMaxLogBytes (and the note when
// this write reaches it); the bytes are [from, to) of `src`.
void append_capped(int log, int src, uint64_t from, uint64_t to) {
  struct stat st {};
  if (fstat(log, &st) != 0) return;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size >= kMaxLogBytes) return;
  const uint64_t room = kMaxLogBytes - size;
  const uint64_t end = to - from > room ? from + room : to;
  char chunk[65536];
  for (uint64_t at = from; at < end;) {
    const ssize_t n = ::pread(src, chunk, std::min<uint64_t>(sizeof chunk, end - at), static_cast<off_t>(at));
    if (n <= 0 || ::write(log, chunk, static_cast<size_t>(n)) != n) return;
    at += static_cast<uint64_t>(n);
  }
  if (end < to) (void)!::write(log, kCapped, sizeof kCapped - 1);
}

}  // namespace

OutputCapture::~OutputCapture() {
  for (int fd : {buf_fd_, saved_out_, saved_err_})
    if (fd >= 0) ::close(fd);
}

void OutputCapture::begin(const char* path) {
  std::lock_guard<std::mutex> g(mu_);
  appended_ = false;
  if (path[0] == '\0') {  // not captured: the task writes to the child's own streams
    release_locked();
    return;
  }
  if (disabled_) return;
  if (buf_fd_ < 0) {
    saved_out_ = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    saved_err_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
    buf_fd_ = ::memfd_create("pto-task-output", MFD_CLOEXEC);
    struct stat st {};
    if (saved_out_ < 0 || saved_err_ < 0 || buf_fd_ < 0 || ::fstat(buf_fd_, &st) != 0) {
      for (int* fd : {&buf_fd_, &saved_out_, &saved_err_})
        if (*fd >= 0) ::close(*fd), *fd = -1;
      disabled_ = true;
      return;
    }
    buf_dev_ = st.st_dev;
    buf_ino_ = st.st_ino;
    // Line-buffered: a follower sees a task's lines as the heartbeat drains
    // them, not when a 4 KiB buffer fills (stdio was flushed, nothing is lost).
    std::fflush(stdout);
    (void)std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  if (redirected_) {
    // Still on the memfd since the last captured task: what arrived since
    // (nobody's task) goes where it would have gone. The memfd is never
    // truncated while the fds point at it (a write racing the truncate would
    // be lost); its offset only grows, over punched-out pages, until a
    // release rewinds it.
    const off_t at = ::lseek(buf_fd_, 0, SEEK_CUR);
    if (at > static_cast<off_t>(copied_)) forward_locked(at);
    if (at > kRewindAt) release_locked();
  }
  if (!redirected_) {
    if (::dup2(buf_fd_, 1) < 0 || ::dup2(buf_fd_, 2) < 0) {
      (void)::dup2(saved_out_, 1);
      (void)::dup2(saved_err_, 2);
      return;
    }
    redirected_ = true;
    g_saved_out.store(saved_out_);
    g_saved_err.store(saved_err_);
    const off_t at = ::lseek(buf_fd_, 0, SEEK_CUR);
    copied_ = at > 0 ? static_cast<uint64_t>(at) : 0;  // 0 unless a release could not put the fds back
  }
  path_ = path;
  active_ = true;
}

bool OutputCapture::end() {
  std::lock_guard<std::mutex> g(mu_);
  if (!active_) return false;
  std::fflush(stdout);
  std::fflush(stderr);
  active_ = false;
  // A task that wrote nothing (the usual one) costs an lseek here. The
  // streams stay on the memfd (release() puts them back; after_task() when
  // the task moved them): back-to-back captured tasks cost no dup2 at all.
  if (const off_t at = ::lseek(buf_fd_, 0, SEEK_CUR); at > static_cast<off_t>(copied_)) drain_locked(at);
  path_.clear();
  return appended_;
}

void OutputCapture::after_task() {
  std::lock_guard<std::mutex> g(mu_);
  if (redirected_ && !active_ && (!on_memfd(1) || !on_memfd(2))) release_locked();
}

bool OutputCapture::on_memfd(int fd) const {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_dev == buf_dev_ && st.st_ino == buf_ino_;
}

void OutputCapture::release() {
  std::lock_guard<std::mutex> g(mu_);
  release_locked();
}

void OutputCapture::release_locked() {
  if (!redirected_ || active_) return;
  std::fflush(stdout);
  std::fflush(stderr);
  (void)::dup2(saved_out_, 1);
  (void)::dup2(saved_err_, 2);
  g_saved_out.store(-1);
  g_saved_err.store(-1);
  redirected_ = false;
  // Nothing writes into the memfd now: what came since the last task goes
  // out, and the memfd starts again from 0.
  if (const off_t at = ::lseek(buf_fd_, 0, SEEK_CUR); at > static_cast<off_t>(copied_)) forward_locked(at);
  (void)::ftruncate(buf_fd_, 0);
  (void)::lseek(buf_fd_, 0, SEEK_SET);
  copied_ = 0;
}

void OutputCapture::forward_locked(off_t end) {
  // Between tasks only the child's own threads write: to its stderr, as a
  // diagnostic would (stdout and stderr share the memfd; which it was is lost).
  char chunk[65536];
  for (off_t at = static_cast<off_t>(copied_); at < end;) {
    const ssize_t n = ::pread(buf_fd_, chunk, static_cast<size_t>(std::min<off_t>(sizeof chunk, end - at)), at);
    if (n <= 0) break;
    for (ssize_t put = 0; put < n;) {
      const ssize_t w = ::write(saved_err_, chunk + put, static_cast<size_t>(n - put));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        put = n;  // stderr is gone: the rest is dropped, as a write to it would be
        at = end;
        break;
      }
      put += w;
    }
    at += n;
  }
  (void)::fallocate(buf_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(copied_),
                    end - static_cast<off_t>(copied_));
  copied_ = static_cast<uint64_t>(end);
}

void OutputCapture::drain() {
  // The heartbeat never waits for the lock: the task thread may hold it
  // while it writes to a stderr that blocks, and the beats must go on.
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (g.owns_lock() && active_) drain_locked(::lseek(buf_fd_, 0, SEEK_CUR));
}

void OutputCapture::drain_locked(off_t end) {
  // Both fds share the memfd's offset (`end`): everything below it has been written.
  if (end <= 0 || static_cast<uint64_t>(end) <= copied_) return;
  const int log = path_.empty() ? -1 : ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log >= 0) {
    appended_ = true;
    append_capped(log, buf_fd_, copied_, static_cast<uint64_t>(end));
    ::close(log);
  }
  // The pages appended are freed: a task that prints a lot holds ~100 ms of it.
  (void)::fallocate(buf_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(copied_),
                    end - static_cast<off_t>(copied_));
  copied_ = static_cast<uint64_t>(end);
}

void OutputCapture::restore_streams_after_fork() {
  const int out = g_saved_out.load(), err = g_saved_err.load();
  if (out >= 0) (void)::dup2(out, 1);
  if (err >= 0) (void)::dup2(err, 2);
}

bool redirect_streams_to(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::fflush(stdout);
  std::fflush(stderr);
  (void)::dup2(fd, 1);
  (void)::dup2(fd, 2);
  ::close(fd);
  (void)std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  return true;
}

void enforce_log_cap(const std::string& path) {
  struct stat st {};
  if (::fstat(1, &st) != 0 || static_cast<uint64_t>(st.st_size) < kMaxLogBytes || !S_ISREG(st.st_mode)) return;
  const int log = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log >= 0) {
    (void)!::write(log, kCapped, sizeof kCapped - 1);
    ::close(log);
  }
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0) return;
  (void)::dup2(null, 1);
  (void)::dup2(null, 2);
  ::close(null);
}

}  // namespace pto
