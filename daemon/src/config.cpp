#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "pto/base/cpu_set.h"
#include "pto/base/freed_memory.h"
#include "pto/package/toml_input.h"

namespace ptod {
namespace {

Status bad(const std::string& what) { return Status::Error(pto::kInvalidConfig, what); }

template <class T>
Status read_int(const toml::table& t, const char* section, const char* key, T* out, int64_t lo, int64_t hi) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  // Only a TOML integer: toml++'s value<int64_t>() would convert a float,
  // with undefined behaviour when it is out of range.
  std::optional<int64_t> v;
  if (const auto* i = n->as_integer()) v = i->get();
  if (!v || *v < lo || *v > hi)
    return bad(fmt::format("[{}] {}: must be an integer in {}..{} (got {})", section, key, lo, hi,
                           v ? std::to_string(*v) : std::string("a non-integer")));
  *out = static_cast<T>(*v);
  return Status::Ok();
}

Status read_str(const toml::table& t, const char* section, const char* key, std::string* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  auto v = n->value<std::string>();
  if (!v) return bad(fmt::format("[{}] {}: must be a string", section, key));
  *out = *v;
  return Status::Ok();
}

// A CPU list ("0-3,8", as taskset writes it) or one CPU number; "" leaves
// the list empty (what effective_toml() writes for one not set).
Status read_cpus(const toml::table& t, const char* section, const char* key, std::vector<int>* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  std::string text;
  if (auto i = n->value<int64_t>())
    text = std::to_string(*i);
  else if (auto v = n->value<std::string>())
    text = *v;
  else
    return bad(fmt::format("[{}] {}: must be a CPU list such as \"1\" or \"0-3,8\"", section, key));
  out->clear();
  if (text.empty()) return Status::Ok();
  if (Status s = pto::parse_cpu_list(text, out); !s.ok())
    return bad(fmt::format("[{}] {}: {}", section, key, s.message));
  return Status::Ok();
}

Status read_bool(const toml::table& t, const char* section, const char* key, bool* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  auto v = n->value<bool>();
  if (!v) return bad(fmt::format("[{}] {}: must be true or false", section, key));
  *out = *v;
  return Status::Ok();
}

Status only_keys(const toml::table& t, const std::string& where, std::set<std::string> keys) {
  for (const auto& [k, v] : t)
    if (!keys.count(std::string(k.str())))
      return bad(fmt::format("{}: unknown key '{}' (known: {})", where, k.str(), fmt::join(keys, ", ")));
  return Status::Ok();
}

// A secret (a bearer token, a TLS private key) must be readable by its owner
// only, as ssh insists for its keys: a file that group or others can read or
// write is refused, naming the file and its mode.
Status check_secret_mode(const std::string& what, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return bad(fmt::format("{} '{}' cannot be read: {}", what, path, pto::errno_text(errno)));
  if ((st.st_mode & 077) != 0)
    return bad(
        fmt::format("{} '{}' is open to group or others (mode {:04o}): a secret must be readable by its owner "
                    "only (chmod 600 '{}')",
                    what, path, st.st_mode & 07777, path));
  return Status::Ok();
}

// The first line of a token file, trailing blanks removed; at least 16
// characters.
Status read_token(const std::string& what, const std::string& path, std::string* token) {
  if (Status s = check_secret_mode(what, path); !s.ok()) return s;
  std::ifstream f(path);
  if (!f) return bad(fmt::format("{} '{}' cannot be read", what, path));
  std::getline(f, *token);
  while (!token->empty() && (token->back() == '\r' || token->back() == ' ')) token->pop_back();
  if (token->size() < 16) return bad(fmt::format("{} '{}': the token must be at least 16 characters", what, path));
  return Status::Ok();
}

// "name role token" lines ('#' starts a comment): the principals that
// present a token. A name is a principal name (check_principal_name), a role
// "user" or "admin", a token at least 16 characters; names and tokens are
// unique.
Status read_named_tokens(const std::string& path, std::vector<DaemonConfig::NamedToken>* out) {
  if (Status s = check_secret_mode("[server] tokens_file", path); !s.ok()) return s;
  std::ifstream f(path);
  if (!f) return bad(fmt::format("[server] tokens_file '{}' cannot be read", path));
  out->clear();
  std::set<std::string> names, tokens;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream in(line);
    DaemonConfig::NamedToken t;
    std::string role, extra;
    if (!(in >> t.name)) continue;  // blank
    const std::string where = fmt::format("[server] tokens_file '{}' line {}", path, n);
    if (!(in >> role >> t.token) || (in >> extra)) return bad(where + ": expected three fields: name role token");
    if (Status s = check_principal_name(t.name); !s.ok()) return bad(where + ": " + s.message);
    if (role != "user" && role != "admin") return bad(fmt::format("{}: role '{}' is not user or admin", where, role));
    t.admin = role == "admin";
    if (t.token.size() < 16) return bad(where + ": the token must be at least 16 characters");
    if (!names.insert(t.name).second) return bad(fmt::format("{}: the name '{}' appears twice", where, t.name));
    if (!tokens.insert(t.token).second) return bad(where + ": this token is also another name's");
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

Status read_string_array(const toml::table& t, const char* section, const char* key, std::vector<std::string>* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::Ok();
  const toml::array* a = n->as_array();
  const std::string err = fmt::format("[{}] {}: must be an array of strings", section, key);
  if (!a) return bad(err);
  out->clear();
  for (const auto& e : *a) {
    auto v = e.value<std::string>();
    if (!v) return bad(err);
    out->push_back(*v);
  }
  return Status::Ok();
}

Status read_quota(const toml::table& t, const std::string& section, DaemonConfig::Quota* q) {
  Status s;
  if (s = read_int(t, section.c_str(), "arena_bytes", &q->arena_bytes, 0, int64_t(1) << 42); !s.ok()) return s;
  return read_int(t, section.c_str(), "queued_jobs", &q->queued_jobs, 0, 1 << 20);
}

// [quotas]: arena_bytes and queued_jobs for everyone; [quotas.NAME] for one
// principal (its unset keys take the section's).
Status read_quotas(const toml::table& t, DaemonConfig& c) {
  Status s;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (key == "arena_bytes" || key == "queued_jobs") continue;
    if (!v.as_table())
      return bad(
          fmt::format("[quotas]: unknown key '{}' (known: arena_bytes, queued_jobs, and [quotas.NAME] "
                      "tables for one principal)",
                      key));
    if (s = check_principal_name(key); !s.ok()) return bad("[quotas." + key + "]: " + s.message);
    if (s = only_keys(*v.as_table(), "[quotas." + key + "]", {"arena_bytes", "queued_jobs"}); !s.ok()) return s;
  }
  if (s = read_quota(t, "quotas", &c.default_quota); !s.ok()) return s;
  c.quotas.clear();
  for (const auto& [k, v] : t)
    if (const toml::table* sub = v.as_table()) {
      DaemonConfig::Quota q = c.default_quota;
      if (s = read_quota(*sub, "quotas." + std::string(k.str()), &q); !s.ok()) return s;
      c.quotas[std::string(k.str())] = q;
    }
  return Status::Ok();
}

}  // namespace

Status check_principal_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return bad(fmt::format("principal name '{}' must have 1..64 characters", name));
  for (char ch : name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' || ch == '@' ||
          ch == ':'))
      return bad(fmt::format("principal name '{}': only letters, digits and . _ - @ : are allowed", name));
  return Status::Ok();
}

Status split_host_port(const std::string& addr, std::string* host, int* port) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    return bad(fmt::format("listen address '{}' is not host:port", addr));
  *host = addr.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  try {
    size_t used = 0;
    *port = std::stoi(addr.substr(colon + 1), &used);
    if (used != addr.size() - colon - 1 || *port < 0 || *port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    return bad(fmt::format("listen address '{}': the port must be 0..65535", addr));
  }
  return Status::Ok();
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

Status DaemonConfig::load(const std::string& path, DaemonConfig* out) {
  toml::table doc;
  if (Status s = pto::package::parse_toml_file(path, &doc); !s.ok()) return bad(s.message);
  return from_table(doc, path, out);
}

Status DaemonConfig::parse(const std::string& text, const std::string& path, DaemonConfig* out) {
  toml::table doc;
  if (Status s = pto::package::parse_toml_text(text, path, &doc); !s.ok()) return bad(s.message);
  return from_table(doc, path, out);
}

namespace {

// One reader per section of ptod.toml: each checks its keys and ranges and
// fills its part of `c`.
Status read_server(const toml::table* t, DaemonConfig& c) {
  Status s;
  if (s = only_keys(*t, "[server]",
                    {"socket", "listen", "tls_cert", "tls_key", "tls_client_ca", "token_file", "tokens_file", "admins",
                     "max_message_bytes", "upload_idle_timeout_s", "write_stall_timeout_s"});
      !s.ok())
    return s;
  if (s = read_str(*t, "server", "socket", &c.socket); !s.ok()) return s;
  if (const toml::node* n = t->get("listen")) {
    const toml::array* a = n->as_array();
    if (!a) return bad("[server] listen: must be an array of \"host:port\" strings");
    c.listen.clear();
    for (const auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v) return bad("[server] listen: must be an array of \"host:port\" strings");
      c.listen.push_back(*v);
    }
  }
  if (s = read_str(*t, "server", "tls_cert", &c.tls_cert); !s.ok()) return s;
  if (s = read_str(*t, "server", "tls_key", &c.tls_key); !s.ok()) return s;
  if (s = read_str(*t, "server", "tls_client_ca", &c.tls_client_ca); !s.ok()) return s;
  if (s = read_str(*t, "server", "token_file", &c.token_file); !s.ok()) return s;
  if (s = read_str(*t, "server", "tokens_file", &c.tokens_file); !s.ok()) return s;
  if (s = read_string_array(*t, "server", "admins", &c.admins); !s.ok()) return s;
  for (const std::string& a : c.admins)
    if (s = check_principal_name(a); !s.ok()) return bad("[server] admins: " + s.message);
  if (s = read_int(*t, "server", "max_message_bytes", &c.max_message_bytes, 65536, (int64_t(1) << 31) - 1); !s.ok())
    return s;
  if (s = read_int(*t, "server", "upload_idle_timeout_s", &c.upload_idle_timeout_s, 1, 3600); !s.ok()) return s;
  if (s = read_int(*t, "server", "write_stall_timeout_s", &c.write_stall_timeout_s, 1, 3600); !s.ok()) return s;
  return Status::Ok();
}

Status read_worker(const toml::table* t, DaemonConfig& c) {
  Status s;
  if (s = only_keys(*t, "[worker]",
                    {"level", "l3_children", "chips", "platform", "sub_workers", "heap_ring_bytes", "arena_bytes",
                     "arena_warm_bytes", "task_timeout_ms", "spin_us", "liveness_timeout_ms", "runner_load_timeout_ms",
                     "runner_idle_ms", "runner_max_idle", "child_cpus"});
      !s.ok())
    return s;
  if (s = read_int(*t, "worker", "level", &c.level, 3, 4); !s.ok()) return s;
  if (s = read_int(*t, "worker", "l3_children", &c.l3_children, 0, 16); !s.ok()) return s;
  if (s = read_int(*t, "worker", "chips", &c.chips, 0, 64); !s.ok()) return s;
  if (s = read_str(*t, "worker", "platform", &c.platform); !s.ok()) return s;
  if (c.platform != "a2a3sim" && c.platform != "tx8sim")
    return bad(fmt::format("[worker] platform = '{}': must be \"a2a3sim\" or \"tx8sim\"", c.platform));
  if (s = read_int(*t, "worker", "sub_workers", &c.sub_workers, 0, 64); !s.ok()) return s;
  if (s = read_int(*t, "worker", "heap_ring_bytes", &c.heap_ring_bytes, 4096, int64_t(1) << 40); !s.ok()) return s;
  if (s = read_int(*t, "worker", "arena_bytes", &c.arena_bytes, 4096, int64_t(1) << 42); !s.ok()) return s;
  if (s = read_int(*t, "worker", "arena_warm_bytes", &c.arena_warm_bytes, 0, int64_t(1) << 42); !s.ok()) return s;
  if (s = read_int(*t, "worker", "task_timeout_ms", &c.task_timeout_ms, 0, int64_t(1) << 40); !s.ok()) return s;
  if (s = read_int(*t, "worker", "spin_us", &c.spin_us, 0, 100000); !s.ok()) return s;
  if (s = read_int(*t, "worker", "liveness_timeout_ms", &c.liveness_timeout_ms, 0, 600000); !s.ok()) return s;
  if (c.liveness_timeout_ms != 0 && c.liveness_timeout_ms < 200)
    return bad(
        fmt::format("[worker] liveness_timeout_ms = {}: at least 200 (children beat every 100 ms), or 0 "
                    "for no check",
                    c.liveness_timeout_ms));
  if (s = read_int(*t, "worker", "runner_load_timeout_ms", &c.runner_load_timeout_ms, 1, 600000); !s.ok()) return s;
  if (s = read_int(*t, "worker", "runner_idle_ms", &c.runner_idle_ms, 0, 3600000); !s.ok()) return s;
  if (s = read_int(*t, "worker", "runner_max_idle", &c.runner_max_idle, 1, 64); !s.ok()) return s;
  if (s = read_cpus(*t, "worker", "child_cpus", &c.child_cpus); !s.ok()) return s;
  return Status::Ok();
}

Status read_session(const toml::table* t, DaemonConfig& c) {
  Status s;
  if (s = only_keys(*t, "[session]",
                    {"credits", "heartbeat_ms", "dead_after_ms", "inline_limit_bytes", "peer_ready_timeout_ms"});
      !s.ok())
    return s;
  if (s = read_int(*t, "session", "credits", &c.session_credits, 1, 65536); !s.ok()) return s;
  if (s = read_int(*t, "session", "heartbeat_ms", &c.heartbeat_ms, 10, 60000); !s.ok()) return s;
  if (s = read_int(*t, "session", "dead_after_ms", &c.dead_after_ms, 20, 600000); !s.ok()) return s;
  if (s = read_int(*t, "session", "inline_limit_bytes", &c.inline_limit_bytes, 0, int64_t(1) << 30); !s.ok()) return s;
  if (s = read_int(*t, "session", "peer_ready_timeout_ms", &c.peer_ready_timeout_ms, 1, 600000); !s.ok()) return s;
  return Status::Ok();
}

Status read_peers(const toml::node* n, const std::string& path, DaemonConfig& c) {
  Status s;
  const toml::array* a = n->as_array();
  if (!a) return bad(fmt::format("{}: peers must be an array of tables ([[peers]])", path));
  c.peers.clear();
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::table* t = (*a)[i].as_table();
    const std::string where = fmt::format("[[peers]] #{}", i);
    if (!t) return bad(where + ": must be a table");
    if (s = only_keys(*t, where,
                      {"address", "name", "workers", "token_file", "tls_ca", "tls_cert", "tls_key", "tls_server_name",
                       "fd_transfers"});
        !s.ok())
      return s;
    DaemonConfig::Peer p;
    const std::string sec = "peers #" + std::to_string(i);
    if (s = read_str(*t, sec.c_str(), "address", &p.address); !s.ok()) return s;
    if (s = read_str(*t, sec.c_str(), "name", &p.name); !s.ok()) return s;
    if (s = read_int(*t, sec.c_str(), "workers", &p.workers, 0, 64); !s.ok()) return s;
    if (s = read_bool(*t, sec.c_str(), "fd_transfers", &p.fd_transfers); !s.ok()) return s;
    for (auto [key, dst] : {std::pair{"token_file", &p.token_file},
                            {"tls_ca", &p.tls_ca},
                            {"tls_cert", &p.tls_cert},
                            {"tls_key", &p.tls_key},
                            {"tls_server_name", &p.tls_server_name}})
      if (s = read_str(*t, sec.c_str(), key, dst); !s.ok()) return s;
    c.peers.push_back(p);
  }
  return Status::Ok();
}

Status read_jobs_daemon_metrics_security(const toml::table& doc, DaemonConfig& c) {
  auto section = [&](const char* name) -> const toml::table* { return doc[name].as_table(); };
  Status s;
  if (const toml::table* t = section("jobs")) {
    if (s = only_keys(*t, "[jobs]",
                      {"max_queued", "retain_finished", "max_running", "default_deadline_s", "capture_output"});
        !s.ok())
      return s;
    if (s = read_int(*t, "jobs", "max_queued", &c.max_queued, 1, 1 << 20); !s.ok()) return s;
    if (s = read_int(*t, "jobs", "retain_finished", &c.retain_finished, 1, 1 << 20); !s.ok()) return s;
    if (s = read_int(*t, "jobs", "max_running", &c.max_running, 1, 64); !s.ok()) return s;
    if (s = read_int(*t, "jobs", "default_deadline_s", &c.default_deadline_s, 0, 30 * 86400); !s.ok()) return s;
    if (s = read_bool(*t, "jobs", "capture_output", &c.capture_output); !s.ok()) return s;
  }
  if (const toml::table* t = section("daemon")) {
    if (s = only_keys(*t, "[daemon]",
                      {"state_dir", "durable", "drain_timeout_s", "cpus", "malloc_keep_bytes", "malloc_idle_trim_s",
                       "log_level", "log_file", "log_target"});
        !s.ok())
      return s;
    if (s = read_str(*t, "daemon", "state_dir", &c.state_dir); !s.ok()) return s;
    if (s = read_bool(*t, "daemon", "durable", &c.durable); !s.ok()) return s;
    if (s = read_int(*t, "daemon", "drain_timeout_s", &c.drain_timeout_s, 0, 86400); !s.ok()) return s;
    if (s = read_cpus(*t, "daemon", "cpus", &c.cpus); !s.ok()) return s;
    if (s = read_int(*t, "daemon", "malloc_keep_bytes", &c.malloc_keep_bytes, 0, int64_t(1) << 30); !s.ok()) return s;
    if (c.malloc_keep_bytes != 0 && c.malloc_keep_bytes < pto::kMinFreedMemoryKept)
      return bad(
          fmt::format("[daemon] malloc_keep_bytes: must be 0 or in {}..{} (got {}): less would keep fewer pages "
                      "than glibc's own thresholds",
                      pto::kMinFreedMemoryKept, int64_t(1) << 30, c.malloc_keep_bytes));
    if (s = read_int(*t, "daemon", "malloc_idle_trim_s", &c.malloc_idle_trim_s, 0, 86400); !s.ok()) return s;
    if (s = read_str(*t, "daemon", "log_level", &c.log_level); !s.ok()) return s;
    if (s = read_str(*t, "daemon", "log_file", &c.log_file); !s.ok()) return s;
    if (s = read_str(*t, "daemon", "log_target", &c.log_target); !s.ok()) return s;
  }
  if (const toml::table* t = section("metrics")) {
    if (s = only_keys(*t, "[metrics]", {"listen"}); !s.ok()) return s;
    if (s = read_str(*t, "metrics", "listen", &c.metrics_listen); !s.ok()) return s;
  }
  if (const toml::table* t = section("quotas")) {
    if (s = read_quotas(*t, c); !s.ok()) return s;
  }
  if (const toml::table* t = section("security")) {
    if (s = only_keys(*t, "[security]", {"allow_native_blob", "allow_native_import", "allow_chip_bundles"}); !s.ok())
      return s;
    if (s = read_bool(*t, "security", "allow_native_blob", &c.allow_native_blob); !s.ok()) return s;
    if (s = read_bool(*t, "security", "allow_native_import", &c.allow_native_import); !s.ok()) return s;
    if (s = read_bool(*t, "security", "allow_chip_bundles", &c.allow_chip_bundles); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Status DaemonConfig::from_table(const toml::table& doc, const std::string& path, DaemonConfig* out) {
  DaemonConfig c = *out;
  if (Status s = only_keys(doc, path,
                           {"server", "worker", "session", "peers", "jobs", "daemon", "metrics", "quotas", "security"});
      !s.ok())
    return s;
  for (const char* name : {"server", "worker", "session", "jobs", "daemon", "metrics", "quotas", "security"})
    if (doc.get(name) && !doc[name].as_table()) return bad(fmt::format("{}: [{}] must be a table", path, name));
  Status s;
  if (const toml::table* t = doc["server"].as_table()) {
    if (s = read_server(t, c); !s.ok()) return s;
  }
  if (const toml::table* t = doc["worker"].as_table()) {
    if (s = read_worker(t, c); !s.ok()) return s;
  }
  if (const toml::table* t = doc["session"].as_table()) {
    if (s = read_session(t, c); !s.ok()) return s;
  }
  if (const toml::node* n = doc.get("peers")) {
    if (s = read_peers(n, path, c); !s.ok()) return s;
  }
  if (s = read_jobs_daemon_metrics_security(doc, c); !s.ok()) return s;
  *out = c;
  return Status::Ok();
}

Status DaemonConfig::validate() {
  static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (!levels.count(log_level))
    return bad(fmt::format("log_level '{}' is not one of trace, debug, info, warn, error, critical, off", log_level));
  if (log_target != "auto" && log_target != "journal" && log_target != "stderr")
    return bad(fmt::format("[daemon] log_target '{}' is not one of auto, journal, stderr", log_target));
  if (socket.empty() && listen.empty()) return bad("no listener: set [server] socket and/or listen");
  // Against the CPUs this host lets ptod be placed on (online, in its
  // cpuset; a narrower mask it was started with does not count: its
  // children may leave it), before run_daemon() places it: a CPU that is
  // not there is named here, not by a child that fails to start.
  if (!cpus.empty() || !child_cpus.empty()) {
    const std::vector<int> usable = pto::available_cpus();
    for (const auto& [list, key] : {std::pair{&cpus, "[daemon] cpus"}, std::pair{&child_cpus, "[worker] child_cpus"}}) {
      std::vector<int> missing;
      std::set_difference(list->begin(), list->end(), usable.begin(), usable.end(), std::back_inserter(missing));
      if (!missing.empty())
        return bad(
            fmt::format("{} = \"{}\": CPU {} not available here (offline, or outside ptod's cpuset; CPUs "
                        "available here: {})",
                        key, pto::format_cpu_list(*list), pto::format_cpu_list(missing), pto::format_cpu_list(usable)));
    }
  }
  if (state_dir.empty()) return bad("[daemon] state_dir must not be empty");
  // A job's log path ("<state_dir>/logs/job-<id>.log") travels in a child's
  // mailbox, 255 bytes at most.
  if (capture_output && state_dir.size() > 200)
    return bad(
        fmt::format("[daemon] state_dir is {} bytes: at most 200 while [jobs] capture_output is on (a job's "
                    "log path must fit a child's mailbox)",
                    state_dir.size()));
  if ((tls_cert.empty()) != (tls_key.empty())) return bad("[server] tls_cert and tls_key go together");
  if (!tls_client_ca.empty() && tls_cert.empty()) return bad("[server] tls_client_ca needs tls_cert and tls_key");
  token.clear();
  if (!token_file.empty())
    if (Status s = read_token("[server] token_file", token_file, &token); !s.ok()) return s;
  if (!tls_key.empty())
    if (Status s = check_secret_mode("[server] tls_key", tls_key); !s.ok()) return s;
  named_tokens.clear();
  if (!tokens_file.empty())
    if (Status s = read_named_tokens(tokens_file, &named_tokens); !s.ok()) return s;
  for (const NamedToken& t : named_tokens)
    if (!token.empty() && t.token == token)
      return bad(fmt::format("[server] tokens_file: the token of '{}' is also [server] token_file's", t.name));
  for (const std::string& a : listen) {
    std::string host;
    int port = 0;
    if (Status s = split_host_port(a, &host, &port); !s.ok()) return s;
    if (!is_loopback_host(host) && (tls_cert.empty() || (token.empty() && named_tokens.empty())))
      return bad(
          fmt::format("listen address '{}' is not loopback: it needs TLS ([server] tls_cert, tls_key) and "
                      "bearer tokens ([server] token_file or tokens_file)",
                      a));
  }
  if (level != 3 && level != 4) return bad(fmt::format("[worker] level {} is not 3 or 4", level));
  if (level == 3 && (l3_children > 0 || !peers.empty()))
    return bad("[worker] l3_children and [[peers]] need level = 4 (a level-3 daemon runs chips itself)");
  if (level == 4 && l3_children == 0 && peers.empty())
    return bad("[worker] level = 4 needs l3_children > 0 or at least one [[peers]] entry");
  if (dead_after_ms <= heartbeat_ms)
    return bad(fmt::format("[session] dead_after_ms {} must exceed heartbeat_ms {}", dead_after_ms, heartbeat_ms));
  for (size_t i = 0; i < peers.size(); ++i) {
    Peer& p = peers[i];
    const std::string where = fmt::format("[[peers]] #{} ({})", i, p.address);
    if (p.address.empty()) return bad(where + ": address is required (host:port or unix:PATH)");
    if (p.name.empty()) p.name = p.address;
    if ((p.tls_cert.empty()) != (p.tls_key.empty())) return bad(where + ": tls_cert and tls_key go together");
    if (!p.tls_cert.empty() && p.tls_ca.empty()) return bad(where + ": a client certificate needs tls_ca");
    p.token.clear();
    if (!p.token_file.empty())
      if (Status s = read_token(where + ": token_file", p.token_file, &p.token); !s.ok()) return s;
    if (!p.tls_key.empty())
      if (Status s = check_secret_mode(where + ": tls_key", p.tls_key); !s.ok()) return s;
    if (p.address.rfind("unix:", 0) == 0) continue;
    std::string host;
    int port = 0;
    if (Status s = split_host_port(p.address, &host, &port); !s.ok()) return bad(where + ": " + s.message);
    if (port == 0) return bad(where + ": the port must not be 0");
    if (!is_loopback_host(host) && (p.tls_ca.empty() || p.token.empty()))
      return bad(where + ": a peer beyond loopback needs TLS (tls_ca) and a token (token_file)");
  }
  if (!metrics_listen.empty()) {
    std::string host;
    int port = 0;
    if (Status s = split_host_port(metrics_listen, &host, &port); !s.ok()) return bad("[metrics] " + s.message);
    if (!is_loopback_host(host))
      return bad(fmt::format("[metrics] listen '{}' must be a loopback address", metrics_listen));
  }
  return Status::Ok();
}

std::string DaemonConfig::effective_toml() const {
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  std::string l;
  for (size_t i = 0; i < listen.size(); ++i) l += (i ? ", " : "") + q(listen[i]);
  std::string admin_list;
  for (size_t i = 0; i < admins.size(); ++i) admin_list += (i ? ", " : "") + q(admins[i]);
  std::string tail = fmt::format(
      "\n[session]\ncredits = {}\nheartbeat_ms = {}\ndead_after_ms = {}\ninline_limit_bytes = {}\n"
      "peer_ready_timeout_ms = {}\n",
      session_credits, heartbeat_ms, dead_after_ms, inline_limit_bytes, peer_ready_timeout_ms);
  tail += fmt::format("\n[quotas]\narena_bytes = {}\nqueued_jobs = {}\n", default_quota.arena_bytes,
                      default_quota.queued_jobs);
  for (const auto& [name, qt] : quotas)
    tail += fmt::format("\n[quotas.{}]\narena_bytes = {}\nqueued_jobs = {}\n", q(name), qt.arena_bytes, qt.queued_jobs);
  for (const Peer& p : peers)
    tail += fmt::format(
        "\n[[peers]]\naddress = {}\nname = {}\nworkers = {}\ntoken_file = {}\ntls_ca = {}\nfd_transfers = {}\n",
        q(p.address), q(p.name), p.workers, q(p.token_file.empty() ? "" : "(set)"), q(p.tls_ca), p.fd_transfers);
  return tail.insert(
      0,
      fmt::format(
          "[server]\nsocket = {}\nlisten = [{}]\ntls_cert = {}\ntls_key = {}\ntls_client_ca = {}\ntoken_file = {}\n"
          "tokens_file = {}\nadmins = [{}]\nmax_message_bytes = {}\nupload_idle_timeout_s = {}\nwrite_stall_timeout_s "
          "= {}\n\n[worker]\nlevel = "
          "{}\nl3_children = {}\nchips = {}\nplatform = {}\nsub_workers = "
          "{}\nheap_ring_bytes = {}\narena_bytes = {}\narena_warm_bytes = {}\n"
          "task_timeout_ms = {}\nspin_us = {}\nliveness_timeout_ms = {}\nrunner_load_timeout_ms = {}\n"
          "runner_idle_ms = {}\nrunner_max_idle = {}\nchild_cpus = {}\n\n[jobs]\n"
          "max_queued = {}\nretain_finished = {}\nmax_running = {}\ndefault_deadline_s = {}\ncapture_output = {}\n\n"
          "[daemon]\n"
          "state_dir = {}\ndurable = {}\ndrain_timeout_s = {}\ncpus = {}\nmalloc_keep_bytes = {}\nmalloc_idle_trim_s = "
          "{}\nlog_level = "
          "{}\nlog_file = {}\nlog_target = "
          "{}\n\n[metrics]\nlisten = "
          "{}\n\n"
          "[security]\nallow_native_blob = {}\nallow_native_import = {}\nallow_chip_bundles = {}\n",
          q(socket), l, q(tls_cert), q(tls_key), q(tls_client_ca), q(token_file.empty() ? "" : "(set)"), q(tokens_file),
          admin_list, max_message_bytes, upload_idle_timeout_s, write_stall_timeout_s, level, l3_children, chips,
          q(platform), sub_workers, heap_ring_bytes, arena_bytes, arena_warm_bytes, task_timeout_ms, spin_us,
          liveness_timeout_ms, runner_load_timeout_ms, runner_idle_ms, runner_max_idle,
          q(pto::format_cpu_list(child_cpus)), max_queued, retain_finished, max_running, default_deadline_s,
          capture_output, q(state_dir), durable, drain_timeout_s, q(pto::format_cpu_list(cpus)), malloc_keep_bytes,
          malloc_idle_trim_s, q(log_level), q(log_file), q(log_target), q(metrics_listen), allow_native_blob,
          allow_native_import, allow_chip_bundles));
}

}  // namespace ptod
