# Attention plugins: flash-cpu against attention/reference op by op (doctest), and whole
# training runs whose loss must not depend on which attention plugin is selected.
if(NOT TARGET loom_attention_flash_cpu OR NOT TARGET loom_backend_cpu)
  return()
endif()
# attention_test(NAME EXECUTABLE SOURCE): the doctest EXECUTABLE built from SOURCE (with
# tests/backend's helpers), run as attention.NAME over backend/cpu, attention/reference and
# attention/flash-cpu.
function(attention_test name exe source)
  add_executable(${exe} ${source})
  target_link_libraries(${exe} PRIVATE loom_test_main)
  target_include_directories(${exe} PRIVATE ${PROJECT_SOURCE_DIR}/tests/backend)
  add_dependencies(${exe} loom_backend_cpu loom_attention_reference loom_attention_flash_cpu)
  add_test(NAME attention.${name} COMMAND ${exe})
  set_tests_properties(attention.${name} PROPERTIES LABELS "attention" TIMEOUT 300)
endfunction()
attention_test(flash_cpu loom-test-attention test_flash_cpu.cpp)

if(TARGET loom AND TARGET loom_model_gpt)
  add_test(NAME attention.swap COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/swap_attention.sh
           $<TARGET_FILE:loom>)
  set_tests_properties(attention.swap PROPERTIES LABELS "attention" TIMEOUT 600
                       ENVIRONMENT "LOOM_PLUGIN_PATH=")
endif()

# Variable-length sequences (padding, packed documents, cross-attention) through reference
# and flash-cpu against a float64 recomputation.
attention_test(seqlens loom-test-attention-seqlens test_seqlens.cpp)

# Partial attention (ABI 2.7): two calls over split keys merged, and their backwards given
# the merged out and lse, through reference and flash-cpu against a float64 recomputation.
attention_test(partial loom-test-attention-partial test_partial.cpp)
