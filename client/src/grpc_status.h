// A gRPC call's status as the client library's Status (its code is the
// gRPC status code).
#pragma once

#include <grpcpp/support/status.h>

#include "pto/client.h"

namespace pto::client {

inline Status from_grpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  return Status::Error(static_cast<int32_t>(s.error_code()), s.error_message());
}

}  // namespace pto::client
