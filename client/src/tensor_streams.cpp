#include "tensor_streams.h"

#include <fmt/format.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "pto/base/crc32c.h"
#include "pto/v1/raw_fields.h"

namespace pto::client::streams {
namespace {

using Bytes = grpc::ByteBuffer;
const auto kDataLoss = static_cast<int32_t>(grpc::StatusCode::DATA_LOSS);

Status from_grpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return Status::Error(static_cast<int32_t>(s.error_code()), s.error_message());
}

template <class M>
Bytes serialized(const M& m) {
  Bytes out;
  bool own = false;
  (void)grpc::SerializationTraits<M>::Serialize(m, &out, &own);
  return out;
}

// The generated stub's own stream factories, with ByteBuffer for the chunk
// type: the same calls, the chunks as wire bytes (grpc::internal is what
// generated code uses; the callback API's generic stub reads a download
// ~25% slower here, its reads hopping threads).
std::unique_ptr<grpc::ClientWriter<Bytes>> upload_stream(const std::shared_ptr<grpc::Channel>& ch,
                                                         grpc::ClientContext* ctx, pto::v1::TensorInfo* reply) {
  const grpc::internal::RpcMethod m("/pto.v1.Tensors/Upload", grpc::internal::RpcMethod::CLIENT_STREAMING, ch);
  return std::unique_ptr<grpc::ClientWriter<Bytes>>(
      grpc::internal::ClientWriterFactory<Bytes>::Create(ch.get(), m, ctx, reply));
}
std::unique_ptr<grpc::ClientReader<Bytes>> download_stream(const std::shared_ptr<grpc::Channel>& ch,
                                                           grpc::ClientContext* ctx,
                                                           const pto::v1::DownloadRequest& req) {
  const grpc::internal::RpcMethod m("/pto.v1.Tensors/Download", grpc::internal::RpcMethod::SERVER_STREAMING, ch);
  return std::unique_ptr<grpc::ClientReader<Bytes>>(
      grpc::internal::ClientReaderFactory<Bytes>::Create(ch.get(), m, ctx, req));
}

// Slices over the caller's memory that gRPC still holds. Shared with each
// slice (its destroy callback), so a late release finds it alive.
struct Lent {
  std::mutex mu;
  std::condition_variable cv;
  int slices = 0;
};
void give_back(void* p) {
  auto* lent = static_cast<std::shared_ptr<Lent>*>(p);
  {
    std::lock_guard<std::mutex> g((*lent)->mu);
    --(*lent)->slices;
  }
  (*lent)->cv.notify_all();
  delete lent;
}

// The fields of DownloadChunk (ptod.proto): info = 1, data = 2, last = 3,
// crc32c = 4. The data goes from gRPC's buffers into *out, checked on the way.
class DownloadSink final : public pto::v1::RawFieldSink {
 public:
  explicit DownloadSink(std::vector<uint8_t>* out) : out_(out) { out_->clear(); }
  // One chunk; false: a fault (fault()).
  bool chunk(const Bytes& b) {
    std::string why;
    if (pto::v1::read_fields(b, *this, &why) && take_info()) return true;
    if (fault_.empty()) fault_ = "download: a malformed chunk from the daemon: " + why;
    return false;
  }
  Result<pto::v1::TensorInfo> result(const grpc::Status& call) const {
    Result<pto::v1::TensorInfo> r;
    r.status = from_grpc(call);
    r.value = info_;
    if (!fault_.empty())
      r.status = Status::Error(kDataLoss, fault_);
    else if (r.ok() && out_->size() != info_.bytes())
      r.status =
          Status::Error(kDataLoss, fmt::format("download: {} bytes received of {}", out_->size(), info_.bytes()));
    else if (r.ok() && !last_)
      r.status = Status::Error(kDataLoss, "download: the stream ended without its last chunk (no checksum)");
    else if (r.ok() && crc_ != sent_crc_)
      r.status = Status::Error(kDataLoss, fmt::format("download: the bytes received have CRC-32C {:08x}, the daemon "
                                                      "sent {:08x}",
                                                      crc_, sent_crc_));
    return r;
  }

 private:
  bool begin(uint32_t field, uint64_t total) override {
    if (field == 1) {
      info_bytes_.clear();
      info_pending_ = true;
    }
    if (field != 2) return true;
    if (!take_info()) return false;
    if (total > info_.bytes() - std::min<uint64_t>(out_->size(), info_.bytes())) {
      fault_ = fmt::format("download: the daemon sent more than the tensor's {} bytes", info_.bytes());
      return false;
    }
    return true;
  }
  bool piece(uint32_t field, const uint8_t* p, size_t n) override {
    if (field == 1) info_bytes_.append(reinterpret_cast<const char*>(p), n);
    if (field == 2) {
      out_->insert(out_->end(), p, p + n);
      crc_ = pto::crc32c(crc_, p, n);
    }
    return true;
  }
  bool scalar(uint32_t field, uint64_t value) override {
    if (field == 3) last_ = value != 0;
    if (field == 4) sent_crc_ = static_cast<uint32_t>(value);
    return true;
  }
  // The tensor's description, once its field has been read whole.
  bool take_info() {
    if (!info_pending_) return true;
    info_pending_ = false;
    if (!info_.ParseFromString(info_bytes_)) {
      fault_ = "download: the tensor's description cannot be read";
      return false;
    }
    out_->reserve(info_.bytes());
    return true;
  }

  std::vector<uint8_t>* out_;
  std::string info_bytes_, fault_;
  bool info_pending_ = false, last_ = false;
  uint32_t crc_ = 0, sent_crc_ = 0;
  pto::v1::TensorInfo info_;
};

}  // namespace

Result<pto::v1::TensorInfo> upload(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                                   const pto::v1::UploadHeader& header, const void* data, uint64_t bytes,
                                   uint32_t chunk_bytes) {
  Result<pto::v1::TensorInfo> r;
  auto writer = upload_stream(channel, ctx, &r.value);
  pto::v1::UploadChunk first;
  *first.mutable_header() = header;
  bool ok = writer->Write(serialized(first));
  const auto* p = static_cast<const uint8_t*>(data);
  auto lent = std::make_shared<Lent>();
  uint32_t crc = 0;
  for (uint64_t off = 0; ok && off < bytes; off += chunk_bytes) {
    // A data chunk: its field's header, then the caller's bytes as they are.
    const uint64_t n = std::min<uint64_t>(chunk_bytes, bytes - off);
    {
      std::lock_guard<std::mutex> g(lent->mu);
      ++lent->slices;
    }
    grpc::Slice parts[2] = {grpc::Slice(pto::v1::bytes_field_header(2, n)),
                            grpc::Slice(const_cast<uint8_t*>(p + off), n, &give_back, new std::shared_ptr<Lent>(lent))};
    crc = pto::crc32c(crc, p + off, n);
    ok = writer->Write(Bytes(parts, 2));
  }
  if (ok) {  // the checksum of what was sent: the tensor exists only if it matches
    pto::v1::UploadChunk t;
    t.mutable_trailer()->set_crc32c(crc);
    writer->Write(serialized(t));
  }
  writer->WritesDone();
  r.status = from_grpc(writer->Finish());
  // The call is over, so gRPC sends none of the caller's bytes any more; it
  // lets go of the last slices as it tears the call down.
  std::unique_lock<std::mutex> lk(lent->mu);
  lent->cv.wait_for(lk, std::chrono::seconds(10), [&] { return lent->slices == 0; });
  return r;
}

Result<pto::v1::TensorInfo> download(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                                     const pto::v1::DownloadRequest& req, std::vector<uint8_t>* out) {
  auto reader = download_stream(channel, ctx, req);
  DownloadSink sink(out);
  Bytes chunk;
  while (reader->Read(&chunk))
    if (!sink.chunk(chunk)) {
      ctx->TryCancel();
      break;
    }
  return sink.result(reader->Finish());
}

}  // namespace pto::client::streams
