#include "log.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include <map>
#include <mutex>

namespace ptod {
namespace {
std::mutex g_mu;
// Every logger writes to this one sink; reopening swaps what it forwards to
// under its own lock, so threads logging meanwhile are safe.
std::shared_ptr<spdlog::sinks::dist_sink_mt> g_sink = std::make_shared<spdlog::sinks::dist_sink_mt>();
bool g_configured = false;
spdlog::level::level_enum g_level = spdlog::level::info;
std::map<std::string, std::shared_ptr<spdlog::logger>> g_loggers;
}  // namespace

bool stderr_is_journal(const char* journal_stream, int stderr_fd) {
  if (journal_stream == nullptr || *journal_stream == '\0') return false;
  // "DEV:INODE", both decimal (systemd.exec(5), $JOURNAL_STREAM).
  char* colon = nullptr;
  char* end = nullptr;
  errno = 0;
  const unsigned long long dev = std::strtoull(journal_stream, &colon, 10);
  if (colon == journal_stream || *colon != ':') return false;
  const unsigned long long ino = std::strtoull(colon + 1, &end, 10);
  if (end == colon + 1 || *end != '\0' || errno == ERANGE) return false;
  struct stat st {};
  if (fstat(stderr_fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

pto::Status check_log_file(const std::string& file) {
  if (file.empty()) return pto::Status::Ok();
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& why) {
    return pto::Status::Error(pto::kInvalidConfig, fmt::format("[daemon] log_file '{}': {}", file, why));
  };
  std::error_code ec;
  const fs::path path(file);
  if (fs::exists(path, ec)) {
    if (fs::is_directory(path, ec)) return refuse("is a directory");
    if (::access(file.c_str(), W_OK) != 0) return refuse(fmt::format("cannot be written ({})", pto::errno_text(errno)));
    return pto::Status::Ok();
  }
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  while (!fs::exists(dir, ec)) {  // spdlog creates the missing ones
    const fs::path up = dir.parent_path();
    if (up == dir) break;
    dir = up.empty() ? fs::path(".") : up;  // a relative path: under the working directory
  }
  if (!fs::is_directory(dir, ec)) return refuse(fmt::format("'{}' is not a directory", dir.string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return refuse(fmt::format("cannot be created in '{}' ({})", dir.string(), pto::errno_text(errno)));
  return pto::Status::Ok();
}

pto::Status setup_logging(const std::string& level, const std::string& file, const std::string& target) {
  std::lock_guard<std::mutex> g(g_mu);
  spdlog::sink_ptr sink;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): ptod never changes its environment
  const char* journal_stream = std::getenv("JOURNAL_STREAM");
  const bool journal =
      file.empty() && (target == "journal" || (target == "auto" && stderr_is_journal(journal_stream, 2)));
  try {
    if (!file.empty())
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, false);
    else if (journal)
      sink = std::make_shared<spdlog::sinks::systemd_sink_mt>("ptod", true);
    else
      sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } catch (const spdlog::spdlog_ex& e) {
    return pto::Status::Error(pto::kInvalidConfig, std::string("log file: ") + e.what());
  }
  // The journal stamps and ranks each entry itself (PRIORITY from the level);
  // elsewhere a line carries its time with the zone, and its level.
  sink->set_pattern(journal ? "[%n] %v" : "%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ [%n] %v");
  g_sink->set_sinks({sink});
  g_configured = true;
  g_level = spdlog::level::from_str(level);
  for (auto& [name, l] : g_loggers) l->set_level(g_level);
  return pto::Status::Ok();
}

std::shared_ptr<spdlog::logger> log(const char* component) {
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_loggers.find(component);
  if (it != g_loggers.end()) return it->second;
  if (!g_configured) {
    auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    err->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ [%n] %v");
    g_sink->set_sinks({err});
    g_configured = true;
  }
  auto l = std::make_shared<spdlog::logger>(std::string("ptod.") + component, g_sink);
  l->set_level(g_level);
  g_loggers[component] = l;
  return l;
}

}  // namespace ptod
