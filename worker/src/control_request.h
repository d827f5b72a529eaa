// A control request (CTRL_REGISTER / CTRL_UNREGISTER / CTRL_QUERY) on its way
// to a set of local children: the CallableTable makes one and waits for it;
// the Scheduler's driver sends it to each target as the target becomes idle,
// collects the answers, rolls a failed registration back, and finishes it
// (docs/worker.md, "Registration"). Fields are under the engine lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mailbox.h"
#include "pto/callable.h"

namespace pto {

struct Endpoint;

struct ControlRequest {
  ControlOp op = CTRL_REGISTER;
  Digest digest{};
  std::vector<uint8_t> payload;
  std::vector<Endpoint*> targets;
  std::vector<int> sent, done;  // per target
  std::vector<uint64_t> sent_ns;
  std::vector<uint32_t> incarnation;  // per target: its restarts when the request was sent
  uint64_t created_ns = 0;
  std::function<void()> on_success;  // runs with the lock held when every target acknowledged
  std::vector<Endpoint*> installed;
  std::string failure;
  bool rolling_back = false;
  bool abandoned = false;
  bool finished = false;
  uint32_t query_result = 0;
  std::condition_variable cv;
};

}  // namespace pto
