/* The folders a test reads, as the macros LOOM_TEST_PLUGIN_DIR, LOOM_SOURCE_DIR,
 * LOOM_BINARY_DIR and LOOM_SHARED_DATA name them (tests/CMakeLists.txt): each a call of one of
 * these, defined in build_paths.cpp, the one file compiled with the absolute paths. Included
 * into every file of a target that links loom_test_main (-include), so C as well as C++. */
#ifndef LOOM_TESTS_BUILD_PATHS_H
#define LOOM_TESTS_BUILD_PATHS_H
#ifdef __cplusplus
extern "C" {
#endif
const char* loomtest_plugin_dir(void);  /* where the build puts the in-tree plugins */
const char* loomtest_source_dir(void);  /* the checkout */
const char* loomtest_binary_dir(void);  /* the build folder */
const char* loomtest_shared_data(void); /* ../shared/data beside the checkout */
#ifdef __cplusplus
}
#endif
#endif
