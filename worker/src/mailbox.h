// The mailbox between a parent Worker and one child process (docs/worker.md
// has the byte layout and the state machine).
//
// One fixed-size shared-memory segment per child. The state word is the only
// synchronisation: the writer of a payload fills it, then publishes the new
// state with a release store; the reader acquires the state before reading.
// Ownership alternates: the parent writes TASK_READY / CONTROL_REQUEST /
// SHUTDOWN and resets to IDLE; the child writes INIT_*, TASK_DONE /
// TASK_FAILED and CONTROL_DONE. A parked child sleeps on the state word
// itself (shared futex); the parent wakes it only when it announced parking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "futex.h"
#include "pto/callable.h"
#include "pto/task_args.h"
#include "pto/worker.h"

namespace pto {

enum MailboxState : uint32_t {
  MB_IDLE = 0,
  MB_TASK_READY = 1,
  MB_TASK_DONE = 2,
  MB_TASK_FAILED = 3,
  MB_CONTROL_REQUEST = 4,
  MB_CONTROL_DONE = 5,
  MB_INIT_READY = 6,
  MB_INIT_FAILED = 7,
  MB_SHUTDOWN = 8,
};
const char* mailbox_state_name(uint32_t s);

enum ControlOp : uint32_t { CTRL_REGISTER = 1, CTRL_UNREGISTER = 2, CTRL_QUERY = 3 };

inline constexpr size_t kMailboxBytes = 32 * 1024;
inline constexpr size_t kMailboxBlobOffset = 1024;
inline constexpr size_t kMailboxBlobCapacity = kMailboxBytes - kMailboxBlobOffset;
// The blob header: [int32 T][int32 S].
inline constexpr size_t kBlobHeaderBytes = 8;
inline constexpr int32_t kMaxBlobTensors =
    static_cast<int32_t>((kMailboxBlobCapacity - kBlobHeaderBytes) / sizeof(ContinuousTensor));

// An L3 child's own children as it last saw them (after start-up and after
// each task), for the parent's worker tree. A seqlock: the child makes
// `seq` odd while writing; the parent retries a read that straddled a write.
struct InnerReport {
  struct Entry {
    uint8_t kind;   // ChildKind
    uint8_t state;  // ChildState
    uint16_t index;
    int32_t pid;
    uint64_t tasks_run;
  };
  static constexpr int kMax = 10;
  std::atomic<uint32_t> seq;
  uint32_t count;
  Entry entries[kMax];

  // The child: its children now (the first kMax).
  void publish(const std::vector<ChildInfo>& children);
  // The parent: the last published list; false when there is none yet or a
  // write kept overlapping the read.
  bool read(std::vector<ChildInfo>* out) const;
};
static_assert(sizeof(InnerReport) == 168);

struct Mailbox {
  std::atomic<uint32_t> state;         // MailboxState; the futex word
  std::atomic<uint32_t> child_parked;  // 1 while the child sleeps on `state`
  int32_t error_code;                  // 0 = success
  uint32_t control_op;                 // ControlOp of a CONTROL_REQUEST
  uint64_t sequence;                   // parent's dispatch number, echoed in `done_sequence`
  uint64_t done_sequence;
  // An answer's error text lives in the blob, which the request no longer
  // needs: up to kMaxMessageBytes, cut in the middle beyond that.
  uint32_t error_bytes;
  // With a task's answer: 1 when its output reached log_path (the file may
  // exist), 0 when nothing of it went there.
  uint32_t log_appended;
  // Bumped every heartbeat period by a thread of the child's own, whatever
  // its task does; the parent's liveness check (liveness_timeout_ms) reads it.
  std::atomic<uint64_t> heartbeat;
  // Where the task's stdout and stderr go while it runs (its run's
  // RunOptions::log_file); "" = the child's own streams.
  char log_path[256];
  // A chip child's L2 runtime progress in the task now running (submitted,
  // completed chip tasks): zeroed by the dispatch, written by the child's
  // heartbeat thread while the run goes on and once more at its end.
  std::atomic<uint64_t> chip_submitted;
  std::atomic<uint64_t> chip_completed;
  uint8_t reserved_text[192];
  CallConfig config;
  uint8_t digest[32];
  uint32_t blob_bytes;
  uint32_t control_result;  // CTRL_QUERY: 1 installed, 0 not
  InnerReport inner;        // L3 children only
  uint8_t reserved[kMailboxBlobOffset - 840 - sizeof(InnerReport)];
  uint8_t blob[kMailboxBlobCapacity];

  void set_error(int32_t code, const std::string& text);
  void clear_error() {
    error_code = 0;
    error_bytes = 0;
  }
  std::string error() const;
};
static_assert(offsetof(Mailbox, error_bytes) == 32);
static_assert(offsetof(Mailbox, heartbeat) == 40);
static_assert(kMaxMessageBytes <= kMailboxBlobCapacity);
static_assert(offsetof(Mailbox, log_path) == 48);
static_assert(offsetof(Mailbox, chip_submitted) == 304);
static_assert(offsetof(Mailbox, config) == 512);
static_assert(offsetof(Mailbox, digest) == 800);
static_assert(offsetof(Mailbox, blob_bytes) == 832);
static_assert(offsetof(Mailbox, inner) == 840);
static_assert(offsetof(Mailbox, blob) == kMailboxBlobOffset);
static_assert(sizeof(Mailbox) == kMailboxBytes);

// Bytes the blob of `view` needs: 8 + 40 T + 8 S.
inline size_t blob_size(int32_t tensors, int32_t scalars) {
  return kBlobHeaderBytes + sizeof(ContinuousTensor) * static_cast<size_t>(tensors) +
         sizeof(uint64_t) * static_cast<size_t>(scalars);
}
// Encodes into `out` (resized); the caller has checked the size.
void encode_args(const TaskArgsView& view, std::vector<uint8_t>* out);
// Decodes the blob in place: the view points into `blob`. The error names the
// counts when they do not fit `bytes`.
Status decode_args(const uint8_t* blob, size_t bytes, TaskArgsView* view);

// CTRL_REGISTER payload: what a child needs to prepare a callable.
struct ControlDescriptor {
  CallableKind kind = CallableKind::FUNCTION;
  EntryAbi abi = EntryAbi::SUB;
  std::string path, symbol, name;
};
std::vector<uint8_t> encode_control(const ControlDescriptor& d);
Status decode_control(const uint8_t* blob, size_t bytes, ControlDescriptor* out);

}  // namespace pto
