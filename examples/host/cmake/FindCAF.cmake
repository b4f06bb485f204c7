# The host's own find module for Debian's libcaf-dev (CAF 0.17), which ships
# neither a CMake package nor a pkg-config file: CAF_VERSION and the imported
# target CAF::core.  CAF 1.x brings a package config (CMakeLists.txt finds it
# first).  The projection's package config has a module of its own for its
# find_dependency; both define CAF::core only if it does not exist yet.
find_path(CAF_INCLUDE_DIR NAMES caf/all.hpp)
find_library(CAF_CORE_LIBRARY NAMES caf_core)
unset(CAF_VERSION)
if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  # 0.17 spells its version 1706.
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _host_caf_ver
       REGEX "^#define CAF_VERSION [0-9]+")
  if(_host_caf_ver MATCHES "CAF_VERSION ([0-9]+)")
    math(EXPR _maj "${CMAKE_MATCH_1} / 10000")
    math(EXPR _min "(${CMAKE_MATCH_1} / 100) % 100")
    math(EXPR _pat "${CMAKE_MATCH_1} % 100")
    set(CAF_VERSION "${_maj}.${_min}.${_pat}")
  endif()
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF REQUIRED_VARS CAF_CORE_LIBRARY CAF_INCLUDE_DIR
                                  VERSION_VAR CAF_VERSION)
if(CAF_FOUND AND NOT TARGET CAF::core)
  find_package(Threads REQUIRED)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY)
