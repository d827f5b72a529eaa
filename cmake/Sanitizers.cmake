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
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(PTO_FUZZ)
  # libFuzzer targets (tests/fuzz): clang's coverage instrumentation on every
  # library they reach, with ASan + UBSan.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PTO_FUZZ needs clang (CC=clang CXX=clang++) and libfuzzer-14-dev")
  endif()
  if(NOT PTO_ASAN)
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
