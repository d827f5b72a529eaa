// The base library's clock and EventCount, by the names the runtime uses.
#pragma once

#include "pto/base/clock.h"
#include "pto/base/event_count.h"

namespace pto2 {

using pto::cpu_relax;
using pto::EventCount;
using pto::now_ns;
using pto::spin_then_park;

}  // namespace pto2
