// ptod's configuration: a TOML file (/etc/ptod/ptod.toml by default; every
// key, its default and its rule are in docs/daemon.md) overridden by flags.
// A key the daemon does not know, or a value that breaks its rule, is a
// startup error naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pto2/errors.h"

namespace ptod {

using Status = pto2::Status;

struct DaemonConfig {
  // [server]
  std::string socket = "/run/ptod/ptod.sock";  // unix socket; "" = none
  std::vector<std::string> listen;             // TCP host:port; loopback unless TLS + token
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; client CA = verify client certificates
  std::string token_file;                      // bearer token for TCP listeners beyond loopback
  uint64_t max_message_bytes = 64ull << 20;
  // [worker]
  int chips = 1;
  int sub_workers = 2;
  uint64_t heap_ring_bytes = 64ull << 20;
  uint64_t arena_bytes = 1ull << 30;
  uint64_t task_timeout_ms = 600000;
  uint32_t spin_us = 500;  // keeps children warm between jobs that follow each other (docs/daemon.md)
  // [jobs]
  uint32_t max_queued = 1024;
  uint32_t retain_finished = 1000;
  // [daemon]
  std::string state_dir = "/var/lib/ptod";
  uint32_t drain_timeout_s = 30;
  std::string log_level = "info";
  std::string log_file;  // "" = stderr (journald under systemd)
  // [metrics]
  std::string metrics_listen = "127.0.0.1:9464";  // "" = off; loopback only
  // [security]
  bool allow_native_blob = false;
  bool allow_native_import = true;
  bool allow_chip_bundles = true;

  // The token's text (from token_file), read by load()/validate().
  std::string token;

  static Status load(const std::string& path, DaemonConfig* out);
  Status validate();
  std::string effective_toml() const;  // secrets redacted
};

// "host:port" split; the error names the value.
Status split_host_port(const std::string& addr, std::string* host, int* port);
bool is_loopback_host(const std::string& host);

}  // namespace ptod
