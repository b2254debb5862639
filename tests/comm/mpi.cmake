# comm/mpi run by mpirun at world sizes 2 and 3 (ranks on this machine) and as an MPI
# singleton (world size 1, no launcher). Skipped where no MPI was found.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()

loom_test_executable(test_comm_mpi loom_comm_mpi)
target_include_directories(test_comm_mpi PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)

# mpirun's settings and environment: loom_mpirun and loom_mpi_env (tests/CMakeLists.txt).
loom_mpi_env(_mpi_env)
foreach(np 2 3)
  loom_mpirun(_mpirun ${np})
  add_test(NAME comm.mpi.np${np} COMMAND ${_mpirun} $<TARGET_FILE:test_comm_mpi>)
endforeach()
add_test(NAME comm.mpi.singleton COMMAND test_comm_mpi)
set_tests_properties(comm.mpi.np2 comm.mpi.np3 comm.mpi.singleton PROPERTIES
  LABELS "comm" TIMEOUT 60 ENVIRONMENT "${_mpi_env}")

# Every parallel layout trains the same model: data parallelism over comm/mpi at 2 ranks
# against one rank, through the real `loom` executable.
add_test(NAME comm.mpi.dp2_equals_1
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/dp_equivalence.sh $<TARGET_FILE:loom>
                 ${MPIEXEC_EXECUTABLE})
set_tests_properties(comm.mpi.dp2_equals_1 PROPERTIES
  LABELS "comm" TIMEOUT 120 ENVIRONMENT "${_mpi_env};LOOM_PLUGIN_PATH=")
