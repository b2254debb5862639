# Tests of tokenizer/wordpiece, tokenizer/sentencepiece and tokenizer/hf-json against
# references computed once by independent implementations (see data/*.py), each plugin
# loaded through the ABI alone by loomtest::TestHost. Small data lives in data/; the GPT-2
# files come from LOOM_SHARED_DATA and those cases skip when it is absent.
find_package(nlohmann_json REQUIRED)
function(loom_tokmore_test name)
  cmake_parse_arguments(T "" "" "PLUGINS" ${ARGN})
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE loom_test_main nlohmann_json::nlohmann_json)
  loom_test_paths(${name} LOOM_TOKMORE_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data)
  add_dependencies(${name} ${T_PLUGINS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "plugins;tokenizers" TIMEOUT 120
    SKIP_RETURN_CODE 77)
endfunction()

loom_tokmore_test(test_tokenizer_wordpiece PLUGINS loom_tokenizer_wordpiece)
loom_tokmore_test(test_tokenizer_sentencepiece PLUGINS loom_tokenizer_sentencepiece)
loom_tokmore_test(test_tokenizer_hf_json PLUGINS loom_tokenizer_hf_json)
