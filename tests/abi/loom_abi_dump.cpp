// loom-abi-dump: prints the public ABI's layout in the golden-file format.
//   build/bin/loom-abi-dump > tests/abi/abi_v2.golden
#include <cstdio>

#include "abi_layout.hpp"

int main() {
  std::string problems = loomabi::listing_problems();
  if (!problems.empty()) {
    std::fprintf(stderr, "loom-abi-dump: %s\n", problems.c_str());
    return 1;
  }
  std::fputs(loomabi::format(loomabi::layout()).c_str(), stdout);
  return 0;
}
