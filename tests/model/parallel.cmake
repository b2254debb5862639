# model/gpt under tensor, sequence and pipeline parallelism, each rank against a whole-model
# reference built in the same process (comm/single), run by mpirun at 2 and 4 ranks.
# Skipped where no MPI was found.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()

loom_test_executable(test_model_parallel loom_backend_cpu loom_attention_reference loom_model_gpt
                     loom_model_bert loom_comm_mpi loom_comm_single)

# mpirun's settings and environment: loom_mpirun and loom_mpi_env (tests/CMakeLists.txt).
loom_mpi_env(_mpi_env)
foreach(np 2 4)
  loom_mpirun(_mpirun ${np})
  add_test(NAME model.parallel.np${np} COMMAND ${_mpirun} $<TARGET_FILE:test_model_parallel>)
  set_tests_properties(model.parallel.np${np} PROPERTIES
    LABELS "model" TIMEOUT 180 ENVIRONMENT "${_mpi_env}")
endforeach()
