# The sampler against numpy references (make_reference.py -> data/): numpy's RandomState,
# Megatron's split bounds, GPT document/sample/shuffle indices, blending, the .npy cache,
# and `loom data samples` end to end.
add_executable(test_sampler test_mt19937.cpp test_gpt_indices.cpp test_cache.cpp)
target_link_libraries(test_sampler PRIVATE loom_engine loom_test_main)
add_test(NAME sampler.units COMMAND test_sampler)
set_tests_properties(sampler.units PROPERTIES LABELS "sanitize")

add_executable(test_sampler_cli test_samples_cli.cpp)
target_link_libraries(test_sampler_cli PRIVATE loom_test_main)
add_dependencies(test_sampler_cli loom)
add_test(NAME sampler.cli COMMAND test_sampler_cli)
set_tests_properties(sampler.cli PROPERTIES LABELS "sanitize" ENVIRONMENT "LOOM_PLUGIN_PATH=")
