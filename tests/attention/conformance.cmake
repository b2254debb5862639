# The attention conformance suite (conformance.cpp): an attention plugin on its backend
# against attention/reference on backend/cpu. Built on every machine: it dlopens the plugins,
# so it needs no CUDA headers. LOOM_ATTN_TEST=BACKEND/ATTENTION picks the plugin; without it
# or without a device the program prints "SKIPPED: <reason>" and exits 77 (Skipped).
#   attention-gpu.flash_vs_reference   cuda/flash-cuda (label gpu)
#   attention-gpu.cudnn_vs_reference   cuda/cudnn (label gpu; it refuses GQA, causal T != S
#                                      and f32 by name)
#   attention-gpu.cudnn_deterministic  the same with deterministic = true (its backward
#                                      without the atomic dQ accumulator)
#   attention.conformance_flash_cpu    cpu/flash-cpu
#   attention-gpu.harness_cpu          cpu/reference: the harness checking itself
add_executable(loom-test-attention-gpu conformance.cpp)
target_link_libraries(loom-test-attention-gpu PRIVATE doctest::doctest loom_sdk loom_test_paths
                      ${CMAKE_DL_LIBS})
target_include_directories(loom-test-attention-gpu PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
foreach(plugin loom_backend_cpu loom_attention_reference loom_attention_flash_cpu
               loom_backend_cuda loom_attention_flash_cuda loom_attention_cudnn)
  if(TARGET ${plugin})
    add_dependencies(loom-test-attention-gpu ${plugin})
  endif()
endforeach()
add_test(NAME attention-gpu.flash_vs_reference COMMAND loom-test-attention-gpu)
add_test(NAME attention-gpu.cudnn_vs_reference COMMAND loom-test-attention-gpu)
add_test(NAME attention-gpu.cudnn_deterministic COMMAND loom-test-attention-gpu)
set_tests_properties(attention-gpu.flash_vs_reference PROPERTIES
  ENVIRONMENT "LOOM_ATTN_TEST=cuda/flash-cuda")
set_tests_properties(attention-gpu.cudnn_vs_reference PROPERTIES
  ENVIRONMENT "LOOM_ATTN_TEST=cuda/cudnn")
set_tests_properties(attention-gpu.cudnn_deterministic PROPERTIES
  ENVIRONMENT "LOOM_ATTN_TEST=cuda/cudnn;LOOM_ATTN_TEST_SET=deterministic=true")
set_tests_properties(attention-gpu.flash_vs_reference attention-gpu.cudnn_vs_reference
  attention-gpu.cudnn_deterministic
  PROPERTIES LABELS "gpu" TIMEOUT 600 SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED:")
add_test(NAME attention.conformance_flash_cpu COMMAND loom-test-attention-gpu)
add_test(NAME attention-gpu.harness_cpu COMMAND loom-test-attention-gpu)
set_tests_properties(attention.conformance_flash_cpu PROPERTIES
  ENVIRONMENT "LOOM_ATTN_TEST=cpu/flash-cpu")
set_tests_properties(attention-gpu.harness_cpu PROPERTIES
  ENVIRONMENT "LOOM_ATTN_TEST=cpu/reference")
set_tests_properties(attention.conformance_flash_cpu attention-gpu.harness_cpu PROPERTIES
  LABELS "attention" TIMEOUT 600 SKIP_RETURN_CODE 77)
