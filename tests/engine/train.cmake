# Engine training-path tests: schedules, sampler, safetensors and checkpoints, main parameters,
# the file tools' output rules (unit), and whole runs of the `loom` executable (resume equivalence,
# generation, exit codes).
find_package(nlohmann_json REQUIRED)
add_executable(test_train_units train/test_lr_schedule.cpp data/test_sampler.cpp
               checkpoint/test_checkpoint.cpp train/test_batch_spec.cpp base/test_tool_output.cpp
               base/test_mfu.cpp train/test_precision.cpp)
target_link_libraries(test_train_units PRIVATE loom_engine loom_test_main nlohmann_json::nlohmann_json)
add_dependencies(test_train_units loom_backend_cpu)  # test_precision's backend
add_test(NAME train.units COMMAND test_train_units)
set_tests_properties(train.units PROPERTIES LABELS "sanitize")

# attention/causal-only: attention/reference built without listing loom.attention-window/1,
# as a 2.0 plugin written before sliding windows would be. The host must refuse to hand it a
# window, whatever its code would do with one. Never installed.
unset(LOOM_INSTALL_PLUGIN_DIR)
set(LOOM_TEST_FIXTURE_DIR ${CMAKE_CURRENT_BINARY_DIR}/fixture-plugins)
loom_add_plugin(loom_test_attention_causal_only KIND attention NAME causal-only
                SOURCES ${PROJECT_SOURCE_DIR}/plugins/attention/reference/src/attention_reference.cpp)
set_target_properties(loom_test_attention_causal_only PROPERTIES
                      LIBRARY_OUTPUT_DIRECTORY ${LOOM_TEST_FIXTURE_DIR})
target_compile_definitions(loom_test_attention_causal_only PRIVATE
                           LOOM_REFERENCE_FIXTURE_WITHOUT_WINDOW)

add_executable(test_train_runs train/test_runs.cpp)
target_link_libraries(test_train_runs PRIVATE loom_test_main)
loom_test_paths(test_train_runs LOOM_TEST_FIXTURE_DIR=${LOOM_TEST_FIXTURE_DIR})
add_dependencies(test_train_runs loom loom_test_attention_causal_only)
add_test(NAME train.runs COMMAND test_train_runs --test-case-exclude=*lion*)
set_tests_properties(train.runs PROPERTIES LABELS "sanitize" ENVIRONMENT "LOOM_PLUGIN_PATH=")
# Lion on the quickstart model: 60 iterations, 15 s in Release and 200 s under ASan at -O0.
# The sanitizer build leaves it out; Lion's kernel runs under ASan in test_optimizers.
if(NOT LOOM_SANITIZE)
  add_test(NAME train.lion COMMAND test_train_runs --test-case=*lion*)
  set_tests_properties(train.lion PROPERTIES LABELS "train" ENVIRONMENT "LOOM_PLUGIN_PATH=")
endif()

# Every file read by name must be a regular file (issue 35): /dev/zero, a FIFO and a directory
# as data, recipe include, tokenizer file, HF model.safetensors, a checkpoint's file, preprocess
# input and eval data are refused with exit 2 naming the path, without hanging.
if(TARGET loom)
  add_test(NAME engine.regular_files
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/regular_files.sh $<TARGET_FILE:loom>
                   ${PROJECT_SOURCE_DIR}/tests/model/hf/gpt2-f32)
  set_tests_properties(engine.regular_files PROPERTIES LABELS "engine" TIMEOUT 300
    ENVIRONMENT "LOOM_PLUGIN_PATH=")
endif()
