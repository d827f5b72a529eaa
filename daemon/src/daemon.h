// ptod: one level-3 Worker behind gRPC (docs/daemon.md). run_daemon() does
// the whole life: state directory, the Worker's children (forked before any
// thread exists), listeners, systemd notification, signals, drain, exit.
#pragma once

#include <string>

#include "config.h"

namespace ptod {

struct RunOptions {
  std::string ready_file;  // written after READY: grpc_port=N, metrics_port=M, socket=PATH
};

// Returns the process exit code: 0 after a clean drain, 1 on a startup error
// (printed to stderr, naming the value).
int run_daemon(DaemonConfig cfg, const RunOptions& opts);

}  // namespace ptod
