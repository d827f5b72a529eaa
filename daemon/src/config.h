// ptod's configuration: a TOML file (/etc/ptod/ptod.toml by default; every
// key, its default and its rule are in docs/daemon.md) overridden by flags.
// A key the daemon does not know, or a value that breaks its rule, is a
// startup error naming it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <toml++/toml.h>
#include <vector>

#include "pto/base/status.h"

namespace ptod {

using Status = pto::Status;

struct DaemonConfig {
  // [server]
  std::string socket = "/run/ptod/ptod.sock";    // unix socket; "" = none
  std::vector<std::string> listen;               // TCP host:port; loopback unless TLS + token
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; client CA = verify client certificates
  std::string token_file;                        // bearer token for TCP listeners beyond loopback
  std::string tokens_file;                       // named tokens: "name role token" lines (docs/daemon.md, Principals)
  std::vector<std::string> admins;               // principals with the admin role (besides root and admin tokens)
  uint64_t max_message_bytes = 64ull << 20;
  uint32_t upload_idle_timeout_s = 30;  // an upload that sends nothing this long is dropped
  uint32_t write_stall_timeout_s = 60;  // a stream whose client reads nothing this long is cancelled
  // [worker]
  int level = 3;        // 3: chips and sub workers here; 4: L3 workers (local children and [[peers]])
  int l3_children = 0;  // level 4: local L3 children, each with `chips` chips and `sub_workers` sub workers
  int chips = 1;
  std::string platform = "a2a3sim";  // the chips' simulated chip: "a2a3sim" or "tx8sim" (docs/tx8sim.md)
  int sub_workers = 2;
  uint64_t heap_ring_bytes = 64ull << 20;
  uint64_t arena_bytes = 1ull << 30;
  uint64_t arena_warm_bytes = 256ull << 20;  // freed tensors' pages kept for the next uploads (docs/daemon.md)
  uint64_t task_timeout_ms = 600000;
  uint32_t spin_us = 500;                   // keeps children warm between jobs that follow each other (docs/daemon.md)
  uint32_t liveness_timeout_ms = 2000;      // a child or runner whose heartbeat stops this long is replaced
  uint32_t runner_load_timeout_ms = 10000;  // an orchestration library must load (in its runner) within this
  uint32_t runner_idle_ms = 10000;  // a runner kept warm for the next job of its library and principal (0 = fresh)
  uint32_t runner_max_idle = 4;     // warm runners kept at most
  // The CPUs of the chip and sub children ("" in the file: ptod's own CPUs);
  // apart from ptod's, spinning children leave its threads their CPUs.
  std::vector<int> child_cpus;
  // [session] (docs/remote.md): both ends of a remote L3 session
  uint32_t session_credits = 256;             // peer: tasks a coordinator may keep in flight
  uint32_t heartbeat_ms = 100;                // HEALTH period, both directions
  uint32_t dead_after_ms = 500;               // silence after which the other end is declared lost
  uint64_t inline_limit_bytes = 16ull << 20;  // coordinator: larger tensors must live in remote buffers
  // The bytes of tensors one session frame (a TASK frame, a completion) may
  // carry: max_message_bytes less room for the rest of the frame.
  static constexpr uint64_t kFrameHeadroom = 64ull << 10;
  // What a task or completion costs a frame beyond its own bytes: its field
  // tag and length prefix.
  static constexpr uint64_t kRepeatedOverhead = 6;
  uint64_t frame_budget() const { return max_message_bytes - kFrameHeadroom; }
  uint32_t peer_ready_timeout_ms = 5000;      // coordinator: startup waits this long for peers to be READY
  // [[peers]] (level 4): remote L3 daemons
  struct Peer {
    std::string address;  // host:port or unix:PATH
    std::string name;     // label; default = address
    int workers = 0;      // chips the peer is expected to report (0 = any); a mismatch refuses the session
    std::string token_file, tls_ca, tls_cert, tls_key, tls_server_name;
    std::string token;  // read from token_file by validate()
    // A peer at a unix: address: remote-buffer chunks go through its fd
    // socket (shared memfd pages) instead of the session's stream.
    bool fd_transfers = true;
  };
  std::vector<Peer> peers;
  // [jobs]
  uint32_t max_queued = 1024;
  uint32_t retain_finished = 1000;
  uint32_t max_running = 4;         // jobs in flight at once on the Worker (its max_concurrent_runs)
  uint32_t default_deadline_s = 0;  // a job without its own deadline_ms gets this one (0 = none)
  // What a job's tasks and orchestration write to stdout and stderr goes to
  // <state_dir>/logs/job-N.log (Jobs.Logs, ptoctl logs), kept while the job is retained.
  bool capture_output = true;
  // [daemon]
  std::string state_dir = "/var/lib/ptod";
  bool durable = false;  // fsync every acknowledged change: survives a power loss, not only a crash of ptod
  uint32_t drain_timeout_s = 30;
  std::vector<int> cpus;  // the CPUs of ptod's threads and runners ("" in the file: all it may use)
  // Freed memory ptod's allocator keeps for the next messages instead of
  // giving it back to the kernel (0: glibc's own thresholds); docs/daemon.md.
  uint64_t malloc_keep_bytes = 64ull << 20;
  // After this many seconds in which ptod's own threads used under 1% of a
  // CPU, the freed memory it kept goes back to the kernel, once per idle
  // spell (0: never); docs/daemon.md, "Memory ptod keeps".
  uint32_t malloc_idle_trim_s = 10;
  std::string log_level = "info";
  std::string log_file;  // "" = log_target decides
  // "auto": the journal (with priorities) when stderr is connected to it
  // (systemd's JOURNAL_STREAM), else stderr; "journal"; "stderr".
  std::string log_target = "auto";
  // [metrics]
  std::string metrics_listen = "127.0.0.1:9464";  // "" = off; loopback only
  // [security]
  bool allow_native_blob = false;
  bool allow_native_import = true;
  bool allow_chip_bundles = true;

  // [quotas]: per principal; 0 = no limit. The section's keys are the
  // default, [quotas.NAME] tables override them for one principal.
  struct Quota {
    uint64_t arena_bytes = 0;  // bytes of tensors held (uploaded, allocated, being uploaded)
    uint32_t queued_jobs = 0;  // jobs waiting to run
  };
  Quota default_quota;
  std::map<std::string, Quota> quotas;
  const Quota& quota_for(const std::string& principal) const {
    auto it = quotas.find(principal);
    return it == quotas.end() ? default_quota : it->second;
  }

  // The token's text (from token_file), read by load()/validate().
  std::string token;
  // The named tokens (from tokens_file), read by validate().
  struct NamedToken {
    std::string name;
    bool admin = false;
    std::string token;
  };
  std::vector<NamedToken> named_tokens;

  // Settings from the file (or text) over what *out holds; an unknown key or
  // a bad value is an error naming it.
  static Status load(const std::string& path, DaemonConfig* out);
  static Status parse(const std::string& text, const std::string& path, DaemonConfig* out);
  Status validate();
  std::string effective_toml() const;  // secrets redacted

 private:
  static Status from_table(const toml::table& doc, const std::string& path, DaemonConfig* out);
};

// "host:port" split; the error names the value.
Status split_host_port(const std::string& addr, std::string* host, int* port);
bool is_loopback_host(const std::string& host);
// A principal's name (a user, a token's name, a certificate's subject): 1..64
// of letters, digits and . _ - @ :.
Status check_principal_name(const std::string& name);

}  // namespace ptod
