# Install rules and package files: find_package(devmem CONFIG) from an install tree or from the
# build tree, and pkg-config's devmem.pc.
include(CMakePackageConfigHelpers)

set(DEVMEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/devmem)

install(TARGETS devmem EXPORT devmem-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/devmem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/include/devmem/config.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/devmem)

if(DEVMEM_HIPCPU)
  # For consumers' kernels on HIP-CPU builds (devmem_add_kernel_sources): the interface target and
  # devmem's HIP-CPU compatibility headers. HIP-CPU itself stays where devmem was built from.
  install(TARGETS devmem_hipcpu_runtime EXPORT devmem-targets)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/cpu_standins/hipcpu/include/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/devmem-hipcpu)
endif()
if(DEVMEM_WITH_MPI)
  # The optional component `mpi` (find_package(devmem COMPONENTS mpi)): its own export set, so that
  # the package's core targets load without MPI.
  install(TARGETS devmem_mpi EXPORT devmem-mpi-targets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/mpi/include/devmem/mpi.hpp
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/devmem)
  install(EXPORT devmem-mpi-targets NAMESPACE devmem:: DESTINATION ${DEVMEM_CMAKE_DIR})
  export(EXPORT devmem-mpi-targets NAMESPACE devmem::
         FILE ${PROJECT_BINARY_DIR}/devmem-mpi-targets.cmake)
endif()
install(EXPORT devmem-targets NAMESPACE devmem:: DESTINATION ${DEVMEM_CMAKE_DIR})
export(EXPORT devmem-targets NAMESPACE devmem:: FILE ${PROJECT_BINARY_DIR}/devmem-targets.cmake)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/devmem-config.cmake.in
  ${PROJECT_BINARY_DIR}/devmem-config.cmake INSTALL_DESTINATION ${DEVMEM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/devmem-config-version.cmake
  COMPATIBILITY SameMinorVersion)
# devmem_add_kernel_sources, next to devmem-config.cmake in the build tree and the install tree.
foreach(file devmem-kernels.cmake devmem-hipcc.cmake devmem-hipcpu.cmake
             devmem-kernel-gpu-check.cmake)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${file} ${PROJECT_BINARY_DIR}/${file} COPYONLY)
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/devmem-config.cmake
              ${PROJECT_BINARY_DIR}/devmem-config-version.cmake
              ${PROJECT_BINARY_DIR}/devmem-kernels.cmake
              ${PROJECT_BINARY_DIR}/devmem-hipcc.cmake
              ${PROJECT_BINARY_DIR}/devmem-hipcpu.cmake
              ${PROJECT_BINARY_DIR}/devmem-kernel-gpu-check.cmake
  DESTINATION ${DEVMEM_CMAKE_DIR})

# The licence, where distributions keep a package's documentation.
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/devmem)

configure_file(${PROJECT_SOURCE_DIR}/cmake/devmem.pc.in ${PROJECT_BINARY_DIR}/devmem.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/devmem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
