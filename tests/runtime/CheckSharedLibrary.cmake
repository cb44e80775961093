cmake_minimum_required(VERSION 3.20)
# cmake -DLIB=libfagen_rt.so -DNM=nm -DREADELF=readelf -P CheckSharedLibrary.cmake
#
# The runtime is carried to machines we do not control (the GPU host has another glibc and
# PyTorch's libstdc++), so the shared library must need only the C library and must not export
# the statically linked C++ runtime, whose symbols would interpose on the host program's.
set(allowed_needed libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 ld-linux-x86-64.so.2
                   ld-linux-aarch64.so.1)

execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIB} failed")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[([^]]+)\\]" needed_lines "${dynamic}")
foreach(line IN LISTS needed_lines)
  string(REGEX REPLACE ".*\\[([^]]+)\\]" "\\1" lib "${line}")
  if(NOT lib IN_LIST allowed_needed)
    message(FATAL_ERROR "${LIB} needs ${lib}; only ${allowed_needed} are allowed: link it "
                        "statically or drop the dependency")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --undefined-only ${LIB} OUTPUT_VARIABLE undefined)
string(REPLACE "\n" ";" undefined "${undefined}")
foreach(line IN LISTS undefined)
  string(STRIP "${line}" line)
  if(line STREQUAL "" OR line MATCHES "^[wv] ")
    continue() # weak references resolve to null when absent
  endif()
  if(NOT line MATCHES "^U [^@ ]+@GLIBC_[0-9.]+$")
    message(FATAL_ERROR "${LIB} has an undefined symbol outside glibc: '${line}'")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE defined)
string(REPLACE "\n" ";" defined "${defined}")
set(foreign)
set(exported 0)
foreach(line IN LISTS defined)
  if(line MATCHES " fagen_[a-z0-9_]+$")
    math(EXPR exported "${exported} + 1")
  elseif(NOT line STREQUAL "")
    list(APPEND foreign "${line}")
  endif()
endforeach()
list(LENGTH foreign foreign_count)
if(foreign_count GREATER 0)
  list(SUBLIST foreign 0 5 first)
  message(FATAL_ERROR "${LIB} exports ${foreign_count} symbols besides fagen_*, e.g. ${first}: "
                      "link it with -Wl,--exclude-libs,ALL so the static libstdc++ stays private")
endif()
if(exported LESS 12)
  message(FATAL_ERROR "${LIB} exports only ${exported} fagen_* functions; expected every "
                      "function of fagen.h (is FAGEN_API missing?)")
endif()
message(STATUS "${LIB}: needs only glibc, exports ${exported} fagen_* functions")
