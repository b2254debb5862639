// The main() of the doctest suites: doctest's, plus the Skipped rule of test_skip.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <set>
#include <string>

#include "test_skip.hpp"

namespace {

std::set<std::string>& skipped() {
  static std::set<std::string> reasons;
  return reasons;
}

}  // namespace

void loomtest::skip(const std::string& why) {
  MESSAGE("SKIPPED: " << why);
  skipped().insert(why);
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int rc = context.run();
  if (context.shouldExit() || rc != 0 || skipped().empty()) return rc;
  std::printf("SKIPPED: %zu reason(s) kept cases from running here:\n", skipped().size());
  for (const std::string& why : skipped()) std::printf("  %s\n", why.c_str());
  return 77;
}
