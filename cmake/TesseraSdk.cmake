# The SDK a vendor installs: `cmake --install build --prefix DIR` lays out
#
#   DIR/bin/tessera                               the command
#   DIR/lib/libtessera.so*                        the library (Tessera::tessera)
#   DIR/include/tessera/*.h, tessera.hpp          the C ABI and the C++ wrapper (Tessera::headers)
#   DIR/lib/tessera/plugins/*.so                  the plugins discovery loads by default (cpu, custom ops)
#   DIR/lib/tessera/samples/libtessera_sample.so  the sample provider (opt-in: TESSERA_PLUGIN_PATH)
#   DIR/lib/cmake/Tessera/                        find_package(Tessera): TesseraConfig.cmake, TesseraConfigVersion.cmake,
#                                                 TesseraTargets*.cmake, tessera-plugin.map (the plugin version script)
#   DIR/lib/pkgconfig/tessera.pc                  pkg-config --cflags --libs tessera
#   DIR/backends/tessera/libtriton_tessera.so     the Triton Inference Server backend (backends/triton; absent when
#                                                 TESSERA_BUILD_TRITON_BACKEND is OFF or nlohmann_json is missing):
#                                                 Triton's layout, so that a prefix of /opt/tritonserver puts it where
#                                                 the server looks; it finds libtessera in DIR/lib through its RPATH
#
# Everything is relocatable: the package files locate the prefix from their own position, so the tree may be moved
# or unpacked anywhere.
include(CMakePackageConfigHelpers)

set(TESSERA_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
set(TESSERA_PLUGIN_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/tessera/plugins)

# Tessera::headers (headers only: what a plugin builds against) and Tessera::tessera (the library, which brings the
# headers along).  The core installs libtessera into the TesseraTargets export set (core/CMakeLists.txt).
set_target_properties(tessera_headers PROPERTIES EXPORT_NAME headers)
install(TARGETS tessera_headers EXPORT TesseraTargets)
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${TESSERA_CMAKE_INSTALL_DIR})

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/TesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sdk/TesseraConfig.cmake
  INSTALL_DESTINATION ${TESSERA_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR TESSERA_PLUGIN_INSTALL_DIR)
# 0.x: a minor version may change the C API, so only the same major.minor satisfies a request.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/sdk/TesseraConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/sdk/TesseraConfig.cmake
  ${PROJECT_BINARY_DIR}/sdk/TesseraConfigVersion.cmake
  DESTINATION ${TESSERA_CMAKE_INSTALL_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/plugin_api/plugin.map
  DESTINATION ${TESSERA_CMAKE_INSTALL_DIR} RENAME tessera-plugin.map)

# pkg-config: the prefix is found relative to the .pc file (${pcfiledir}), so the file survives a move.
file(RELATIVE_PATH TESSERA_PC_PREFIX_FROM_PCDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" TESSERA_PC_PREFIX_FROM_PCDIR "${TESSERA_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/tessera.pc.in ${PROJECT_BINARY_DIR}/sdk/tessera.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sdk/tessera.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The build tree gets its own, with absolute paths: PKG_CONFIG_PATH=build/lib/pkgconfig builds against a build
# without installing it (headers from the source tree and the generated ones, the library from build/lib).
file(WRITE ${PROJECT_BINARY_DIR}/lib/pkgconfig/tessera.pc
"libdir=${PROJECT_BINARY_DIR}/lib
plugindir=\${libdir}/tessera/plugins

Name: Tessera (build tree)
Description: ONNX inference runtime whose every device is a plugin (a plugin needs only --cflags)
Version: ${PROJECT_VERSION}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltessera
Cflags: -I${PROJECT_SOURCE_DIR}/plugin_api/include -I${PROJECT_BINARY_DIR}/include
")
