#include "progress.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "pto/base/clock.h"

namespace ptoctl {
namespace v1 = pto::v1;

namespace {

int terminal_width() {
  winsize w{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

std::string seconds(double s) {
  return s < 60 ? fmt::format("{:.1f} s", s) : fmt::format("{}m{:02}s", int(s) / 60, int(s) % 60);
}

}  // namespace

std::string progress_line(const v1::JobEvent& ev, int width, double elapsed_s, double running_s) {
  const bool chip = ev.chip_tasks_total() > 0;
  const uint64_t done = chip ? ev.chip_tasks_done() : ev.tasks_done();
  const uint64_t total = chip ? ev.chip_tasks_total() : ev.tasks_total();
  const std::string head = fmt::format("job {} {}", ev.job_id(), v1::JobState_Name(ev.state()));
  std::string tail;
  if (ev.state() == v1::QUEUED) {
    tail = fmt::format(" {} ahead, {}", ev.queue_position(), seconds(elapsed_s));
  } else {
    tail = fmt::format(" {}/{} {}, {}", done, total, chip ? "chip tasks" : "tasks", seconds(elapsed_s));
    if (running_s > 0.05 && done > 0) tail += fmt::format(", {:.0f}/s", double(done) / running_s);
  }
  const int room = std::max(0, width - 1);
  // A bar between the head and the counts when there are counts and room for at least 10 cells.
  const int bar_cells = room - int(head.size()) - int(tail.size()) - 3;
  std::string line = head;
  if (ev.state() != v1::QUEUED && total > 0 && bar_cells >= 10) {
    const int cells = std::min(bar_cells, 40);
    const int fill = int(uint64_t(cells) * std::min(done, total) / total);
    line += " [" + std::string(size_t(fill), '#') + std::string(size_t(cells - fill), '.') + "]";
  }
  line += tail;
  if (int(line.size()) > room) line.resize(size_t(room));  // ASCII only: a byte is a column
  return line;
}

ProgressPrinter::ProgressPrinter(bool json)
    : json_(json), tty_(isatty(STDOUT_FILENO) && !json), start_ns_(pto::now_ns()) {}

void ProgressPrinter::operator()(const v1::JobEvent& ev) {
  // Ctrl-C now concerns this job, until it ended (the client and the cancel
  // flag stay what the command set).
  follow_job(ev.has_result() ? 0 : ev.job_id(), nullptr, false);
  if (json_) return;
  const uint64_t now = pto::now_ns();
  if (ev.state() == v1::RUNNING && running_ns_ == 0) running_ns_ = now;
  const double elapsed = double(now - start_ns_) / 1e9;
  const double running = running_ns_ ? double(now - running_ns_) / 1e9 : 0;
  const bool final = ev.has_result();
  if (tty_) {
    // Back to the line's start, the new text, and the rest of the old one erased.
    std::printf("\r%s\x1b[K%s", progress_line(ev, terminal_width(), elapsed, running).c_str(), final ? "\n" : "");
    std::fflush(stdout);
  } else if (ev.state() != last_) {
    if (ev.state() == v1::QUEUED)
      std::printf("job %llu QUEUED (%u ahead)\n", (unsigned long long)ev.job_id(), ev.queue_position());
    else
      std::printf(
          "job %llu %s (%llu/%llu tasks%s)\n", (unsigned long long)ev.job_id(), v1::JobState_Name(ev.state()).c_str(),
          (unsigned long long)ev.tasks_done(), (unsigned long long)ev.tasks_total(),
          ev.chip_tasks_total() ? fmt::format(", {}/{} chip tasks", ev.chip_tasks_done(), ev.chip_tasks_total()).c_str()
                                : "");
  }
  last_ = ev.state();
}

namespace {
std::atomic<uint64_t> g_job{0};
std::atomic<pto::client::Client*> g_client{nullptr};
std::atomic<bool> g_cancel{false};
std::atomic<bool> g_interrupted{false};  // the waiter below handles a Ctrl-C: it ends the process
}  // namespace

void follow_job(uint64_t job_id, pto::client::Client* client, bool cancel) {
  if (client) {
    g_client.store(client);
    g_cancel.store(cancel);
  }
  g_job.store(job_id);
}

Following::~Following() {
  // The job may end while a Ctrl-C is handled (a cancel's reply waits for
  // its end, and the watch sees it first): the handler says so and exits
  // 130, not this thread with the job's result. Bounded (65 s): the
  // handler's cancel is bounded by the client's timeout (60 s by default).
  for (int i = 0; g_interrupted.load() && i < 6500; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  g_job.store(0);
  g_client.store(nullptr);
  g_cancel.store(false);
}

void take_interrupts() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  // Blocked here, before any thread exists, so every thread inherits it and
  // only the waiter below takes the signal.
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {}
    g_interrupted.store(true);
    const uint64_t job = g_job.load();
    pto::client::Client* c = g_client.load();
    if (job != 0) {
      if (g_cancel.load() && c) {
        auto r = c->cancel(job);
        if (r.ok())
          std::fprintf(stderr, "\nptoctl: interrupted: job %llu cancelled (%s)\n", (unsigned long long)job,
                       v1::JobState_Name(r.value).c_str());
        else
          std::fprintf(stderr, "\nptoctl: interrupted; cancelling job %llu failed: %s\n", (unsigned long long)job,
                       r.status.message.c_str());
      } else {
        std::fprintf(stderr,
                     "\nptoctl: interrupted; job %llu goes on in the daemon: 'ptoctl watch %llu' follows it, "
                     "'ptoctl cancel %llu' stops it\n",
                     (unsigned long long)job, (unsigned long long)job, (unsigned long long)job);
      }
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(130);
  }).detach();
}

}  // namespace ptoctl
