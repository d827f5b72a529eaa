// The engine's logger ("pto.worker", spdlog): child deaths and replacements,
// killed children, start-up. Lines name the Worker (WorkerConfig::name) and
// the child ("chip 1").
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace pto {

std::shared_ptr<spdlog::logger> engine_log();

}  // namespace pto
