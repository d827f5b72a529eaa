#include "remote_stager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "pto/worker.h"

namespace ptod {

RemoteStager::RemoteStager(pto::RemoteLink& link, Session& session, std::mutex& mu, std::mutex& outputs_mu,
                           const DaemonConfig& cfg)
    : link_(link), session_(session), mu_(mu), outputs_mu_(outputs_mu), cfg_(cfg) {}

std::vector<size_t> tensors_to_stage(const pto::RemoteTask& t, const DaemonConfig& cfg) {
  std::vector<size_t> stage, rest;
  uint64_t in = 0, out = 0;  // inline bytes each way
  for (size_t i = 0; i < t.tensors.size(); ++i) {
    if (t.buffers[i].id != 0) continue;
    const uint64_t bytes = pto::tensor_bytes(t.tensors[i]);
    if (bytes > cfg.inline_limit_bytes) {
      stage.push_back(i);
      continue;
    }
    rest.push_back(i);
    if (copies_in(t.directions[i])) in += bytes;
    if (copies_out(t.directions[i])) out += bytes;
  }
  const uint64_t budget = cfg.frame_budget();
  std::sort(rest.begin(), rest.end(),
            [&](size_t a, size_t b) { return pto::tensor_bytes(t.tensors[a]) > pto::tensor_bytes(t.tensors[b]); });
  for (size_t i : rest) {
    if (in <= budget && out <= budget) break;
    const uint64_t bytes = pto::tensor_bytes(t.tensors[i]);
    const bool helps = (in > budget && copies_in(t.directions[i])) || (out > budget && copies_out(t.directions[i]));
    if (!helps || bytes == 0) continue;
    stage.push_back(i);
    if (copies_in(t.directions[i])) in -= bytes;
    if (copies_out(t.directions[i])) out -= bytes;
  }
  return stage;
}

bool RemoteStager::needs_staging(const pto::RemoteTask& t) const {
  return t.refuse.empty() && !tensors_to_stage(t, cfg_).empty();
}

void RemoteStager::start(std::function<void()> wake) {
  wake_ = std::move(wake);
  thread_ = std::thread([this] { loop(); });
}

void RemoteStager::request_stop() {
  stop_ = true;
  cv_.notify_all();
}

void RemoteStager::join() {
  if (thread_.joinable()) thread_.join();
}

void RemoteStager::stage(pto::RemoteTask&& task) {
  stage_q_.push_back(std::move(task));
  cv_.notify_one();
}

bool RemoteStager::unstage(pto::RemoteCompletion& done, pto::RemoteTask& task, bool abandoned) {
  auto st = staged_.find(done.seq);
  if (st == staged_.end()) return false;
  unstaging_.insert(done.seq);
  unstage_q_.push_back(Unstage{std::move(done), std::move(task), std::move(st->second), abandoned});
  staged_.erase(st);
  cv_.notify_one();
  return true;
}

void RemoteStager::loop() {
  for (;;) {
    pto::RemoteTask task;
    Unstage un;
    bool staging = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !stage_q_.empty() || !unstage_q_.empty(); });
      if (!unstage_q_.empty()) {
        un = std::move(unstage_q_.front());
        unstage_q_.pop_front();
      } else if (!stage_q_.empty()) {
        task = std::move(stage_q_.front());
        stage_q_.pop_front();
        staging = true;
      } else {
        return;  // stopping, nothing left
      }
    }
    if (staging) {
      if (stage_one(task)) continue;  // the engine hears of it when it completes
    } else {
      unstage_one(un);
    }
    if (wake_) wake_();
  }
}

bool RemoteStager::stage_one(pto::RemoteTask& task) {
  const uint32_t tmo = cfg_.peer_ready_timeout_ms;
  std::vector<size_t> staged;
  pto::Status st;
  for (size_t i : tensors_to_stage(task, cfg_)) {
    const uint64_t bytes = pto::tensor_bytes(task.tensors[i]);
    st = link_.buffer_alloc(bytes, &task.buffers[i], tmo);
    if (!st.ok()) break;
    staged.push_back(i);
    if (copies_in(task.directions[i]))
      st = link_.buffer_write(task.buffers[i], reinterpret_cast<const void*>(task.tensors[i].data), bytes, tmo);
    if (!st.ok()) break;
  }
  if (!st.ok())
    for (size_t i : staged) (void)link_.buffer_free(task.buffers[i], tmo);
  std::lock_guard<std::mutex> g(mu_);
  if (!st.ok() || !session_.session_live()) {
    for (size_t i : staged) task.buffers[i].id = 0;  // the session's buffers go with it, or are freed above
    session_.deliver({task.seq, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "",
                      fmt::format("{}: staging a large tensor in a remote buffer failed: {}", link_.label(),
                                  st.ok() ? "the session ended" : st.message)});
    return false;
  }
  staged_[task.seq] = std::move(staged);
  session_.send_staged(std::move(task));
  return true;
}

void RemoteStager::unstage_one(Unstage& un) {
  const uint32_t tmo = cfg_.peer_ready_timeout_ms;
  const uint64_t seq = un.done.seq;
  pto::Status st;
  for (size_t i : un.staged) {
    if (st.ok() && !un.abandoned && un.done.outcome == static_cast<uint8_t>(pto::Outcome::SUCCESS) &&
        copies_out(un.task.directions[i]))
      st = read_back(un.task.buffers[i], un.task.tensors[i], seq, &un.abandoned);
    (void)link_.buffer_free(un.task.buffers[i], tmo);
  }
  if (!st.ok()) {
    un.done.outcome = static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE);
    un.done.message =
        fmt::format("{}: reading outputs back from a remote buffer failed: {}", link_.label(), st.message);
  }
  std::lock_guard<std::mutex> g(mu_);
  unstaging_.erase(seq);
  session_.forget_abandoned(seq);
  session_.deliver(std::move(un.done));
}

// The engine may give up on the task while its outputs come back (its run
// cancelled, its time up) and then free or reuse its tensors: no byte may
// land there after abandon() returned. A read straight into the tensor
// could be anywhere in a chunk's wait then; a piece read into scratch_ is
// copied in under outputs_mu_, which abandon() takes, after a look at the
// mark. One copy more per byte of a staged output.
pto::Status RemoteStager::read_back(const pto::RemoteBufferRef& ref, const pto::ContinuousTensor& t, uint64_t seq,
                                    bool* abandoned) {
  const uint64_t bytes = pto::tensor_bytes(t);
  if (scratch_.size() < std::min(bytes, kReadBackPiece)) scratch_.resize(std::min(bytes, kReadBackPiece));
  for (uint64_t at = 0; at < bytes; at += kReadBackPiece) {
    const uint64_t n = std::min(kReadBackPiece, bytes - at);
    pto::RemoteBufferRef piece = ref;
    piece.offset += at;
    if (pto::Status s = link_.buffer_read(piece, scratch_.data(), n, cfg_.peer_ready_timeout_ms); !s.ok()) return s;
    std::lock_guard<std::mutex> o(outputs_mu_);
    {
      std::lock_guard<std::mutex> g(mu_);
      if (session_.abandoned(seq)) {
        *abandoned = true;
        return pto::Status::Ok();
      }
    }
    std::memcpy(reinterpret_cast<uint8_t*>(t.data) + at, scratch_.data(), n);
  }
  return pto::Status::Ok();
}

}  // namespace ptod
