// ptod's loggers: one named spdlog logger per component ("ptod.jobs",
// "ptod.registry", ...), all writing to the same sink: the journal (each
// line with its priority, so `journalctl -p err` filters), stderr, or the
// configured log file. Lines carry the job, task and worker ids they concern.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "pto/base/status.h"

namespace ptod {

// Sets the sink and level for every component logger; a log file (when set)
// is opened in append mode, else `target` ("auto", "journal", "stderr")
// decides. Called again (SIGHUP) it reopens the file.
pto::Status setup_logging(const std::string& level, const std::string& file, const std::string& target);
// Whether this process could append to `file` as setup_logging would (the
// file, or the nearest directory of its path that exists, which spdlog
// creates the rest under): --check-config's look at [daemon] log_file.
pto::Status check_log_file(const std::string& file);

// Whether "auto" logs to the journal: systemd connected stderr to it (the
// JOURNAL_STREAM variable, "DEVICE:INODE", names stderr's file).
bool stderr_is_journal(const char* journal_stream, int stderr_fd);
std::shared_ptr<spdlog::logger> log(const char* component);

}  // namespace ptod
