#include "shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "pto/worker.h"

namespace pto {

Status SharedMapping::map(uint64_t bytes, const char* what, bool confined) {
  reset();
  // A confined mapping is made and listed under the regions' lock, which
  // every fork holds: no process is forked between the two, inheriting a
  // mapping that is not yet listed for it to unmap (engine_fork).
  std::unique_lock<std::mutex> held;
  if (confined) held = lock_shared_regions();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return Status::Error(kWorkerHeapExhausted, std::string("mapping ") + std::to_string(bytes) + " bytes for " + what +
                                                   ": " + errno_text(errno));
  base_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  confined_ = confined;
  if (confined)
    add_confined_region_locked(held, base_, bytes_);
  else
    add_shared_region(base_, bytes_);
  return Status::Ok();
}

Status SharedMapping::map_file(const std::string& path, uint64_t bytes, const char* what) {
  reset();
  auto fail = [&](const char* step) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return Status::Error(kStorageError,
                         std::string(what) + ": " + step + " '" + path + "': " + errno_text(err));
  };
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return fail("cannot open");
  struct stat st {};
  if (fstat(fd_, &st) != 0) return fail("cannot stat");
  if (static_cast<uint64_t>(st.st_size) != bytes && ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    return fail("cannot size");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (p == MAP_FAILED) return fail("cannot map");
  base_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  path_ = path;
  add_shared_region(base_, bytes_);
  return Status::Ok();
}

Status SharedMapping::reserve(uint64_t offset, uint64_t bytes) {
  if (fd_ < 0 || bytes == 0) return Status::Ok();
  const int rc = posix_fallocate(fd_, static_cast<off_t>(offset), static_cast<off_t>(bytes));
  if (rc == 0 || rc == EOPNOTSUPP) return Status::Ok();  // a file system without it backs pages on write
  return Status::Error(kWorkerHeapExhausted, "the arena file '" + path_ + "' cannot hold " + std::to_string(bytes) +
                                                 " more bytes: " + errno_text(rc));
}

bool SharedMapping::release(uint64_t offset, uint64_t bytes) {
  // The blocks go back to the file system; the range reads as zeros.
  if (fd_ < 0 || bytes == 0) return true;
  return fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                   static_cast<off_t>(bytes)) == 0;
}

Status SharedMapping::write(uint64_t offset, const std::vector<iovec>& pieces) {
  // Through the mapping, fresh pages too: everything that reads the buffer
  // later (a download, a job's tasks) reads it through a mapping, and pages
  // that pwrite had put into the file's page cache read ~10x slower that way
  // on the VM measured, download after download (docs/worker.md, "Warm arena
  // pages"); the faults of a fresh range cost no more than pwrite did there.
  for (const iovec& v : pieces) {
    std::memcpy(base_ + offset, v.iov_base, v.iov_len);
    offset += v.iov_len;
  }
  return Status::Ok();
}

Status SharedMapping::sync(uint64_t offset, uint64_t bytes) {
  if (fd_ < 0 || bytes == 0) return Status::Ok();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  if (msync(base_ + start, offset + bytes - start, MS_SYNC) != 0)
    return Status::Error(kStorageError, "syncing the arena file '" + path_ + "': " + errno_text(errno));
  return Status::Ok();
}

void SharedMapping::reset() {
  if (!base_) return;
  remove_shared_region(base_);
  if (confined_) {  // unlisted and unmapped at once: a fork between them would keep its pages
    auto held = lock_shared_regions();
    remove_confined_region_locked(held, base_);
    munmap(base_, bytes_);
  } else {
    munmap(base_, bytes_);
  }
  confined_ = false;
  base_ = nullptr;
  bytes_ = 0;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {
struct Regions {
  std::mutex mu;
  std::map<uint64_t, uint64_t> by_base;   // base -> bytes
  std::map<uint64_t, uint64_t> confined;  // base -> bytes: mappings for one forked process only
};
Regions& regions() {
  static Regions* r = new Regions;  // never destroyed: children _exit without running destructors
  return *r;
}
}  // namespace

void add_confined_region_locked(const std::unique_lock<std::mutex>& /*held*/, const void* base, uint64_t bytes) {
  regions().confined[reinterpret_cast<uint64_t>(base)] = bytes;
}
void remove_confined_region_locked(const std::unique_lock<std::mutex>& /*held*/, const void* base) {
  regions().confined.erase(reinterpret_cast<uint64_t>(base));
}

std::vector<std::pair<uint64_t, uint64_t>> confined_regions_but(const std::unique_lock<std::mutex>& /*held*/,
                                                                const void* keep) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& [base, bytes] : regions().confined)
    if (base != reinterpret_cast<uint64_t>(keep)) out.emplace_back(base, bytes);
  return out;
}

void add_shared_region(const void* base, uint64_t bytes) {
  std::lock_guard<std::mutex> g(regions().mu);
  regions().by_base[reinterpret_cast<uint64_t>(base)] = bytes;
}
void remove_shared_region(const void* base) {
  std::lock_guard<std::mutex> g(regions().mu);
  regions().by_base.erase(reinterpret_cast<uint64_t>(base));
}
std::unique_lock<std::mutex> lock_shared_regions() { return std::unique_lock<std::mutex>(regions().mu); }

bool in_shared_region(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> g(regions().mu);
  auto& m = regions().by_base;
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return false;
  --it;
  return addr >= it->first && addr + bytes >= addr && addr + bytes <= it->first + it->second;
}

Status register_shared_memory(void* base, uint64_t bytes) {
  if (!base || bytes == 0)
    return Status::Error(kWorkerInvalidArgument, "register_shared_memory: base must be non-null and bytes > 0");
  add_shared_region(base, bytes);
  return Status::Ok();
}

L3HeapRing::Alloc L3HeapRing::alloc(uint64_t bytes, uint64_t* end_position, uint8_t** ptr) {
  bytes = (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  if (bytes == 0) bytes = kHeapAlign;
  if (bytes > size_) return Alloc::kTooLarge;
  uint64_t start = top_;
  const uint64_t off = start % size_;
  if (off + bytes > size_) start += size_ - off;  // never straddle the end
  if (start + bytes - tail_ > size_) return Alloc::kFull;
  top_ = start + bytes;
  *end_position = top_;
  *ptr = base_ + start % size_;
  return Alloc::kOk;
}

void Arena::attach(uint8_t* base, uint64_t size) {
  std::lock_guard<std::mutex> g(mu_);
  base_ = base;
  free_.clear();
  used_.clear();
  in_use_ = 0;
  if (size) free_[0] = size;
}

Status Arena::alloc(uint64_t bytes, uint8_t** ptr) {
  const uint64_t need = (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    used_[off] = need;
    in_use_ += need;
    *ptr = base_ + off;
    return Status::Ok();
  }
  return Status::Error(kWorkerHeapExhausted, "buffer arena has no free block of " + std::to_string(need) + " bytes (" +
                                                 std::to_string(in_use_) + " bytes in use)");
}

Status Arena::alloc_at(uint64_t offset, uint64_t bytes, uint8_t** ptr) {
  const uint64_t need = (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  std::lock_guard<std::mutex> g(mu_);
  auto it = free_.upper_bound(offset);
  if (offset % kHeapAlign == 0 && it != free_.begin()) {
    --it;
    const uint64_t off = it->first, len = it->second;
    if (offset + need >= offset && offset + need <= off + len) {
      free_.erase(it);
      if (offset > off) free_[off] = offset - off;
      if (off + len > offset + need) free_[offset + need] = off + len - (offset + need);
      used_[offset] = need;
      in_use_ += need;
      *ptr = base_ + offset;
      return Status::Ok();
    }
  }
  return Status::Error(kWorkerInvalidArgument, "buffer arena: " + std::to_string(need) + " bytes at offset " +
                                                   std::to_string(offset) + " are not free");
}

uint64_t Arena::length_of(const void* ptr) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = used_.find(static_cast<uint64_t>(static_cast<const uint8_t*>(ptr) - base_));
  return it == used_.end() ? 0 : it->second;
}

Status Arena::free(const void* ptr) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(ptr) - base_);
  auto it = used_.find(off);
  if (!base_ || it == used_.end())
    return Status::Error(
        kWorkerInvalidArgument, "free: 0x" + [&] {
          char b[32];
          snprintf(b, sizeof b, "%llx", (unsigned long long)reinterpret_cast<uintptr_t>(ptr));
          return std::string(b);
        }() + " is not a live buffer of this Worker's arena");
  const uint64_t freed = it->second;
  uint64_t len = freed;
  in_use_ -= len;
  used_.erase(it);
  // Coalesce with the neighbours.
  uint64_t start = off;
  auto next = free_.lower_bound(off);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + freed) {
    len += next->second;
    free_.erase(next);
  }
  free_[start] = len;
  return Status::Ok();
}

uint64_t Arena::bytes_in_use() const {
  std::lock_guard<std::mutex> g(mu_);
  return in_use_;
}

}  // namespace pto
