# The indexed format and preprocessing: the SDK's Megatron .bin/.idx reader and writer
# against bytes written by hand, the dataset/indexed plugin, `loom preprocess` and
# `loom data inspect` run as the real executable. The GPT-2 case needs the gpt2-bpe plugin
# and ../shared/data and skips with one line when either is absent.
find_package(ZLIB REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LOOM_TEST_ZSTD REQUIRED IMPORTED_TARGET libzstd)

add_executable(test_data_indexed test_indexed.cpp)
target_link_libraries(test_data_indexed PRIVATE loom_test_main)
add_dependencies(test_data_indexed loom_dataset_indexed)
add_test(NAME data.indexed COMMAND test_data_indexed)
set_tests_properties(data.indexed PROPERTIES LABELS "data" TIMEOUT 120)

# test_preprocess_chat.cpp: --chat-format against chat/references.jsonl.
find_package(nlohmann_json REQUIRED)
add_executable(test_data_preprocess test_preprocess.cpp test_sentences.cpp test_preprocess_chat.cpp)
target_link_libraries(test_data_preprocess PRIVATE loom_engine loom_test_main ZLIB::ZLIB
                      PkgConfig::LOOM_TEST_ZSTD nlohmann_json::nlohmann_json)
loom_test_paths(test_data_preprocess LOOM_EXE=${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/loom)
add_dependencies(test_data_preprocess loom loom_tokenizer_byte loom_dataset_indexed)
add_test(NAME data.preprocess COMMAND test_data_preprocess)
set_tests_properties(data.preprocess PROPERTIES LABELS "data" TIMEOUT 600 SKIP_RETURN_CODE 77)
