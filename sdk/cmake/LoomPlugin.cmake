# loom_add_plugin(<target> KIND <kind> NAME <name> SOURCES <src>... [LIBRARIES <lib>...]
#                 [CUDA <bool> CUDA_SOURCES <src.cu>...]
#                 [VERSION <v> VENDOR <who> LICENSE <spdx>])
#
# Builds one Loom plugin: a MODULE library named loom-<kind>-<name>.so that links the SDK,
# hides every symbol but loom_plugin_entry, and lands in LOOM_PLUGIN_OUTPUT_DIR (the build
# tree's plugins/ folder in-tree; the current binary dir out of tree).
#
# A plugin that runs on the CPU and brings optional CUDA kernels (an optimizer) calls
# loom_try_enable_cuda(<var> ...) first and passes CUDA ${<var>}: with it true, CUDA_SOURCES
# are built in, with the static CUDA runtime so that the plugin still loads where no CUDA
# library exists, and LOOM_PLUGIN_CUDA is 1 (0 otherwise) for the C++ sources to test.
set(_LOOM_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/plugin.map")

# loom_plugin_identity(<target> <kind> <name> [VERSION <v>] [VENDOR <who>] [LICENSE <spdx>])
# The plugin's identity as compile definitions, stated once where its library's file name is
# made: LOOM_PLUGIN_KIND (LOOM_KIND_<KIND>) and LOOM_PLUGIN_NAME, and LOOM_PLUGIN_VERSION,
# _VENDOR and _LICENSE from the arguments or else the CMake variables of those names. With all
# five, loom/cpp/plugin.hpp's LOOM_PLUGIN_IDENTITY fills the descriptor's first five members.
# loom_add_plugin calls it; a build that compiles a plugin's sources into something else (a
# fuzz harness, a test fixture) calls it for that target.
function(loom_plugin_identity target kind name)
  cmake_parse_arguments(I "" "VERSION;VENDOR;LICENSE" "" ${ARGN})
  string(TOUPPER "${kind}" kind_upper)
  set(defs "LOOM_PLUGIN_KIND=LOOM_KIND_${kind_upper}" "LOOM_PLUGIN_NAME=\"${name}\"")
  foreach(field VERSION VENDOR LICENSE)
    if(NOT I_${field} AND DEFINED LOOM_PLUGIN_${field})
      set(I_${field} "${LOOM_PLUGIN_${field}}")
    endif()
    if(I_${field})
      list(APPEND defs "LOOM_PLUGIN_${field}=\"${I_${field}}\"")
    endif()
  endforeach()
  target_compile_definitions(${target} PRIVATE ${defs})
endfunction()

function(loom_add_plugin target)
  cmake_parse_arguments(P "" "KIND;NAME;CUDA;VERSION;VENDOR;LICENSE" "SOURCES;LIBRARIES;CUDA_SOURCES"
                        ${ARGN})
  if(NOT P_KIND OR NOT P_NAME OR NOT P_SOURCES)
    message(FATAL_ERROR "loom_add_plugin(${target}): KIND, NAME and SOURCES are required")
  endif()
  if(P_CUDA)
    list(APPEND P_SOURCES ${P_CUDA_SOURCES})
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  loom_plugin_identity(${target} ${P_KIND} ${P_NAME} VERSION "${P_VERSION}" VENDOR "${P_VENDOR}"
                       LICENSE "${P_LICENSE}")
  if(P_CUDA)
    target_link_libraries(${target} PRIVATE CUDA::cudart_static)
    target_compile_definitions(${target} PRIVATE LOOM_PLUGIN_CUDA=1)
    loom_cuda_target(${target})
    set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  elseif(P_CUDA_SOURCES)
    target_compile_definitions(${target} PRIVATE LOOM_PLUGIN_CUDA=0)
  endif()
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

# For a plugin with CUDA sources, first thing in its CMakeLists.txt:
#   loom_enable_cuda("backend/cuda")
# A macro, so that it can return() from the caller: where nvcc is missing, or in the
# sanitizer build (machines without a GPU; the normal build already compiles the plugin), the
# plugin is skipped with one STATUS line saying why. Otherwise CUDA is enabled for sm_90a plus
# compute_90 PTX (set CMAKE_CUDA_ARCHITECTURES to choose otherwise), C++17, and the folder's
# C/C++ warning and sanitizer options are kept off nvcc, which does not take them as such.
# A plugin whose CUDA code is optional (it runs on the CPU too) calls
#   loom_try_enable_cuda(<var> "optimizer/lion")
# instead, which sets <var> to TRUE or FALSE and never returns from the caller.
macro(loom_try_enable_cuda var who)
  set(${var} FALSE)
  if(LOOM_SANITIZE)
    message(STATUS "${who}: CUDA code skipped in the sanitizer build (compiled by the normal build)")
  else()
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      message(STATUS "${who}: CUDA code skipped (no nvcc)")
    else()
      # Before enable_language: it would otherwise cache CMake's own default (an old target).
      set(CMAKE_CUDA_ARCHITECTURES "90a-real;90-virtual" CACHE STRING
          "GPU targets of the CUDA plugins (real = machine code, virtual = PTX)")
      enable_language(CUDA)
      find_package(CUDAToolkit REQUIRED)
      set(CMAKE_CUDA_STANDARD 17)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      get_directory_property(_loom_opts COMPILE_OPTIONS)
      set(_loom_host_opts "")
      foreach(opt IN LISTS _loom_opts)
        list(APPEND _loom_host_opts "$<$<COMPILE_LANGUAGE:C,CXX>:${opt}>")
      endforeach()
      set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_loom_host_opts}")
      set(${var} TRUE)
    endif()
  endif()
endmacro()

macro(loom_enable_cuda who)
  loom_try_enable_cuda(_loom_cuda_on "${who}")
  if(NOT _loom_cuda_on)
    return()
  endif()
endmacro()

# nvcc options of a CUDA plugin target: the host pass gets the warnings (without -Werror:
# code nvcc generates is not ours to fix), spills are reported, and the process has one CUDA
# runtime, the shared one (as CUDA::cudart and comm/nccl use).
function(loom_cuda_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-fvisibility=hidden
    --expt-relaxed-constexpr -Xptxas=-warn-spills>)
  set_target_properties(${target} PROPERTIES
    CUDA_RUNTIME_LIBRARY Shared
    CUDA_VISIBILITY_PRESET hidden
    CUDA_SEPARABLE_COMPILATION OFF)
endfunction()
