# model/gpt under tensor, sequence and pipeline parallelism, each rank against a whole-model
# reference built in the same process (comm/single), run by mpirun at 2 and 4 ranks.
# Skipped where no MPI was found.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()

add_executable(test_model_parallel test_model_parallel.cpp)
target_link_libraries(test_model_parallel PRIVATE loom_test_main)
add_dependencies(test_model_parallel loom_backend_cpu loom_attention_reference loom_model_gpt loom_model_bert
                 loom_comm_mpi loom_comm_single)

# As tests/comm: root in a container, more ranks than cores, shared memory and loopback only.
set(_mpi_env
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_btl=self,vader)
if(LOOM_SANITIZE)
  list(APPEND _mpi_env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)  # see tests/comm
endif()
foreach(np 2 4)
  add_test(NAME model.parallel.np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                   --allow-run-as-root --mca btl self,vader $<TARGET_FILE:test_model_parallel>)
  set_tests_properties(model.parallel.np${np} PROPERTIES
    LABELS "model" TIMEOUT 180 ENVIRONMENT "${_mpi_env}")
endforeach()
