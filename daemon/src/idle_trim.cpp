#include "idle_trim.h"

#include <time.h>

#include <asio.hpp>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "log.h"
#include "pto/base/freed_memory.h"

namespace ptod {
namespace {

uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);  // every thread of ptod, not its children
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// kB of anonymous resident memory (/proc/self/status), or -1. Nothing here
// throws: it runs on the main thread's io_context.
long rss_anon_kb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssAnon:", 0) == 0) {
      char* end = nullptr;
      const long kb = std::strtol(line.c_str() + 8, &end, 10);
      return end != line.c_str() + 8 && kb >= 0 ? kb : -1;
    }
  return -1;
}

struct IdleTrim : std::enable_shared_from_this<IdleTrim> {
  IdleTrim(asio::io_context& io, std::chrono::seconds p) : timer(io), period(p), last_cpu(process_cpu_ns()) {}
  asio::steady_timer timer;
  const std::chrono::seconds period;
  uint64_t last_cpu;
  IdleSpells spells;

  void arm() {
    timer.expires_after(period);
    timer.async_wait([self = shared_from_this()](const std::error_code& e) {
      if (!e) self->tick();
    });
  }

  void tick() {
    const uint64_t used = process_cpu_ns() - last_cpu;
    const long before = rss_anon_kb();
    if (spells.give_back(used, uint64_t(std::chrono::nanoseconds(period).count()), before)) {
      const bool given = pto::give_back_freed_memory();
      const long after = rss_anon_kb();
      spells.given_back(after);
      if (given && before >= 0 && after >= 0 && before - after >= 1024)
        log("main")->info("idle for {} s: freed memory given back to the kernel (RssAnon {} -> {} MiB)", period.count(),
                          before / 1024, after / 1024);
      else
        log("main")->debug("idle for {} s: under 1 MiB of freed memory given back (RssAnon {} -> {} kB)",
                           period.count(), before, after);
    }
    // After the trim: its own time is not the next period's work, or a
    // costly trim on a short period would read as work and trim again.
    last_cpu = process_cpu_ns();
    arm();
  }
};

}  // namespace

void start_idle_trim(asio::io_context& io, std::chrono::seconds period) {
  if (period.count() <= 0) return;
  std::make_shared<IdleTrim>(io, period)->arm();
}

}  // namespace ptod
