# cmake -DMODE=install|package|subproject -DEMBED_DIR=... [-DBUILD_DIR=...]
#       -DHOST_SRC=... -DSOURCE_DIR=... -DDOC_DIR=... -DGENERATOR=... -DBUILD_TYPE=...
#       [-DCONFIG_CXX_FLAGS=<the build's CMAKE_CXX_FLAGS_<BUILD_TYPE>>]
#       -DCXX=... [-DCAF_DIR=<CAF 1.x>/lib/cmake/CAF] -P build_host.cmake
# The steps of tests/embed, each a CTest fixture.  CAF_DIR: the projection
# was built against CAF 1.x there, and the host must find the same (without
# it the host finds Debian's libcaf-dev 0.17).
#   install     cmake --install into a prefix, then moved elsewhere;
#   package     the host as the moved prefix carries it
#               (<prefix>/DOC_DIR/examples/host), built against that prefix
#               alone: the host's package search sees only the prefix (and
#               the CAF_DIR it is handed), and its cache must name the
#               moved prefix for the projection and its librdkafka/hiredis;
#   subproject  the source tree's examples/host (HOST_SRC) with the source
#               tree as a subproject.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(configure -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX})
if(BUILD_TYPE AND DEFINED CONFIG_CXX_FLAGS)
  string(TOUPPER "${BUILD_TYPE}" bt)
  list(APPEND configure "-DCMAKE_CXX_FLAGS_${bt}=${CONFIG_CXX_FLAGS}")
endif()
if(CAF_DIR)
  list(APPEND configure -DCAF_DIR=${CAF_DIR})
endif()
if(MODE STREQUAL "install")
  file(REMOVE_RECURSE ${EMBED_DIR}/prefix ${EMBED_DIR}/moved-prefix)
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${EMBED_DIR}/prefix)
  # Moved before any host uses it: the package must be relocatable.
  file(RENAME ${EMBED_DIR}/prefix ${EMBED_DIR}/moved-prefix)
elseif(MODE STREQUAL "package")
  set(prefix ${EMBED_DIR}/moved-prefix)
  set(host ${EMBED_DIR}/host-package)
  set(installed_host ${prefix}/${DOC_DIR}/examples/host)
  if(NOT EXISTS ${installed_host}/CMakeLists.txt)
    message(FATAL_ERROR "the install carries no example host (${installed_host})")
  endif()
  file(REMOVE_RECURSE ${host})
  # No user or system package registry: a host elsewhere has neither.
  run(${CMAKE_COMMAND} -S ${installed_host} -B ${host} ${configure}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
      -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  file(STRINGS ${host}/CMakeCache.txt dirs REGEX "^(QsessionProjection|RdKafka|hiredis|hiredis_ssl)_DIR:")
  list(LENGTH dirs n)
  if(NOT n EQUAL 4)
    message(FATAL_ERROR "the host's cache lacks the projection's package dirs: ${dirs}")
  endif()
  foreach(d IN LISTS dirs)
    string(REGEX REPLACE "^[^=]*=" "" path "${d}")
    string(FIND "${path}/" "${prefix}/" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "the host found ${d}, not in the installed prefix ${prefix}")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} --build ${host})
elseif(MODE STREQUAL "subproject")
  file(REMOVE_RECURSE ${EMBED_DIR}/host-subproject)
  run(${CMAKE_COMMAND} -S ${HOST_SRC} -B ${EMBED_DIR}/host-subproject ${configure}
      -DQSP_SOURCE_DIR=${SOURCE_DIR})
  run(${CMAKE_COMMAND} --build ${EMBED_DIR}/host-subproject -j 2)
else()
  message(FATAL_ERROR "MODE must be install, package or subproject")
endif()
