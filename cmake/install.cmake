# Install rules and the relocatable package config (QSP_INSTALL):
#   find_package(QsessionProjection 0.2 REQUIRED)
#   target_link_libraries(host PRIVATE qsession::projection)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(qsp_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/QsessionProjection)

install(TARGETS qsession_projection EXPORT QsessionProjectionTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The test kit (docs/TESTING.md): always installed with the library, so
# `find_package(QsessionProjection COMPONENTS testkit)` finds it.
if(TARGET qsession_projection_testkit)
  install(TARGETS qsession_projection_testkit EXPORT QsessionProjectionTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# The reader conformance suite (docs/EMBEDDING.md §8), with the kit.
if(TARGET qsession_projection_reader_conformance)
  install(TARGETS qsession_projection_reader_conformance EXPORT QsessionProjectionTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# A static library's PRIVATE $<BUILD_INTERFACE:x> (the conformance suite's
# internal include root, warnings, ...) becomes $<LINK_ONLY:$<BUILD_INTERFACE:x>>
# in its INTERFACE_LINK_LIBRARIES, which the export writes as an empty
# $<LINK_ONLY:> into the installed targets file.  Turned inside out,
# $<BUILD_INTERFACE:$<LINK_ONLY:x>>, the build tree links the same and the
# export drops the entry (tests/embed: embed_install_clean checks the files).
function(qsp_export_link_only_clean target)
  get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
  if(NOT libs)
    return()
  endif()
  set(out "")
  foreach(lib IN LISTS libs)
    if(lib MATCHES "^\\$<LINK_ONLY:\\$<BUILD_INTERFACE:(.*)>>$")
      list(APPEND out "$<BUILD_INTERFACE:$<LINK_ONLY:${CMAKE_MATCH_1}>>")
    else()
      list(APPEND out "${lib}")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${out}")
endfunction()
foreach(t qsession_projection qsession_projection_testkit qsession_projection_reader_conformance)
  if(TARGET ${t})
    qsp_export_link_only_clean(${t})
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/qsession/projection/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qsession/projection)
install(EXPORT QsessionProjectionTargets NAMESPACE qsession:: DESTINATION ${qsp_cmake_dir})

# The private librdkafka and hiredis (static, from scripts/bootstrap) go into
# the same prefix, so the installed package is whole and relocatable.
option(QSP_INSTALL_DEPS "Install the private librdkafka/hiredis next to the library" ON)
if(QSP_INSTALL_DEPS AND EXISTS "${QSP_DEPS_PREFIX}/lib")
  install(DIRECTORY ${QSP_DEPS_PREFIX}/lib/ DESTINATION ${CMAKE_INSTALL_LIBDIR}
          PATTERN "pkgconfig" EXCLUDE)
  install(DIRECTORY ${QSP_DEPS_PREFIX}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set(QSP_DEPS_INSTALLED ON)
else()
  set(QSP_DEPS_INSTALLED OFF)
endif()

# The documentation and the examples a host works from, laid out as in the
# source tree, so the docs' citations (`docs/TESTING.md`,
# `examples/host/gate.hpp`, ...) resolve from <prefix>/share/doc/qsession-projection/:
#   README.md, docs/*.md
#   examples/host/     the complete host, its own CMake project (builds against
#                      this prefix: tests/embed builds this installed copy)
#   examples/reader/   the example dispatch-log reader (example_reader.hpp/.cpp)
#   examples/testkit/front.hpp  the kit's host front (tests/testkit/front.hpp)
#   examples/embed_host.cpp, examples/redis-acl.conf
# The same directory as the node's Debian package (cmake/package.cmake) uses
# for its guides; the files both install are the same.
set(qsp_doc_dir ${CMAKE_INSTALL_DATAROOTDIR}/doc/qsession-projection)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${qsp_doc_dir})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${qsp_doc_dir}/docs
        FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/host DESTINATION ${qsp_doc_dir}/examples)
install(FILES ${PROJECT_SOURCE_DIR}/examples/reader/example_reader.hpp
              ${PROJECT_SOURCE_DIR}/examples/reader/example_reader.cpp
        DESTINATION ${qsp_doc_dir}/examples/reader)
install(FILES ${PROJECT_SOURCE_DIR}/tests/testkit/front.hpp
        DESTINATION ${qsp_doc_dir}/examples/testkit)
install(FILES ${PROJECT_SOURCE_DIR}/examples/embed_host.cpp
              ${PROJECT_SOURCE_DIR}/config/redis-acl.conf
        DESTINATION ${qsp_doc_dir}/examples)

# The package config records the CAF the library was built against
# (QSP_CAF_VERSION, cmake/caf.cmake), finds the same one and refuses a host's
# other CAF by name.  It records no path of the machine it was built on: a
# host points CMake at its CAF 1.x itself (CAF_DIR or CMAKE_PREFIX_PATH), and
# the private librdkafka/hiredis are looked for in the package's own prefix
# (else where the host's CMAKE_PREFIX_PATH says).
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/QsessionProjectionConfig.cmake.in
  ${PROJECT_BINARY_DIR}/QsessionProjectionConfig.cmake INSTALL_DESTINATION ${qsp_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/QsessionProjectionConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/QsessionProjectionConfig.cmake
              ${PROJECT_BINARY_DIR}/QsessionProjectionConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${qsp_cmake_dir})
