// PTO_SANITIZED: defined when this test is built with AddressSanitizer or
// ThreadSanitizer (the daemon and engine it runs are then built so too).
// For the few tests whose subject a sanitizer's own runtime gets in the way
// of: it intercepts mmap, or needs file descriptors of its own to report.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PTO_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PTO_SANITIZED 1
#endif
#endif
