# Tokenizer tests:
#   test_tokenizer_conformance  conformance.cpp: one body per property, run against every
#                               registered tokenizer (append cases there, and the plugin
#                               target to LOOM_CONFORMANCE_PLUGINS below)
#   test_tokenizer_gpt2_bpe     GPT-2 BPE against reference ids (data/, made by
#                               make_gpt2_reference.py), round trips, errors
#   test_tokenizer_null         the integer-text tokenizer
#   loom-bench-tokenizer        encode/decode throughput (a program, not a test)
# A case that needs ../shared/data calls loomtest::skip when it is absent: its suite exits 77
# (Skipped) after the cases that could run.
find_package(nlohmann_json 3 REQUIRED)
find_package(OpenSSL REQUIRED)

set(LOOM_CONFORMANCE_PLUGINS
  loom_tokenizer_byte
  loom_tokenizer_null
  loom_tokenizer_gpt2_bpe
  loom_tokenizer_wordpiece
  loom_tokenizer_sentencepiece
  loom_tokenizer_hf_json
)

# loom_tokenizer_test(<name> SOURCE <file> PLUGINS <targets>... [LIBRARIES <libs>...])
function(loom_tokenizer_test name)
  cmake_parse_arguments(T "" "SOURCE" "PLUGINS;LIBRARIES" ${ARGN})
  add_executable(${name} ${T_SOURCE})
  target_link_libraries(${name} PRIVATE loom_test_main ${T_LIBRARIES})
  loom_test_paths(${name} LOOM_TOKENIZER_TEST_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data)
  add_dependencies(${name} ${T_PLUGINS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "tokenizers" TIMEOUT 300 SKIP_RETURN_CODE 77)
endfunction()

loom_tokenizer_test(test_tokenizer_conformance SOURCE conformance.cpp
  PLUGINS ${LOOM_CONFORMANCE_PLUGINS})
loom_tokenizer_test(test_tokenizer_gpt2_bpe SOURCE test_gpt2_bpe.cpp
  PLUGINS loom_tokenizer_gpt2_bpe
  LIBRARIES nlohmann_json::nlohmann_json OpenSSL::Crypto)
loom_tokenizer_test(test_tokenizer_null SOURCE test_null.cpp PLUGINS loom_tokenizer_null)

add_executable(loom-bench-tokenizer bench_tokenizer.cpp)
target_link_libraries(loom-bench-tokenizer PRIVATE loom_sdk loom_test_paths ${CMAKE_DL_LIBS})
target_include_directories(loom-bench-tokenizer PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/../support)
add_dependencies(loom-bench-tokenizer loom_tokenizer_gpt2_bpe)
