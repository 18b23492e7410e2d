# `cmake --install`: headers, libkiln (shared and static), the CLI, the example plugins, kiln.pc
# and the CMake package (find_package(kiln) -> kiln::kiln, kiln::kiln_static, kiln::headers).
# The wheel (pyproject.toml) runs the same rules with the prefix inside the Python package.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Inside the tree the targets see src/ and the generated headers too; installed, only
# include/ exists, so the build-tree paths must not leak into the exported targets.
foreach(target kiln_static kiln_shared)
  get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  list(TRANSFORM dirs PREPEND "$<BUILD_INTERFACE:")
  list(TRANSFORM dirs APPEND ">")
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES
                        "${dirs};$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
endforeach()
set_target_properties(kiln_shared PROPERTIES EXPORT_NAME kiln)
set_target_properties(kiln_static PROPERTIES EXPORT_NAME kiln_static)

# Plugin authors need the headers and nothing to link: a plugin never links libkiln.
add_library(kiln_headers INTERFACE)
set_target_properties(kiln_headers PROPERTIES EXPORT_NAME headers)
target_include_directories(kiln_headers INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                                                  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
set(KILN_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/kiln/plugins)

install(FILES ${CMAKE_SOURCE_DIR}/include/kiln/kiln.h ${CMAKE_SOURCE_DIR}/include/kiln/kiln_plugin.h
              ${CMAKE_SOURCE_DIR}/include/kiln/kiln_math.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(TARGETS kiln_shared kiln_static kiln_headers EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET swish)
  install(TARGETS swish relu_sigmoid_mul LIBRARY DESTINATION ${KILN_PLUGIN_DIR})
endif()

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR}
                              PATH_VARS KILN_PLUGIN_DIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR})

# kiln.pc with paths relative to the .pc file's own place, so a moved prefix still works.
file(RELATIVE_PATH KILN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_CURRENT_LIST_DIR}/kiln.pc.in ${CMAKE_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
