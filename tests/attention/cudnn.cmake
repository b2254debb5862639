# attention/cudnn, two entries of one executable:
#   attention-cudnn.no_device  create fails with a clear "no CUDA device" error (runs here;
#                              Skipped where a device exists)
#   attention-cudnn.gpu        forward/backward against attention/reference on backend/cpu
#                              (label gpu; Skipped without a device or the plugins)
# It dlopens the plugins, so it needs no CUDA headers; nothing is added where the plugin was
# not built (no CUDA toolkit or cuDNN).
if(NOT TARGET loom_attention_cudnn)
  return()
endif()
add_executable(loom-test-attention-cudnn test_attention_cudnn.cpp)
target_link_libraries(loom-test-attention-cudnn PRIVATE doctest::doctest loom_sdk loom_test_paths
                      ${CMAKE_DL_LIBS})
target_include_directories(loom-test-attention-cudnn PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
foreach(plugin loom_backend_cpu loom_attention_reference loom_backend_cuda loom_attention_cudnn)
  if(TARGET ${plugin})
    add_dependencies(loom-test-attention-cudnn ${plugin})
  endif()
endforeach()
add_test(NAME attention-cudnn.no_device COMMAND loom-test-attention-cudnn no-device)
add_test(NAME attention-cudnn.gpu COMMAND loom-test-attention-cudnn gpu)
set_tests_properties(attention-cudnn.no_device PROPERTIES LABELS "attention" TIMEOUT 120
  SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED:")
set_tests_properties(attention-cudnn.gpu PROPERTIES LABELS "gpu" TIMEOUT 600
  SKIP_RETURN_CODE 77 SKIP_REGULAR_EXPRESSION "SKIPPED:")
