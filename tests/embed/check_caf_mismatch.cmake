# cmake -DCASE=host|dependency|unset -DEMBED_DIR=... -DBUILT=<the build's CAF version>
#       -DOTHER=<major.minor of the other CAF> [-DOTHER_CAF_DIR=<CAF 1.x>/lib/cmake/CAF]
#       -DHOST_SRC=.../caf_mismatch -DGENERATOR=... -DMAKE_PROGRAM=... -DCXX=...
#       -P check_caf_mismatch.cmake
# Configures the host of caf_mismatch/ with the other CAF against the
# installed, moved package (fixture embed_install) and passes if the
# configure fails with the package config's error naming both versions.
#   host        the host finds the other CAF itself, before the package;
#   dependency  the host finds none, the package's find_dependency meets the
#               other one first in CMAKE_PREFIX_PATH (a 0.17 package and a
#               CAF 1.1 prefix: Debian's CAF has no prefix of its own);
#   unset       (a CAF 1.x package) the host names no CAF at all: the
#               configure must fail with the package config's request to
#               point CMake at its CAF (it records no path of the build
#               machine, so it cannot fall back to the build's CAF).
set(prefix ${EMBED_DIR}/moved-prefix)
set(bin ${EMBED_DIR}/caf-mismatch-${CASE})
set(args -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX})
if(CASE STREQUAL "host" AND OTHER_CAF_DIR)
  list(APPEND args -DHOST_CAF=config -DCAF_DIR=${OTHER_CAF_DIR} -DCMAKE_PREFIX_PATH=${prefix})
elseif(CASE STREQUAL "host")
  list(APPEND args -DHOST_CAF=module -DQSP_MODULE_DIR=${prefix}/lib/cmake/QsessionProjection
       -DCMAKE_PREFIX_PATH=${prefix})
elseif(CASE STREQUAL "dependency" AND OTHER_CAF_DIR)
  get_filename_component(other_prefix ${OTHER_CAF_DIR}/../../.. ABSOLUTE)
  list(APPEND args -DHOST_CAF=none -DCMAKE_PREFIX_PATH=${prefix} -DOTHER_PREFIX=${other_prefix})
elseif(CASE STREQUAL "unset")
  # A CAF 1.x in a system prefix (/usr/local), one next to a PATH entry or
  # in a package registry would be found without the host naming it: only
  # the package's prefix is searched (so the build tool is named).
  list(APPEND args -DHOST_CAF=none -DCMAKE_PREFIX_PATH=${prefix}
       -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM} -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF
       -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
       -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
else()
  message(FATAL_ERROR "CASE must be host, dependency or unset (dependency needs OTHER_CAF_DIR)")
endif()

file(REMOVE_RECURSE ${bin})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${HOST_SRC} -B ${bin} ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
file(REMOVE_RECURSE ${bin})
# CMake wraps an error's text: compare it as one line.
string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")
string(REPLACE "." "\\." built_re "${BUILT}")
if(CASE STREQUAL "unset")
  if(rc EQUAL 0)
    message(FATAL_ERROR "the host configured without naming a CAF against a projection "
                        "built with CAF ${BUILT}: the package found a CAF of its own")
  endif()
  string(CONCAT re "QsessionProjection [0-9.]+ was built against CAF ${built_re} and no "
         "CAF [0-9.]+ package config was found: point CMake at it with -DCAF_DIR=")
  if(NOT flat MATCHES "${re}")
    message(FATAL_ERROR "the configure failed, but not with the package config's request "
                        "to point CMake at CAF ${BUILT} (no match for '${re}')")
  endif()
  message(STATUS "refused as expected: the host named no CAF, the package asked for CAF ${BUILT}")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the host configured with CAF ${OTHER} against a projection built "
                      "with CAF ${BUILT}: expected the package config's error")
endif()
string(REPLACE "." "\\." other_re "${OTHER}")
foreach(re "QsessionProjection [0-9.]+ was built against CAF ${built_re};"
           "this project uses CAF ${other_re}\\.[0-9]+ ")
  if(NOT flat MATCHES "${re}")
    message(FATAL_ERROR "the configure failed, but not with the error naming both CAF "
                        "versions (no match for '${re}')")
  endif()
endforeach()
message(STATUS "refused as expected: CAF ${BUILT} (the package) against CAF ${OTHER} (the host)")
