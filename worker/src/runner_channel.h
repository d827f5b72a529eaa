// The channel between the engine and one runner process (docs/worker.md,
// "Runners"): a shared mapping made before the runner is forked, with a
// state word that alternates ownership like a mailbox's, a heartbeat, and a
// payload area. The engine side writes LOAD and JOB and answers CALL with
// REPLY; the runner writes LOADED, CALL and DONE.
//
//   engine                         runner
//   LOAD {path, symbol}      ->    dlopen + dlsym      -> LOADED {code, message}
//   JOB {callable, args...}  ->    the orchestration runs; each Orchestrator
//                            <-    call is CALL {op, ...} -> REPLY {...}
//                            <-    DONE {rc, message}
//
// Everything the runner writes is outside input to the engine: the decoders
// below check every count and length against the bytes present and never
// allocate more than the payload justifies (tests/fuzz/fuzz_runner_call.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

#include "pto/worker.h"

namespace pto {

enum RunnerState : uint32_t {
  RC_IDLE = 0,
  RC_LOAD = 1,    // engine -> runner
  RC_LOADED = 2,  // runner -> engine
  RC_JOB = 3,     // engine -> runner
  RC_CALL = 4,    // runner -> engine
  RC_REPLY = 5,   // engine -> runner
  RC_DONE = 6,    // runner -> engine
};

enum RunnerOp : uint32_t {
  RO_SUBMIT = 1,
  RO_ALLOC = 2,
  RO_SCOPE_BEGIN = 3,
  RO_SCOPE_END = 4,
  RO_FIND_CALLABLE = 5,
  RO_FAIL = 6,
  RO_CANCELLED = 7,
};

inline constexpr size_t kRunnerChannelBytes = 1 << 20;
inline constexpr size_t kRunnerHeaderBytes = 64;
inline constexpr size_t kRunnerPayloadBytes = kRunnerChannelBytes - kRunnerHeaderBytes;

struct RunnerChannel {
  std::atomic<uint32_t> state;          // RunnerState; the futex word
  std::atomic<uint32_t> runner_parked;  // 1 while the runner sleeps on `state`
  std::atomic<uint32_t> engine_parked;  // 1 while the engine side sleeps on `state`
  uint32_t bytes;                       // payload bytes of the current message
  std::atomic<uint64_t> heartbeat;      // bumped every 100 ms by a thread of the runner's
  std::atomic<uint32_t> loaded;         // 1 once the library is loaded and its symbol found
  std::atomic<uint32_t> reusable;       // with DONE: 1 if the job left no thread behind (the runner may be kept)
  uint8_t reserved[kRunnerHeaderBytes - 32];
  uint8_t payload[kRunnerPayloadBytes];
};
static_assert(sizeof(RunnerChannel) == kRunnerChannelBytes);

// Bounded little-endian reader over a payload: every read checks the bytes
// left; a failed read sets ok() false and reads zeros from then on.
class PayloadReader {
 public:
  PayloadReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint32_t u32();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  uint64_t u64();
  std::string str(size_t max_bytes);
  bool raw(void* out, size_t bytes);
  bool ok() const { return ok_; }
  size_t left() const { return n_ - at_; }

 private:
  bool take(size_t bytes);
  const uint8_t* p_;
  size_t n_, at_ = 0;
  bool ok_ = true;
};

// The longest library path, symbol, callable name and log path a LOAD or a
// JOB carries (the runner's decoder refuses longer ones).
inline constexpr size_t kRunnerPathBytes = 4096;
inline constexpr size_t kRunnerSymbolBytes = 1024;
inline constexpr size_t kRunnerNameBytes = 1024;
// Whether a LOAD of (path, symbol) fits those bounds: the error names the
// field, its length and its bound, before any runner is started.
Status check_load(const std::string& path, const std::string& symbol);

// LOAD: a library to check.
std::vector<uint8_t> encode_load(const std::string& path, const std::string& symbol);
Status decode_load(const uint8_t* p, size_t n, std::string* path, std::string* symbol);

// The start of a job: what the runner needs to load and call the orchestration.
struct RunnerJob {
  std::string path, symbol, name;
  int32_t level = 3, num_next_level = 0, num_sub_workers = 0;
  std::string log_file;  // non-empty: the runner's stdout and stderr go here
  CallConfig config;
  TaskArgs args;
};
std::vector<uint8_t> encode_job(const RunnerJob& j);
Status decode_job(const uint8_t* p, size_t n, RunnerJob* out);

// A call of the orchestration, as the runner sends it.
struct RunnerCall {
  RunnerOp op = RO_SUBMIT;
  // RO_SUBMIT
  bool next_level = false, group = false;
  CallableHandle handle;
  CallConfig config;
  std::vector<int> pinned;
  std::vector<TaskArgs> members;
  // RO_ALLOC
  std::vector<uint32_t> shape;
  int32_t dtype = 0;
  // RO_FIND_CALLABLE (name), RO_FAIL (message)
  std::string text;
};
std::vector<uint8_t> encode_call(const RunnerCall& c);
// The error names what is wrong (the engine then stops the runner).
Status decode_call(const uint8_t* p, size_t n, RunnerCall* out);

// The engine's answers.
std::vector<uint8_t> encode_submit_reply(const SubmitResult& r);
Status decode_submit_reply(const uint8_t* p, size_t n, SubmitResult* out);
std::vector<uint8_t> encode_alloc_reply(const Result<ContinuousTensor>& r);
Status decode_alloc_reply(const uint8_t* p, size_t n, Result<ContinuousTensor>* out);
std::vector<uint8_t> encode_status_reply(const Status& s, int64_t value = 0);
Status decode_status_reply(const uint8_t* p, size_t n, Status* out, int64_t* value);
std::vector<uint8_t> encode_handle_reply(const CallableHandle& h);
Status decode_handle_reply(const uint8_t* p, size_t n, CallableHandle* out);
// LOADED and DONE: a code (DONE: the orchestration's return value) and a message.
std::vector<uint8_t> encode_outcome(int64_t code, const std::string& message);
Status decode_outcome(const uint8_t* p, size_t n, int64_t* code, std::string* message);

// The runner process: serves one LOAD and exits, or JOBs one after another
// until the engine kills it (runner_process.cpp).
[[noreturn]] void runner_main(RunnerChannel* ch, pid_t parent, uint32_t spin_us);

// Limits that bound what a decoder allocates.
inline constexpr uint32_t kMaxRunnerMembers = 64;
inline constexpr uint32_t kMaxRunnerTensors = 4096;
inline constexpr uint32_t kMaxRunnerScalars = 4096;

}  // namespace pto
