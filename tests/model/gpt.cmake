# model/gpt and attention/reference (with the optimizers the training tests use), each loaded through the ABI alone by
# loomtest::TestHost with backend/cpu. The whole-model reference data in data/ comes from
# make_reference.py (PyTorch, float64); Python is not needed at test time.
set(_model_plugins loom_backend_cpu loom_attention_reference loom_attention_flash_cpu
                   loom_model_gpt loom_model_bert loom_model_bert_classifier loom_model_t5
                   loom_optimizer_adamw loom_optimizer_sgd loom_optimizer_lion)

function(loom_model_test name)
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE loom_test_main)
  loom_test_paths(${name} LOOM_MODEL_TEST_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data)
  add_dependencies(${name} ${_model_plugins})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "model" TIMEOUT 300)
endfunction()

loom_model_test(test_attention_reference)
loom_model_test(test_gpt_reference)
loom_model_test(test_gpt)
loom_model_test(test_t5)
target_link_libraries(test_t5 PRIVATE loom_layers)
loom_model_test(test_moe_router)
target_link_libraries(test_moe_router PRIVATE loom_layers)
loom_model_test(test_moe)
loom_model_test(test_hybrid)
loom_model_test(test_mtp)
loom_model_test(test_lora)
loom_model_test(test_dpo)
loom_model_test(test_gpt_fp8)
target_link_libraries(test_gpt_fp8 PRIVATE loom_layers)  # the experts' GEMMs
target_link_libraries(test_mtp PRIVATE loom_layers)  # the expert-bias rule
loom_model_test(test_gpt_mixed)

# Benchmark (not a test): GPT-2 124M forward+backward+AdamW on the CPU backend.
add_executable(loom_bench_gpt bench_gpt.cpp)
set_target_properties(loom_bench_gpt PROPERTIES OUTPUT_NAME loom-bench-gpt)
target_include_directories(loom_bench_gpt PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/../support)
target_link_libraries(loom_bench_gpt PRIVATE loom_sdk loom_engine loom_test_paths ${CMAKE_DL_LIBS})
add_dependencies(loom_bench_gpt ${_model_plugins})

# Mixed precision across 2 ranks (comm/mpi bf16/f16 collectives, model/gpt bf16 under tensor
# + sequence parallelism), run by mpirun; skipped where no MPI was found.
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND AND TARGET loom_comm_mpi)
  loom_test_executable(test_gpt_mixed_tp ${_model_plugins} loom_comm_mpi loom_comm_single)
  # mpirun's settings and environment: loom_mpirun and loom_mpi_env (tests/CMakeLists.txt)
  loom_mpirun(_mpirun 2)
  add_test(NAME model.mixed_tp.np2 COMMAND ${_mpirun} $<TARGET_FILE:test_gpt_mixed_tp>)
  loom_mpi_env(_mpi_env)
  set_tests_properties(model.mixed_tp.np2 PROPERTIES LABELS "model" TIMEOUT 180
    ENVIRONMENT "${_mpi_env}")
endif()
