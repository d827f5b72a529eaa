# libsystemd (sd_notify) from Debian's libsystemd-dev, located through pkg-config.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_SYSTEMD QUIET libsystemd)
endif()
find_path(Systemd_INCLUDE_DIR NAMES systemd/sd-daemon.h HINTS ${PC_SYSTEMD_INCLUDE_DIRS})
find_library(Systemd_LIBRARY NAMES systemd HINTS ${PC_SYSTEMD_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Systemd REQUIRED_VARS Systemd_LIBRARY Systemd_INCLUDE_DIR)
if(Systemd_FOUND AND NOT TARGET Systemd::systemd)
  add_library(Systemd::systemd UNKNOWN IMPORTED)
  set_target_properties(Systemd::systemd PROPERTIES
    IMPORTED_LOCATION "${Systemd_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Systemd_INCLUDE_DIR}")
endif()
