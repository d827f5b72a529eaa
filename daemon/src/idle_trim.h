// Giving back, once ptod has gone idle, the freed memory it keeps for the
// next messages ([daemon] malloc_keep_bytes): up to that much per allocator
// arena stays mapped while work comes, and would stay for good after it
// stopped (docs/daemon.md, "Memory ptod keeps").
#pragma once

#include <chrono>
#include <cstdint>

namespace asio {
class io_context;
}

namespace ptod {

// When to give memory back, from ptod's own CPU time per period and its
// RssAnon: a period in which its threads used under 1% of one CPU is idle.
// True for the first idle period after one that was not (or after
// start-up), and for an idle period in which RssAnon stands 1 MiB or more
// above what the last give-back left (a light transfer, under 1% of a CPU
// in its period, still faults pages in): once per spell, and never again
// for nothing.
class IdleSpells {
 public:
  bool give_back(uint64_t used_ns, uint64_t period_ns, long rss_anon_kb) {
    const bool idle = used_ns < period_ns / 100;
    const bool grew = rss_anon_kb >= 0 && rss_anon_kb - left_kb_ >= 1024;
    const bool now = idle && (worked_ || grew);
    worked_ = !idle;
    return now;
  }
  // RssAnon after a give-back (-1: unknown, growth no longer tells).
  void given_back(long rss_anon_kb) { left_kb_ = rss_anon_kb >= 0 ? rss_anon_kb : kUnknown; }

 private:
  static constexpr long kUnknown = long(1) << 62;
  bool worked_ = true;  // start-up allocated
  long left_kb_ = kUnknown;
};

// Every `period` on `io` (ptod's main thread, beside the signals): ptod's
// process CPU time; at the start of an idle spell, pto::give_back_freed_memory,
// logged with RssAnon before and after. A period of 0 starts nothing. The
// timer lives as long as `io` runs.
void start_idle_trim(asio::io_context& io, std::chrono::seconds period);

}  // namespace ptod
