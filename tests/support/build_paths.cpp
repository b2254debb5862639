// The folders of build_paths.h, from the absolute paths this one file is compiled with.
#include "build_paths.h"

extern "C" const char* loomtest_plugin_dir(void) { return LOOM_PATH_PLUGINS; }
extern "C" const char* loomtest_source_dir(void) { return LOOM_PATH_SOURCE; }
extern "C" const char* loomtest_binary_dir(void) { return LOOM_PATH_BINARY; }
extern "C" const char* loomtest_shared_data(void) { return LOOM_PATH_SHARED; }
