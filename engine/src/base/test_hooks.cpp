// The resilience tests' failure injection (test_hooks.hpp).
#include "base/test_hooks.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace loom::engine {

namespace {
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}
void sleep_s(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}
}  // namespace

std::unique_ptr<const TestHooks> TestHooks::from_env() {
  auto h = std::make_unique<TestHooks>();
  bool any = false;
  if (const char* v = env("LOOM_TEST_NAN_AT")) {
    h->nan_at = std::atoll(v);
    h->nan_always = std::string(v).find(":always") != std::string::npos;
    any |= h->nan_at > 0;
  }
  if (const char* v = env("LOOM_TEST_STALL_AT")) {
    long long it = 0, rank = 0;
    double s = 0;
    if (std::sscanf(v, "%lld:%lld:%lf", &it, &rank, &s) == 3) {
      h->stall_at = it, h->stall_rank = (int)rank, h->stall_s = s;
      any = true;
    }
  }
  if (const char* v = env("LOOM_TEST_SLOW_SAVE_AT")) {
    long long it = 0;
    double s = 0;
    if (std::sscanf(v, "%lld:%lf", &it, &s) == 2) {
      h->slow_save_at = it, h->slow_save_s = s;
      any = true;
    }
  }
  if (!any) return nullptr;
  return h;
}

bool TestHooks::nan(int64_t it, int attempt) const {
  return nan_at == it + 1 && (attempt == 0 || nan_always);
}

void TestHooks::stall(int rank, int64_t it) const {
  if (stall_at == it + 1 && rank == stall_rank) sleep_s(stall_s);
}

void TestHooks::slow_save(int64_t iteration) const {
  if (slow_save_at >= 0 && slow_save_at == iteration) sleep_s(slow_save_s);
}

}  // namespace loom::engine
