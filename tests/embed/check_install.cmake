# cmake -DPREFIX=<installed, moved prefix> -DDOC_DIR=<its doc dir, relative>
#       -DFORBIDDEN=<paths of the build machine, |-separated> -P check_install.cmake
# The installed package is whole and clean (fixture embed_install):
#   1. it carries the docs and every `examples/...` file they cite;
#   2. no file of it names a path of the machine that built it (the build
#      tree, the source tree, the private deps prefix, the build's CAF):
#      every file is searched except the static libraries (*.a), whose
#      debug info names the sources and the build tree they were compiled
#      from (DW_AT_comp_dir, DW_AT_name), as any -g build does;
#   3. the exported targets link cleanly: no empty $<LINK_ONLY:>.
# What is wrong, one line each (a string: a grep hit may hold ';' or '${').
set(errors "")

if(NOT IS_DIRECTORY "${PREFIX}")
  message(FATAL_ERROR "no installed prefix at ${PREFIX} (the fixture embed_install makes it)")
endif()

# -- 1. the docs and what they cite -----------------------------------------
set(doc ${PREFIX}/${DOC_DIR})
foreach(f README.md docs/EMBEDDING.md docs/TESTING.md docs/DESIGN.md docs/OPERATIONS.md
          docs/CLUSTER.md docs/RELIABILITY.md docs/PERFORMANCE.md
          examples/host/CMakeLists.txt examples/testkit/front.hpp)
  if(NOT EXISTS ${doc}/${f})
    string(APPEND errors "\n  missing: ${DOC_DIR}/${f}")
  endif()
endforeach()
file(GLOB mds ${doc}/README.md ${doc}/docs/*.md)
set(cited 0)
foreach(md IN LISTS mds)
  file(READ ${md} text)
  # `examples/host/gate.hpp`, `examples/host/`: a citation relative to the
  # doc dir (not /usr/share/doc/.../examples/..., the node's Debian package).
  string(REGEX MATCHALL "`examples/[A-Za-z0-9_./-]*`" refs "${text}")
  foreach(ref IN LISTS refs)
    string(REGEX REPLACE "^`(.*)`$" "\\1" path "${ref}")
    math(EXPR cited "${cited} + 1")
    if(NOT EXISTS ${doc}/${path})
      file(RELATIVE_PATH rel ${doc} ${md})
      string(APPEND errors "\n  ${rel} cites ${path}, which the install does not carry")
    endif()
  endforeach()
endforeach()
if(cited EQUAL 0)
  string(APPEND errors "\n  the installed docs cite no `examples/...` file (nothing to check)")
endif()

# -- 2. no path of the build machine -------------------------------------------
# A path counts where it starts a token: /work/main matches "/work/main/x"
# and "HINTS /work/main", not "/work/main2" or "/home/u/work/main".
string(REPLACE "|" ";" forbidden "${FORBIDDEN}")
set(res "")
foreach(p IN LISTS forbidden)
  if(p STREQUAL "" OR p STREQUAL "/")
    continue()
  endif()
  get_filename_component(real "${p}" REALPATH)
  foreach(q "${p}" "${real}")
    string(REGEX REPLACE "/+$" "" q "${q}")
    string(REGEX REPLACE "([][.*+?(){}|^$\\\\])" "\\\\\\1" q_re "${q}")
    list(APPEND res "(^|[^A-Za-z0-9_./-])${q_re}($|[^A-Za-z0-9_.-])")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES res)
if(NOT res)
  message(FATAL_ERROR "FORBIDDEN names no path")
endif()
set(grep_args -rnE --exclude=*.a)
foreach(re IN LISTS res)
  list(APPEND grep_args -e "${re}")
endforeach()
execute_process(COMMAND grep ${grep_args} ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
if(rc EQUAL 0)
  string(SUBSTRING "${hits}" 0 3000 hits)
  string(APPEND errors "\n  the installed tree names a path of the build machine (${FORBIDDEN}):\n${hits}")
elseif(NOT rc EQUAL 1)
  message(FATAL_ERROR "grep failed (${rc}): ${err}")
endif()

# -- 3. the exported targets ---------------------------------------------------
file(GLOB targets ${PREFIX}/lib/cmake/QsessionProjection/QsessionProjectionTargets*.cmake)
if(NOT targets)
  string(APPEND errors "\n  no QsessionProjectionTargets*.cmake in ${PREFIX}/lib/cmake/QsessionProjection")
endif()
foreach(t IN LISTS targets)
  file(READ ${t} text)
  string(FIND "${text}" "$<LINK_ONLY:>" at)
  if(at GREATER -1)
    get_filename_component(name ${t} NAME)
    string(APPEND errors "\n  ${name} links through an empty $<LINK_ONLY:>")
  endif()
endforeach()

if(errors)
  message(FATAL_ERROR "the installed package is not whole and clean:${errors}")
endif()
message(STATUS "installed package whole and clean: ${cited} cited examples present, "
               "no build-machine path (${FORBIDDEN}) outside *.a, no empty $<LINK_ONLY:>")
