// ptoctl's subcommands, one function each (ptoctl.cpp parses the command line
// and calls the one chosen). Each returns ptoctl's exit status; `json` is the
// global --json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pto/client.h"

namespace ptoctl {

inline constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnreachable = 3;

enum class RegisterKind { kChip, kImport, kBlob };

// One set for the three register subcommands: only one of them runs.
struct RegisterOptions {
  std::string path, symbol, name;
  bool orchestration = false;
  pto::client::Placement where;
};

struct UploadOptions {
  std::string path, name;
};

struct AllocOptions {
  std::vector<uint32_t> shape;
  std::string dtype_name = "float32";
  std::string name;
};

struct DownloadOptions {
  std::string tensor, out_file;
};

struct SubmitOptions {
  std::string callable;
  std::vector<std::string> targs;
  std::vector<uint64_t> scalars;
  std::vector<float> scalars_f32;
  int block_dim = 0;
  uint64_t timeout_ms = 0;   // per task (config.timeout_ms)
  uint32_t deadline_ms = 0;  // the whole job
  std::string priority;      // low | normal | high
  std::string label;
  bool detach = false;
  uint32_t count = 1;  // > 1: that many copies in one SubmitBatch call
  bool trace = false;  // config.enable_profiling: a swimlane trace (ptoctl trace)
  bool cancel_on_interrupt = false;  // Ctrl-C cancels the job (otherwise it goes on)
};

struct ResultOptions {
  uint64_t job = 0;
  uint32_t wait_ms = 0;
};

struct ExampleOptions {
  std::string config, name;
  int block_dim = 0;
  bool keep = false, trace = false;
  int instances = 1;
  std::string spread;
  pto::client::Placement where;
};

int cmd_register(pto::client::Client& c, RegisterKind kind, const RegisterOptions& o, bool json);
int cmd_unregister(pto::client::Client& c, const std::string& callable);
int cmd_callables(pto::client::Client& c, bool json);
int cmd_publish(pto::client::Client& c, const std::string& callable, bool published);

int cmd_upload(pto::client::Client& c, const UploadOptions& o, bool json);
int cmd_alloc(pto::client::Client& c, const AllocOptions& o, bool json);
int cmd_download(pto::client::Client& c, const DownloadOptions& o, bool json);
int cmd_free(pto::client::Client& c, const std::string& tensor);
int cmd_tensors(pto::client::Client& c, bool json);

int cmd_submit(pto::client::Client& c, const SubmitOptions& o, bool json);
int cmd_watch(pto::client::Client& c, uint64_t job, bool cancel_on_interrupt, bool json);
int cmd_cancel(pto::client::Client& c, uint64_t job);
int cmd_result(pto::client::Client& c, const ResultOptions& o, bool json);
// Where the commands' client talks to (named in the advice for UNAVAILABLE).
void set_daemon_address(const std::string& address);

struct JobsOptions {
  int limit = 50;
  std::string state;     // queued | running | succeeded | failed | cancelled
  std::string callable;  // a name, or a digest in hex
  std::string label;
  std::string since;     // a duration back from now: 90s, 10m, 2h, 1d
};
int cmd_jobs(pto::client::Client& c, const JobsOptions& o, bool json);

int cmd_workers(pto::client::Client& c, bool json);
int cmd_health(pto::client::Client& c, bool json);
int cmd_version(pto::client::Client& c, bool json);
int cmd_config(pto::client::Client& c, bool json);

int cmd_run_example(pto::client::Client& c, const ExampleOptions& o, bool json);

// A job's captured output to stdout (`follow`: until it ends); its trace into a file.
int cmd_logs(pto::client::Client& c, uint64_t job, bool follow);
int cmd_trace(pto::client::Client& c, uint64_t job, const std::string& out_file);

}  // namespace ptoctl
