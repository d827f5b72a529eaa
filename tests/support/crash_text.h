// How a process's segmentation fault reads in the engine's messages: a
// signal, or under AddressSanitizer (whose handler reports the fault and
// exits) exit status 1.
#pragma once

namespace pto_test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr const char* kSegv = "exited with status 1";
#else
inline constexpr const char* kSegv = "killed by signal 11";
#endif

}  // namespace pto_test
