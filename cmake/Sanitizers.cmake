# PTO_TSAN / PTO_ASAN apply to every target in the build, so the runtime, the
# tests and the platform all run instrumented together.
if(PTO_TSAN AND PTO_ASAN)
  message(FATAL_ERROR "PTO_TSAN and PTO_ASAN cannot be combined")
endif()
if(PTO_TSAN)
  # clang's: GCC 12's runtime cannot start a thread in a child forked from a
  # multi-threaded process ("dup thread with used id"), and the engine does
  # exactly that when it replaces a child or forks a runner while runs go on.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PTO_TSAN needs clang (CC=clang CXX=clang++): GCC's ThreadSanitizer runtime cannot start "
                        "threads in a child forked from a multi-threaded process")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  add_compile_definitions(PTO_UNDER_TSAN=1)
endif()
if(PTO_ASAN)
  # clang 18 or later: older ASan runtimes (GCC 12's, clang 14's) do not take
  # their allocator's locks around fork(). The engine forks runners and
  # replacement children while its other threads allocate, and a child forked
  # while one of them held a size class's lock hangs at its first allocation
  # of that class (seen as a runner that stops beating). glibc's own malloc,
  # in the normal build, is fork-safe.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 18)
    message(FATAL_ERROR "PTO_ASAN needs clang 18 or later (CC=clang-19 CXX=clang++-19, Debian 12's clang-19 and "
                        "libclang-rt-19-dev): older AddressSanitizer runtimes leave a child forked from a "
                        "multi-threaded process with its allocator locked")
  endif()
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  # clang does not define GCC's __SANITIZE_ADDRESS__: code that tells
  # LeakSanitizer about a deliberate leak tests this instead.
  add_compile_definitions(PTO_UNDER_ASAN=1)
endif()
# A sanitizer's report needs file:line in its stacks, not variables: line
# tables only, after RelWithDebInfo's -g (the later flag wins). Full debug
# info made the ASan build 16% slower from scratch on 2 vCPUs (636 s against
# 549 s), where scripts/test.sh must stay inside CI's time.
if(PTO_TSAN OR PTO_ASAN OR PTO_FUZZ)
  add_compile_options(-gline-tables-only)
  # And they link with the compiler's own lld (Debian's lld-14 beside clang,
  # lld-19 beside clang-19; scripts/install-deps.sh installs both): an ASan
  # test links in ~0.9 s against ~2.3 s with GNU ld, and these trees link
  # ~110 executables and libraries each. The normal build keeps the system's
  # default linker: it is what users build.
  get_filename_component(_pto_cxx_real "${CMAKE_CXX_COMPILER}" REALPATH)
  get_filename_component(_pto_cxx_dir "${_pto_cxx_real}" DIRECTORY)
  find_program(PTO_SANITIZED_LLD ld.lld HINTS "${_pto_cxx_dir}" NO_DEFAULT_PATH)
  if(PTO_SANITIZED_LLD)
    add_link_options("--ld-path=${PTO_SANITIZED_LLD}")
    message(STATUS "sanitized build: linking with ${PTO_SANITIZED_LLD}")
  else()
    message(STATUS "sanitized build: no ld.lld beside ${_pto_cxx_real}, linking with the default linker "
                   "(slower; install the compiler's lld package)")
  endif()
endif()
if(PTO_FUZZ)
  # libFuzzer targets (tests/fuzz): clang's coverage instrumentation on the
  # folders whose code a decoder reaches (tests/fuzz/coverage.allowlist),
  # with ASan + UBSan. With PTO_ASAN the targets share the ASan build: the
  # allowlist keeps the instrumentation off the chip runtime and simulator,
  # so the whole suite runs there about as fast (203 s against 195 s on 2
  # vCPUs) and scripts/test.sh compiles one sanitized tree instead of two
  # (599 s against 549 s for ASan plus ~270 s for a separate fuzz tree).
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PTO_FUZZ needs clang with its libFuzzer runtime (CC=clang-19 CXX=clang++-19, "
                        "Debian 12's clang-19 and libclang-rt-19-dev)")
  endif()
  if(NOT PTO_ASAN)
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
    add_compile_definitions(PTO_UNDER_ASAN=1)
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link
                      -fsanitize-coverage-allowlist=${PROJECT_SOURCE_DIR}/tests/fuzz/coverage.allowlist)
endif()

# A ThreadSanitizer build runs the concurrency tests alone (scripts/test.sh).
# They run pto2-run (the examples' golden tests) but not ptod or ptoctl, and
# none links the client: those targets are left out of its `all` (still
# buildable by name), and so is the install (deploy/), which no sanitized
# tree is for: 7 objects and 4 links, ~56 CPU-s of that tree by its .ninja_log.
function(pto_skip_under_tsan)
  if(PTO_TSAN)
    set_target_properties(${ARGN} PROPERTIES EXCLUDE_FROM_ALL ON)
  endif()
endfunction()
