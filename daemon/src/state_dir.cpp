#include "state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

namespace ptod {

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

Status StateDirLock::acquire(const std::string& dir) {
  const std::string path = dir + "/ptod.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return Status::Error(pto::kStorageError,
                         fmt::format("state directory {}: cannot open {}: {}", dir, path, pto::errno_text(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK)
      return Status::Error(pto::kStorageError,
                           fmt::format("state directory {}: cannot lock {}: {}", dir, path, pto::errno_text(err)));
    std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    return Status::Error(pto::kInUse, fmt::format("state directory {} is in use by pid {}", dir, pid));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return Status::Error(pto::kStorageError,
                         fmt::format("state directory {}: cannot write {}: {}", dir, path, pto::errno_text(err)));
  }
  fd_ = fd;
  return Status::Ok();
}

Status SocketPath::claim(const std::string& path) {
  path_ = path;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Error(pto::kInvalidConfig, fmt::format("[server] socket '{}': {}", path, pto::errno_text(errno)));
  }
  if (!S_ISSOCK(st.st_mode))
    return Status::Error(pto::kInvalidConfig,
                         fmt::format("[server] socket '{}' exists and is not a socket: it is left as it is; "
                                     "choose another path or remove it",
                                     path));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    return Status::Error(pto::kInvalidConfig, fmt::format("[server] socket '{}': the path is longer than {} bytes",
                                                          path, sizeof a.sun_path - 1));
  std::memcpy(a.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(pto::kStorageError, fmt::format("socket(): {}", pto::errno_text(errno)));
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  const int err = errno;
  ::close(fd);
  if (rc == 0)
    return Status::Error(pto::kInUse, fmt::format("[server] socket '{}' is in use: a daemon answers on it", path));
  if (err != ECONNREFUSED)
    return Status::Error(pto::kInvalidConfig,
                         fmt::format("[server] socket '{}': cannot tell whether a daemon uses it ({}); it is left "
                                     "as it is",
                                     path, pto::errno_text(err)));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return Status::Error(pto::kInvalidConfig, fmt::format("[server] socket '{}': a stale socket that cannot be "
                                                          "removed: {}",
                                                          path, pto::errno_text(errno)));
  return Status::Ok();
}

void SocketPath::bound() {
  struct stat st {};
  if (path_.empty() || lstat(path_.c_str(), &st) != 0) return;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  have_ = true;
}

void SocketPath::release() {
  struct stat st {};
  if (!have_ || lstat(path_.c_str(), &st) != 0) return;
  if (st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  have_ = false;
}

size_t remove_unreferenced_bundles(const std::string& callables_dir, const std::set<std::string>& keep) {
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(callables_dir, ec)) {
    if (keep.count(e.path().filename().string())) continue;
    std::error_code rm;
    removed += std::filesystem::remove_all(e.path(), rm) > 0 ? 1 : 0;
  }
  return removed;
}

}  // namespace ptod
