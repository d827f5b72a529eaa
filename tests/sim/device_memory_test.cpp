#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "pto2/sim/device_memory.h"

using namespace pto2;
using namespace pto2::sim;

TEST_CASE("GM allocations are tracked, aligned and copied to and from", "[gm]") {
  DeviceMemory gm(1 << 20);
  void* a = nullptr;
  REQUIRE(gm.alloc(100, &a).ok());
  CHECK(reinterpret_cast<uintptr_t>(a) % 1024 == 0);
  CHECK(gm.bytes_in_use() == 1024);
  CHECK(gm.allocations() == 1);
  std::vector<uint8_t> host(100), back(100, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 3);
  REQUIRE(gm.copy_to_device(a, host.data(), host.size()).ok());
  REQUIRE(gm.copy_from_device(back.data(), a, back.size()).ok());
  CHECK(back == host);
  REQUIRE(gm.free(a).ok());
  CHECK(gm.bytes_in_use() == 0);
}

TEST_CASE("GM errors name the values: out of memory, double free, foreign pointer, bad range", "[gm]") {
  DeviceMemory gm(4096);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(gm.alloc(3000, &a).ok());
  Status oom = gm.alloc(2048, &b);
  CHECK_FALSE(oom.ok());
  CHECK(b == nullptr);
  CHECK_THAT(oom.message, Catch::Contains("out of memory") && Catch::Contains("2048") && Catch::Contains("4096"));

  uint8_t buf[64] = {};
  Status range = gm.copy_to_device(static_cast<uint8_t*>(a) + 3000, buf, 64);
  CHECK_FALSE(range.ok());
  CHECK_THAT(range.message, Catch::Contains("leaves the allocation"));
  CHECK_FALSE(gm.copy_from_device(buf, buf, 8).ok());  // host memory is not GM

  int local = 0;
  Status foreign = gm.free(&local);
  CHECK_THAT(foreign.message, Catch::Contains("not an address this device allocated"));
  REQUIRE(gm.free(a).ok());
  Status twice = gm.free(a);
  CHECK_FALSE(twice.ok());
  CHECK_THAT(twice.message, Catch::Contains("double free"));
  CHECK_FALSE(gm.alloc(0, &a).ok());
  CHECK_FALSE(gm.alloc(~0ull - 100, &a).ok());  // no wrap-around in the size
  REQUIRE(gm.alloc(1024, &a).ok());
  CHECK_FALSE(gm.copy_to_device(static_cast<uint8_t*>(a) + 8, buf, ~0ull - 4).ok());  // no wrap in the range
  REQUIRE(gm.free(a).ok());
  REQUIRE(gm.alloc(4096, &a).ok());  // everything was given back
  REQUIRE(gm.free(a).ok());
}
