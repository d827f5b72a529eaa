#include "session_wire.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>

namespace ptod {
namespace {

// Field numbers (session.proto): Frame.control = 12, Frame.control_reply =
// 13; Control.data = 9, ControlReply.data = 8.
constexpr uint32_t kControl = 12, kControlReply = 13;
constexpr uint32_t kControlData = 9, kReplyData = 8;

// The number of the first length-delimited field: a frame's body (its
// other fields are numbers); 0 if there is none or the bytes are malformed.
struct FirstBody final : pto::v1::RawFieldSink {
  uint32_t field = 0;
  bool begin(uint32_t f, uint64_t) override {
    field = f;
    return false;  // enough
  }
  bool piece(uint32_t, const uint8_t*, size_t) override { return false; }
  bool scalar(uint32_t, uint64_t) override { return true; }
};

bool parse_whole(const grpc::ByteBuffer& bb, pto::v1::Frame* f, std::string* why) {
  grpc::ByteBuffer copy(bb);  // Deserialize consumes its buffer; the copy shares the slices
  if (grpc::Status s = grpc::SerializationTraits<pto::v1::Frame>::Deserialize(&copy, f); !s.ok()) {
    *why = "a frame that is not a Frame: " + s.error_message();
    return false;
  }
  return true;
}

}  // namespace

void Payload::copy_to(void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  for (const auto& p : pieces) {
    std::memcpy(out, p.data, p.size);
    out += p.size;
  }
}

grpc::ByteBuffer encode_frame(const pto::v1::Frame& f, const grpc::Slice* data) {
  if (!data || data->size() == 0) {  // as a generated stream writes it
    grpc::ByteBuffer out;
    bool own = false;
    (void)grpc::SerializationTraits<pto::v1::Frame>::Serialize(f, &out, &own);
    return out;
  }
  std::string head = f.SerializeAsString();
  // A second occurrence of the body field holding only the data: protobuf
  // merges it into the first (the control's other fields).
  const uint32_t body = f.has_control() ? kControl : kControlReply;
  const uint32_t field = f.has_control() ? kControlData : kReplyData;
  const std::string inner = pto::v1::bytes_field_header(field, data->size());
  head += pto::v1::bytes_field_header(body, inner.size() + data->size());
  head += inner;
  grpc::Slice parts[2] = {grpc::Slice(std::move(head)), *data};
  return grpc::ByteBuffer(parts, 2);
}

bool decode_frame(const grpc::ByteBuffer& bb, pto::v1::Frame* f, Payload* data, std::string* why) {
  *data = Payload{};
  f->Clear();
  if (bb.Length() < kPayloadMinBytes) return parse_whole(bb, f, why);
  if (!bb.Dump(&data->slices).ok()) {
    *why = "a frame that cannot be read";
    return false;
  }
  std::vector<pto::v1::Piece> pieces;
  pieces.reserve(data->slices.size());
  for (const grpc::Slice& s : data->slices) pieces.push_back({s.begin(), s.size()});
  // A large TASK or COMPLETION (inline tensors) parses as a whole: the
  // split below would copy it once more.
  FirstBody first;
  std::string ignored;
  (void)pto::v1::read_fields(pieces, first, &ignored);
  if (first.field != kControl && first.field != kControlReply) {
    data->slices.clear();
    return parse_whole(bb, f, why);
  }
  // The frame without its body, then the body (each occurrence, merged as
  // protobuf merges them) without its data.
  pto::v1::Split frame;
  if (!pto::v1::split_fields(pieces, (uint64_t{1} << kControl) | (uint64_t{1} << kControlReply), &frame, why)) {
    *why = "a malformed frame: " + *why;
    return false;
  }
  std::string body_rest;
  std::vector<pto::v1::Piece> chunk;
  int chunks = 0;
  for (const auto& occurrence : frame.contents) {
    pto::v1::Split body;
    if (!pto::v1::split_fields(occurrence, uint64_t{1} << (frame.taken == kControl ? kControlData : kReplyData), &body,
                               why)) {
      *why = "a malformed frame: " + *why;
      return false;
    }
    body_rest += body.rest;
    for (auto& c : body.contents) {
      chunk = std::move(c);
      ++chunks;
    }
  }
  if (chunks > 1) {
    *why = "a malformed frame: its data field twice";
    return false;
  }
  bool ok = f->ParseFromString(frame.rest);
  if (ok && f->body_case() != pto::v1::Frame::BODY_NOT_SET) {
    *why = "a malformed frame: two bodies";  // which one protobuf keeps depends on their order
    return false;
  }
  if (ok && frame.taken == kControl) ok = f->mutable_control()->ParseFromString(body_rest);
  if (ok && frame.taken == kControlReply) ok = f->mutable_control_reply()->ParseFromString(body_rest);
  if (!ok) {
    *why = "a frame that is not a Frame";
    return false;
  }
  data->pieces = std::move(chunk);
  for (const auto& p : data->pieces) data->size += p.size;
  if (data->empty()) data->slices.clear();
  return true;
}

}  // namespace ptod
