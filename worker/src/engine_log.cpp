#include "engine_log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace pto {

std::shared_ptr<spdlog::logger> engine_log() {
  // A function-local static: created once, thread-safe; an application that
  // registered "pto.worker" itself (a daemon with its own sinks) keeps its own.
  static std::shared_ptr<spdlog::logger> log = [] {
    if (auto existing = spdlog::get("pto.worker")) return existing;
    return spdlog::stderr_logger_mt("pto.worker");
  }();
  return log;
}

}  // namespace pto
