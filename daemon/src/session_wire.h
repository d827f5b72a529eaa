// Session frames as raw bytes (docs/remote.md, "Frames as raw bytes"): both
// ends of a Session.Open stream read and write gRPC ByteBuffers, and a
// remote buffer's chunk — the data of a BUFFER_WRITE control or of a
// BUFFER_READ reply — travels as a slice over the sender's own memory and
// is left in the receiver's gRPC buffers until it is copied where it goes.
// Through generated messages each chunk was copied twice more per side
// (into the message, into gRPC's buffer; out of gRPC's buffer, out of the
// message). The bytes on the wire are the protobuf encoding of Frame, so
// a generated stub still speaks to either end.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pto/v1/raw_fields.h"
#include "pto/v1/session.pb.h"

namespace ptod {

// A frame's chunk as received: pieces of gRPC's slices, held here.
struct Payload {
  std::vector<grpc::Slice> slices;  // what the pieces point into
  std::vector<pto::v1::Piece> pieces;
  uint64_t size = 0;
  bool empty() const { return size == 0; }
  void copy_to(void* dst) const;
};

// A frame to write, with its chunk (if any) as a slice lent to gRPC.
struct OutFrame {
  pto::v1::Frame f;
  grpc::Slice data;
};

// A frame bigger than this has its control's or reply's data left in
// gRPC's buffers (the Payload); smaller ones parse as any message.
inline constexpr size_t kPayloadMinBytes = 64u << 10;

// The frame's wire bytes. With `data` (non-empty), the frame's control (or
// control reply) gets it as its data field, the bytes not copied: the slice
// is referenced by gRPC until it has written it. The frame's own data field
// must then be empty.
grpc::ByteBuffer encode_frame(const pto::v1::Frame& f, const grpc::Slice* data = nullptr);

// Parses a frame. For a frame of at least kPayloadMinBytes the data of its
// control or control reply goes to *data instead of the message (an empty
// data field in *f); otherwise *data is left empty. False with *why on
// bytes that are not a Frame.
bool decode_frame(const grpc::ByteBuffer& bb, pto::v1::Frame* f, Payload* data, std::string* why);

}  // namespace ptod
