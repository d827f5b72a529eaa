#include "tensor_streams.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <string>

#include "grpc_status.h"
#include "pto/base/crc32c.h"
#include "pto/dtype.h"
#include "pto/v1/raw_fields.h"

namespace pto::client::streams {
namespace {

using Bytes = grpc::ByteBuffer;
const auto kDataLoss = static_cast<int32_t>(grpc::StatusCode::DATA_LOSS);

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
      r.status = Status::Error(fault_code_, fault_);
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
  // The tensor's description, once its field has been read whole: once,
  // first, and its size what its shape and dtype make (the room made for
  // the bytes is the daemon's word, so it is checked).
  bool take_info() {
    if (!info_pending_) return true;
    info_pending_ = false;
    if (has_info_) {
      fault_ = "download: a second description of the tensor";
      return false;
    }
    has_info_ = true;
    if (!info_.ParseFromString(info_bytes_)) {
      fault_ = "download: the tensor's description cannot be read";
      return false;
    }
    uint64_t n = pto_dtype_size(info_.dtype());
    for (uint32_t d : info_.shape()) n = d && n > UINT64_MAX / d ? 0 : n * d;
    if (n != info_.bytes()) {
      fault_ = fmt::format("download: the tensor's description says {} bytes, its shape and dtype make {}",
                           info_.bytes(), n);
      return false;
    }
    try {
      out_->reserve(info_.bytes());
    } catch (const std::exception&) {  // length_error, bad_alloc: no room for it here
      fault_ = fmt::format("download: {} bytes do not fit in this process's memory", info_.bytes());
      fault_code_ = static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED);
      return false;
    }
    return true;
  }

  std::vector<uint8_t>* out_;
  std::string info_bytes_, fault_;
  int32_t fault_code_ = kDataLoss;
  bool info_pending_ = false, has_info_ = false, last_ = false;
  uint32_t crc_ = 0, sent_crc_ = 0;
  pto::v1::TensorInfo info_;
};

}  // namespace

Result<pto::v1::TensorInfo> upload(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::function<void(grpc::ClientContext*)>& prepare,
                                   const pto::v1::UploadHeader& header, const void* data, uint64_t bytes,
                                   uint32_t chunk_bytes) {
  Result<pto::v1::TensorInfo> r;
  const auto* p = static_cast<const uint8_t*>(data);
  auto lent = std::make_shared<pto::v1::LentSlices>();
  {
    grpc::ClientContext ctx;
    prepare(&ctx);
    auto writer = upload_stream(channel, &ctx, &r.value);
    pto::v1::UploadChunk first;
    *first.mutable_header() = header;
    bool ok = writer->Write(serialized(first));
    uint32_t crc = 0;
    for (uint64_t off = 0; ok && off < bytes; off += chunk_bytes) {
      // A data chunk: its field's header, then the caller's bytes as they are.
      const uint64_t n = std::min<uint64_t>(chunk_bytes, bytes - off);
      grpc::Slice parts[2] = {grpc::Slice(pto::v1::bytes_field_header(2, n)), lent->slice(p + off, n)};
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
  }
  // The call and its context are gone, and with them what gRPC had queued
  // of ours. Bytes already handed to the connection are let go once written
  // or when the connection closes, and keepalive (30 s + 10 s, client.cpp)
  // closes one whose daemon stopped reading.
  std::string why;
  if (!lent->wait([&] { return channel->GetState(false) == GRPC_CHANNEL_READY; }, &why))
    r.status = Status::Error(static_cast<int32_t>(grpc::StatusCode::INTERNAL), "upload: " + why);
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
