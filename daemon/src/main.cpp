// ptod — the per-host daemon. Usage: ptod [--config FILE] [flags]; every
// config key is in docs/daemon.md. Exit status: 0 after a clean stop, 1 on a
// startup error (the message names the value), 2 on bad usage.
// --check-config validates and prints the effective configuration instead.
#include <absl/synchronization/mutex.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <tuple>

#include "daemon.h"
#include "log.h"
#include "pto/base/cpu_set.h"
#include "pto/version.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"ptod: the PTO runtime daemon (one Worker per host, level 3 or level 4 over peers, served over gRPC)"};
  std::string config_path = "/etc/ptod/ptod.toml";
  bool config_given = false;
  std::string socket, state_dir, metrics, log_level, log_file, token_file, tls_cert, tls_key;
  std::vector<std::string> listen;
  int chips = -1, subs = -1;
  std::string platform;
  std::string cpus, child_cpus;
  bool no_socket = false, allow_blob = false;
  ptod::RunOptions opts;
  app.add_option("-c,--config", config_path, "config file (TOML); default /etc/ptod/ptod.toml if it exists")
      ->each([&](const std::string&) { config_given = true; });
  app.add_option("--socket", socket, "unix socket path ([server] socket)");
  app.add_flag("--no-socket", no_socket, "do not listen on a unix socket");
  app.add_option("--listen", listen, "TCP listener host:port, repeatable ([server] listen); port 0 picks one");
  app.add_option("--state-dir", state_dir, "state directory ([daemon] state_dir)");
  app.add_option("--chips", chips, "simulated chips ([worker] chips)")->check(CLI::Range(0, 64));
  app.add_option("--platform", platform, "the chips' simulated chip: a2a3sim or tx8sim ([worker] platform)")
      ->check(CLI::IsMember({"a2a3sim", "tx8sim"}));
  app.add_option("--sub-workers", subs, "sub workers ([worker] sub_workers)")->check(CLI::Range(0, 64));
  CLI::Option* cpus_flag = app.add_option("--cpus", cpus, "CPUs of ptod's threads, e.g. 0 or 0-3,8 ([daemon] cpus)");
  CLI::Option* child_cpus_flag =
      app.add_option("--child-cpus", child_cpus, "CPUs of the chip and sub children ([worker] child_cpus)");
  app.add_option("--metrics", metrics, "metrics listener host:port, or 'off' ([metrics] listen)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off ([daemon] log_level)");
  app.add_option("--log-file", log_file, "log file instead of stderr ([daemon] log_file)");
  app.add_option("--token-file", token_file, "bearer token file ([server] token_file)");
  app.add_option("--tls-cert", tls_cert, "TLS certificate, PEM ([server] tls_cert)");
  app.add_option("--tls-key", tls_key, "TLS key, PEM ([server] tls_key)");
  app.add_flag("--allow-native-blob", allow_blob, "accept uploaded native libraries ([security] allow_native_blob)");
  app.add_option("--ready-file", opts.ready_file, "write grpc_port=, metrics_port=, socket=, pid= here once serving");
  bool check_config = false;
  app.add_flag("--check-config", check_config,
               "check the configuration (the file and the flags), print the effective one and exit: 0 valid, 1 not");
  app.set_version_flag("--version", "ptod " PTO_VERSION_STRING);
  CLI11_PARSE(app, argc, argv);

  ptod::DaemonConfig cfg;
  if (config_given || std::filesystem::exists(config_path)) {
    if (ptod::Status s = ptod::DaemonConfig::load(config_path, &cfg); !s.ok()) {
      std::fprintf(stderr, "ptod: %s\n", s.message.c_str());
      return 1;
    }
  }
  if (!socket.empty()) cfg.socket = socket;
  if (no_socket) cfg.socket.clear();
  if (!listen.empty()) cfg.listen = listen;
  if (!state_dir.empty()) cfg.state_dir = state_dir;
  if (chips >= 0) cfg.chips = chips;
  if (!platform.empty()) cfg.platform = platform;
  if (subs >= 0) cfg.sub_workers = subs;
  // "" sets no CPUs, as in the file.
  for (const auto& [flag, text, out] :
       {std::tuple{cpus_flag, &cpus, &cfg.cpus}, std::tuple{child_cpus_flag, &child_cpus, &cfg.child_cpus}})
    if (flag->count() > 0) {
      out->clear();
      if (ptod::Status s = text->empty() ? ptod::Status::Ok() : pto::parse_cpu_list(*text, out); !s.ok()) {
        std::fprintf(stderr, "ptod: %s: %s\n", flag->get_name().c_str(), s.message.c_str());
        return 1;
      }
    }
  if (!metrics.empty()) cfg.metrics_listen = metrics == "off" ? "" : metrics;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!log_file.empty()) cfg.log_file = log_file;
  if (!token_file.empty()) cfg.token_file = token_file;
  if (!tls_cert.empty()) cfg.tls_cert = tls_cert;
  if (!tls_key.empty()) cfg.tls_key = tls_key;
  if (allow_blob) cfg.allow_native_blob = true;
  if (check_config) {
    ptod::Status s = cfg.validate();
    // What the start opens that validate() cannot see: the log file.
    if (s.ok()) s = ptod::check_log_file(cfg.log_file);
    if (!s.ok()) {
      std::fprintf(stderr, "ptod: %s\n", s.message.c_str());
      return 1;
    }
    std::printf("%s", cfg.effective_toml().c_str());
    return 0;
  }
  return ptod::run_daemon(cfg, opts);
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's locks are absl::Mutex. Debian builds absl without NDEBUG, which
  // leaves its debug-only lock-order checking on: every lock taken records
  // an edge, under one process-wide lock, in a graph of all mutexes, and
  // every mutex destroyed is looked up in it. Upstream release builds do
  // not do that; nor does ptod.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A file-size limit (ulimit -f, systemd's LimitFSIZE=) or a file grown to
  // the file system's largest then fails the write with EFBIG, which the
  // state database and the tensor store report as errors (a job's end is
  // retried until its record is written), instead of killing the daemon and
  // every job with it. The processes that run user code put it back to its
  // default (worker/src/child.cpp, runner_process.cpp).
  std::signal(SIGXFSZ, SIG_IGN);
  // Startup errors are exit status 1 with a message; an exception that still
  // gets here (out of memory, a library's bug) is reported the same way
  // rather than as an abort.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptod: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "ptod: internal error\n");
  }
  return 1;
}
