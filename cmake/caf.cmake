# Finds CAF, 1.x by its package config or Debian's 0.17 by cmake/FindCAF.cmake,
# and sets QSP_CAF_VERSION (major.minor.patch) and QSP_CAF_MAJOR.  The
# package config of an installed QsessionProjection repeats this choice with
# the version it was built against (cmake/QsessionProjectionConfig.cmake.in).
find_package(CAF CONFIG QUIET)
if(CAF_FOUND)
  if(CAF_VERSION VERSION_LESS 1.1)
    message(FATAL_ERROR "CAF ${CAF_VERSION} at ${CAF_DIR}: the projection supports CAF 1.1 "
                        "(a package config) or Debian's 0.17 (libcaf-dev, no package config)")
  endif()
else()
  find_package(CAF 0.17 MODULE REQUIRED)
  if(NOT CAF_VERSION VERSION_LESS 0.18)
    message(FATAL_ERROR "CAF ${CAF_VERSION} without a package config: the projection supports "
                        "CAF 1.1 (point CAF_DIR at its lib/cmake/CAF) or Debian's 0.17")
  endif()
endif()
set(QSP_CAF_VERSION "${CAF_VERSION}")
string(REGEX MATCH "^[0-9]+" QSP_CAF_MAJOR "${CAF_VERSION}")
message(STATUS "qsession projection: CAF ${QSP_CAF_VERSION}")
