# `cmake --install build --prefix /opt/fagen`: the runtime (libfagen_rt.so.<ABI>, libfagen_rt.a,
# fagen/fagen.h(.hpp)), the `fagen` CLI unless FAGEN_RUNTIME_ONLY, a CMake package config
# (find_package(fagen CONFIG): fagen::runtime, fagen::runtime_static, fagen::fagen and
# fagen_add_bundle) and a pkg-config file (fagen.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FAGEN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fagen)

install(TARGETS fagen_rt fagen_rt_static EXPORT fagenTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET fagen)
  install(TARGETS fagen EXPORT fagenTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES ${PROJECT_SOURCE_DIR}/runtime/include/fagen/fagen.h
              ${PROJECT_SOURCE_DIR}/runtime/include/fagen/fagen.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fagen)

install(EXPORT fagenTargets NAMESPACE fagen:: DESTINATION ${FAGEN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fagenConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/fagenConfig.cmake INSTALL_DESTINATION ${FAGEN_CMAKE_DIR})
# 0.x: a minor release may change the package; the runtime ABI is the SONAME's business.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/fagenConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/fagenConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake/fagenConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FagenAddBundle.cmake
        DESTINATION ${FAGEN_CMAKE_DIR})

# pkg-config: `pkg-config --cflags --libs fagen` (shared), `--static` adds the static library's
# dependencies.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FAGEN_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(FAGEN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FAGEN_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(FAGEN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# Relocatable: the prefix is found from the .pc file's own folder, so an install moved or made
# with `cmake --install --prefix DIR` still points at itself.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FAGEN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH FAGEN_PC_UP "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" FAGEN_PC_UP "${FAGEN_PC_UP}")
  set(FAGEN_PC_PREFIX "\${pcfiledir}/${FAGEN_PC_UP}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/fagen.pc.in ${PROJECT_BINARY_DIR}/cmake/fagen.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/fagen.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# In-tree users (tests/, a project that add_subdirectory()s fagen) get fagen_add_bundle and the
# same target names as an installed package.
include(${PROJECT_SOURCE_DIR}/cmake/FagenAddBundle.cmake)
add_library(fagen::runtime ALIAS fagen_rt)
add_library(fagen::runtime_static ALIAS fagen_rt_static)
if(TARGET fagen)
  add_executable(fagen::fagen ALIAS fagen)
endif()
