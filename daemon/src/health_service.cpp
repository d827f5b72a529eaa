#include "health_service.h"

#include <chrono>
#include <utility>

#include <fmt/format.h>

namespace ptod {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthService::HealthService(std::set<std::string> services) : services_(std::move(services)) {}

void HealthService::set_serving(bool serving) {
  {
    std::lock_guard<std::mutex> g(mu_);
    serving_ = serving;
  }
  changed_.notify_all();
}

void HealthService::shutdown() {
  {
    std::lock_guard<std::mutex> g(mu_);
    shut_ = true;
    serving_ = false;
  }
  changed_.notify_all();
}

HealthCheckResponse::ServingStatus HealthService::status_locked(const std::string& service) const {
  if (!service.empty() && !services_.count(service)) return HealthCheckResponse::SERVICE_UNKNOWN;
  return serving_ ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext*, const HealthCheckRequest* req, HealthCheckResponse* reply) {
  std::lock_guard<std::mutex> g(mu_);
  const HealthCheckResponse::ServingStatus s = status_locked(req->service());
  if (s == HealthCheckResponse::SERVICE_UNKNOWN)
    return grpc::Status(grpc::StatusCode::NOT_FOUND, fmt::format("no service named '{}' here", req->service()));
  reply->set_status(s);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const HealthCheckRequest* req,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  std::unique_lock<std::mutex> lk(mu_);
  bool sent = false;
  HealthCheckResponse::ServingStatus last = HealthCheckResponse::UNKNOWN;
  for (;;) {
    const HealthCheckResponse::ServingStatus now = status_locked(req->service());
    if (!sent || now != last) {
      HealthCheckResponse r;
      r.set_status(now);
      lk.unlock();  // a slow reader holds no one else up
      if (!writer->Write(r)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      lk.lock();
      sent = true;
      last = now;
      continue;  // it may have changed meanwhile
    }
    // Told NOT_SERVING first (shutdown() sets it).
    if (shut_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is stopping");
    // Woken by a change; the bound notices a client that went away.
    changed_.wait_for(lk, std::chrono::milliseconds(100));
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
}

}  // namespace ptod
