// One open remote session at the peer (docs/remote.md): what the session
// service's reader, writer and watchdog threads and the runs it started
// share — the writer's queue, the completions to batch, the session's
// remote buffers, and the arena slices it lent gRPC.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "principal.h"
#include "pto/v1/session.pb.h"
#include "pto/worker.h"
#include "session_wire.h"

namespace ptod {

// Slices over arena pages that sessions lent gRPC (BUFFER_READ replies),
// counted so that the daemon's stop unmaps the arena under none of them.
struct LentPages {
  std::mutex mu;
  std::condition_variable cv;
  int held = 0;
};

// One open session. Shared with the runs it started: a run that ends after
// the session drops its completion.
struct SessionConn : std::enable_shared_from_this<SessionConn> {
  grpc::ServerContext* ctx = nullptr;
  uint64_t session = 0;
  uint32_t worker = 0;
  std::mutex mu;
  std::condition_variable cv;             // the writer's queue
  std::condition_variable stop_cv;        // the watchdog: the session closed
  std::deque<OutFrame> out;               // frames to write (bodies; the writer adds the header)
  std::vector<pto::v1::Completion> done;  // completions to batch into one frame
  uint32_t credits_back = 0;              // credits to hand back with them
  bool closed = false;
  bool writer_done = false;         // the writer flushed what was queued and ended (stop_cv)
  bool cancel_after_flush = false;  // drain: the reader is still in Read; cancel once the SHUTDOWN is out
  uint32_t outstanding = 0;         // tasks taken and not completed (<= credits)
  std::atomic<uint64_t> last_recv_ns{0};
  std::atomic<bool> in_control{false};  // a CONTROL is being served: the coordinator's frames wait meanwhile
  std::atomic<bool> tree_dirty{false};  // a task ended: the next HEALTH carries the worker tree
  std::set<pto::Digest> prepared;       // prepared here and not committed: aborted at the end
  std::string peer;
  Principal who;  // who opened the session (the coordinator's token, certificate or user)
  // Remote buffers of this session (generation = the session id), in the
  // Worker's arena. Freed when the coordinator frees them and no task uses
  // them, or when the last reference to the session goes.
  struct Buffer {
    pto::ContinuousTensor t;
    uint32_t users = 0;
    bool freed = false;
  };
  pto::Worker* engine = nullptr;
  std::shared_ptr<LentPages> lent;     // the service's count of lent slices
  std::map<uint64_t, Buffer> buffers;  // under mu
  uint64_t next_buffer = 0;

  ~SessionConn() {
    for (auto& [id, b] : buffers) (void)engine->free(b.t);
  }
  void release_buffer(uint64_t id) {
    std::lock_guard<std::mutex> g(mu);
    auto it = buffers.find(id);
    if (it == buffers.end()) return;
    if (--it->second.users == 0 && it->second.freed) {
      (void)engine->free(it->second.t);
      buffers.erase(it);
    }
  }

  // A frame for the writer. A frame with a chunk keeps its buffer in use
  // until gRPC lets go of the slice, whose release takes mu: a frame that
  // holds one is never destroyed under mu.
  void push(OutFrame f) {
    std::unique_lock<std::mutex> g(mu);
    if (closed) {
      g.unlock();
      return;  // f goes here, without mu
    }
    out.push_back(std::move(f));
    cv.notify_one();
  }
  // The arena's bytes of buffer `id` as a slice, the buffer in use until
  // gRPC lets go of it (mu held).
  grpc::Slice lend(uint64_t id, const void* p, size_t n) {
    ++buffers[id].users;
    {
      std::lock_guard<std::mutex> g(lent->mu);
      ++lent->held;
    }
    struct Hold {
      std::shared_ptr<SessionConn> c;
      uint64_t id;
    };
    return grpc::Slice(
        const_cast<void*>(p), n,
        [](void* h) {
          auto* hold = static_cast<Hold*>(h);
          const std::shared_ptr<LentPages> count = hold->c->lent;
          hold->c->release_buffer(hold->id);
          delete hold;  // may be the session's last reference: its buffers are freed
          {
            std::lock_guard<std::mutex> g(count->mu);
            --count->held;
          }
          count->cv.notify_all();
        },
        new Hold{shared_from_this(), id});
  }
  // The stream's writes (and the frame sequence) happen under write_mu:
  // from the writer thread, or directly from the thread that finished a task
  // when nothing else is queued (one thread wake-up less per task).
  std::mutex write_mu;
  std::function<bool(OutFrame)> write;  // set while the session is open

  void complete(pto::v1::Completion c) {
    tree_dirty = true;
    std::unique_lock<std::mutex> lk(mu);
    if (outstanding) --outstanding;
    ++credits_back;
    if (closed) return;
    // The last task in flight answers at once from this thread when it is
    // small; under load (or for large outputs, whose Write could block this
    // run thread on flow control) the writer thread batches completions.
    uint64_t bytes = 0;
    for (const auto& o : c.outputs()) bytes += o.size();
    if (outstanding > 0 || bytes > (64u << 10) || !done.empty() || !out.empty() || !write_mu.try_lock()) {
      done.push_back(std::move(c));
      cv.notify_one();
      return;
    }
    pto::v1::Frame f;
    *f.mutable_completion()->add_completions() = std::move(c);
    f.mutable_completion()->set_credits(credits_back);
    credits_back = 0;
    lk.unlock();
    const bool ok = write && write({std::move(f), grpc::Slice()});
    write_mu.unlock();
    if (!ok) {  // the stream broke: the reader sees it too and ends the session
      lk.lock();
      closed = true;
      stop_cv.notify_all();
      cv.notify_all();
    }
  }
};

}  // namespace ptod
