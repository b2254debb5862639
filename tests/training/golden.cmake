# Golden loss curves (golden_curve.sh says how each was made and its tolerance):
#   golden.quickstart          recipes/quickstart.toml, 50 iterations (quickstart-50.jsonl)
#   golden.gpt2_shakespeare    recipes/gpt2-tinyshakespeare.toml, GPT-2 BPE through
#                              `loom preprocess` and dataset/indexed, 10 iterations
#                              (gpt2-shakespeare-10.jsonl; Skipped without ../shared/data)
if(NOT TARGET loom OR LOOM_SANITIZE)  # Release numerics; the sanitizer build is -O0
  return()
endif()
add_test(NAME golden.quickstart
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden_curve.sh $<TARGET_FILE:loom> quickstart-50)
add_test(NAME golden.gpt2_shakespeare
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/golden_curve.sh $<TARGET_FILE:loom>
                 gpt2-shakespeare-10)
# PROCESSORS 2: each trains with backend.threads = 2, so ctest -j2 runs it alone rather
# than beside another test (which doubled its time).
set_tests_properties(golden.quickstart golden.gpt2_shakespeare PROPERTIES LABELS "golden"
  TIMEOUT 600 SKIP_RETURN_CODE 77 PROCESSORS 2
  ENVIRONMENT "LOOM_PLUGIN_PATH=;LOOM_SHARED_DATA=${PROJECT_SOURCE_DIR}/../shared/data")
