# The host's own build defaults: C++17 (CAF 0.17 corrupts aggregate actor
# state at C++20; CAF 1.1 is fine with 17).  On CAF 1.x the host's code uses
# only its current API: a deprecated call is an error (CAF's own headers come
# from an imported target, as system headers, so theirs are not).
function(host_defaults target)
  set_target_properties(${target} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                        CXX_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(CAF_VERSION VERSION_GREATER_EQUAL 1)
    target_compile_options(${target} PRIVATE -Werror=deprecated-declarations)
  endif()
endfunction()
