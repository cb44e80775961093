# fagen_add_bundle(<target> SPEC <spec.yaml> ARCH <arch>... [OUTPUT <file.fab>] [TUNING <db>]
#                  [FAGEN <path/to/fagen>] [OPTIONS <fagen build flags>...] [ALL])
#
# Adds a custom target <target> that compiles SPEC into a bundle with `fagen build` at build
# time. `fagen build --depfile` lists the spec and every file it reads (block layouts, the
# tuning database), so the bundle is rebuilt exactly when one of them, or fagen itself,
# changes. OUTPUT defaults to ${CMAKE_CURRENT_BINARY_DIR}/<target>.fab; the target's property
# FAGEN_BUNDLE_FILE holds its path. The fagen executable is FAGEN if given, else the fagen::fagen
# target (installed package or this source tree), else `fagen` on PATH. nvcc must be on PATH
# (or CUDA_HOME) when the bundle builds; no GPU is needed.
#
#   find_package(fagen CONFIG REQUIRED)
#   fagen_add_bundle(attn_bundle SPEC attn.yaml ARCH sm_90a sm_80)
#   add_executable(app main.c)
#   target_link_libraries(app PRIVATE fagen::runtime)
#   add_dependencies(app attn_bundle)
include_guard(GLOBAL)

function(fagen_add_bundle target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "ALL" "SPEC;OUTPUT;TUNING;FAGEN" "ARCH;OPTIONS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fagen_add_bundle(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SPEC)
    message(FATAL_ERROR "fagen_add_bundle(${target}): SPEC <spec.yaml> is required")
  endif()
  if(NOT ARG_ARCH)
    message(FATAL_ERROR "fagen_add_bundle(${target}): ARCH <sm_XX>... is required "
                        "(e.g. ARCH sm_90a sm_80)")
  endif()
  get_filename_component(spec "${ARG_SPEC}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(ARG_OUTPUT)
    get_filename_component(output "${ARG_OUTPUT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(output "${CMAKE_CURRENT_BINARY_DIR}/${target}.fab")
  endif()

  set(fagen_deps)
  set(fagen_target)
  if(ARG_FAGEN)
    set(fagen "${ARG_FAGEN}")
    list(APPEND fagen_deps "${ARG_FAGEN}")
  elseif(TARGET fagen::fagen)
    set(fagen "$<TARGET_FILE:fagen::fagen>")
    list(APPEND fagen_deps "$<TARGET_FILE:fagen::fagen>")
    get_target_property(aliased fagen::fagen ALIASED_TARGET)
    if(aliased)
      set(fagen_target ${aliased})
    endif()
  else()
    find_program(FAGEN_EXECUTABLE fagen)
    if(NOT FAGEN_EXECUTABLE)
      message(FATAL_ERROR "fagen_add_bundle(${target}): no fagen executable: install fagen "
                          "with its CLI (not FAGEN_RUNTIME_ONLY), put it on PATH, or pass "
                          "FAGEN <path>")
    endif()
    set(fagen "${FAGEN_EXECUTABLE}")
    list(APPEND fagen_deps "${FAGEN_EXECUTABLE}")
  endif()

  set(args build "${spec}" -q -o "${output}" --depfile "${output}.d")
  foreach(arch IN LISTS ARG_ARCH)
    list(APPEND args --arch ${arch})
  endforeach()
  if(ARG_TUNING)
    get_filename_component(tuning "${ARG_TUNING}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND args --tuning "${tuning}")
  endif()
  list(APPEND args ${ARG_OPTIONS})

  add_custom_command(OUTPUT "${output}"
                     COMMAND "${fagen}" ${args}
                     DEPENDS "${spec}" ${fagen_deps}
                     DEPFILE "${output}.d"
                     COMMENT "fagen: building bundle ${output} for ${ARG_ARCH}"
                     VERBATIM)
  set(all)
  if(ARG_ALL)
    set(all ALL)
  endif()
  add_custom_target(${target} ${all} DEPENDS "${output}")
  set_target_properties(${target} PROPERTIES FAGEN_BUNDLE_FILE "${output}")
  if(fagen_target)
    add_dependencies(${target} ${fagen_target})
  endif()
endfunction()
