# Mixed precision through the real `loom` executable on the CPU: bf16 vs fp32, fp16 dynamic
# loss scaling against Megatron's rule, bitwise resume, bf16 with the distributed optimizer.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()
set(_env OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader LOOM_PLUGIN_PATH=)
if(LOOM_SANITIZE)
  list(APPEND _env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)  # see tests/comm
endif()
add_test(NAME mixed.precision
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mixed_precision.sh $<TARGET_FILE:loom>
                 ${MPIEXEC_EXECUTABLE})
set_tests_properties(mixed.precision PROPERTIES LABELS "mixed" TIMEOUT 600
                     ENVIRONMENT "${_env}")
