// Links the installed client library and calls a daemon that is not there:
// the call must come back UNAVAILABLE (14), not crash or hang.
#include <cstdio>

#include "pto/client.h"
#include "pto/version.h"

int main(int argc, char** argv) {
  pto::client::ClientOptions o;
  o.address = argc > 1 ? argv[1] : "unix:/nonexistent/ptod.sock";
  o.timeout = std::chrono::milliseconds(2000);
  pto::client::Client c(o);
  auto v = c.version();
  std::printf("client_probe %s: version() -> code %d\n", PTO_VERSION_STRING, v.status.code);
  return v.status.code == 14 ? 0 : 1;
}
