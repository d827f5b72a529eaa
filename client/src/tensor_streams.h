// Tensors.Upload and Tensors.Download over gRPC as raw bytes (docs/proto.md,
// "Transfers as raw bytes"): the same messages on the wire, without the
// copies generated messages make. An upload's data chunks are slices over
// the caller's memory; a download's data goes from gRPC's buffers straight
// into the destination.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "pto/client.h"

namespace pto::client::streams {

// prepare: sets up the call's context (deadline, token); the context lives
// inside, so that it is gone before the wait for the caller's memory. The
// header goes first, then the bytes in chunks of chunk_bytes, then the
// trailer with their CRC-32C.
Result<pto::v1::TensorInfo> upload(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::function<void(grpc::ClientContext*)>& prepare,
                                   const pto::v1::UploadHeader& header, const void* data, uint64_t bytes,
                                   uint32_t chunk_bytes);
// The tensor's bytes into *out (replaced), checked against the CRC-32C the
// daemon sends with the last chunk.
Result<pto::v1::TensorInfo> download(const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* ctx,
                                     const pto::v1::DownloadRequest& req, std::vector<uint8_t>* out);

}  // namespace pto::client::streams
