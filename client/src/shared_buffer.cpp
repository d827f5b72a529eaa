// SharedBuffer (pto/client.h): a memfd the fd socket maps on its side, so a
// transfer from or to it is one copy, on the daemon's side.
#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <utility>

#include "pto/client.h"

namespace pto::client {

Result<SharedBuffer> SharedBuffer::create(uint64_t bytes) {
  Result<SharedBuffer> r;
  auto fail = [&](const char* what) {
    r.status = Status::Error(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED),
                             fmt::format("a shared buffer of {} bytes: {}: {}", bytes, what, pto::errno_text(errno)));
    return std::move(r);
  };
  if (bytes == 0) {
    r.status = Status::Error(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT), "a shared buffer of 0 bytes");
    return r;
  }
  SharedBuffer b;
  b.fd_ = memfd_create("pto-shared-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (b.fd_ < 0) return fail("memfd_create");
  if (ftruncate(b.fd_, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  // The daemon maps it only if no page it maps can vanish under it.
  if (fcntl(b.fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return fail("sealing");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b.fd_, 0);
  if (p == MAP_FAILED) return fail("mmap");
  b.data_ = p;
  b.size_ = bytes;
  r.value = std::move(b);
  return r;
}

SharedBuffer::~SharedBuffer() { reset(); }

void SharedBuffer::reset() {
  if (data_) munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

SharedBuffer::SharedBuffer(SharedBuffer&& o) noexcept : data_(o.data_), size_(o.size_), fd_(o.fd_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.fd_ = -1;
}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

}  // namespace pto::client
