// One named spdlog logger per runtime component (orchestrator, scheduler, ...).
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace pto2 {

// Returns the logger "pto2.<component>", creating it (stderr) on first use.
std::shared_ptr<spdlog::logger> component_logger(const std::string& component);

}  // namespace pto2
