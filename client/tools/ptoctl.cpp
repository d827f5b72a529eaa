// ptoctl — the command line for ptod (docs/daemon.md, "ptoctl").
//
//   ptoctl [--address unix:/run/ptod/ptod.sock | host:port] [--json] COMMAND ...
//
// Exit status: 0 success; 1 the operation failed (a job failed, a check
// failed, the daemon refused the request); 2 bad usage; 3 the daemon could
// not be reached (unavailable or timed out).
//
// This file is the command line and the dispatch; the subcommands are in
// ptoctl_commands.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "progress.h"
#include "pto/base/freed_memory.h"
#include "pto/client.h"
#include "pto/version.h"
#include "ptoctl_commands.h"

using pto::client::Client;

namespace ptoctl {
namespace {

struct GlobalOptions {
  pto::client::ClientOptions client;
  std::string token_file;
  int timeout_s = 60;
  bool json = false;
};

// Every subcommand's values. CLI11 writes into them during the parse, so they
// live as long as main's app.
struct Options {
  RegisterOptions reg;
  std::string unregister_callable, publish_callable;
  bool publish_withdraw = false;
  UploadOptions upload;
  AllocOptions alloc;
  DownloadOptions download;
  std::string free_tensor;
  SubmitOptions submit;
  uint64_t watch_job = 0, cancel_job = 0;
  ResultOptions result;
  JobsOptions jobs;
  uint64_t logs_job = 0, trace_job = 0;
  bool watch_cancel = false;
  bool logs_follow = false;
  std::string trace_file;
  ExampleOptions example;
};

struct Command {
  CLI::App* sub;
  std::function<int(Client&, bool json)> run;
};
using Commands = std::vector<Command>;

void add_global_options(CLI::App& app, GlobalOptions& g) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once, before any thread
  if (const char* a = std::getenv("PTOD_ADDRESS"); a && *a) g.client.address = a;
  app.add_option("-a,--address", g.client.address, "daemon address: unix:/path or host:port (env PTOD_ADDRESS)")
      ->capture_default_str();
  app.add_flag("--json", g.json, "print replies as JSON (one object per line)");
  app.add_option("--token-file", g.token_file,
                 "file with a bearer token: required by TLS listeners; on any listener it names the principal (the "
                 "daemon's tokens_file)");
  auto* tls = app.add_flag("--tls", g.client.tls, "connect with TLS");
  // A TLS file that cannot be read is an error here: the client library
  // would fall back to the system roots, or send no certificate.
  app.add_option("--tls-ca", g.client.tls_ca, "PEM of the CA that signed the daemon's certificate")
      ->needs(tls)
      ->check(CLI::ExistingFile);
  auto* cert =
      app.add_option("--tls-cert", g.client.tls_cert, "client certificate (PEM), for daemons that verify clients")
          ->needs(tls)
          ->check(CLI::ExistingFile);
  auto* key = app.add_option("--tls-key", g.client.tls_key, "client key (PEM)")->needs(tls)->check(CLI::ExistingFile);
  cert->needs(key);
  key->needs(cert);
  // At least a second: 0 would make the fd socket's waits unbounded and
  // every gRPC call fail at once.
  app.add_option("--timeout", g.timeout_s, "seconds per call (at least 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 365 * 24 * 3600));
}

void add_callable_commands(CLI::App& app, Options& o, Commands& cmds) {
  auto* reg = app.add_subcommand("register", "register a callable: chip CONFIG | import LIB SYMBOL | blob LIB SYMBOL");
  reg->require_subcommand(1);
  auto* reg_chip = reg->add_subcommand("chip", "a chip callable: its kernel config and the libraries it names");
  reg_chip->add_option("config", o.reg.path, "kernels.toml")->required()->check(CLI::ExistingFile);
  auto* reg_import = reg->add_subcommand("import", "a native library already on the daemon's host");
  reg_import->add_option("library", o.reg.path)->required();
  reg_import->add_option("symbol", o.reg.symbol)->required();
  auto* reg_blob = reg->add_subcommand("blob", "a native library uploaded with the request");
  reg_blob->add_option("library", o.reg.path)->required()->check(CLI::ExistingFile);
  reg_blob->add_option("symbol", o.reg.symbol)->required();
  for (auto* s : {reg_chip, reg_import, reg_blob}) {
    s->add_option("-n,--name", o.reg.name, "a name to find it by");
    s->add_flag("--publish", o.reg.where.publish, "every principal may find and run it, not only its owners");
  }
  for (auto* s : {reg_import, reg_blob})
    s->add_flag("--orchestration", o.reg.orchestration, "an L3 orchestration entry");
  for (auto* s : {reg_chip, reg_import, reg_blob}) {
    s->add_option("--retries", o.reg.where.max_retries, "level 4: retries on another L3 worker after ENDPOINT_FAILURE");
    s->add_option("--peer", o.reg.where.peers, "level 4: register on this [[peers]] index (repeatable; default all)");
  }
  for (auto* s : {reg_import, reg_blob})
    s->add_flag("--next-level", o.reg.where.next_level,
                "level 4: the orchestration runs on the L3 workers, not in ptod");
  cmds.push_back({reg_chip, [&o](Client& c, bool json) { return cmd_register(c, RegisterKind::kChip, o.reg, json); }});
  cmds.push_back(
      {reg_import, [&o](Client& c, bool json) { return cmd_register(c, RegisterKind::kImport, o.reg, json); }});
  cmds.push_back({reg_blob, [&o](Client& c, bool json) { return cmd_register(c, RegisterKind::kBlob, o.reg, json); }});

  auto* unreg = app.add_subcommand("unregister", "remove a callable (name or digest)");
  unreg->add_option("callable", o.unregister_callable)->required();
  cmds.push_back({unreg, [&o](Client& c, bool) { return cmd_unregister(c, o.unregister_callable); }});
  auto* publish = app.add_subcommand("publish", "let every principal find and run a callable you own");
  publish->add_option("callable", o.publish_callable)->required();
  publish->add_flag("--withdraw", o.publish_withdraw, "only its owners (and admins) again");
  cmds.push_back({publish, [&o](Client& c, bool) { return cmd_publish(c, o.publish_callable, !o.publish_withdraw); }});
  cmds.push_back({app.add_subcommand("callables", "list registered callables"), cmd_callables});
}

void add_tensor_commands(CLI::App& app, Options& o, Commands& cmds) {
  auto* upload = app.add_subcommand("upload", "upload a .npy file as a tensor");
  upload->add_option("file", o.upload.path)->required()->check(CLI::ExistingFile);
  upload->add_option("-n,--name", o.upload.name);
  cmds.push_back({upload, [&o](Client& c, bool json) { return cmd_upload(c, o.upload, json); }});

  auto* alloc = app.add_subcommand("alloc", "allocate a zero tensor");
  alloc->add_option("--shape", o.alloc.shape)->required();
  alloc->add_option("--dtype", o.alloc.dtype_name)->capture_default_str();
  alloc->add_option("-n,--name", o.alloc.name);
  cmds.push_back({alloc, [&o](Client& c, bool json) { return cmd_alloc(c, o.alloc, json); }});

  auto* download = app.add_subcommand("download", "download a tensor (NAME or ID) to a .npy file");
  download->add_option("tensor", o.download.tensor)->required();
  download->add_option("-o,--output", o.download.out_file)->required();
  cmds.push_back({download, [&o](Client& c, bool json) { return cmd_download(c, o.download, json); }});

  auto* freet = app.add_subcommand("free", "free a tensor (NAME or ID)");
  freet->add_option("tensor", o.free_tensor)->required();
  cmds.push_back({freet, [&o](Client& c, bool) { return cmd_free(c, o.free_tensor); }});
  cmds.push_back({app.add_subcommand("tensors", "list tensors"), cmd_tensors});
}

void add_job_commands(CLI::App& app, Options& o, Commands& cmds) {
  auto* submit = app.add_subcommand("submit", "run a callable as a job: submit CALLABLE [TENSOR[:tag] ...]");
  submit->add_option("callable", o.submit.callable, "name or digest")->required();
  submit->add_option("args", o.submit.targs,
                     "tensor arguments in order: NAME[:in|out|inout|out_existing|nodep] or ID[:tag]");
  submit->add_option("-s,--scalar", o.submit.scalars, "a 64-bit scalar, repeatable, in order");
  submit->add_option("--scalar-f32", o.submit.scalars_f32, "a float32 scalar (after the --scalar ones)");
  submit->add_option("--block-dim", o.submit.block_dim, "chip clusters (0 = the callable's)");
  submit->add_option("--timeout-ms", o.submit.timeout_ms, "each task's time limit (0 = the daemon's task_timeout_ms)");
  submit->add_option("--deadline-ms", o.submit.deadline_ms,
                     "cancel the job once it has run this long (0 = the daemon's default_deadline_s)");
  submit->add_option("--priority", o.submit.priority, "low | normal | high (default normal)")
      ->check(CLI::IsMember({"low", "normal", "high"}));
  submit->add_option("--label", o.submit.label, "free text shown by 'ptoctl jobs'");
  submit->add_flag("--trace", o.submit.trace, "profile the chip run: fetch its trace with 'ptoctl trace JOB'");
  auto* cancel_on_interrupt =
      submit->add_flag("--cancel-on-interrupt", o.submit.cancel_on_interrupt,
                       "Ctrl-C cancels the job (without it the job goes on, and ptoctl says how to follow it)");
  auto* detach = submit->add_flag("-d,--detach", o.submit.detach, "print the job id and return");
  submit->add_option("--count", o.submit.count, "submit that many copies in one call (all queued or none)")
      ->check(CLI::Range(1, 10000));
  // A detached submit waits for no job: there would be nothing for Ctrl-C to
  // cancel (nor with --count above 1: checked after the parse).
  cancel_on_interrupt->excludes(detach);
  cmds.push_back({submit, [&o](Client& c, bool json) { return cmd_submit(c, o.submit, json); }});

  auto* watch = app.add_subcommand("watch", "follow a job to its end");
  watch->add_option("job", o.watch_job)->required();
  watch->add_flag("--cancel-on-interrupt", o.watch_cancel, "Ctrl-C cancels the job (without it the job goes on)");
  cmds.push_back({watch, [&o](Client& c, bool json) { return cmd_watch(c, o.watch_job, o.watch_cancel, json); }});

  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("job", o.cancel_job)->required();
  cmds.push_back({cancel, [&o](Client& c, bool) { return cmd_cancel(c, o.cancel_job); }});

  auto* result = app.add_subcommand("result", "a job's result");
  result->add_option("job", o.result.job)->required();
  result->add_option("--wait", o.result.wait_ms, "wait up to MS for it to end");
  cmds.push_back({result, [&o](Client& c, bool json) { return cmd_result(c, o.result, json); }});

  auto* jobs = app.add_subcommand("jobs", "recent jobs, newest first");
  jobs->add_option("--limit", o.jobs.limit, "the newest that pass the filters (0: the daemon's default)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  jobs->add_option("--state", o.jobs.state, "queued | running | succeeded | failed | cancelled")
      ->check(CLI::IsMember({"queued", "running", "succeeded", "failed", "cancelled"}));
  jobs->add_option("--callable", o.jobs.callable, "a callable's name (or digest)");
  jobs->add_option("--label", o.jobs.label, "the label given at submit");
  jobs->add_option("--since", o.jobs.since, "submitted within this long: 90s, 10m, 2h, 1d");
  cmds.push_back({jobs, [&o](Client& c, bool json) { return cmd_jobs(c, o.jobs, json); }});

  auto* logs = app.add_subcommand("logs", "what a job's tasks and orchestration wrote to stdout and stderr");
  logs->add_option("job", o.logs_job)->required();
  logs->add_flag("-f,--follow", o.logs_follow, "keep printing what the job writes until it ends");
  cmds.push_back({logs, [&o](Client& c, bool) { return cmd_logs(c, o.logs_job, o.logs_follow); }});

  auto* trace = app.add_subcommand("trace", "fetch a job's swimlane trace (submitted with --trace)");
  trace->add_option("job", o.trace_job)->required();
  trace->add_option("-o,--output", o.trace_file, "where to write it (Chrome trace JSON)")->required();
  cmds.push_back({trace, [&o](Client& c, bool) { return cmd_trace(c, o.trace_job, o.trace_file); }});
}

void add_daemon_commands(CLI::App& app, Commands& cmds) {
  cmds.push_back({app.add_subcommand("workers", "the worker tree and each node's state"), cmd_workers});
  cmds.push_back({app.add_subcommand("health", "the daemon's health (grpc.health.v1)"), cmd_health});
  cmds.push_back({app.add_subcommand("version", "the daemon's version and protocol"), cmd_version});
  cmds.push_back({app.add_subcommand("config", "the daemon's effective configuration"), cmd_config});
}

void add_example_command(CLI::App& app, Options& o, Commands& cmds) {
  auto* example = app.add_subcommand("run-example", "register an example, upload generated inputs, run, check outputs");
  example->add_option("config", o.example.config, "the example's kernels.toml")->required()->check(CLI::ExistingFile);
  example->add_option("-n,--name", o.example.name);
  example->add_option("--block-dim", o.example.block_dim);
  example->add_flag("--keep", o.example.keep, "keep the tensors on the daemon");
  example->add_flag("--trace", o.example.trace,
                    "profile the chip run; the daemon writes a swimlane trace and says where");
  example->add_option("--instances", o.example.instances, "independent instances (needs --spread)")
      ->capture_default_str();
  example->add_option("--spread", o.example.spread, "level 4: run the instances through this pto_spread orchestration");
  example->add_option("--retries", o.example.where.max_retries, "level 4: register the example retryable");
  cmds.push_back({example, [&o](Client& c, bool json) { return cmd_run_example(c, o.example, json); }});
}

// The options only known after the parse: the timeout and the bearer token.
bool finish_client_options(GlobalOptions& g) {
  g.client.timeout = std::chrono::seconds(g.timeout_s);
  if (g.token_file.empty()) return true;
  std::ifstream f(g.token_file);
  if (!f) {
    std::fprintf(stderr, "ptoctl: cannot read --token-file %s\n", g.token_file.c_str());
    return false;
  }
  std::string& token = g.client.token;
  std::getline(f, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {  // no token would be sent: the call would quietly run as the socket's user
    std::fprintf(stderr, "ptoctl: --token-file %s holds no token (its first line is empty)\n", g.token_file.c_str());
    return false;
  }
  return true;
}

int run(int argc, char** argv) {
  CLI::App app{"ptoctl: register callables, move tensors, run and watch jobs on a ptod daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ptoctl " PTO_VERSION_STRING);
  GlobalOptions global;
  add_global_options(app, global);
  Options o;
  Commands commands;
  add_callable_commands(app, o, commands);
  add_tensor_commands(app, o, commands);
  add_job_commands(app, o, commands);
  add_daemon_commands(app, commands);
  add_example_command(app, o, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (!finish_client_options(global)) return kExitUsage;
  set_daemon_address(global.client.address);
  Client c(global.client);
  for (const auto& cmd : commands)
    if (*cmd.sub) return cmd.run(c, global.json);
  return kExitUsage;
}

}  // namespace
}  // namespace ptoctl

int main(int argc, char** argv) {
  ptoctl::take_interrupts();  // before any other thread: Ctrl-C while a job is followed (progress.h)
  // A tensor's chunks through gRPC land in pages kept from the last chunk,
  // not faulted in afresh (docs/daemon.md, "Memory ptod keeps"). Only a
  // speed: a refusal leaves glibc's own thresholds.
  (void)pto::keep_freed_memory(64ull << 20);
  // Commands report failures as exit codes; an exception that still gets here
  // (out of memory, a library's bug) is reported, never an abort's core dump.
  try {
    return ptoctl::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptoctl: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "ptoctl: internal error\n");
  }
  return ptoctl::kExitFailed;
}
