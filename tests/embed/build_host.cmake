# cmake -DMODE=install|package|subproject -DEMBED_DIR=... [-DBUILD_DIR=...]
#       -DHOST_SRC=... -DSOURCE_DIR=... -DGENERATOR=... -DBUILD_TYPE=... -DCXX=...
#       [-DCAF_DIR=<CAF 1.x>/lib/cmake/CAF] -P build_host.cmake
# The steps of tests/embed, each a CTest fixture.  CAF_DIR: the projection
# was built against CAF 1.x there, and the host must find the same (without
# it the host finds Debian's libcaf-dev 0.17).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(configure -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX})
if(CAF_DIR)
  list(APPEND configure -DCAF_DIR=${CAF_DIR})
endif()
if(MODE STREQUAL "install")
  file(REMOVE_RECURSE ${EMBED_DIR}/prefix ${EMBED_DIR}/moved-prefix)
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${EMBED_DIR}/prefix)
  # Moved before any host uses it: the package must be relocatable.
  file(RENAME ${EMBED_DIR}/prefix ${EMBED_DIR}/moved-prefix)
elseif(MODE STREQUAL "package")
  file(REMOVE_RECURSE ${EMBED_DIR}/host-package)
  run(${CMAKE_COMMAND} -S ${HOST_SRC} -B ${EMBED_DIR}/host-package ${configure}
      -DCMAKE_PREFIX_PATH=${EMBED_DIR}/moved-prefix)
  run(${CMAKE_COMMAND} --build ${EMBED_DIR}/host-package)
elseif(MODE STREQUAL "subproject")
  file(REMOVE_RECURSE ${EMBED_DIR}/host-subproject)
  run(${CMAKE_COMMAND} -S ${HOST_SRC} -B ${EMBED_DIR}/host-subproject ${configure}
      -DQSP_SOURCE_DIR=${SOURCE_DIR})
  run(${CMAKE_COMMAND} --build ${EMBED_DIR}/host-subproject -j 2)
else()
  message(FATAL_ERROR "MODE must be install, package or subproject")
endif()
