#include "pto/base/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace pto {

Status write_file_once(const std::string& path, const std::string& bytes) {
  static std::atomic<uint64_t> serial{0};
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return Status::Ok();
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(serial++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(kStorageError, fmt::format("cannot write {}: {}", tmp, errno_text(errno)));
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::Error(kStorageError, fmt::format("cannot write {}: {}", path, errno_text(errno)));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::Error(kStorageError, fmt::format("cannot write {}: {}", path, errno_text(err)));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::Error(kStorageError, fmt::format("cannot write {}: {}", path, errno_text(errno)));
  }
  return Status::Ok();
}

Status read_file(const std::string& path, std::string* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(kStorageError, fmt::format("cannot read {}: {}", path, errno_text(errno)));
  bytes->clear();
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::Error(kStorageError, fmt::format("cannot read {}: {}", path, errno_text(err)));
    }
    bytes->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace pto
