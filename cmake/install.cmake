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
  # Whole: the package config looks in its own prefix only (no path of the
  # build machine in a package that may be moved).
  set(QSP_DEPS_HINT "")
else()
  set(QSP_DEPS_HINT "${QSP_DEPS_PREFIX}")
endif()

# The package config records the CAF the library was built against
# (QSP_CAF_VERSION, cmake/caf.cmake), finds the same one and refuses a host's
# other CAF by name; on CAF 1.x it falls back to the build's CAF_DIR.
if(QSP_CAF_MAJOR GREATER_EQUAL 1)
  set(QSP_CAF_HINT "${CAF_DIR}")
else()
  set(QSP_CAF_HINT "")
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/QsessionProjectionConfig.cmake.in
  ${PROJECT_BINARY_DIR}/QsessionProjectionConfig.cmake INSTALL_DESTINATION ${qsp_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/QsessionProjectionConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/QsessionProjectionConfig.cmake
              ${PROJECT_BINARY_DIR}/QsessionProjectionConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${qsp_cmake_dir})
