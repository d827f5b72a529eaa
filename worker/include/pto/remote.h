// Remote next-level workers (docs/remote.md): a level-4
// Worker's children may be L3 Workers in other daemons, reached through a
// RemoteLink. The engine treats a link as one more next-level endpoint — the
// same ready queues, dependencies, failure model and statistics as a forked
// L3 child — except that it may hold several tasks at once (the peer's
// credits) and that its liveness is the session's, not a pid's.
//
// The engine owns scheduling; the link owns the transport: framing, tensor
// bytes, heartbeats, reconnection and re-installing registrations on a new
// session. ptod implements it over a gRPC stream (daemon/src/remote_link.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pto/callable.h"
#include "pto/task_args.h"

namespace pto {

// Which way a tensor's bytes travel for a remote task: INPUT to the peer,
// OUTPUT back, INOUT both. (Tags stay at the submitting Worker; only the
// direction crosses.)
enum class TensorDirection : uint8_t { IN = 1, OUT = 2, INOUT = 3, NONE = 0 };

// A task handed to a link. Tensor addresses are valid in this process; the
// link copies IN bytes out when it sends and OUT bytes back before it reports
// the completion.
// A tensor that lives in a remote buffer (Worker::alloc_remote): no bytes
// travel with the task, the peer finds them by (buffer id, generation,
// offset). id 0: the tensor travels inline.
struct RemoteBufferRef {
  uint64_t id = 0, generation = 0, offset = 0;
};

struct RemoteTask {
  uint64_t seq = 0;  // the engine's dispatch number on this endpoint (echoed in the completion)
  uint64_t task_id = 0;
  CallableIdentity callable;
  CallConfig config;
  std::vector<ContinuousTensor> tensors;
  std::vector<TensorDirection> directions;  // one per tensor
  std::vector<RemoteBufferRef> buffers;     // one per tensor
  std::string refuse;                       // non-empty: fail the task with this message instead of sending it
  std::vector<uint64_t> scalars;
  std::string principal;  // the run's (RunOptions::principal): whose job it is
};

struct RemoteCompletion {
  uint64_t seq = 0;
  uint8_t outcome = 0;  // pto::Outcome
  std::string worker;   // where it failed on the peer ("chip 0"), empty on success
  std::string message;
};

class RemoteLink {
 public:
  virtual ~RemoteLink() = default;
  // "peer 10.0.0.2:7000"; names the endpoint in failures and the worker tree.
  virtual std::string label() const = 0;
  // Called once by Worker::init (from the thread that calls init): start
  // connecting. wake() rings the engine's doorbell; call it when a completion
  // arrives or the session's state changes.
  virtual Status start(std::function<void()> wake) = 0;
  // Called by Worker::close: end the session (SHUTDOWN frame) and its threads.
  virtual void stop() = 0;
  // True while a session is READY (HELLO READY received, registrations re-installed).
  virtual bool ready() const = 0;
  // Why the link is not ready ("connecting", "connection lost: ...").
  virtual std::string state_text() const = 0;
  // Tasks the peer lets this side keep in flight (its credits).
  virtual uint32_t credits() const = 0;
  // Queues a task for sending; never blocks on the network. When the session
  // is down the task comes back from poll() as an ENDPOINT_FAILURE.
  virtual void send(RemoteTask&& task) = 0;
  // True when poll() has something (a cheap check the scheduler makes on
  // every round).
  virtual bool has_completions() const = 0;
  // The engine gave up on a task (its timeout ran out here): when its
  // completion arrives, report it but write none of its outputs (the
  // tensors may already be reused).
  virtual void abandon(uint64_t seq) = 0;
  // Moves completions that arrived into out. When a session ends, every task
  // it held comes back here as an ENDPOINT_FAILURE completion.
  virtual void poll(std::vector<RemoteCompletion>* out) = 0;

  // Two-phase registration (Worker::register_callable with remote options).
  // prepare stores and loads the callable on the peer without making it
  // visible (sending the bytes only when the peer lacks the digest); commit
  // publishes it; abort forgets what prepare did. unregister leaves a
  // tombstone on the peer. Each blocks for at most timeout_ms.
  virtual Status prepare(const CallableIdentity& id, const std::string& payload, uint32_t timeout_ms) = 0;
  virtual Status commit(const CallableIdentity& id, uint32_t timeout_ms) = 0;
  virtual Status abort(const CallableIdentity& id, uint32_t timeout_ms) = 0;
  virtual Status unregister(const CallableIdentity& id, uint32_t timeout_ms) = 0;

  // Remote buffers on the peer, for the session in flight (its id is the
  // buffer's generation: a new session makes old buffers stale). Writes and
  // reads are chunked; each call blocks for at most timeout_ms per chunk.
  virtual Status buffer_alloc(uint64_t bytes, RemoteBufferRef* out, uint32_t timeout_ms) = 0;
  virtual Status buffer_free(const RemoteBufferRef& b, uint32_t timeout_ms) = 0;
  virtual Status buffer_write(const RemoteBufferRef& b, const void* src, uint64_t bytes, uint32_t timeout_ms) = 0;
  virtual Status buffer_read(const RemoteBufferRef& b, void* dst, uint64_t bytes, uint32_t timeout_ms) = 0;

  // The peer's own children (label, state) for the worker tree; empty when unknown.
  struct PeerChild {
    std::string label, state;
    int pid = -1;
    uint64_t tasks_run = 0;
    int level = 0;  // 2 for a chip, 0 for a sub worker
    std::string platform;  // a chip's simulated chip ("a2a3sim", "tx8sim"); empty otherwise
  };
  virtual std::vector<PeerChild> peer_children() const = 0;
};

// Registration options (Worker::register_callable).
struct CallableOptions {
  // A task that ends in ENDPOINT_FAILURE (its worker died or its session was
  // lost) is retried on another worker up to this many times. 0 = not retryable.
  uint32_t max_retries = 0;
  // Level >= 4 with remote workers: what prepare() sends to each peer (ptod: a
  // serialized pto.v1.RegisterRequest). Empty: the callable is registered
  // only on the local children.
  std::string remote_payload;
  // Remote workers (indices among the remote ones, in add order) to register
  // on; empty = all of them.
  std::vector<int> remote_workers;
  bool local = true;  // also broadcast to the local children of its kind
};

}  // namespace pto
