# Installable CMake package: find_package(symcomm) gives symcomm::symcomm (and symcomm::symcomm_mpi with MPI).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(SYMCOMM_INSTALL_TARGETS symcomm)
if(TARGET symcomm_mpi)
  list(APPEND SYMCOMM_INSTALL_TARGETS symcomm_mpi)
endif()
install(TARGETS ${SYMCOMM_INSTALL_TARGETS} EXPORT symcommTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/symcomm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT symcommTargets NAMESPACE symcomm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/symcomm)
configure_package_config_file(cmake/symcommConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/symcommConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/symcomm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/symcommConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/symcommConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/symcommConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/symcomm)

# libsymcomm_nccl, the NCCL drop-in library, in a directory of its own with libnccl.so.2 naming it: a program
# takes it for NCCL only when asked to (LD_PRELOAD, or that directory in LD_LIBRARY_PATH). In a directory that
# ldconfig reads it would stand in for NCCL in every program, as its SONAME is libnccl.so.2.
if(TARGET symcomm_nccl)
  set(SYMCOMM_NCCL_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/symcomm-nccl)
  install(TARGETS symcomm_nccl LIBRARY DESTINATION ${SYMCOMM_NCCL_INSTALL_DIR})
  install(CODE "execute_process(COMMAND \${CMAKE_COMMAND} -E create_symlink libsymcomm_nccl.so
    \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${SYMCOMM_NCCL_INSTALL_DIR}/libnccl.so.2\")")
endif()
