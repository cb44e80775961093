# cmake -DMODE=installed|runtime_only -DSOURCE_ROOT=... -DBUILD_DIR=... -DWORK=... -DFAGEN=...
#       -DFAKE_CUDA=... -DABI=... -DGENERATOR=... [-DPKG_CONFIG=...] -P run-consumer.cmake
#
# installed:    `cmake --install` of the fagen build into WORK/prefix; the files of the package
#               (SONAME libfagen_rt.so.<ABI>, package config, fagen.pc); a copy of
#               tests/consumer configured against it, its bundle built by fagen_add_bundle and
#               rebuilt exactly when the spec or its layout file changes; both consumers run on
#               the fake driver; a pkg-config build of the same program.
# runtime_only: a FAGEN_RUNTIME_ONLY=ON configure of the source tree with LLVM out of reach,
#               built and installed into WORK/prefix (no CLI, no LLVM, yaml-cpp, CLI11 or
#               GoogleTest in its cache); the consumer built against it with a prebuilt bundle.
cmake_minimum_required(VERSION 3.20)

function(run)
  cmake_parse_arguments(ARG "" "OUTPUT;WORKING_DIRECTORY" "COMMAND" ${ARGN})
  if(NOT ARG_WORKING_DIRECTORY)
    set(ARG_WORKING_DIRECTORY ${WORK})
  endif()
  execute_process(COMMAND ${ARG_COMMAND} WORKING_DIRECTORY ${ARG_WORKING_DIRECTORY}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARG_COMMAND}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}")
  endif()
  if(ARG_OUTPUT)
    set(${ARG_OUTPUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(expect_file path)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "missing from the install: ${path}")
  endif()
endfunction()

# Builds the consumer; `expect_bundle` says whether fagen_add_bundle's command must run.
function(build_consumer expect_bundle what)
  run(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build OUTPUT out)
  string(FIND "${out}" "fagen: building bundle" at)
  if(expect_bundle AND at EQUAL -1)
    message(FATAL_ERROR "${what}: the bundle was not rebuilt:\n${out}")
  elseif(NOT expect_bundle AND NOT at EQUAL -1)
    message(FATAL_ERROR "${what}: the bundle was rebuilt, but none of its inputs changed:\n${out}")
  endif()
  message(STATUS "${what}: bundle ${expect_bundle}, as expected")
endfunction()

function(run_consumers bundle)
  set(ENV{FAGEN_LIBCUDA} ${FAKE_CUDA})
  set(ENV{FAKE_CUDA_CC} 80)
  foreach(exe consumer_shared consumer_static)
    run(COMMAND ${WORK}/build/${exe} ${bundle} OUTPUT out)
    if(NOT out MATCHES "consumer: ABI ${ABI}, 2 kernels, ran fagen_fwd_fp16_hd64_none_sm80")
      message(FATAL_ERROR "${exe}: unexpected output:\n${out}")
    endif()
    message(STATUS "${exe}: ${out}")
  endforeach()
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
# A copy of the consumer, so that touching its inputs leaves the source tree alone.
file(COPY ${SOURCE_ROOT}/tests/consumer/ DESTINATION ${WORK}/src)
# fagen's compile cache outlives WORK: a rerun compiles nothing.
set(ENV{FAGEN_CACHE_DIR} ${BUILD_DIR}/tests/consumer-cache)
set(prefix ${WORK}/prefix)

if(MODE STREQUAL "installed")
  run(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  foreach(f lib/libfagen_rt.so.${ABI} lib/libfagen_rt.so lib/libfagen_rt_static.a
            include/fagen/fagen.h include/fagen/fagen.hpp bin/fagen
            lib/cmake/fagen/fagenConfig.cmake lib/cmake/fagen/fagenConfigVersion.cmake
            lib/cmake/fagen/FagenAddBundle.cmake lib/pkgconfig/fagen.pc)
    expect_file(${prefix}/${f})
  endforeach()
  run(COMMAND readelf -d ${prefix}/lib/libfagen_rt.so.${ABI} OUTPUT dynamic)
  if(NOT dynamic MATCHES "\\(SONAME\\)[^\n]*\\[libfagen_rt\\.so\\.${ABI}\\]")
    message(FATAL_ERROR "libfagen_rt.so.${ABI} has no SONAME libfagen_rt.so.${ABI}:\n${dynamic}")
  endif()

  run(COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -G ${GENERATOR}
              -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
  build_consumer(TRUE "first build")
  file(READ ${WORK}/build/bundle-path.txt bundle)
  run_consumers(${bundle})
  build_consumer(FALSE "rebuild with nothing changed")
  file(TOUCH ${WORK}/src/main.c)
  build_consumer(FALSE "rebuild after main.c changed")
  file(TOUCH ${WORK}/src/layout.txt)
  build_consumer(TRUE "rebuild after the layout file changed")
  build_consumer(FALSE "rebuild after that")
  file(TOUCH ${WORK}/src/attn.yaml)
  build_consumer(TRUE "rebuild after the spec changed")

  # pkg-config: the same program, compiled by hand against the installed runtime.
  if(PKG_CONFIG)
    set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
    run(COMMAND ${PKG_CONFIG} --cflags --libs fagen OUTPUT flags)
    run(COMMAND ${PKG_CONFIG} --static --libs fagen OUTPUT static_flags)
    if(NOT static_flags MATCHES "-lstdc\\+\\+")
      message(FATAL_ERROR "pkg-config --static --libs fagen lacks -lstdc++: ${static_flags}")
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    run(COMMAND cc ${WORK}/src/main.c ${flags} -o ${WORK}/pkgconfig_consumer)
    set(ENV{LD_LIBRARY_PATH} ${prefix}/lib)
    set(ENV{FAGEN_LIBCUDA} ${FAKE_CUDA})
    set(ENV{FAKE_CUDA_CC} 80)
    run(COMMAND ${WORK}/pkgconfig_consumer ${bundle} OUTPUT out)
    message(STATUS "pkg-config consumer: ${out}")
  endif()
elseif(MODE STREQUAL "runtime_only")
  run(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_ROOT} -B ${WORK}/rt-build -G ${GENERATOR}
              -DFAGEN_RUNTIME_ONLY=ON -DFAGEN_LLVM_ROOT=${WORK}/no-llvm -DCMAKE_BUILD_TYPE=Release)
  file(READ ${WORK}/rt-build/CMakeCache.txt cache)
  foreach(var LLVM_SUPPORT_LIB YAML_CPP_LIB CLI11_INCLUDE GTest_DIR ZSTD_LIB)
    if(cache MATCHES "\n${var}:")
      message(FATAL_ERROR "a FAGEN_RUNTIME_ONLY configure looked for ${var}")
    endif()
  endforeach()
  run(COMMAND ${CMAKE_COMMAND} --build ${WORK}/rt-build)
  run(COMMAND ${CMAKE_COMMAND} --install ${WORK}/rt-build --prefix ${prefix})
  expect_file(${prefix}/lib/libfagen_rt.so.${ABI})
  expect_file(${prefix}/lib/cmake/fagen/fagenConfig.cmake)
  if(EXISTS ${prefix}/bin/fagen)
    message(FATAL_ERROR "a FAGEN_RUNTIME_ONLY install has the CLI")
  endif()
  set(bundle ${WORK}/consumer.fab)
  run(COMMAND ${FAGEN} build ${WORK}/src/attn.yaml --arch sm_80 -q -o ${bundle})
  run(COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -G ${GENERATOR}
              -DCMAKE_PREFIX_PATH=${prefix} -DCONSUMER_BUNDLE=${bundle} -DCMAKE_BUILD_TYPE=Release)
  run(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build)
  run_consumers(${bundle})
else()
  message(FATAL_ERROR "MODE must be installed or runtime_only")
endif()
message(STATUS "consumer (${MODE}): passed")
