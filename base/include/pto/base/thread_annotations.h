// Clang's thread-safety annotations, as documentation everywhere and as
// checks where the compiler supports them (clang with -Wthread-safety on a
// capability-annotated mutex); they expand to nothing elsewhere. The engine
// states with them which lock a field or a method needs.
#pragma once

#if defined(__clang__)
#define PTO_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PTO_THREAD_ANNOTATION(x)
#endif

#define PTO_GUARDED_BY(m) PTO_THREAD_ANNOTATION(guarded_by(m))
#define PTO_REQUIRES(m) PTO_THREAD_ANNOTATION(requires_capability(m))
#define PTO_EXCLUDES(m) PTO_THREAD_ANNOTATION(locks_excluded(m))
