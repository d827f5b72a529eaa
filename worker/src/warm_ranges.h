// Ranges of a file-backed buffer arena whose bytes are not known to be
// zeros (docs/worker.md, "Warm arena pages").
//
// Freeing a buffer used to punch its blocks out of the arena file, so the
// next buffer there started on holes: every page of its first write was a
// new page-cache page (allocated and charged, per 4 KiB, on each upload).
// Instead, up to `cap` bytes of freed ranges keep their pages ("kept"); a
// buffer allocated over them is written in place. What they still hold is
// an earlier buffer's bytes, possibly another principal's, so an allocation
// that promises zeros clears the parts it takes (WorkerImpl::alloc_buffer);
// only an allocation whose every byte is written before anyone reads it (an
// upload) takes them as they are.
//
// "Unknown" ranges: a file arena re-attached after a restart holds, in its
// free space, whatever the last process kept there (and a file system that
// cannot punch holes keeps what a free meant to punch). They are tracked
// apart, not counted against the cap; a zeroing alloc punches (or clears)
// them, a re-attaching one (alloc_at) leaves them: its tensor lies there.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace pto {

class WarmRanges {
 public:
  using Range = std::pair<uint64_t, uint64_t>;  // offset, bytes

  void set_cap(uint64_t cap);
  // Bytes of unknown origin: the whole arena at attach (its free space may
  // hold an earlier process's), a freed range the file system could not punch.
  void adopt_unknown(uint64_t offset, uint64_t bytes);
  // A freed range: keeps what fits under the cap (from its start) and
  // returns the rest, which the caller punches out of the file.
  Range keep(uint64_t offset, uint64_t bytes);
  // Removes every kept or unknown part of [offset, offset + bytes) and
  // returns them (their old bytes are what the range holds now).
  struct Taken {
    std::vector<Range> kept;     // freed in this process
    std::vector<Range> unknown;  // left by an earlier one
  };
  Taken take(uint64_t offset, uint64_t bytes);
  uint64_t kept_bytes() const;

 private:
  static uint64_t carve(std::map<uint64_t, uint64_t>& m, uint64_t offset, uint64_t bytes, std::vector<Range>* out);
  mutable std::mutex mu_;
  uint64_t cap_ = 0;
  std::map<uint64_t, uint64_t> kept_;     // offset -> bytes, counted against cap_
  std::map<uint64_t, uint64_t> unknown_;  // offset -> bytes, not counted
  uint64_t kept_bytes_ = 0;
};

}  // namespace pto
