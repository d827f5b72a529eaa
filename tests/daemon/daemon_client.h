// A client of a test's daemon (daemon_process.h): its address, a 30 s
// deadline per call; and the daemon killed and started again under it.
#pragma once

#include <chrono>
#include <memory>

#include <catch2/catch.hpp>

#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

namespace pto_test {

inline std::unique_ptr<pto::client::Client> connect(const DaemonProcess& d) {
  pto::client::ClientOptions o;
  o.address = d.address();
  o.timeout = std::chrono::seconds(30);
  return std::make_unique<pto::client::Client>(o);
}

// SIGKILL and a start on the same state directory; a client once it serves.
inline std::unique_ptr<pto::client::Client> restart(DaemonProcess& d) {
  d.restart();
  REQUIRE(d.up());
  // (A client's first call may still meet the old connection: gRPC shares it.)
  REQUIRE(eventually([&] { return connect(d)->health().value == "SERVING"; }));
  return connect(d);
}

}  // namespace pto_test
