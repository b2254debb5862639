// MFU against the backend's peak (issue 35: backend/cpu's sgemm sample, taken under load,
// made the T5 quick start print "mfu 118%").
#include <doctest/doctest.h>

#include <initializer_list>

#include "base/mfu.hpp"

using loom::engine::model_flops_utilisation;

TEST_CASE("MFU is the model's rate over the peak, and never above 100%") {
  double peak = 50.0;  // GFLOP/s per rank
  CHECK(model_flops_utilisation(2 * 25e9, peak, 2) == doctest::Approx(0.5));
  CHECK(peak == 50.0);
  // A step faster than the sampled peak: the peak was low; that rate is the peak now.
  CHECK(model_flops_utilisation(118e9, peak, 2) == doctest::Approx(1.0));
  CHECK(peak == doctest::Approx(59.0));
  CHECK(model_flops_utilisation(59e9, peak, 2) == doctest::Approx(0.5));
  for (double rate : {1e9, 50e9, 100e9, 1e12}) CHECK(model_flops_utilisation(rate, peak, 1) <= 1.0);
  // No peak (backend/meta, measure_gemm = false): no MFU, and no peak invented.
  double none = 0;
  CHECK(model_flops_utilisation(1e12, none, 1) == 0.0);
  CHECK(none == 0.0);
}
