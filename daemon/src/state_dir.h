// What one ptod owns on the file system (docs/daemon.md, "State"): its state
// directory, held by a lock for the process's life so that a second daemon
// on it refuses to start, and the path of its unix socket, which it replaces
// only when no daemon answers there and removes at exit only while it is
// still the one it bound.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>

#include "pto/base/status.h"

namespace ptod {

using pto::Status;

// An exclusive lock (flock) on <dir>/ptod.lock, which holds the holder's
// pid. The kernel drops it when the process ends, however it ends.
class StateDirLock {
 public:
  StateDirLock() = default;
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;
  // kInUse "state directory D is in use by pid N" when another process holds it.
  Status acquire(const std::string& dir);

 private:
  int fd_ = -1;
};

// The unix socket's path, claimed before the server binds it.
class SocketPath {
 public:
  // Absent: fine. A socket no one answers on (left by a daemon that died):
  // removed. A socket a daemon answers on, or a path that is not a socket:
  // an error naming it, and nothing is removed.
  Status claim(const std::string& path);
  // After the bind: remembers which file is ours.
  void bound();
  // Removes the socket if it is still the one this process bound.
  void release();

 private:
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  bool have_ = false;
};

// Startup: every entry of <state_dir>/callables that no registration names
// (`keep`, entry names) is removed; the number removed.
size_t remove_unreferenced_bundles(const std::string& callables_dir, const std::set<std::string>& keep);

}  // namespace ptod
