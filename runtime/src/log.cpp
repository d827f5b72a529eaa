#include "log.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace pto2 {

std::shared_ptr<spdlog::logger> component_logger(const std::string& component) {
  static std::mutex mu;
  const std::string name = "pto2." + component;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_color_mt(name);
  return logger;
}

}  // namespace pto2
