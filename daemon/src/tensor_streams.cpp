#include "tensor_streams.h"

#include <algorithm>
#include <string>
#include <vector>

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

class Refused final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit Refused(const grpc::Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

class Download final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Download(const TensorEntry& e, TensorStore& tensors, uint64_t chunk)
      : e_(e), tensors_(tensors), pin_(std::make_unique<Pin>(tensors, e.id)), chunk_(chunk) {
    next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return end(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    if (off_ == e_.bytes) return end(grpc::Status::OK);
    next();
  }
  void OnDone() override { delete this; }

 private:
  void next() {
    const auto* src = reinterpret_cast<uint8_t*>(e_.tensor.data) + off_;
    const uint64_t n = std::min(chunk_, e_.bytes - off_);
    // DownloadChunk (ptod.proto): info (first chunk), then data (field 2) as
    // its key and length and a slice over the tensor, then last and crc32c
    // (last chunk). Protobuf writes the small parts; fields may follow in
    // any order, these come in the field numbers' own.
    pto::v1::DownloadChunk parts;
    if (off_ == 0) to_proto(e_, parts.mutable_info());
    std::string head = parts.SerializeAsString();
    if (n > 0) head += pto::v1::bytes_field_header(2, n);
    std::vector<grpc::Slice> slices;
    slices.emplace_back(head);
    if (n > 0) slices.emplace_back(const_cast<uint8_t*>(src), n, &give_back, tensors_.lend(e_.id, e_.tensor));
    crc_ = pto::crc32c(crc_, src, n);
    off_ += n;
    if (off_ == e_.bytes) {
      parts.Clear();
      parts.set_last(true);
      parts.set_crc32c(crc_);
      slices.emplace_back(parts.SerializeAsString());
    }
    buf_ = grpc::ByteBuffer(slices.data(), slices.size());
    // No buffer_hint (the sync handler set one): a callback write with it
    // waits for a later flush, and a Python client's download ran at half
    // speed (0.26-0.32 GB/s against 0.54-0.57).
    StartWrite(&buf_);
  }
  // Unpinned before the status goes out: the client, told the download
  // ended, may free the tensor at once (its pages stay lent, not reused).
  void end(const grpc::Status& s) {
    pin_.reset();
    Finish(s);
  }

  TensorEntry e_;
  TensorStore& tensors_;
  std::unique_ptr<Pin> pin_;
  uint64_t chunk_;
  uint64_t off_ = 0;
  uint32_t crc_ = 0;
  grpc::ByteBuffer buf_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* start_download(const DaemonParts& p, grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request) {
  Principal who;
  if (grpc::Status denied = identify(p, ctx, &who); !denied.ok()) return new Refused(denied);
  pto::v1::DownloadRequest req;
  grpc::ByteBuffer copy(*request);  // Deserialize consumes its buffer; the copy shares the slices
  if (grpc::Status bad = grpc::SerializationTraits<pto::v1::DownloadRequest>::Deserialize(&copy, &req); !bad.ok())
    return new Refused(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "download: the request cannot be parsed"));
  TensorEntry e;
  if (Status s = p.tensors.find_and_pin(who, req.tensor().id(), req.tensor().name(), &e); !s.ok())
    return new Refused(to_grpc(s));
  uint64_t chunk = req.chunk_bytes() ? req.chunk_bytes() : (1u << 20);
  chunk = std::max<uint64_t>(4096, std::min<uint64_t>(chunk, p.cfg.max_message_bytes - 4096));
  return new Download(e, p.tensors, chunk);
}

}  // namespace ptod
