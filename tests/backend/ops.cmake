# Op tests of backend/cpu: forward against naive double loops, every backward against central
# finite differences in f64, f32 against f64, bf16/f16 mixed precision against f32, FP8's
# casts against a table of every code (make_fp8_table.py), argument errors. Loads the plugin .so through the test host (tests/support/test_host.hpp), the way
# any host would.
add_executable(loom-test-ops
  test_backend.cpp
  test_args.cpp
  test_linear.cpp
  test_grouped_gemm.cpp
  test_elementwise.cpp
  test_norm.cpp
  test_norm_residual.cpp
  test_activation.cpp
  test_attention.cpp
  test_loss.cpp
  test_vocab_ce.cpp
  test_ssm.cpp
  test_ssm_conv.cpp
  test_mixed.cpp
  test_fp8.cpp
  test_fp8_ops.cpp)
target_link_libraries(loom-test-ops PRIVATE loom_test_main)
if(TARGET loom_backend_cpu)
  add_dependencies(loom-test-ops loom_backend_cpu)
endif()
add_test(NAME ops.backend_cpu COMMAND loom-test-ops)
set_tests_properties(ops.backend_cpu PROPERTIES LABELS "ops;backend-cpu" TIMEOUT 300)
