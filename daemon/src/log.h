// ptod's loggers: one named spdlog logger per component ("ptod.jobs",
// "ptod.registry", ...), all writing to the same sink (stderr, which
// journald collects, or the configured log file). Lines carry the job, task
// and worker ids they concern.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "pto/base/status.h"

namespace ptod {

// Sets the sink and level for every component logger; a log file is opened
// in append mode. Called again (SIGHUP) it reopens the file.
pto::Status setup_logging(const std::string& level, const std::string& file);
std::shared_ptr<spdlog::logger> log(const char* component);

}  // namespace ptod
