#include "tensor_streams.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "job_manager.h"
#include "pto/base/crc32c.h"
#include "pto/v1/raw_fields.h"

namespace ptod {
namespace {

// The tensor's pin for the call (a Free meanwhile fails, as with any
// transfer in progress), dropped before the call's status is sent.
struct Pin {
  TensorStore& tensors;
  uint64_t id;
  Pin(TensorStore& t, uint64_t i) : tensors(t), id(i) {}
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { tensors.pin(id, -1); }
};

// One data slice's hold on the tensor's pages, until gRPC lets go of it.
void give_back(void* l) { TensorStore::give_back(static_cast<TensorStore::Lend*>(l)); }

// One chunk of a download from *off on, as DownloadChunk's wire bytes: info
// (first chunk), then data (field 2) as its key and length and a slice over
// the tensor, then last and crc32c (last chunk). Protobuf writes the small
// parts; fields may follow in any order, these come in the field numbers' own.
grpc::ByteBuffer next_chunk(const TensorEntry& e, TensorStore& tensors, uint64_t chunk, uint64_t* off, uint32_t* crc) {
  const auto* src = reinterpret_cast<uint8_t*>(e.tensor.data) + *off;
  const uint64_t n = std::min(chunk, e.bytes - *off);
  pto::v1::DownloadChunk parts;
  if (*off == 0) to_proto(e, parts.mutable_info());
  std::string head = parts.SerializeAsString();
  if (n > 0) head += pto::v1::bytes_field_header(2, n);
  std::vector<grpc::Slice> slices;
  slices.emplace_back(head);
  if (n > 0) slices.emplace_back(const_cast<uint8_t*>(src), n, &give_back, tensors.lend(e.id, e.tensor));
  *crc = pto::crc32c(*crc, src, n);
  *off += n;
  if (*off == e.bytes) {
    parts.Clear();
    parts.set_last(true);
    parts.set_crc32c(*crc);
    slices.emplace_back(parts.SerializeAsString());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

grpc::Status serve_download(const DaemonParts& p, grpc::ServerContext* ctx, DownloadStream* stream) {
  Principal who;
  if (grpc::Status denied = identify(p, ctx, &who); !denied.ok()) return denied;
  grpc::ByteBuffer request;
  if (!stream->Read(&request))
    return grpc::Status(grpc::StatusCode::CANCELLED, "download: the client went away before its request");
  pto::v1::DownloadRequest req;
  if (grpc::Status bad = grpc::SerializationTraits<pto::v1::DownloadRequest>::Deserialize(&request, &req); !bad.ok())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "download: the request cannot be parsed");
  TensorEntry e;
  if (Status s = p.tensors.find_and_pin(who, req.tensor().id(), req.tensor().name(), &e); !s.ok()) return to_grpc(s);
  // Unpinned (here, on return) before the status goes out: the client, told
  // the download ended, may free the tensor at once (its pages stay lent,
  // not reused).
  Pin pin(p.tensors, e.id);
  uint64_t chunk = req.chunk_bytes() ? req.chunk_bytes() : (1u << 20);
  chunk = std::max<uint64_t>(4096, std::min<uint64_t>(chunk, p.cfg.max_message_bytes - 4096));
  uint64_t off = 0;
  uint32_t crc = 0;
  // A client that reads nothing would hold the pin, and this thread, until
  // the daemon stops.
  StallWatch::Call watched = watch_writes(p, ctx);
  do {
    // No buffer_hint: a write with it waits for a later flush (a Python
    // client's download once ran at half speed so).
    if (!watched.write(stream, next_chunk(e, p.tensors, chunk, &off, &crc)))
      return write_failed(watched, fmt::format("download of tensor {}", e.id));
  } while (off < e.bytes);
  return grpc::Status::OK;
}

}  // namespace ptod
