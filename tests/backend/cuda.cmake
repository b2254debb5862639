# backend/cuda core: the no-device suite (runs here and in CI: create must fail cleanly) and
# the GPU suite (label gpu: memory, allocator, GEMM and elementwise ops against host
# references). A suite that cannot run on this machine prints "SKIPPED: <reason>" and exits
# 77, which ctest reports as Skipped. Nothing is added where the plugin was not built.
if(NOT TARGET loom_backend_cuda)
  return()
endif()
find_package(CUDAToolkit QUIET)  # imported targets are per directory: find it again here

add_executable(test_backend_cuda_basic test_backend_cuda_basic.cpp)
target_link_libraries(test_backend_cuda_basic PRIVATE loom_test_main CUDA::cudart)
add_dependencies(test_backend_cuda_basic loom_backend_cuda)

add_test(NAME backend.cuda.no_device COMMAND test_backend_cuda_basic --test-suite=no-device)
add_test(NAME backend.cuda.gpu COMMAND test_backend_cuda_basic --test-suite=gpu)
set_tests_properties(backend.cuda.no_device PROPERTIES LABELS "backend-cuda")
set_tests_properties(backend.cuda.gpu PROPERTIES LABELS "gpu;backend-cuda")
set_tests_properties(backend.cuda.no_device backend.cuda.gpu PROPERTIES
  TIMEOUT 300 SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED:")
