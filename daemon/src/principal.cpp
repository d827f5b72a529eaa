#include "principal.h"

#include <fmt/format.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <vector>

namespace ptod {

void UnixPeers::set(int fd, uid_t uid, pid_t pid) {
  std::lock_guard<std::mutex> g(mu_);
  by_fd_[fd] = {uid, pid};
}

bool UnixPeers::get(int fd, uid_t* uid, pid_t* pid) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return false;
  *uid = it->second.first;
  *pid = it->second.second;
  return true;
}

std::string Principals::user_name(uid_t uid) const {
  {
    std::lock_guard<std::mutex> g(names_mu_);
    if (auto it = names_.find(uid); it != names_.end()) return it->second;
  }
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  std::string name = fmt::format("uid:{}", uid);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found && pw.pw_name &&
      check_principal_name(pw.pw_name).ok())
    name = pw.pw_name;
  std::lock_guard<std::mutex> g(names_mu_);
  names_[uid] = name;
  return name;
}

bool Principals::listed_admin(const std::string& name) const {
  return std::find(cfg_.admins.begin(), cfg_.admins.end(), name) != cfg_.admins.end();
}

namespace {
// Constant time in the token's length: no early exit on the first mismatch.
bool same_token(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}
}  // namespace

Status Principals::resolve(const std::string& bearer, const std::string& peer, const std::string& cert_name,
                           Principal* out) const {
  if (!bearer.empty()) {
    for (const DaemonConfig::NamedToken& t : cfg_.named_tokens)
      if (same_token(bearer, t.token)) {
        *out = {t.name, t.admin || listed_admin(t.name)};
        return Status::Ok();
      }
    if (!cfg_.token.empty() && same_token(bearer, cfg_.token)) {
      *out = {"token", listed_admin("token")};
      return Status::Ok();
    }
    return Status::Error(pto::kUnauthenticated,
                         "the bearer token names no principal of this daemon ([server] tokens_file, token_file)");
  }
  int fd = -1;
  if (peer.rfind("fd:", 0) == 0) {
    // gRPC names a unix-socket peer "fd:N"; anything else there is no fd of ours.
    const char* end = peer.data() + peer.size();
    if (auto [p, ec] = std::from_chars(peer.data() + 3, end, fd); ec != std::errc() || p != end) fd = -1;
  }
  if (fd >= 0) {
    uid_t uid = 0;
    pid_t pid = 0;
    if (unix_.get(fd, &uid, &pid)) {
      *out = unix_user(uid);
      return Status::Ok();
    }
  }
  if (!cert_name.empty()) {
    if (Status s = check_principal_name(cert_name); !s.ok())
      return Status::Error(pto::kUnauthenticated,
                           "the client certificate's subject is not a principal name: " + s.message);
    *out = {cert_name, listed_admin(cert_name)};
    return Status::Ok();
  }
  *out = {"anonymous", false};
  return Status::Ok();
}

Principal Principals::unix_user(uid_t uid) const {
  Principal p;
  p.name = user_name(uid);
  p.admin = uid == 0 || uid == geteuid() || listed_admin(p.name);
  return p;
}

Status Principals::of_unix_peer(uid_t uid, const std::string& bearer, Principal* out) const {
  if (!bearer.empty()) return resolve(bearer, "", "", out);
  *out = unix_user(uid);
  return Status::Ok();
}

Status Principals::of(const grpc::ServerContextBase& ctx, Principal* out) const {
  std::string bearer;
  const auto& md = ctx.client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    const std::string v(it->second.data(), it->second.size());
    if (v.rfind("Bearer ", 0) != 0)
      return Status::Error(pto::kUnauthenticated, "the authorization metadata must be 'Bearer <token>'");
    bearer = v.substr(7);
  }
  // The certificate's subject common name, as documented - not gRPC's "peer
  // identity", which is the subjectAltName list whenever the certificate has
  // one (CN=alice with DNS:alice-laptop would be "alice-laptop", and every
  // certificate naming one host one principal).
  std::string cert;
  if (auto auth = ctx.auth_context(); auth && auth->IsPeerAuthenticated()) {
    for (const auto& cn : auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
      cert.assign(cn.data(), cn.size());
      break;
    }
    if (cert.empty() && bearer.empty())
      return Status::Error(pto::kUnauthenticated,
                           "the client certificate's subject has no common name (CN): it names no principal");
  }
  return resolve(bearer, ctx.peer(), cert, out);
}

}  // namespace ptod
