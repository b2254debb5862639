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

# As in tests/comm: root in a container, more ranks than cores, shared memory only.
set(_mpi_env
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_btl=self,vader)
if(LOOM_SANITIZE)
  # OpenMPI's and the CUDA runtime's start-up allocations are never freed; see tests/comm.
  list(APPEND _mpi_env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:protect_shadow_gap=0)
endif()

add_test(NAME comm.nccl.no_device COMMAND test_comm_nccl --test-suite=no-device)
add_test(NAME comm.nccl.gpu.singleton COMMAND test_comm_nccl --test-suite=gpu)
add_test(NAME comm.nccl.gpu.np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe
                 --allow-run-as-root --mca btl self,vader $<TARGET_FILE:test_comm_nccl>
                 --test-suite=gpu)
set_tests_properties(comm.nccl.no_device PROPERTIES LABELS "comm")
set_tests_properties(comm.nccl.gpu.singleton comm.nccl.gpu.np2 PROPERTIES LABELS "comm;gpu")
set_tests_properties(comm.nccl.no_device comm.nccl.gpu.singleton comm.nccl.gpu.np2 PROPERTIES
  TIMEOUT 120 ENVIRONMENT "${_mpi_env}" SKIP_REGULAR_EXPRESSION "SKIPPED:")
