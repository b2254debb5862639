// LR schedules against their closed forms.
#include <doctest/doctest.h>

#include <cmath>

#include "train/lr_schedule.hpp"

using loom::engine::LrSchedule;

TEST_CASE("warmup rises linearly to max and never starts at zero") {
  LrSchedule s{"constant", 1.0, 0.0, 4, 10, 0.1};
  CHECK(s.at(0) == doctest::Approx(0.25));
  CHECK(s.at(3) == doctest::Approx(1.0));
  CHECK(s.at(7) == doctest::Approx(1.0));
}

TEST_CASE("cosine decays from max to min over decay_iters") {
  LrSchedule s{"cosine", 1.0, 0.1, 0, 100, 0.1};
  CHECK(s.at(0) == doctest::Approx(1.0));
  CHECK(s.at(50) == doctest::Approx(0.55));  // halfway: (max + min) / 2
  CHECK(s.at(25) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(M_PI / 4))));
  CHECK(s.at(100) == doctest::Approx(0.1));
  CHECK(s.at(500) == doctest::Approx(0.1));  // stays at min after decay
}

TEST_CASE("linear decays after warmup") {
  LrSchedule s{"linear", 2.0, 0.0, 10, 110, 0.1};
  CHECK(s.at(10) == doctest::Approx(2.0));
  CHECK(s.at(60) == doctest::Approx(1.0));
  CHECK(s.at(110) == doctest::Approx(0.0));
}

TEST_CASE("wsd holds max then decays over the last fraction") {
  LrSchedule s{"wsd", 1.0, 0.0, 0, 100, 0.2};
  CHECK(s.at(79) == doctest::Approx(1.0));
  CHECK(s.at(80) == doctest::Approx(1.0));
  CHECK(s.at(90) == doctest::Approx(0.5));
  CHECK(s.at(100) == doctest::Approx(0.0));
}
