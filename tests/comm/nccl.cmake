# comm/nccl: the no-device suite (runs here and in CI: create must fail cleanly) and the
# GPU suite (label gpu: as one process and under mpirun -np 2). A suite that cannot run on
# this machine prints "SKIPPED: <reason>" and ctest reports it as Skipped, not Passed.
# Nothing is added where the plugin was not built (no CUDA toolkit, NCCL or MPI).
if(NOT TARGET loom_comm_nccl)
  return()
endif()
find_package(CUDAToolkit QUIET)  # imported targets are per directory: find it again here
find_package(MPI COMPONENTS C QUIET)

add_executable(test_comm_nccl test_comm_nccl.cpp)
target_link_libraries(test_comm_nccl PRIVATE loom_test_main CUDA::cudart)
target_include_directories(test_comm_nccl PRIVATE ${PROJECT_SOURCE_DIR}/tests/support
  ${PROJECT_SOURCE_DIR}/tests/comm)
add_dependencies(test_comm_nccl loom_comm_nccl)

# mpirun's settings and environment: loom_mpirun and loom_mpi_env (tests/CMakeLists.txt);
# under ASan the CUDA runtime also needs the shadow gap unprotected.
loom_mpi_env(_mpi_env ASAN_OPTIONS protect_shadow_gap=0)
loom_mpirun(_mpirun 2)

add_test(NAME comm.nccl.no_device COMMAND test_comm_nccl --test-suite=no-device)
add_test(NAME comm.nccl.gpu.singleton COMMAND test_comm_nccl --test-suite=gpu)
add_test(NAME comm.nccl.gpu.np2 COMMAND ${_mpirun} $<TARGET_FILE:test_comm_nccl> --test-suite=gpu)
set_tests_properties(comm.nccl.no_device PROPERTIES LABELS "comm")
set_tests_properties(comm.nccl.gpu.singleton comm.nccl.gpu.np2 PROPERTIES LABELS "comm;gpu")
set_tests_properties(comm.nccl.no_device comm.nccl.gpu.singleton comm.nccl.gpu.np2 PROPERTIES
  TIMEOUT 120 ENVIRONMENT "${_mpi_env}" SKIP_REGULAR_EXPRESSION "SKIPPED:")
