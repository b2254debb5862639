# Attention plugins: flash-cpu against attention/reference op by op (doctest), and whole
# training runs whose loss must not depend on which attention plugin is selected.
if(NOT TARGET loom_attention_flash_cpu OR NOT TARGET loom_backend_cpu)
  return()
endif()
add_executable(loom-test-attention test_flash_cpu.cpp)
target_link_libraries(loom-test-attention PRIVATE loom_test_main)
target_include_directories(loom-test-attention PRIVATE
  ${PROJECT_SOURCE_DIR}/tests/backend)
add_dependencies(loom-test-attention loom_backend_cpu loom_attention_reference
  loom_attention_flash_cpu)
add_test(NAME attention.flash_cpu COMMAND loom-test-attention)
set_tests_properties(attention.flash_cpu PROPERTIES LABELS "attention" TIMEOUT 300)

if(TARGET loom AND TARGET loom_model_gpt)
  add_test(NAME attention.swap COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/swap_attention.sh
           $<TARGET_FILE:loom>)
  set_tests_properties(attention.swap PROPERTIES LABELS "attention" TIMEOUT 600
                       ENVIRONMENT "LOOM_PLUGIN_PATH=")
endif()

# Variable-length sequences (padding, packed documents, cross-attention) through reference
# and flash-cpu against a float64 recomputation.
add_executable(loom-test-attention-seqlens test_seqlens.cpp)
target_link_libraries(loom-test-attention-seqlens PRIVATE loom_test_main)
target_include_directories(loom-test-attention-seqlens PRIVATE
  ${PROJECT_SOURCE_DIR}/tests/backend)
add_dependencies(loom-test-attention-seqlens loom_backend_cpu loom_attention_reference
  loom_attention_flash_cpu)
add_test(NAME attention.seqlens COMMAND loom-test-attention-seqlens)
set_tests_properties(attention.seqlens PROPERTIES LABELS "attention" TIMEOUT 300)

# Partial attention (ABI 2.7): two calls over split keys merged, and their backwards given
# the merged out and lse, through reference and flash-cpu against a float64 recomputation.
add_executable(loom-test-attention-partial test_partial.cpp)
target_link_libraries(loom-test-attention-partial PRIVATE loom_test_main)
target_include_directories(loom-test-attention-partial PRIVATE
  ${PROJECT_SOURCE_DIR}/tests/backend)
add_dependencies(loom-test-attention-partial loom_backend_cpu loom_attention_reference
  loom_attention_flash_cpu)
add_test(NAME attention.partial COMMAND loom-test-attention-partial)
set_tests_properties(attention.partial PROPERTIES LABELS "attention" TIMEOUT 300)
