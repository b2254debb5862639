// OpenBLAS, loaded at run time. Process-wide: a library is initialised once per process, so
// every backend instance shares one Blas and the core type chosen by the first create().
#pragma once

#include <atomic>
#include <string>

#include "cpu_features.hpp"
#include "loom/loom.h"

namespace loom_cpu {

struct Blas {
  // The CBLAS prototypes with the enums as int (ABI-identical on x86-64) and blasint = int
  // (checked at load: a 64-bit-integer OpenBLAS is refused).
  using sgemm_fn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
  using dgemm_fn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, double alpha,
                            const double* a, int lda, const double* b, int ldb, double beta,
                            double* c, int ldc);
  static constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  char* (*get_corename)() = nullptr;
  char* (*get_config)() = nullptr;

  std::string corename;   // what OpenBLAS runs: "SkylakeX", "Haswell", "Prescott", ...
  std::string config;     // openblas_get_config(): version and build options
  std::string requested;  // the OPENBLAS_CORETYPE in force at load ("" = OpenBLAS detects)

  // OpenBLAS's thread count is global; instances with different `threads` each set theirs
  // before a call (cheap: only when it changes).
  void use_threads(int n) const;
  mutable std::atomic<int> threads_now{-1};
};

// Loads libopenblas.so.0 once per process. `coretype` is the backend's blas_coretype key:
// "auto" (from cpuid), "native" (OpenBLAS's own detection) or a core name. A user-set
// OPENBLAS_CORETYPE in the environment always wins. Throws loom::Error when it cannot load.
const Blas& load_blas(const loom_host* host, const CpuFeatures& cpu, const std::string& coretype);

// Best of `reps` timed n^3 sgemm calls, in GFLOP/s (2 n^3 flops each), after one warm-up.
double measure_sgemm_gflops(const Blas& blas, int n, int reps);

}  // namespace loom_cpu
