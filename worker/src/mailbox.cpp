#include "mailbox.h"

#include <cstring>

#include "pto/worker.h"

namespace pto {

const char* mailbox_state_name(uint32_t s) {
  switch (s) {
    case MB_IDLE: return "IDLE";
    case MB_TASK_READY: return "TASK_READY";
    case MB_TASK_DONE: return "TASK_DONE";
    case MB_TASK_FAILED: return "TASK_FAILED";
    case MB_CONTROL_REQUEST: return "CONTROL_REQUEST";
    case MB_CONTROL_DONE: return "CONTROL_DONE";
    case MB_INIT_READY: return "INIT_READY";
    case MB_INIT_FAILED: return "INIT_FAILED";
    case MB_SHUTDOWN: return "SHUTDOWN";
    default: break;
  }
  return "UNKNOWN";
}

void Mailbox::set_error(int32_t code, const std::string& text) {
  error_code = code;
  const std::string clipped = clip_message(text);
  std::memcpy(blob, clipped.data(), clipped.size());
  error_bytes = static_cast<uint32_t>(clipped.size());
}

void InnerReport::publish(const std::vector<ChildInfo>& children) {
  const uint32_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  uint32_t n = 0;
  for (const ChildInfo& c : children) {
    if (n == kMax) break;
    entries[n++] = {static_cast<uint8_t>(c.kind), static_cast<uint8_t>(c.state), static_cast<uint16_t>(c.index), c.pid,
                    c.tasks_run};
  }
  count = n;
  seq.store(s + 2, std::memory_order_release);
}

bool InnerReport::read(std::vector<ChildInfo>* out) const {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint32_t s0 = seq.load(std::memory_order_acquire);
    if (s0 == 0) return false;  // nothing published yet
    if (s0 & 1) continue;       // being written
    out->clear();
    const uint32_t n = std::min<uint32_t>(count, kMax);
    for (uint32_t i = 0; i < n; ++i) {
      const Entry e = entries[i];
      ChildInfo c;
      c.kind = static_cast<ChildKind>(e.kind);
      c.state = static_cast<ChildState>(e.state);
      c.index = e.index;
      c.pid = e.pid;
      c.tasks_run = e.tasks_run;
      out->push_back(c);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) == s0) return true;
  }
  return false;
}

std::string Mailbox::error() const {
  return std::string(reinterpret_cast<const char*>(blob), std::min<size_t>(error_bytes, kMaxMessageBytes));
}

void encode_args(const TaskArgsView& view, std::vector<uint8_t>* out) {
  out->resize(blob_size(view.tensor_count, view.scalar_count));
  uint8_t* p = out->data();
  std::memcpy(p, &view.tensor_count, 4);
  std::memcpy(p + 4, &view.scalar_count, 4);
  p += kBlobHeaderBytes;
  const size_t tb = sizeof(ContinuousTensor) * static_cast<size_t>(view.tensor_count);
  if (tb) std::memcpy(p, view.tensors, tb);
  if (view.scalar_count) std::memcpy(p + tb, view.scalars, sizeof(uint64_t) * static_cast<size_t>(view.scalar_count));
}

Status decode_args(const uint8_t* blob, size_t bytes, TaskArgsView* view) {
  if (bytes < kBlobHeaderBytes)
    return Status::Error(kWorkerChildFailed, "args blob of " + std::to_string(bytes) + " bytes has no header");
  int32_t t, s;
  std::memcpy(&t, blob, 4);
  std::memcpy(&s, blob + 4, 4);
  if (t < 0 || s < 0 || blob_size(t, s) > bytes)
    return Status::Error(kWorkerChildFailed, "args blob header says " + std::to_string(t) + " tensors and " +
                                                 std::to_string(s) + " scalars, which do not fit its " +
                                                 std::to_string(bytes) + " bytes");
  // Every tensor is one the engine could have sent: a callable may compute
  // sizes from it without overflowing.
  for (int32_t i = 0; i < t; ++i) {
    ContinuousTensor x;
    std::memcpy(&x, blob + kBlobHeaderBytes + sizeof(ContinuousTensor) * static_cast<size_t>(i), sizeof x);
    uint64_t bytes = pto_dtype_size(x.dtype);
    bool ok = bytes != 0 && x.ndims >= 0 && x.ndims <= PTO_TENSOR_MAX_DIMS;
    for (int32_t d = 0; ok && d < x.ndims; ++d) ok = !__builtin_mul_overflow(bytes, uint64_t(x.shape[d]), &bytes);
    if (!ok)
      return Status::Error(kWorkerChildFailed, "args blob tensor " + std::to_string(i) + " has dtype " +
                                                   std::to_string(x.dtype) + " and " + std::to_string(x.ndims) +
                                                   " dims: not a tensor the engine sends");
  }
  view->tensor_count = t;
  view->scalar_count = s;
  // The blob starts 1024-B aligned and tensors are 40 B, so both arrays are
  // 8-byte aligned.
  view->tensors = reinterpret_cast<const ContinuousTensor*>(blob + kBlobHeaderBytes);
  view->scalars = reinterpret_cast<const uint64_t*>(blob + kBlobHeaderBytes + sizeof(ContinuousTensor) * t);
  return Status::Ok();
}

namespace {
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), s.begin(), s.end());
}
bool get_str(const uint8_t*& p, const uint8_t* end, std::string* s) {
  if (end - p < 4) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(p[i]) << (8 * i);
  p += 4;
  if (static_cast<size_t>(end - p) < n) return false;
  s->assign(reinterpret_cast<const char*>(p), n);
  p += n;
  return true;
}
}  // namespace

std::vector<uint8_t> encode_control(const ControlDescriptor& d) {
  std::vector<uint8_t> out{static_cast<uint8_t>(d.kind), static_cast<uint8_t>(d.abi)};
  put_str(out, d.path);
  put_str(out, d.symbol);
  put_str(out, d.name);
  return out;
}

Status decode_control(const uint8_t* blob, size_t bytes, ControlDescriptor* out) {
  const uint8_t* p = blob;
  const uint8_t* end = blob + bytes;
  if (bytes < 2) return Status::Error(kWorkerChildFailed, "control payload too short");
  if (p[0] < static_cast<uint8_t>(CallableKind::CHIP) || p[0] > static_cast<uint8_t>(CallableKind::FUNCTION) ||
      p[1] < static_cast<uint8_t>(EntryAbi::CHIP) || p[1] > static_cast<uint8_t>(EntryAbi::ORCHESTRATION))
    return Status::Error(kWorkerChildFailed, "control payload names kind " + std::to_string(p[0]) + " and abi " +
                                                 std::to_string(p[1]) + ", which do not exist");
  out->kind = static_cast<CallableKind>(p[0]);
  out->abi = static_cast<EntryAbi>(p[1]);
  p += 2;
  if (!get_str(p, end, &out->path) || !get_str(p, end, &out->symbol) || !get_str(p, end, &out->name))
    return Status::Error(kWorkerChildFailed, "control payload truncated");
  return Status::Ok();
}

}  // namespace pto
