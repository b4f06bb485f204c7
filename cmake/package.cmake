# The node's runtime Debian package (QSP_INSTALL with QSP_BUILD_APP):
#   cd build && cpack -G DEB          (or: cmake --build build --target package)
#   -> build/qsession-projection_<version>_amd64.deb
#
# Everything in it belongs to the install component "node" and is
# EXCLUDE_FROM_ALL: a plain `cmake --install build` still installs exactly the
# library's development files (cmake/install.cmake, used by tests/embed), and
# CPack packages the "node" component alone.  To lay the package's tree out
# without dpkg: `DESTDIR=/some/root cmake --install build --component node
# --prefix /usr` (it holds absolute paths under /etc and /lib, so DESTDIR).
#
# Layout (Debian 12):
#   /usr/bin/qsession-projection                       the node (stripped)
#   /etc/qsession-projection/production.conf           conffile, root:qsession 0640 (postinst)
#   /lib/systemd/system/qsession-projection.service    not enabled on install
#   /usr/share/man/man1/qsession-projection.1.gz
#   /usr/share/doc/qsession-projection/                README.md, OPERATIONS.md, RELIABILITY.md,
#       PERFORMANCE.md, copyright, changelog.gz, examples/redis-acl.conf
# qsp-devtool stays out: it creates/deletes topics and produces demo records,
# a developer's tool; operators manage topics with Kafka's own tools.
include(GNUInstallDirs)

set(qsp_pkg_name qsession-projection)
set(qsp_pkg_dir ${PROJECT_BINARY_DIR}/package)
set(qsp_pkg_src ${PROJECT_SOURCE_DIR}/cmake/debian)
set(qsp_pkg_doc ${CMAKE_INSTALL_DATAROOTDIR}/doc/${qsp_pkg_name})
set(QSP_PACKAGE_MAINTAINER "Seed 01e55c7f maintainers <maintainers@users.noreply.a-seed-01e55c7f.example>"
    CACHE STRING "Maintainer field of the Debian package (Name <address>)")

# -- generated files (at configure time; their inputs re-run the configure) ---
# gzip -9n: maximal compression and no name/timestamp in the header, as
# Debian policy (and lintian) want for changelogs and manual pages.
function(qsp_gzip in out)
  execute_process(COMMAND gzip -9nc ${in} OUTPUT_FILE ${out} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip -9n ${in} failed (${rc})")
  endif()
endfunction()

configure_file(${qsp_pkg_src}/changelog ${qsp_pkg_dir}/changelog COPYONLY)
qsp_gzip(${qsp_pkg_dir}/changelog ${qsp_pkg_dir}/changelog.gz)
configure_file(${PROJECT_SOURCE_DIR}/docs/qsession-projection.1.in
               ${qsp_pkg_dir}/qsession-projection.1 @ONLY)
qsp_gzip(${qsp_pkg_dir}/qsession-projection.1 ${qsp_pkg_dir}/qsession-projection.1.gz)

# The copyright file reproduces the licences of the statically linked
# librdkafka (and the code it bundles) from the private prefix.
set(qsp_rdkafka_licenses ${QSP_DEPS_PREFIX}/share/licenses/librdkafka/LICENSES.txt)
if(EXISTS ${qsp_rdkafka_licenses})
  file(READ ${qsp_rdkafka_licenses} QSP_RDKAFKA_LICENSES)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${qsp_rdkafka_licenses})
else()
  message(WARNING "${qsp_rdkafka_licenses} not found (scripts/bootstrap installs it): "
                  "the Debian package's copyright file will lack librdkafka's licences")
  set(QSP_RDKAFKA_LICENSES "(missing: ${qsp_rdkafka_licenses} was not found at build time)")
endif()
# Debian ships the Apache License 2.0 (bundled opentelemetry-proto) in
# /usr/share/common-licenses: the copyright file refers to it instead of
# repeating it (lintian: copyright-file-contains-full-apache-2-license).
string(FIND "${QSP_RDKAFKA_LICENSES}" "Apache License\n" qsp_apache_begin)
if(qsp_apache_begin GREATER -1)
  string(SUBSTRING "${QSP_RDKAFKA_LICENSES}" ${qsp_apache_begin} -1 qsp_apache)
  set(qsp_apache_last "limitations under the License.\n")
  string(FIND "${qsp_apache}" "${qsp_apache_last}" qsp_apache_end)
  if(qsp_apache_end GREATER -1)
    string(LENGTH "${qsp_apache_last}" qsp_len)
    math(EXPR qsp_apache_end "${qsp_apache_end} + ${qsp_len}")
    string(SUBSTRING "${qsp_apache}" 0 ${qsp_apache_end} qsp_apache)
    string(REPLACE "${qsp_apache}" "Apache License, Version 2.0: on Debian systems, the full text is in
/usr/share/common-licenses/Apache-2.0.\n" QSP_RDKAFKA_LICENSES "${QSP_RDKAFKA_LICENSES}")
  endif()
endif()
string(REGEX REPLACE "\n[ ]+(Apache License, Version 2.0: on Debian)" "\n\\1"
       QSP_RDKAFKA_LICENSES "${QSP_RDKAFKA_LICENSES}")
string(STRIP "${QSP_RDKAFKA_LICENSES}" QSP_RDKAFKA_LICENSES)
configure_file(${qsp_pkg_src}/copyright.in ${qsp_pkg_dir}/copyright @ONLY)

# -- install rules of the "node" component (the binary: app/CMakeLists.txt) ----
set(qsp_node COMPONENT node EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/config/production.conf
        DESTINATION /etc/${qsp_pkg_name} ${qsp_node})
install(FILES ${PROJECT_SOURCE_DIR}/config/qsession-projection.service
        DESTINATION /lib/systemd/system ${qsp_node})
install(FILES ${qsp_pkg_dir}/qsession-projection.1.gz
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 ${qsp_node})
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/OPERATIONS.md
              ${PROJECT_SOURCE_DIR}/docs/CLUSTER.md
              ${PROJECT_SOURCE_DIR}/docs/RELIABILITY.md ${PROJECT_SOURCE_DIR}/docs/PERFORMANCE.md
              ${qsp_pkg_dir}/copyright ${qsp_pkg_dir}/changelog.gz
        DESTINATION ${qsp_pkg_doc} ${qsp_node})
install(FILES ${PROJECT_SOURCE_DIR}/config/redis-acl.conf
        DESTINATION ${qsp_pkg_doc}/examples ${qsp_node})

# -- CPack: one DEB of the "node" component ---------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ${qsp_pkg_name})
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "qsession")
set(CPACK_PACKAGE_CONTACT "${QSP_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL node)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_NODE_PACKAGE_NAME ${qsp_pkg_name})
set(CPACK_DEBIAN_NODE_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_NODE_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared libraries (CAF, spdlog, fmt, cpp-httplib, OpenSSL, curl, ...) through
# dpkg-shlibdeps; librdkafka and hiredis are linked statically.  adduser serves
# the postinst (deb-systemd-helper/-invoke come with the essential
# init-system-helpers).
set(CPACK_DEBIAN_NODE_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_NODE_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_EXTRA
    ${qsp_pkg_src}/conffiles ${qsp_pkg_src}/postinst ${qsp_pkg_src}/prerm ${qsp_pkg_src}/postrm)
set(CPACK_DEBIAN_NODE_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "durable session projection: Kafka dispatch log to Redis session sets")
set(CPACK_DEBIAN_NODE_DESCRIPTION
"qsession keeps, for every user, the Redis sorted set convs:{user} (member:
conversation id, score: last activity time). This node feeds it from the
committed Kafka dispatch log with idempotent ZADD GT writes and its own
per-partition checkpoints in Redis, pinned to the Kafka cluster id, topic id,
topic name and partition count: it fails closed on any mismatch and never
skips an offset. Readiness opens only once every partition has caught up.
.
The package holds the node, its configuration template, a systemd unit, a
least-privilege Redis ACL example and the operator's guide.")
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git" "/build" "/\\\\.deps/" "/\\\\.services/" "/\\\\.bench/"
    "/\\\\.soak/")
include(CPack)
