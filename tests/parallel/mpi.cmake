# Parallel plugins: the pipeline schedules (plans checked without MPI; the three schedule
# plugins driving a toy model under mpirun against a sequential reference) and the
# distributed optimizer (ZeRO-1 shards under mpirun against host-computed averages), and
# grad/fsdp (ZeRO-2/3: residency units gathered from the shards and reduce-scattered into
# them, through the ABI alone, under mpirun against values each rank computes itself).
add_executable(test_pipeline_schedule test_pipeline_schedule.cpp)
target_link_libraries(test_pipeline_schedule PRIVATE loom_test_main)
target_include_directories(test_pipeline_schedule PRIVATE
  ${PROJECT_SOURCE_DIR}/plugins/schedule/pipeline/src)
add_test(NAME parallel.pipeline_schedule COMMAND test_pipeline_schedule)
set_tests_properties(parallel.pipeline_schedule PROPERTIES LABELS "parallel" TIMEOUT 60)

find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND OR NOT TARGET loom_comm_mpi)
  return()
endif()

# mpirun's settings and environment: loom_mpirun and loom_mpi_env (tests/CMakeLists.txt).
loom_mpi_env(_mpi_env)

# name, world sizes, plugins
function(loom_parallel_mpi_test name sizes)
  loom_test_executable(${name} loom_comm_mpi loom_backend_cpu ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  set(_tests)
  foreach(np ${sizes})
    loom_mpirun(_mpirun ${np})
    add_test(NAME parallel.${name}.np${np} COMMAND ${_mpirun} $<TARGET_FILE:${name}>)
    list(APPEND _tests parallel.${name}.np${np})
  endforeach()
  add_test(NAME parallel.${name}.singleton COMMAND ${name})
  list(APPEND _tests parallel.${name}.singleton)
  # ASan + oversubscribed ranks: np 4 takes ~2 minutes in the sanitizer build (10 s in release)
  set_tests_properties(${_tests} PROPERTIES LABELS "parallel" TIMEOUT 600
                       ENVIRONMENT "${_mpi_env}")
endfunction()

loom_parallel_mpi_test(test_pipeline_mpi "2;4" loom_schedule_gpipe loom_schedule_1f1b
                       loom_schedule_interleaved_1f1b)
loom_parallel_mpi_test(test_distributed_optimizer_mpi "2;3" loom_grad_distributed_optimizer)
loom_parallel_mpi_test(test_grad_fsdp_mpi "2;3" loom_grad_fsdp)

# parallel.overlap_grad_reduce on two ranks: the numbers of a run that overlaps grad/ddp's
# reductions with the backward pass are those of one that does not, and a traced run shows
# buckets started and completed before the backward passes end.
loom_script_test(parallel.overlap_grad_reduce overlap_grad_reduce.sh 600
                 "${_mpi_env};LOOM_PLUGIN_PATH=" ${MPIEXEC_EXECUTABLE})

# grad/fsdp (parallel.data = "fsdp") through whole runs, beside its unit test above: bitwise
# resume, resharding to and from other layouts, the measured memory per parameter against
# the ZeRO table, refusals, overlap_param_gather. (layouts.*fsdp* hold it to one rank.)
loom_script_test(parallel.fsdp fsdp.sh 600 "${_mpi_env};LOOM_PLUGIN_PATH="
                 ${MPIEXEC_EXECUTABLE})

# train.schedule_trace: one step's schedule as it ran, per pipeline rank, and `loom schedule
# show --trace` over it (1F1B and ZB-V on two ranks).
loom_script_test(parallel.schedule_trace schedule_trace.sh 300 "${_mpi_env};LOOM_PLUGIN_PATH="
                 ${MPIEXEC_EXECUTABLE})

# The bubble `loom schedule show` prints against the idle time of a traced run at P = 4,
# M = 8 (1F1B, ZB-H1, ZB-V, DualPipeV), through model/paced: stages that take a set time and
# compute nothing, so that four ranks measure on two cores.
loom_test_plugin(loom_test_paced_model KIND model NAME paced
                 DIR ${CMAKE_CURRENT_BINARY_DIR}/paced SOURCE
                 ${CMAKE_CURRENT_SOURCE_DIR}/plugins/paced_model.cpp)
loom_script_test(parallel.schedule_bubble schedule_bubble.sh 300 "${_mpi_env}"
                 ${MPIEXEC_EXECUTABLE} ${CMAKE_CURRENT_BINARY_DIR}/paced)
# Alone: timing, though the stages only wait.
set_tests_properties(parallel.schedule_bubble PROPERTIES RUN_SERIAL TRUE)
