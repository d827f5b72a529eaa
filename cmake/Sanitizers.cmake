# PTO_TSAN / PTO_ASAN apply to every target in the build, so the runtime, the
# tests and the platform all run instrumented together.
if(PTO_TSAN AND PTO_ASAN)
  message(FATAL_ERROR "PTO_TSAN and PTO_ASAN cannot be combined")
endif()
if(PTO_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  add_compile_definitions(PTO_UNDER_TSAN=1)
endif()
if(PTO_ASAN)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
