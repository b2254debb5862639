// loom-bench-gemm: sgemm throughput of backend/cpu through the plugin ABI.
//
//   loom-bench-gemm [--size N] [--reps R] [--threads T] [--coretype NAME] [--gpt2]
//
// Loads backend/cpu with the test host, times an N^3 (default 2048^3) sgemm R times and prints
// the best and median GFLOP/s with OpenBLAS's core name and the thread count. --coretype is
// the backend's blas_coretype key (auto | native | SkylakeX | Haswell | Prescott ...); an
// OPENBLAS_CORETYPE in the environment overrides it, as in the backend. --gpt2 also times the
// GEMMs of one GPT-2 124M training step at micro-batch 4 x sequence 64 (N = 256 tokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gemm_args.hpp"
#include "loom/cpp/tensor.hpp"
#include "test_host.hpp"

namespace {

struct Options {
  int64_t size = 2048;
  int reps = 5;
  std::string threads = "0";
  std::string coretype = "auto";
  bool gpt2 = false;
};

void usage() {
  std::fprintf(stderr,
               "usage: loom-bench-gemm [--size N] [--reps R] [--threads T] [--coretype NAME] "
               "[--gpt2]\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--gpt2") {
      o.gpt2 = true;
    } else if (a == "--size" && (v = value())) {
      o.size = std::atoll(v);
    } else if (a == "--reps" && (v = value())) {
      o.reps = std::atoi(v);
    } else if (a == "--threads" && (v = value())) {
      o.threads = v;
    } else if (a == "--coretype" && (v = value())) {
      o.coretype = v;
    } else {
      return false;
    }
  }
  return o.size > 0 && o.reps > 0;
}

// Between "OpenBLAS " and the next comma of the device name.
std::string field_after(const std::string& s, const std::string& key) {
  size_t p = s.find(key);
  if (p == std::string::npos) return "?";
  p += key.size();
  return s.substr(p, s.find(',', p) - p);
}

// Times C(m,n) = op(A) op(B) `reps` times (after one warm-up); returns {best, median} seconds.
std::pair<double, double> time_gemm(const loom::Backend& be, int64_t m, int64_t n, int64_t k,
                                    bool ta, bool tb, int reps) {
  loom::Tensor A(be, loom_f32(), {m * k}), B(be, loom_f32(), {k * n}), C(be, loom_f32(), {m * n});
  be.call(&loom_ops::fill, A.get(), 0.01);
  be.call(&loom_ops::fill, B.get(), 0.02);
  loom_gemm_args g = loomtest::gemm_args(ta, tb, m, n, k, 0.0, A, B, C);
  be.call(&loom_ops::gemm, &g);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    be.call(&loom_ops::gemm, &g);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    usage();
    return 2;
  }
  // Read before the backend loads OpenBLAS (it sets the variable itself when unset).
  const char* env_core = std::getenv("OPENBLAS_CORETYPE");
  std::string env_before = env_core ? env_core : "(unset)";
  try {
    loomtest::TestHost host;
    host.load_backend(
        "cpu", {{"threads", o.threads}, {"blas_coretype", o.coretype}, {"measure_gemm", "false"}});
    loom::Backend be(host.host());
    loom_backend_info info{};
    info.struct_size = LOOM_BACKEND_INFO_SIZE_V2;
    loom::check(host.host(), be.api()->get_info(be.self(), &info));
    std::string dev = info.device_name;
    std::string core = field_after(dev, "OpenBLAS ");
    std::string threads = field_after(dev, ", OpenBLAS " + core + ", ");
    std::printf("device: %s\n", dev.c_str());
    std::printf("OPENBLAS_CORETYPE before load: %s\n", env_before.c_str());

    int64_t s = o.size;
    auto [best, median] = time_gemm(be, s, s, s, false, false, o.reps);
    double flop = 2.0 * s * s * static_cast<double>(s);
    std::printf("sgemm %lld^3: %.1f GFLOP/s best, %.1f median (%d runs), OpenBLAS %s, %s\n",
                static_cast<long long>(s), flop / best * 1e-9, flop / median * 1e-9, o.reps,
                core.c_str(), threads.c_str());

    if (o.gpt2) {
      // One GPT-2 124M step, N = 4 x 64 tokens: per layer the forward GEMMs (qkv, attention
      // projection, fc, fc projection) and the two backward GEMMs of each (dinp: A @ W,
      // dweight: dout^T @ inp), times 12 layers, plus the tied LM head (3 GEMMs).
      struct Shape {
        const char* name;
        int64_t m, n, k;
        bool ta, tb;
        int count;
      };
      const int64_t N = 256, C = 768, V = 50257;
      const Shape shapes[] = {
          {"qkv fwd", N, 3 * C, C, false, true, 12},
          {"qkv dinp", N, C, 3 * C, false, false, 12},
          {"qkv dW", 3 * C, C, N, true, false, 12},
          {"proj fwd", N, C, C, false, true, 12},
          {"proj dinp", N, C, C, false, false, 12},
          {"proj dW", C, C, N, true, false, 12},
          {"fc fwd", N, 4 * C, C, false, true, 12},
          {"fc dinp", N, C, 4 * C, false, false, 12},
          {"fc dW", 4 * C, C, N, true, false, 12},
          {"fcproj fwd", N, C, 4 * C, false, true, 12},
          {"fcproj dinp", N, 4 * C, C, false, false, 12},
          {"fcproj dW", C, 4 * C, N, true, false, 12},
          {"lmhead fwd", N, V, C, false, true, 1},
          {"lmhead dinp", N, C, V, false, false, 1},
          {"lmhead dW", V, C, N, true, false, 1},
      };
      double total = 0, total_flop = 0;
      for (const Shape& sh : shapes) {
        auto [b, med] = time_gemm(be, sh.m, sh.n, sh.k, sh.ta, sh.tb, std::max(3, o.reps / 2));
        (void)b;
        double f = 2.0 * sh.m * sh.n * static_cast<double>(sh.k);
        std::printf("  %-12s %6lld x %6lld x %6lld: %7.1f GFLOP/s  x%-2d = %7.1f ms\n", sh.name,
                    static_cast<long long>(sh.m), static_cast<long long>(sh.n),
                    static_cast<long long>(sh.k), f / med * 1e-9, sh.count, med * sh.count * 1e3);
        total += med * sh.count;
        total_flop += f * sh.count;
      }
      std::printf("GPT-2 124M step GEMMs (B=4, T=64): %.0f ms, %.1f GFLOP/s, bound %.0f tokens/s\n",
                  total * 1e3, total_flop / total * 1e-9, 256.0 / total);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench-gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
