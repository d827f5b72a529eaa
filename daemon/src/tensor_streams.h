// Download as raw bytes (docs/proto.md, "Transfers as raw bytes"): the
// same messages on the wire, without a generated message's copies of the
// data.
//
// Download: each DownloadChunk is written as the wire bytes it is, its data
// field a slice over the tensor's own pages in the arena. Through the
// generated message a download cost the daemon three passes over the bytes
// before the socket (the copy into the message, its serialisation into
// gRPC's buffer, the CRC); now only the CRC reads them. The tensor is
// pinned (a Free fails) until the last chunk is written, as before; its
// pages stay lent (TensorStore::lend) while any slice over them lives, since
// gRPC may hold the last ones after the call has ended: a Free then takes
// the tensor away at once and its arena range with the last slice.
//
// Upload stays the generated sync method: read as raw bytes (each message's
// data pieces from gRPC's slices straight into the tensor) it ran at
// 1.2-1.3 GB/s against 1.7-2.1 for the generated message, interleaved runs.
// Tried again with a chunk's pieces written in one call (Worker::write of
// iovecs) and gRPC's buffers dropped before the next read: 1.37-1.82 GB/s
// against 1.80-2.70 (4 MiB chunks, 7 interleaved pairs). Held until the
// chunk is written, gRPC's receive buffers cannot be reused for the next
// message, whose bytes then land in fresh pages (their faults showed in the
// profile); the generated message's copy goes into its own string, warm
// from the chunk before, and lets gRPC's buffers go at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "services.h"

namespace ptod {

// The stream a Download is served on: its request and chunks as wire bytes,
// on a sync handler thread (TensorsService; a callback method would bring
// gRPC's callback threads into the daemon, docs/daemon.md).
using DownloadStream = grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>;

// One Download call, start to end.
grpc::Status serve_download(const DaemonParts& p, grpc::ServerContext* ctx, DownloadStream* stream);

}  // namespace ptod
