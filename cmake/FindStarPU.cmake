# StarPU 1.3 from Debian's libstarpu-dev (for the side-by-side benchmark),
# located through pkg-config.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_STARPU QUIET starpu-1.3)
endif()
find_path(StarPU_INCLUDE_DIR NAMES starpu.h HINTS ${PC_STARPU_INCLUDE_DIRS} PATH_SUFFIXES starpu/1.3)
find_library(StarPU_LIBRARY NAMES starpu-1.3 HINTS ${PC_STARPU_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(StarPU REQUIRED_VARS StarPU_LIBRARY StarPU_INCLUDE_DIR)
if(StarPU_FOUND AND NOT TARGET StarPU::starpu)
  add_library(StarPU::starpu UNKNOWN IMPORTED)
  set_target_properties(StarPU::starpu PROPERTIES
    IMPORTED_LOCATION "${StarPU_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${StarPU_INCLUDE_DIR}")
endif()
