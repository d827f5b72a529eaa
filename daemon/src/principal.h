// Who a request comes from (docs/daemon.md, "Principals"). Every tensor, job
// and callable records the principal that made it; other principals are told
// it does not exist, unless they are admin.
//
// A request's principal, in order:
//   1. a bearer token in its metadata ("authorization: Bearer T"): the name
//      of T in [server] tokens_file (its role there), or "token" for
//      [server] token_file's token; a token that matches neither is refused
//      (UNAUTHENTICATED), on every listener;
//   2. on the unix socket, the connecting process's user (SO_PEERCRED, read
//      when ptod accepted the connection): the user's name, or "uid:N";
//   3. over TLS with a verified client certificate, its subject's common
//      name (refused without one);
//   4. otherwise "anonymous" (a loopback TCP client without a token).
// Admin: root on the unix socket, the daemon's own user, an admin token, or
// a name listed in [server] admins.
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>

#include "config.h"

namespace grpc {
class ServerContextBase;
}

namespace ptod {

struct Principal {
  std::string name;
  bool admin = false;
  // May it see (read, use, free, cancel, unregister) what `owner` made?
  bool may_use(const std::string& owner) const { return admin || owner == name; }
};

// The credentials of each connection accepted on the unix socket, by the fd
// gRPC names it by (its peer string is "fd:N"). An fd is closed by gRPC only
// after every call on its connection ended, so a call always finds its own
// connection's entry; a reused fd number is overwritten before gRPC sees it.
class UnixPeers {
 public:
  void set(int fd, uid_t uid, pid_t pid);
  bool get(int fd, uid_t* uid, pid_t* pid) const;

 private:
  mutable std::mutex mu_;
  std::map<int, std::pair<uid_t, pid_t>> by_fd_;
};

class Principals {
 public:
  Principals(const DaemonConfig& cfg, const UnixPeers& unix_peers) : cfg_(cfg), unix_(unix_peers) {}
  // kUnauthenticated when a token is presented that names no principal.
  Status of(const grpc::ServerContextBase& ctx, Principal* out) const;
  // The same from the parts of a request (what of() reads from the context).
  Status resolve(const std::string& bearer, const std::string& peer, const std::string& cert_name,
                 Principal* out) const;
  // A connection on a unix socket of the daemon's own (the fd socket): the
  // bearer token's principal if one is given, else the connecting user's.
  Status of_unix_peer(uid_t uid, const std::string& bearer, Principal* out) const;
  // The principal a uid is: its user name, or "uid:N" (looked up once per uid).
  std::string user_name(uid_t uid) const;

 private:
  bool listed_admin(const std::string& name) const;
  Principal unix_user(uid_t uid) const;
  const DaemonConfig& cfg_;
  const UnixPeers& unix_;
  mutable std::mutex names_mu_;
  mutable std::map<uid_t, std::string> names_;  // the passwd lookup costs more than the rest of a call
};

}  // namespace ptod
