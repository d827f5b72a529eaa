// A client of a test's daemon (daemon_process.h): its address, a 30 s
// deadline per call.
#pragma once

#include <chrono>
#include <memory>

#include "daemon_process.h"
#include "pto/client.h"

namespace pto_test {

inline std::unique_ptr<pto::client::Client> connect(const DaemonProcess& d) {
  pto::client::ClientOptions o;
  o.address = d.address();
  o.timeout = std::chrono::seconds(30);
  return std::make_unique<pto::client::Client>(o);
}

}  // namespace pto_test
