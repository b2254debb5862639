# loom_add_plugin(<target> KIND <kind> NAME <name> SOURCES <src>... [LIBRARIES <lib>...])
#
# Builds one Loom plugin: a MODULE library named loom-<kind>-<name>.so that links the SDK,
# hides every symbol but loom_plugin_entry, and lands in LOOM_PLUGIN_OUTPUT_DIR (the build
# tree's plugins/ folder in-tree; the current binary dir out of tree).
set(_LOOM_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/plugin.map")

function(loom_add_plugin target)
  cmake_parse_arguments(P "" "KIND;NAME" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_KIND OR NOT P_NAME OR NOT P_SOURCES)
    message(FATAL_ERROR "loom_add_plugin(${target}): KIND, NAME and SOURCES are required")
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  if(TARGET Loom::sdk)
    target_link_libraries(${target} PRIVATE Loom::sdk)
  else()
    target_link_libraries(${target} PRIVATE loom_sdk)
  endif()
  if(P_LIBRARIES)
    target_link_libraries(${target} PRIVATE ${P_LIBRARIES})
  endif()
  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}")
  if(DEFINED LOOM_BUILD_PLUGIN_DIR)
    set(out_dir "${LOOM_BUILD_PLUGIN_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "" OUTPUT_NAME "loom-${P_KIND}-${P_NAME}"
    LIBRARY_OUTPUT_DIRECTORY "${out_dir}"
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  target_link_options(${target} PRIVATE "-Wl,--version-script=${_LOOM_PLUGIN_MAP}" "-Wl,--no-undefined")
  if(DEFINED LOOM_INSTALL_PLUGIN_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${LOOM_INSTALL_PLUGIN_DIR})
  endif()
endfunction()
