# Mixed precision through the real `loom` executable on the CPU: bf16 vs fp32, fp16 dynamic
# loss scaling against Megatron's rule, bitwise resume, bf16 with the distributed optimizer.
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND AND TARGET loom_comm_mpi)
  loom_mpi_env(_env LOOM_PLUGIN_PATH=)
  loom_script_test(mixed.precision mixed_precision.sh 600 "${_env}" ${MPIEXEC_EXECUTABLE})
endif()
