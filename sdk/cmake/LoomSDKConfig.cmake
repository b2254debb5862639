# find_package(LoomSDK) — the Loom plugin SDK: target Loom::sdk and loom_add_plugin().
include(CMakeFindDependencyMacro)
include("${CMAKE_CURRENT_LIST_DIR}/LoomSDKTargets.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/LoomPlugin.cmake")
