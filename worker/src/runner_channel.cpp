// Encoding of the runner channel's messages (runner_channel.h). Little
// endian; strings and lists carry a u32 count first. Tensors travel as their
// 40-byte PtoTensor with a u32 tag; the engine checks them again at submit
// like any orchestration's.
#include "runner_channel.h"

#include <fmt/format.h>

#include <cstring>

#include "pto/base/byte_writer.h"

namespace pto {

// --- reading ---------------------------------------------------------------------

bool PayloadReader::take(size_t bytes) {
  if (!ok_ || bytes > n_ - at_) {
    ok_ = false;
    return false;
  }
  return true;
}

uint32_t PayloadReader::u32() {
  if (!take(4)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p_[at_ + i]) << (8 * i);
  at_ += 4;
  return v;
}

uint64_t PayloadReader::u64() {
  if (!take(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p_[at_ + i]) << (8 * i);
  at_ += 8;
  return v;
}

std::string PayloadReader::str(size_t max_bytes) {
  const uint32_t len = u32();
  if (len > max_bytes || !take(len)) {
    ok_ = false;
    return {};
  }
  std::string s(reinterpret_cast<const char*>(p_ + at_), len);
  at_ += len;
  return s;
}

bool PayloadReader::raw(void* out, size_t bytes) {
  if (!take(bytes)) return false;
  std::memcpy(out, p_ + at_, bytes);
  at_ += bytes;
  return true;
}

namespace {

Status bad(const std::string& what) {
  return Status::Error(kWorkerInvalidArgument, "runner channel: " + what);
}

void put_args(ByteWriter& w, const TaskArgs& a) {
  w.u32(static_cast<uint32_t>(a.tensor_count()));
  for (int i = 0; i < a.tensor_count(); ++i) {
    const ContinuousTensor& t = a.tensor(i);
    w.u64(t.data);
    for (uint32_t d : t.shape) w.u32(d);
    w.i32(t.dtype);
    w.i32(t.ndims);
    w.u32(static_cast<uint32_t>(a.tag(i)));
  }
  w.u32(static_cast<uint32_t>(a.scalar_count()));
  for (int i = 0; i < a.scalar_count(); ++i) w.u64(a.scalar(i));
}

bool get_tensor(PayloadReader& r, ContinuousTensor* t) {
  t->data = r.u64();
  for (uint32_t& d : t->shape) d = r.u32();
  t->dtype = r.i32();
  t->ndims = r.i32();
  return r.ok();
}

Status get_args(PayloadReader& r, TaskArgs* out) {
  const uint32_t nt = r.u32();
  // 44 bytes per tensor: the count cannot promise more than the payload holds.
  if (!r.ok() || nt > kMaxRunnerTensors || nt > r.left() / 44)
    return bad(fmt::format("{} tensors in {} bytes (at most {})", nt, r.left(), kMaxRunnerTensors));
  for (uint32_t i = 0; i < nt; ++i) {
    ContinuousTensor t{};
    get_tensor(r, &t);
    const uint32_t tag = r.u32();
    if (!r.ok()) return bad("a tensor is cut short");
    if (tag > static_cast<uint32_t>(TensorArgType::NO_DEP)) return bad(fmt::format("tensor {}: unknown tag {}", i, tag));
    out->add_tensor(t, static_cast<TensorArgType>(tag));
  }
  const uint32_t ns = r.u32();
  if (!r.ok() || ns > kMaxRunnerScalars || ns > r.left() / 8)
    return bad(fmt::format("{} scalars in {} bytes (at most {})", ns, r.left(), kMaxRunnerScalars));
  for (uint32_t i = 0; i < ns; ++i) out->add_scalar(r.u64());
  return r.ok() ? Status::Ok() : bad("the scalars are cut short");
}

void put_config(ByteWriter& w, const CallConfig& c) {
  const auto* p = reinterpret_cast<const uint8_t*>(&c);
  w.bytes(std::vector<uint8_t>(p, p + sizeof(CallConfig)));
}

bool get_config(PayloadReader& r, CallConfig* c) {
  if (!r.raw(c, sizeof(CallConfig))) return false;
  c->output_prefix[sizeof(c->output_prefix) - 1] = '\0';
  return true;
}

void put_handle(ByteWriter& w, const CallableHandle& h) {
  w.digest(h.id.digest);
  w.u32(static_cast<uint32_t>(h.id.kind));
  w.u32(static_cast<uint32_t>(h.id.target_namespace));
  w.u32(static_cast<uint32_t>(h.abi));
  w.i32(h.status.code);
  w.str(h.status.message);
}

bool get_handle(PayloadReader& r, CallableHandle* h) {
  r.raw(h->id.digest.data(), h->id.digest.size());
  const uint32_t kind = r.u32(), ns = r.u32(), abi = r.u32();
  const int32_t code = r.i32();
  std::string message = r.str(kMaxMessageBytes);
  if (!r.ok() || kind < 1 || kind > 4 || ns < 1 || ns > 3 || abi < 1 || abi > 3) return false;
  h->id.kind = static_cast<CallableKind>(kind);
  h->id.target_namespace = static_cast<TargetNamespace>(ns);
  h->abi = static_cast<EntryAbi>(abi);
  h->status = code ? Status::Error(code, std::move(message)) : Status::Ok();
  return true;
}

void put_status(ByteWriter& w, const Status& s) {
  w.i32(s.code);
  w.str(clip_message(s.message));
}

Status get_status(PayloadReader& r) {
  const int32_t code = r.i32();
  std::string message = r.str(kMaxMessageBytes);
  return code ? Status::Error(code, std::move(message)) : Status::Ok();
}

}  // namespace

// --- loads and jobs -------------------------------------------------------------------

Status check_load(const std::string& path, const std::string& symbol) {
  if (path.size() > kRunnerPathBytes)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("the library path has {} bytes; at most {}", path.size(), kRunnerPathBytes));
  if (symbol.size() > kRunnerSymbolBytes)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("the symbol has {} bytes; at most {}", symbol.size(), kRunnerSymbolBytes));
  return Status::Ok();
}

std::vector<uint8_t> encode_load(const std::string& path, const std::string& symbol) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.str(path);
  w.str(symbol);
  return out;
}

Status decode_load(const uint8_t* p, size_t n, std::string* path, std::string* symbol) {
  PayloadReader r(p, n);
  *path = r.str(kRunnerPathBytes);
  *symbol = r.str(kRunnerSymbolBytes);
  return r.ok() ? Status::Ok() : bad("a malformed load request");
}

std::vector<uint8_t> encode_job(const RunnerJob& j) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.str(j.path);
  w.str(j.symbol);
  w.str(j.name);
  w.i32(j.level);
  w.i32(j.num_next_level);
  w.i32(j.num_sub_workers);
  w.str(j.log_file);
  put_config(w, j.config);
  put_args(w, j.args);
  return out;
}

Status decode_job(const uint8_t* p, size_t n, RunnerJob* out) {
  PayloadReader r(p, n);
  out->path = r.str(kRunnerPathBytes);
  out->symbol = r.str(kRunnerSymbolBytes);
  out->name = r.str(kRunnerNameBytes);
  out->level = r.i32();
  out->num_next_level = r.i32();
  out->num_sub_workers = r.i32();
  out->log_file = r.str(kRunnerPathBytes);
  if (!get_config(r, &out->config)) return bad("the job is cut short");
  return get_args(r, &out->args);
}

// --- calls -----------------------------------------------------------------------

std::vector<uint8_t> encode_call(const RunnerCall& c) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.u32(c.op);
  switch (c.op) {
    case RO_SUBMIT:
      w.u32(c.next_level ? 1 : 0);
      w.u32(c.group ? 1 : 0);
      put_handle(w, c.handle);
      put_config(w, c.config);
      w.u32(static_cast<uint32_t>(c.pinned.size()));
      for (int p : c.pinned) w.i32(p);
      w.u32(static_cast<uint32_t>(c.members.size()));
      for (const TaskArgs& a : c.members) put_args(w, a);
      break;
    case RO_ALLOC:
      w.u32(static_cast<uint32_t>(c.shape.size()));
      for (uint32_t d : c.shape) w.u32(d);
      w.i32(c.dtype);
      break;
    case RO_FIND_CALLABLE:
    case RO_FAIL: w.str(c.text); break;
    default: break;
  }
  return out;
}

Status decode_call(const uint8_t* p, size_t n, RunnerCall* out) {
  PayloadReader r(p, n);
  out->op = static_cast<RunnerOp>(r.u32());
  if (!r.ok()) return bad("an empty call");
  switch (out->op) {
    case RO_SUBMIT: {
      out->next_level = r.u32() != 0;
      out->group = r.u32() != 0;
      if (!get_handle(r, &out->handle)) return bad("submit: a malformed callable handle");
      if (!get_config(r, &out->config)) return bad("submit: the call configuration is cut short");
      const uint32_t np = r.u32();
      if (!r.ok() || np > kMaxRunnerMembers || np > r.left() / 4) return bad(fmt::format("submit: {} worker ids", np));
      for (uint32_t i = 0; i < np; ++i) out->pinned.push_back(r.i32());
      const uint32_t nm = r.u32();
      if (!r.ok() || nm == 0 || nm > kMaxRunnerMembers || nm > r.left() / 8)
        return bad(fmt::format("submit: {} members (1..{})", nm, kMaxRunnerMembers));
      out->members.resize(nm);
      for (uint32_t m = 0; m < nm; ++m)
        if (Status s = get_args(r, &out->members[m]); !s.ok()) return s;
      break;
    }
    case RO_ALLOC: {
      const uint32_t nd = r.u32();
      if (!r.ok() || nd > PTO_TENSOR_MAX_DIMS) return bad(fmt::format("alloc: {} dimensions", nd));
      for (uint32_t i = 0; i < nd; ++i) out->shape.push_back(r.u32());
      out->dtype = r.i32();
      break;
    }
    case RO_FIND_CALLABLE: out->text = r.str(1024); break;
    case RO_FAIL: out->text = r.str(kMaxMessageBytes); break;
    case RO_SCOPE_BEGIN:
    case RO_SCOPE_END:
    case RO_CANCELLED: break;
    default: return bad(fmt::format("unknown call {}", static_cast<uint32_t>(out->op)));
  }
  if (!r.ok()) return bad("a call is cut short");
  if (r.left() != 0) return bad(fmt::format("{} bytes after the call", r.left()));
  return Status::Ok();
}

// --- replies ---------------------------------------------------------------------

std::vector<uint8_t> encode_submit_reply(const SubmitResult& res) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  put_status(w, res.status);
  w.u64(res.task_id);
  w.u32(static_cast<uint32_t>(res.tensors.size()));
  for (const auto& member : res.tensors) {
    w.u32(static_cast<uint32_t>(member.size()));
    for (const ContinuousTensor& t : member) {
      w.u64(t.data);
      for (uint32_t d : t.shape) w.u32(d);
      w.i32(t.dtype);
      w.i32(t.ndims);
    }
  }
  return out;
}

Status decode_submit_reply(const uint8_t* p, size_t n, SubmitResult* out) {
  PayloadReader r(p, n);
  out->status = get_status(r);
  out->task_id = r.u64();
  const uint32_t nm = r.u32();
  if (!r.ok() || nm > kMaxRunnerMembers) return bad("a malformed submit reply");
  out->tensors.resize(nm);
  for (auto& member : out->tensors) {
    const uint32_t nt = r.u32();
    if (!r.ok() || nt > kMaxRunnerTensors || nt > r.left() / 40) return bad("a malformed submit reply");
    member.resize(nt);
    for (ContinuousTensor& t : member) get_tensor(r, &t);
  }
  return r.ok() ? Status::Ok() : bad("a submit reply is cut short");
}

std::vector<uint8_t> encode_alloc_reply(const Result<ContinuousTensor>& res) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  put_status(w, res.status);
  w.u64(res.value.data);
  for (uint32_t d : res.value.shape) w.u32(d);
  w.i32(res.value.dtype);
  w.i32(res.value.ndims);
  return out;
}

Status decode_alloc_reply(const uint8_t* p, size_t n, Result<ContinuousTensor>* out) {
  PayloadReader r(p, n);
  out->status = get_status(r);
  get_tensor(r, &out->value);
  return r.ok() ? Status::Ok() : bad("an alloc reply is cut short");
}

std::vector<uint8_t> encode_status_reply(const Status& s, int64_t value) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  put_status(w, s);
  w.u64(static_cast<uint64_t>(value));
  return out;
}

Status decode_status_reply(const uint8_t* p, size_t n, Status* out, int64_t* value) {
  PayloadReader r(p, n);
  *out = get_status(r);
  *value = static_cast<int64_t>(r.u64());
  return r.ok() ? Status::Ok() : bad("a reply is cut short");
}

std::vector<uint8_t> encode_handle_reply(const CallableHandle& h) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  put_handle(w, h);
  return out;
}

Status decode_handle_reply(const uint8_t* p, size_t n, CallableHandle* out) {
  PayloadReader r(p, n);
  return get_handle(r, out) ? Status::Ok() : bad("a malformed callable handle");
}

std::vector<uint8_t> encode_outcome(int64_t code, const std::string& message) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.u64(static_cast<uint64_t>(code));
  w.str(clip_message(message));
  return out;
}

Status decode_outcome(const uint8_t* p, size_t n, int64_t* code, std::string* message) {
  PayloadReader r(p, n);
  *code = static_cast<int64_t>(r.u64());
  *message = r.str(kMaxMessageBytes);
  return r.ok() ? Status::Ok() : bad("a malformed outcome");
}

}  // namespace pto
