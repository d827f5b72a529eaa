// grpc.health.v1.Health, served by the daemon itself on gRPC's sync threads.
// gRPC's built-in service (EnableDefaultHealthCheckService) runs on the
// callback API, and a server with any callback method polls its sockets from
// two more threads of gRPC's own (the callback queue's "nexting_thread"s):
// every call, health or not, then crossed one more thread (docs/daemon.md,
// "Figures").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace ptod {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  // `services`: the names a client may ask about besides "" (the daemon as a
  // whole). All NOT_SERVING until set_serving(true).
  explicit HealthService(std::set<std::string> services);
  // Every name at once: the daemon serves, or it is draining.
  void set_serving(bool serving);
  // Open Watch streams end (UNAVAILABLE) and new ones end at once: before the
  // server's shutdown, which waits for its handlers.
  void shutdown();

  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     grpc::health::v1::HealthCheckResponse*) override;
  // The status now, then at every change, until the client cancels or the
  // daemon stops. An unknown name reads SERVICE_UNKNOWN (the protocol's rule).
  grpc::Status Watch(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>*) override;

 private:
  grpc::health::v1::HealthCheckResponse::ServingStatus status_locked(const std::string& service) const;

  const std::set<std::string> services_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool serving_ = false;
  bool shut_ = false;
};

}  // namespace ptod
