# The SDK as a third party sees it: install only the SDK component of this build tree into a
# temp prefix, build docs/examples/signsgd-optimizer out of tree against it with
# find_package(LoomSDK), check the .so exports exactly loom_plugin_entry, run the probe
# below on it, and (when the engine's `loom` supports them) pack, install, list and train
# with it. run.sh prints which steps ran and why any was skipped.
set(_example ${CMAKE_CURRENT_SOURCE_DIR}/../../docs/examples/signsgd-optimizer)

# Loads the out-of-tree .so through the ABI and steps it on a tiny in-test CPU backend.
add_executable(sdk_package_probe probe.cpp)
target_link_libraries(sdk_package_probe PRIVATE loom_test_main)

find_program(LOOM_NINJA NAMES ninja ninja-build)
if(CMAKE_GENERATOR MATCHES "Ninja")
  set(LOOM_NINJA ${CMAKE_MAKE_PROGRAM})
endif()

add_test(NAME sdk_package
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run.sh
    --cmake ${CMAKE_COMMAND}
    --ninja ${LOOM_NINJA}
    --cxx ${CMAKE_CXX_COMPILER}
    --build-dir ${CMAKE_BINARY_DIR}
    --example ${_example}
    --probe $<TARGET_FILE:sdk_package_probe>
    --loom ${CMAKE_BINARY_DIR}/bin/loom)
set_tests_properties(sdk_package PROPERTIES LABELS "sdk" TIMEOUT 900)

# The same for docs/examples/gptj-model, a model plugin on the SDK's layer library
# (Loom::layers): its probe checks it on backend/cpu against model/gpt and finite differences.
add_executable(sdk_package_model_probe model_probe.cpp)
target_include_directories(sdk_package_model_probe PRIVATE ${PROJECT_SOURCE_DIR}/tests/model)
target_link_libraries(sdk_package_model_probe PRIVATE loom_test_main)
add_test(NAME sdk_package.gptj
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run.sh
    --cmake ${CMAKE_COMMAND}
    --ninja ${LOOM_NINJA}
    --cxx ${CMAKE_CXX_COMPILER}
    --build-dir ${CMAKE_BINARY_DIR}
    --example ${CMAKE_CURRENT_SOURCE_DIR}/../../docs/examples/gptj-model
    --name model/gptj
    --probe $<TARGET_FILE:sdk_package_model_probe>
    --loom ${CMAKE_BINARY_DIR}/bin/loom)
set_tests_properties(sdk_package.gptj PROPERTIES LABELS "sdk" TIMEOUT 900)
