// ptoctl's subcommands (ptoctl_commands.h); the command line is in ptoctl.cpp.
#include "ptoctl_commands.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <system_error>

#include "progress.h"
#include "pto/dtype.h"
#include "pto/package/chip_package.h"
#include "pto/package/example_data.h"
#include "pto/package/npy.h"

using pto::client::Client;
using pto::client::Status;
namespace v1 = pto::v1;

namespace ptoctl {
namespace {

int exit_for(const Status& s) {
  if (s.ok()) return kExitOk;
  const auto c = static_cast<grpc::StatusCode>(s.code);
  return c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::DEADLINE_EXCEEDED ? kExitUnreachable
                                                                                        : kExitFailed;
}

std::string g_address;  // the daemon's address, for advice when it cannot be reached

int report(const Status& s, const char* what) {
  std::fprintf(stderr, "ptoctl: %s: %s (%s)\n", what, s.message.c_str(), pto::client::status_code_name(s.code));
  if (static_cast<grpc::StatusCode>(s.code) == grpc::StatusCode::UNAVAILABLE) {
    const bool unix_socket = g_address.rfind("unix:", 0) == 0;
    std::fprintf(stderr,
                 "ptoctl: no daemon answered at %s. Is ptod running (systemctl status ptod)? The address comes from "
                 "--address or PTOD_ADDRESS.%s\n",
                 g_address.c_str(),
                 unix_socket ? " On the unix socket your user must be in the socket's group (ptod by default: "
                               "sudo usermod -aG ptod $USER, then log in again)."
                             : "");
  }
  return exit_for(s);
}

void print_json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = false;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  std::printf("%s\n", out.c_str());
}

std::string hex(const std::string& bytes) {
  std::string s;
  for (unsigned char c : bytes) s += fmt::format("{:02x}", c);
  return s;
}

v1::CallableRef callable_ref(const std::string& s) {
  v1::CallableRef r;
  if (s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos) {
    std::string d(32, '\0');
    for (int i = 0; i < 32; ++i) d[i] = static_cast<char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
    r.set_digest(d);
  } else {
    r.set_name(s);
  }
  return r;
}

// "NAME", or "ID" (digits: a tensor name is never only digits), or "#ID" as
// older versions printed it; false (and a message) when "#..." is not a number.
bool tensor_handle(const std::string& s, v1::TensorHandle* h) {
  const bool hashed = !s.empty() && s[0] == '#';
  const std::string digits = hashed ? s.substr(1) : s;
  const bool number =
      !digits.empty() && digits.size() <= 19 && digits.find_first_not_of("0123456789") == std::string::npos;
  if (hashed && !number) {
    std::fprintf(stderr, "ptoctl: '%s': a tensor id is a number\n", s.c_str());
    return false;
  }
  if (number)
    h->set_id(std::stoull(digits));
  else
    h->set_name(s);
  return true;
}

// "NAME[:tag]" or "ID[:tag]"; tags: in, out, inout, out_existing, nodep.
bool parse_arg(const std::string& s, v1::TaskArgs* args, std::string* err) {
  const auto colon = s.rfind(':');
  std::string t = s, tag = "in";
  if (colon != std::string::npos) {
    t = s.substr(0, colon);
    tag = s.substr(colon + 1);
  }
  static const std::map<std::string, v1::TensorTag> tags = {{"in", v1::INPUT},
                                                            {"out", v1::OUTPUT},
                                                            {"inout", v1::INOUT},
                                                            {"out_existing", v1::OUTPUT_EXISTING},
                                                            {"nodep", v1::NO_DEP}};
  auto it = tags.find(tag);
  if (t.empty() || it == tags.end()) {
    *err = fmt::format("argument '{}': expected NAME[:in|out|inout|out_existing|nodep] or ID[:tag]", s);
    return false;
  }
  if (!tensor_handle(t, args->add_tensors()->mutable_tensor())) {
    *err = fmt::format("argument '{}': bad tensor id", s);
    return false;
  }
  args->add_tags(it->second);
  return true;
}

int print_result(const v1::JobResult& r, bool json) {
  if (json) {
    print_json(r);
  } else {
    std::printf("job %llu %s: %llu tasks, %llu succeeded, %llu failed, %llu skipped%s; queued %.3f ms, ran %.3f ms\n",
                (unsigned long long)r.job_id(), v1::JobState_Name(r.state()).c_str(),
                (unsigned long long)r.tasks_submitted(), (unsigned long long)r.tasks_succeeded(),
                (unsigned long long)r.tasks_failed(), (unsigned long long)r.tasks_skipped(),
                r.tasks_stopped() ? fmt::format(", {} stopped", r.tasks_stopped()).c_str() : "", r.queued_ns() / 1e6,
                r.run_ns() / 1e6);
    if (!r.owner().empty()) std::printf("  owner %s, callable %s\n", r.owner().c_str(), r.callable().c_str());
    if (r.chip_tasks_submitted())
      std::printf("  chip tasks: %llu submitted, %llu completed\n", (unsigned long long)r.chip_tasks_submitted(),
                  (unsigned long long)r.chip_tasks_completed());
    if (!r.message().empty()) std::printf("  %s\n", r.message().c_str());
    if (!r.trace_path().empty())
      std::printf("  trace: ptoctl trace %llu -o job-%llu.json\n", (unsigned long long)r.job_id(),
                  (unsigned long long)r.job_id());
    if (r.has_first_failure() && r.tasks_failed())
      std::printf("  first failure: task %llu (%s) %s on %s: %s\n", (unsigned long long)r.first_failure().task_id(),
                  r.first_failure().callable().substr(0, 16).c_str(),
                  v1::Outcome_Name(r.first_failure().outcome()).c_str(), r.first_failure().worker().c_str(),
                  r.first_failure().message().c_str());
  }
  // Not ended yet (result without --wait) is not a failure.
  return r.state() == v1::FAILED || r.state() == v1::CANCELLED ? kExitFailed : kExitOk;
}

// upload and alloc answer alike.
void print_tensor_info(const v1::TensorInfo& t, bool json) {
  if (json)
    print_json(t);
  else
    std::printf("%llu %s %llu bytes (owner %s)\n", (unsigned long long)t.handle().id(), t.handle().name().c_str(),
                (unsigned long long)t.bytes(), t.owner().c_str());
}

void print_node(const v1::WorkerNode& n, int depth) {
  std::printf("%s%-10s level %d  %-8s pid %-7d tasks %-8llu restarts %u%s\n", std::string(2 * depth, ' ').c_str(),
              n.name().c_str(), n.level(), n.state().c_str(), n.pid(), (unsigned long long)n.tasks_run(), n.restarts(),
              n.platform().empty() ? "" : ("  " + n.platform()).c_str());
  for (const auto& c : n.children()) print_node(c, depth + 1);
}

}  // namespace

void set_daemon_address(const std::string& address) { g_address = address; }

int cmd_register(Client& c, RegisterKind kind, const RegisterOptions& o, bool json) {
  auto r = kind == RegisterKind::kChip     ? c.register_chip(o.path, o.name, o.where)
           : kind == RegisterKind::kImport ? c.register_import(o.path, o.symbol, o.name, o.orchestration, o.where)
                                           : c.register_blob(o.path, o.symbol, o.name, o.orchestration, o.where);
  if (!r.ok()) return report(r.status, "register");
  if (json)
    print_json(r.value);
  else
    std::printf("%s %s%s\n", hex(r.value.identity().digest()).c_str(), r.value.name().c_str(),
                r.value.existed() ? " (already registered)" : "");
  return kExitOk;
}

int cmd_unregister(Client& c, const std::string& callable) {
  Status s = c.unregister(callable_ref(callable));
  return s.ok() ? kExitOk : report(s, "unregister");
}

int cmd_publish(Client& c, const std::string& callable, bool published) {
  Status s = c.publish(callable_ref(callable), published);
  return s.ok() ? kExitOk : report(s, "publish");
}

namespace {
std::string owners_of(const v1::CallableInfo& ci) {
  std::string o;
  for (const auto& p : ci.owners()) o += (o.empty() ? "" : ",") + p;
  return o + (ci.published() ? " (published)" : "");
}
}  // namespace

int cmd_callables(Client& c, bool json) {
  auto r = c.callables();
  if (!r.ok()) return report(r.status, "callables");
  if (json) return print_json(r.value), kExitOk;
  std::printf("%-16s  %-14s %-17s %-16s %-24s %s\n", "DIGEST", "KIND", "ABI", "NAME", "OWNERS", "SOURCE");
  for (const auto& ci : r.value.callables())
    std::printf("%s  %-14s %-17s %-16s %-24s %s\n", hex(ci.identity().digest()).substr(0, 16).c_str(),
                v1::CallableKind_Name(ci.identity().kind()).c_str(), v1::EntryAbi_Name(ci.abi()).c_str(),
                ci.name().c_str(), owners_of(ci).c_str(), ci.source().c_str());
  return kExitOk;
}

int cmd_upload(Client& c, const UploadOptions& o, bool json) {
  pto::package::NpyArray arr;
  if (pto::Status s = pto::package::read_npy(o.path, &arr); !s.ok()) {
    std::fprintf(stderr, "ptoctl: %s\n", s.message.c_str());
    return kExitUsage;
  }
  int32_t dtype = -1;
  for (int32_t d = 0; d <= PTO_FLOAT64; ++d)
    if (pto::package::npy_descr(d) == arr.descr) dtype = d;
  if (dtype < 0) {
    std::fprintf(stderr, "ptoctl: %s: dtype %s is not supported\n", o.path.c_str(), arr.descr.c_str());
    return kExitUsage;
  }
  std::vector<uint32_t> sh;
  for (uint64_t dim : arr.shape) {
    if (dim > UINT32_MAX) {
      std::fprintf(stderr, "ptoctl: %s: dimension %llu is above 2^32-1\n", o.path.c_str(), (unsigned long long)dim);
      return kExitUsage;
    }
    sh.push_back(static_cast<uint32_t>(dim));
  }
  auto r = c.upload(o.name, sh, dtype, arr.data.data(), arr.data.size());
  if (!r.ok()) return report(r.status, "upload");
  print_tensor_info(r.value, json);
  if (!json) std::printf("  moved %s\n", c.fd_socket() ? "through the fd socket" : "over gRPC");
  return kExitOk;
}

int cmd_alloc(Client& c, const AllocOptions& o, bool json) {
  const int32_t dtype = pto::package::dtype_from_name(o.dtype_name);
  if (dtype < 0) {
    std::fprintf(stderr, "ptoctl: --dtype %s is unknown\n", o.dtype_name.c_str());
    return kExitUsage;
  }
  auto r = c.alloc(o.name, o.shape, dtype);
  if (!r.ok()) return report(r.status, "alloc");
  print_tensor_info(r.value, json);
  return kExitOk;
}

int cmd_download(Client& c, const DownloadOptions& o, bool json) {
  std::vector<uint8_t> data;
  v1::TensorHandle h;
  if (!tensor_handle(o.tensor, &h)) return kExitUsage;
  auto r = c.download(h, &data);
  if (!r.ok()) return report(r.status, "download");
  std::vector<uint64_t> sh(r.value.shape().begin(), r.value.shape().end());
  std::string descr = pto::package::npy_descr(r.value.dtype());
  if (static_cast<int32_t>(r.value.dtype()) == PTO_BFLOAT16) {  // numpy has no bfloat16
    descr = "<u2";
    std::fprintf(stderr, "ptoctl: %s is bfloat16, which numpy has not: written as its 16-bit patterns (<u2)\n",
                 o.out_file.c_str());
  }
  if (descr.empty()) {
    std::fprintf(stderr, "ptoctl: the tensor's dtype %d has no .npy type\n", static_cast<int>(r.value.dtype()));
    return kExitFailed;
  }
  if (pto::Status s = pto::package::write_npy(o.out_file, descr, sh, data.data(), data.size()); !s.ok()) {
    std::fprintf(stderr, "ptoctl: %s\n", s.message.c_str());
    return kExitFailed;
  }
  if (json)
    print_json(r.value);
  else
    std::printf("%s: %llu bytes, moved %s\n", o.out_file.c_str(), (unsigned long long)data.size(),
                c.fd_socket() ? "through the fd socket" : "over gRPC");
  return kExitOk;
}

int cmd_free(Client& c, const std::string& tensor) {
  v1::TensorHandle h;
  if (!tensor_handle(tensor, &h)) return kExitUsage;
  Status s = c.free(h);
  return s.ok() ? kExitOk : report(s, "free");
}

int cmd_tensors(Client& c, bool json) {
  auto r = c.tensors();
  if (!r.ok()) return report(r.status, "tensors");
  if (json) return print_json(r.value), kExitOk;
  std::printf("%-6s %-16s %-9s %-16s %s\n", "ID", "NAME", "DTYPE", "OWNER", "BYTES");
  for (const auto& t : r.value.tensors())
    std::printf("%-6llu %-16s %-9s %-16s %llu\n", (unsigned long long)t.handle().id(), t.handle().name().c_str(),
                v1::DataType_Name(t.dtype()).c_str(), t.owner().c_str(), (unsigned long long)t.bytes());
  std::printf("arena: %llu of %llu bytes in use\n", (unsigned long long)r.value.arena_in_use(),
              (unsigned long long)r.value.arena_bytes());
  return kExitOk;
}

namespace {

// `submit --count N`: N copies of one job in one SubmitBatch call; their ids
// (--detach), or once all ended a line per state.
int submit_copies(Client& c, const v1::SubmitRequest& req, const SubmitOptions& o, bool json) {
  v1::SubmitBatchRequest batch;
  for (uint32_t i = 0; i < o.count; ++i) *batch.add_jobs() = req;
  if (!o.detach) batch.set_wait_ms(24u * 3600 * 1000);  // the client's own deadline bounds it too
  auto r = c.submit_batch(batch);
  if (!r.ok()) return report(r.status, "submit");
  if (json) {
    print_json(r.value);
  } else if (o.detach) {
    for (const auto& j : r.value.jobs()) std::printf("%llu\n", (unsigned long long)j.job_id());
  }
  std::map<std::string, uint32_t> by_state;
  for (const auto& j : r.value.jobs()) ++by_state[v1::JobState_Name(j.state())];
  if (o.detach) return kExitOk;
  if (!json) {
    std::printf("%u jobs (%llu..%llu):", o.count, (unsigned long long)r.value.jobs(0).job_id(),
                (unsigned long long)r.value.jobs(r.value.jobs_size() - 1).job_id());
    for (const auto& [state, n] : by_state) std::printf(" %u %s", n, state.c_str());
    std::printf("\n");
  }
  return by_state.size() == 1 && by_state.count("SUCCEEDED") ? kExitOk : kExitFailed;
}

}  // namespace

int cmd_submit(Client& c, const SubmitOptions& o, bool json) {
  v1::SubmitRequest req;
  *req.mutable_callable() = callable_ref(o.callable);
  std::string err;
  for (const auto& a : o.targs)
    if (!parse_arg(a, req.mutable_args(), &err)) {
      std::fprintf(stderr, "ptoctl: %s\n", err.c_str());
      return kExitUsage;
    }
  for (uint64_t s : o.scalars) req.mutable_args()->add_scalars(s);
  for (float f : o.scalars_f32) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    req.mutable_args()->add_scalars(bits);
  }
  req.mutable_config()->set_block_dim(o.block_dim);
  req.mutable_config()->set_enable_profiling(o.trace);
  req.mutable_config()->set_timeout_ms(o.timeout_ms);
  req.set_deadline_ms(o.deadline_ms);
  req.set_label(o.label);
  req.set_priority(o.priority == "low"    ? v1::PRIORITY_LOW
                   : o.priority == "high" ? v1::PRIORITY_HIGH
                                          : v1::PRIORITY_NORMAL);
  if (o.count > 1) {
    if (o.cancel_on_interrupt) {  // it follows no single job: nothing for Ctrl-C to cancel
      std::fprintf(stderr, "ptoctl: --cancel-on-interrupt with --count %u: the copies are not followed\n", o.count);
      return kExitUsage;
    }
    return submit_copies(c, req, o, json);
  }
  if (o.detach) {
    auto r = c.submit(req);
    if (!r.ok()) return report(r.status, "submit");
    if (json)
      print_json(r.value);
    else
      std::printf("%llu\n", (unsigned long long)r.value.job_id());
    return kExitOk;
  }
  const Following following(0, c, o.cancel_on_interrupt);
  ProgressPrinter progress(json);
  auto r = c.run(req, std::ref(progress));
  if (!r.ok()) return report(r.status, "submit");
  return print_result(r.value, json);
}

int cmd_watch(Client& c, uint64_t job, bool cancel_on_interrupt, bool json) {
  const Following following(job, c, cancel_on_interrupt);
  ProgressPrinter progress(json);
  auto r = c.watch(job, std::ref(progress));
  if (!r.ok()) return report(r.status, "watch");
  return print_result(r.value, json);
}

int cmd_cancel(Client& c, uint64_t job) {
  auto r = c.cancel(job);
  if (!r.ok()) return report(r.status, "cancel");
  std::printf("job %llu %s\n", (unsigned long long)job, v1::JobState_Name(r.value).c_str());
  return kExitOk;
}

int cmd_result(Client& c, const ResultOptions& o, bool json) {
  auto r = c.result(o.job, o.wait_ms);
  if (!r.ok()) return report(r.status, "result");
  return print_result(r.value, json);
}

namespace {

// "90s", "10m", "2h", "1d" in milliseconds; false when it is none of these.
bool parse_duration_ms(const std::string& s, uint64_t* ms) {
  static const std::map<char, uint64_t> unit = {{'s', 1000}, {'m', 60000}, {'h', 3600000}, {'d', 86400000}};
  if (s.size() < 2 || s.size() > 12 || !unit.count(s.back()) || s.find_first_not_of("0123456789") != s.size() - 1)
    return false;  // at most 11 digits: no number that overflows (a stoull throw, or a wrapped product)
  *ms = std::stoull(s.substr(0, s.size() - 1)) * unit.at(s.back());
  return true;
}

}  // namespace

int cmd_jobs(Client& c, const JobsOptions& o, bool json) {
  v1::ListJobsRequest req;
  req.set_limit(static_cast<uint32_t>(o.limit));
  if (!o.state.empty()) {
    std::string upper = o.state;
    for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    v1::JobState st;
    if (v1::JobState_Parse(upper, &st)) req.set_state(st);
  }
  req.set_callable(o.callable);
  req.set_label(o.label);
  if (!o.since.empty()) {
    uint64_t back = 0;
    if (!parse_duration_ms(o.since, &back)) {
      std::fprintf(stderr,
                   "ptoctl: --since %s: a number of at most 11 digits and a unit, s, m, h or d (90s, 10m, 2h, 1d)\n",
                   o.since.c_str());
      return kExitUsage;
    }
    const auto now = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    req.set_since_ms(now > back ? now - back : 0);
  }
  auto r = c.jobs(req);
  if (!r.ok()) return report(r.status, "jobs");
  if (json) return print_json(r.value), kExitOk;
  std::printf("%-6s %-10s %-12s %-16s %-6s %-6s %-6s %11s  %s\n", "ID", "STATE", "OWNER", "CALLABLE", "PRIO", "TASKS",
              "FAILED", "RUN", "LABEL");
  for (const auto& j : r.value.jobs())
    std::printf("%-6llu %-10s %-12s %-16s %-6s %-6llu %-6llu %8.3f ms  %s\n", (unsigned long long)j.job_id(),
                v1::JobState_Name(j.state()).c_str(), j.owner().c_str(), j.callable().substr(0, 16).c_str(),
                j.priority() == v1::PRIORITY_HIGH  ? "high"
                : j.priority() == v1::PRIORITY_LOW ? "low"
                                                   : "normal",
                (unsigned long long)j.tasks_submitted(), (unsigned long long)j.tasks_failed(), j.run_ns() / 1e6,
                j.label().c_str());
  return kExitOk;
}

int cmd_workers(Client& c, bool json) {
  auto r = c.workers();
  if (!r.ok()) return report(r.status, "workers");
  if (json) return print_json(r.value), kExitOk;
  print_node(r.value.root(), 0);
  return kExitOk;
}

int cmd_health(Client& c, bool json) {
  auto r = c.health();
  if (!r.ok()) return report(r.status, "health");
  std::printf(json ? "{\"status\":\"%s\"}\n" : "%s\n", r.value.c_str());
  return r.value == "SERVING" ? kExitOk : kExitFailed;
}

int cmd_version(Client& c, bool json) {
  auto r = c.version();
  if (!r.ok()) return report(r.status, "version");
  if (json) return print_json(r.value), kExitOk;
  std::printf("ptod %s (protocol %s)\n", r.value.version().c_str(), r.value.protocol().c_str());
  return kExitOk;
}

int cmd_config(Client& c, bool json) {
  auto r = c.config();
  if (!r.ok()) return report(r.status, "config");
  if (json) return print_json(r.value), kExitOk;
  std::printf("%s", r.value.effective_toml().c_str());
  return kExitOk;
}

// run-example: the example's inputs generated as pto2-run does, uploaded; its
// outputs allocated; one job; outputs downloaded and compared with the
// reference library run here on the same inputs. With --spread ORCH (a
// level-4 daemon with the pto_spread orchestration registered under that
// name), `instances` independent instances run as one job spread over the
// daemon's L3 workers, and each is checked.
int cmd_run_example(Client& c, const ExampleOptions& o, bool json) {
  pto::package::ChipConfig cfg;
  if (pto::Status s = pto::package::ChipConfig::load(o.config, &cfg); !s.ok()) {
    std::fprintf(stderr, "ptoctl: %s\n", s.message.c_str());
    return kExitUsage;
  }
  const int instances = o.instances;
  if (instances < 1 || (instances > 1 && o.spread.empty())) {
    std::fprintf(stderr, "ptoctl: --instances %d: more than one instance needs --spread ORCHESTRATION\n", instances);
    return kExitUsage;
  }
  auto reg = c.register_chip(o.config, o.name, o.where);
  if (!reg.ok()) return report(reg.status, "register");
  if (!json)
    std::printf("registered %s as %s%s\n", o.config.c_str(), hex(reg.value.identity().digest()).substr(0, 16).c_str(),
                reg.value.existed() ? " (already known)" : "");
  std::mt19937_64 rng(cfg.seed);
  v1::SubmitRequest req;
  *req.mutable_callable() = callable_ref(o.spread.empty() ? hex(reg.value.identity().digest()) : o.spread);
  req.set_label("run-example " + std::filesystem::path(o.config).filename().string());
  req.mutable_config()->set_block_dim(o.block_dim);
  req.mutable_config()->set_enable_profiling(o.trace);
  const size_t n_args = cfg.args.size();
  std::vector<std::vector<uint8_t>> host(n_args * instances);
  std::vector<std::vector<uint64_t>> host_args(instances, std::vector<uint64_t>(n_args));
  std::vector<v1::TensorHandle> handles(n_args * instances);
  std::vector<uint64_t> scalars;
  uint64_t group = 0, out_mask = 0;
  auto cleanup = [&] {
    if (o.keep) return;
    for (const auto& h : handles)
      if (h.id()) (void)c.free(h);
  };
  for (int k = 0; k < instances; ++k)
    for (size_t i = 0; i < n_args; ++i) {
      const auto& a = cfg.args[i];
      const size_t slot = k * n_args + i;
      if (a.role == pto::package::ArgSpec::Role::kScalar) {
        if (k == 0) scalars.push_back(a.scalar);
        host_args[k][i] = a.scalar;
        continue;
      }
      if (k == 0) {
        if (a.writes()) out_mask |= uint64_t(1) << group;
        ++group;
      }
      std::vector<uint32_t> shape(a.shape.begin(), a.shape.end());
      pto::client::Result<v1::TensorInfo> t;
      if (a.reads()) {
        pto::package::generate_input(a, rng, host[slot]);
        t = c.upload("", shape, a.dtype, host[slot].data(), host[slot].size());
      } else {
        host[slot].assign(a.bytes(), 0);
        t = c.alloc("", shape, a.dtype);
      }
      if (!t.ok()) {
        cleanup();
        return report(t.status, a.reads() ? "upload" : "alloc");
      }
      handles[slot] = t.value.handle();
      host_args[k][i] = reinterpret_cast<uint64_t>(host[slot].data());
      auto* ref = req.mutable_args()->add_tensors();
      *ref->mutable_tensor() = t.value.handle();
      req.mutable_args()->add_tags(a.role == pto::package::ArgSpec::Role::kInout ? v1::INOUT
                                   : a.reads()                                   ? v1::INPUT
                                                                                 : v1::OUTPUT);
    }
  if (!o.spread.empty()) {  // pto_spread's scalars: digest, group size, output mask, the example's scalars
    const std::string& d = reg.value.identity().digest();
    for (int w = 0; w < 4; ++w) {
      uint64_t v = 0;
      std::memcpy(&v, d.data() + 8 * w, 8);
      req.mutable_args()->add_scalars(v);
    }
    req.mutable_args()->add_scalars(group);
    req.mutable_args()->add_scalars(out_mask);
  }
  for (uint64_t v : scalars) req.mutable_args()->add_scalars(v);
  const Following following(0, c, false);
  ProgressPrinter progress(json);
  auto run = c.run(req, std::ref(progress));
  if (!run.ok()) {
    cleanup();
    return report(run.status, "submit");
  }
  const int job_exit = print_result(run.value, json);
  if (job_exit != kExitOk) {
    cleanup();
    return job_exit;
  }
  bool pass = true;
  for (int k = 0; k < instances; ++k) {
    if (pto::Status s = pto::package::run_reference(cfg, host_args[k]); !s.ok()) {
      std::fprintf(stderr, "ptoctl: reference: %s\n", s.message.c_str());
      cleanup();
      return kExitFailed;
    }
    for (size_t i = 0; i < n_args; ++i) {
      const auto& a = cfg.args[i];
      if (!a.writes()) continue;
      std::vector<uint8_t> got;
      auto d = c.download(handles[k * n_args + i], &got);
      if (!d.ok()) {
        cleanup();
        return report(d.status, "download");
      }
      const auto cmp = pto::package::compare_output(a, got.data(), host[k * n_args + i].data());
      pass &= cmp.pass();
      std::printf("%s%s\n", instances > 1 ? fmt::format("instance {}: ", k).c_str() : "", cmp.describe(a).c_str());
    }
  }
  if (!run.value.trace_path().empty())
    std::printf("fetch the trace with: ptoctl trace %llu -o job-%llu.json (open it at https://ui.perfetto.dev)\n",
                (unsigned long long)run.value.job_id(), (unsigned long long)run.value.job_id());
  cleanup();
  return pass ? kExitOk : kExitFailed;
}

int cmd_logs(Client& c, uint64_t job, bool follow) {
  const Status s = c.logs(
      job,
      [](const std::string& chunk) {
        std::fwrite(chunk.data(), 1, chunk.size(), stdout);
        std::fflush(stdout);
      },
      follow);
  return s.ok() ? kExitOk : report(s, "logs");
}

int cmd_trace(Client& c, uint64_t job, const std::string& out_file) {
  // Written beside the target and renamed: a failed fetch leaves no half file.
  const std::string tmp = out_file + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "ptoctl: trace: cannot write %s: %s\n", tmp.c_str(),
                 std::error_code(errno, std::generic_category()).message().c_str());
    return kExitFailed;
  }
  uint64_t bytes = 0;
  bool write_ok = true;
  const Status s = c.trace(job, [&](const std::string& chunk) {
    write_ok = write_ok && std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size();
    bytes += chunk.size();
  });
  write_ok = std::fclose(f) == 0 && write_ok;
  if (!s.ok() || !write_ok) {
    std::remove(tmp.c_str());
    if (!s.ok()) return report(s, "trace");
    std::fprintf(stderr, "ptoctl: trace: writing %s failed\n", out_file.c_str());
    return kExitFailed;
  }
  if (std::rename(tmp.c_str(), out_file.c_str()) != 0) {
    std::fprintf(stderr, "ptoctl: trace: cannot rename to %s: %s\n", out_file.c_str(),
                 std::error_code(errno, std::generic_category()).message().c_str());
    std::remove(tmp.c_str());
    return kExitFailed;
  }
  std::printf("trace of job %llu: %llu bytes in %s (open it at https://ui.perfetto.dev)\n", (unsigned long long)job,
              (unsigned long long)bytes, out_file.c_str());
  return kExitOk;
}

}  // namespace ptoctl
