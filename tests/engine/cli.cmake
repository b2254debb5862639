# Engine tests: recipes, plugin discovery and refusal, packages, the CLI's exit codes and
# messages, and docs/recipes.md. Hermetic: the CLI runs with LOOM_PLUGIN_PATH_ONLY=1 over
# the stub plugins built here (same kind/name and similar schemas as the defaults), so the
# results do not depend on which real plugins happen to build.

# The test plugins must never be installed with the real ones.
unset(LOOM_INSTALL_PLUGIN_DIR)

set(LOOM_TEST_STUB_DIR ${CMAKE_CURRENT_BINARY_DIR}/stub-plugins)
set(LOOM_TEST_ODD_DIR ${CMAKE_CURRENT_BINARY_DIR}/odd-plugins)
set(LOOM_TEST_TINY_DIR ${CMAKE_CURRENT_BINARY_DIR}/tiny)
set(LOOM_TEST_TINY_OTHER_DIR ${CMAKE_CURRENT_BINARY_DIR}/tiny-abi3)
set(LOOM_TEST_ABI1_DIR ${CMAKE_CURRENT_BINARY_DIR}/abi1-plugins)
set(LOOM_TEST_WILD_DIR ${CMAKE_CURRENT_BINARY_DIR}/wild-plugins)

# loom_test_plugin(<target> KIND k NAME n DIR d SOURCE s [DEFINES ...])
function(loom_test_plugin target)
  cmake_parse_arguments(T "" "KIND;NAME;DIR;SOURCE" "DEFINES" ${ARGN})
  loom_add_plugin(${target} KIND ${T_KIND} NAME ${T_NAME} SOURCES ${T_SOURCE})
  # After loom_add_plugin: keep test plugins out of build/plugins.
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${T_DIR})
  target_compile_definitions(${target} PRIVATE ${T_DEFINES})
  set(LOOM_ENGINE_TEST_PLUGINS ${LOOM_ENGINE_TEST_PLUGINS} ${target} PARENT_SCOPE)
endfunction()

set(_stub ${CMAKE_CURRENT_SOURCE_DIR}/plugins/stub_plugin.cpp)
foreach(spec backend:cpu:BACKEND comm:single:COMM model:gpt:MODEL model:typed:MODEL
             attention:reference:ATTENTION attention:fussy:ATTENTION
             grad:ddp:GRAD schedule:1f1b:SCHEDULE optimizer:adamw:OPTIMIZER
             tokenizer:byte:TOKENIZER
             dataset:mock:DATASET dataset:needs:DATASET)
  string(REPLACE ":" ";" parts ${spec})
  list(GET parts 0 kind)
  list(GET parts 1 name)
  list(GET parts 2 kind_enum)
  loom_test_plugin(loom_test_stub_${kind}_${name} KIND ${kind} NAME ${name} DIR ${LOOM_TEST_STUB_DIR}
                   SOURCE ${_stub}
                   DEFINES STUB_KIND=LOOM_KIND_${kind_enum} STUB_NAME="${name}"
                           STUB_SCHEMA_${kind}_${name})
endforeach()

set(_tiny ${CMAKE_CURRENT_SOURCE_DIR}/plugins/tiny_plugin.cpp)
loom_test_plugin(loom_test_tiny KIND optimizer NAME tiny DIR ${LOOM_TEST_TINY_DIR}
                 SOURCE ${_tiny})
loom_test_plugin(loom_test_tiny_abi3 KIND optimizer NAME tiny DIR ${LOOM_TEST_TINY_OTHER_DIR}
                 SOURCE ${_tiny} DEFINES TINY_ABI_MAJOR=3)
# A plugin as the 1.1 SDK built them: its entry answers a 1.x host only.
loom_test_plugin(loom_test_abi1 KIND optimizer NAME old DIR ${LOOM_TEST_ABI1_DIR}
                 SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/abi1_plugin.cpp)
# Capabilities: one that lists a malformed id, one whose ext chain names an unlisted id.
loom_test_plugin(loom_test_tiny_badcap KIND optimizer NAME badcap DIR ${LOOM_TEST_ABI1_DIR}
                 SOURCE ${_tiny} DEFINES TINY_BAD_CAPABILITY TINY_NAME="badcap")
loom_test_plugin(loom_test_tiny_unlisted KIND optimizer NAME unlisted DIR ${LOOM_TEST_ABI1_DIR}
                 SOURCE ${_tiny} DEFINES TINY_UNLISTED_EXT TINY_NAME="unlisted")
loom_test_plugin(loom_test_tiny_null KIND optimizer NAME null DIR ${LOOM_TEST_ODD_DIR}
                 SOURCE ${_tiny} DEFINES TINY_RETURN_NULL)
loom_test_plugin(loom_test_tiny_badkind KIND optimizer NAME badkind DIR ${LOOM_TEST_ODD_DIR}
                 SOURCE ${_tiny} DEFINES TINY_BAD_KIND TINY_NAME="badkind")
loom_test_plugin(loom_test_tiny_small KIND optimizer NAME small DIR ${LOOM_TEST_ODD_DIR}
                 SOURCE ${_tiny} DEFINES TINY_SMALL TINY_NAME="small")
# A function table of the right size with a NULL mandatory slot (step).
loom_test_plugin(loom_test_tiny_nullslot KIND optimizer NAME nullslot DIR ${LOOM_TEST_ODD_DIR}
                 SOURCE ${_tiny} DEFINES TINY_NULL_SLOT TINY_NAME="nullslot")
# An entry that returns a wild pointer: reading the descriptor crashes whoever loads it.
loom_test_plugin(loom_test_tiny_wild KIND optimizer NAME wild DIR ${LOOM_TEST_WILD_DIR}
                 SOURCE ${_tiny} DEFINES TINY_WILD TINY_NAME="wild")
# A constructor that writes into the working folder and HOME (install's probe must contain it).
set(LOOM_TEST_TOUCH_DIR ${CMAKE_CURRENT_BINARY_DIR}/touch-plugins)
loom_test_plugin(loom_test_tiny_touch KIND optimizer NAME touch DIR ${LOOM_TEST_TOUCH_DIR}
                 SOURCE ${_tiny} DEFINES TINY_TOUCH_CWD TINY_NAME="touch")
# A shared object without the entry symbol.
add_library(loom_test_noentry MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/noentry.c)
set_target_properties(loom_test_noentry PROPERTIES PREFIX "" OUTPUT_NAME loom-model-noentry
                      LIBRARY_OUTPUT_DIRECTORY ${LOOM_TEST_ODD_DIR})
list(APPEND LOOM_ENGINE_TEST_PLUGINS loom_test_noentry)

find_package(spdlog REQUIRED)

# Each test file sits in the folder of the engine subsystem it tests (engine/src/<folder>).
set(_engine_tests session/test_capabilities.cpp cli/test_cli.cpp recipe/test_docs.cpp
  train/test_launch.cpp base/test_log.cpp loader/test_package.cpp eval/test_parity.cpp
  recipe/test_recipe.cpp train/test_schedule_show.cpp)
add_executable(test_engine ${_engine_tests})
target_link_libraries(test_engine PRIVATE loom_engine loom_test_main spdlog::spdlog)
target_include_directories(test_engine PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # engine_test_util
loom_test_paths(test_engine
  LOOM_EXE=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/loom
  LOOM_TEST_STUB_DIR=${LOOM_TEST_STUB_DIR}
  LOOM_TEST_ODD_DIR=${LOOM_TEST_ODD_DIR}
  LOOM_TEST_TINY_DIR=${LOOM_TEST_TINY_DIR}
  LOOM_TEST_TINY_OTHER_DIR=${LOOM_TEST_TINY_OTHER_DIR}
  LOOM_TEST_ABI1_DIR=${LOOM_TEST_ABI1_DIR}
  LOOM_TEST_WILD_DIR=${LOOM_TEST_WILD_DIR}
  LOOM_TEST_TOUCH_DIR=${LOOM_TEST_TOUCH_DIR})
add_dependencies(test_engine loom ${LOOM_ENGINE_TEST_PLUGINS})
add_test(NAME test_engine COMMAND test_engine)
set_tests_properties(test_engine PROPERTIES LABELS "engine" TIMEOUT 300)
