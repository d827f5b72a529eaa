// eventually(pred, ms): a bounded wait for a condition the test cannot be
// told about (a child's state, a daemon's answer). Polls pred() every 2 ms for
// at most ms milliseconds and returns its last value: true as soon as it
// holds, pred()'s verdict at the deadline otherwise. Where the code under test
// offers a callback, a future or a counter, wait on that instead.
#pragma once

#include <chrono>
#include <thread>

namespace pto_test {

template <class F>
bool eventually(F pred, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

}  // namespace pto_test
