# GPU correctness tests (label gpu). Built on every machine: they dlopen the plugins like any
# host, so they need neither CUDA headers nor the cuda backend to compile. Without the
# backend/cuda plugin, or without a device, they print "SKIPPED: <reason>" and exit 77, which
# ctest reports as Skipped (tools/gpu-check runs them on a GPU machine).
#   gpu.ops_vs_cpu     every loom_ops slot on backend/cuda against backend/cpu (f32, tf32, bf16),
#                      Mamba-2's ops and ABI 2.22's extensions in test_ops_vs_cpu_ssm.cpp, and
#                      loom.graph/1's capture and replay in test_graph.cpp, loom.fp8/1 in
#                      test_ops_vs_cpu_fp8.cpp (the casts bitwise, the FP8 GEMM within 5e-3)
add_executable(loom-test-gpu-ops gpu_pair.cpp test_ops_vs_cpu.cpp test_ops_vs_cpu_layers.cpp
  test_ops_vs_cpu_ssm.cpp test_graph.cpp test_ops_vs_cpu_fp8.cpp)
target_link_libraries(loom-test-gpu-ops PRIVATE doctest::doctest loom_sdk loom_test_paths
                      ${CMAKE_DL_LIBS})
target_include_directories(loom-test-gpu-ops PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
foreach(plugin loom_backend_cpu loom_backend_cuda)
  if(TARGET ${plugin})
    add_dependencies(loom-test-gpu-ops ${plugin})
  endif()
endforeach()
add_test(NAME gpu.ops_vs_cpu COMMAND loom-test-gpu-ops)
# The same suite with a second backend/cpu standing in for the device: checks the harness
# (argument layouts, poisoning, the mixed-precision dtypes of each slot, the bf16 bounds
# against the cpu's own bf16 path) where there is no GPU.
add_test(NAME gpu.ops_harness_cpu COMMAND loom-test-gpu-ops)
set_tests_properties(gpu.ops_harness_cpu PROPERTIES ENVIRONMENT "LOOM_GPU_TEST_DEVICE=cpu"
  LABELS "ops" TIMEOUT 600)
set_tests_properties(gpu.ops_vs_cpu PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77)

