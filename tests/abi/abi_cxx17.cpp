// Every public header (and the SDK's C++ helpers) compiled as C++17, pedantic: plugins may
// be built with an older standard than the engine's C++20.
#include "abi_structs.h"
#include "loom/cpp/plugin.hpp"
#include "loom/cpp/tensor.hpp"
#include "loom/loom.h"

#define LOOM_ABI_SIZEOF(T) sizeof(T),
extern "C" const size_t loom_abi_cxx17_sizes[] = {LOOM_ABI_STRUCTS(LOOM_ABI_SIZEOF)};
extern "C" const size_t loom_abi_cxx17_count =
    sizeof(loom_abi_cxx17_sizes) / sizeof(loom_abi_cxx17_sizes[0]);
