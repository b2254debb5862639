// `loom schedule show` (engine/src/train/schedule_show.cpp) over the real schedule plugins:
// the bubble it prints against the published formulas, the drawing's rows and slots, the
// SVG, and the refusals (the schedule's own, and a schedule that cannot be drawn).
#include <doctest/doctest.h>

#include <regex>

#include "engine_test_util.hpp"

using namespace enginetest;

namespace {

Result show(const std::string& args) {
  return run_loom("schedule show " + args, LOOM_TEST_PLUGIN_DIR);
}

// The "bubble: X %" figure.
double bubble_of(const std::string& out) {
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("bubble: ([0-9.]+) %")));
  return std::stod(m[1]);
}

}  // namespace

TEST_CASE("schedule show: 1F1B's bubble is (p-1)/(m+p-1), ZB-H1's a third of its idle time") {
  Result f = show("1f1b -p 4 -m 8");
  REQUIRE(f.code == 0);
  CHECK(bubble_of(f.out) == doctest::Approx(100.0 * 3 / 11).epsilon(0.002));
  CHECK(contains(f.out, "1F1B's (p-1)/(m+p-1) = 27.3 %"));
  // 4 rows; rank 3 (the last stage) starts after three forwards' time: 3 x 3 columns idle
  CHECK(contains(f.out, "rank 3  |.........F0 B0"));
  Result h = show("zb-h1 -p 4 -m 8");
  REQUIRE(h.code == 0);
  CHECK(bubble_of(h.out) == doctest::Approx(100.0 * 3 / 27).epsilon(0.002));  // (p-1)/(3m+p-1)
  // ZB-H1 keeps 1F1B's activations from F to b: 4, 3, 2, 1
  CHECK(contains(h.out, "to its W or B: 4/7 3/6 2/5 1/4"));
  Result v = show("zb-v -p 4 -m 8 -v 2 --cost-f 1 --cost-b 1 --cost-w 1");
  REQUIRE(v.code == 0);
  CHECK(bubble_of(v.out) < bubble_of(h.out));
  CHECK(contains(v.out, "2 chunks per rank"));
  CHECK(contains(v.out, "F0.1"));  // chunk 1, the way back up the V
}

TEST_CASE("schedule show: the SVG has a rectangle per step") {
  TempDir dir;
  const std::string svg = (dir / "d.svg").string();
  Result d = show("dualpipev -p 2 -m 4 -v 2 --svg " + q(svg));
  REQUIRE(d.code == 0);
  const std::string s = read_file(svg);
  CHECK(s.rfind("<svg", 0) == 0);
  size_t rects = 0;
  for (size_t at = s.find("<rect"); at != std::string::npos; at = s.find("<rect", at + 1)) ++rects;
  // every (stage, micro-batch) forward and backward once, plus a W per deferred b: 2 ranks x 2
  // chunks x 4 micro-batches x 2, and at P = 2, M = 4 DualPipeV defers 3 b's on rank 0 and 2
  // on rank 1 (the orders test_pipeline_schedule spells out)
  CHECK(rects == 2 * 2 * 4 * 2 + 3 + 2);
}

TEST_CASE("schedule show: refusals") {
  Result few = show("dualpipev -p 4 -m 6 -v 2");
  CHECK(few.code == 2);
  CHECK(contains(few.err, "needs at least 2 x pipeline = 8 micro-batches"));
  Result one = show("zb-v -p 4 -m 8");
  CHECK(one.code == 2);
  CHECK(contains(one.err, "places two model chunks per rank in a V (virtual_stages = 2), not 1"));
  Result unknown = show("zb-h2 -p 4 -m 8");
  CHECK(unknown.code == 2);
  CHECK(contains(unknown.err, "zb-h1"));  // the nearest name
  Result bad = show("1f1b -p 4 -m 8 --cost-w 0");
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "costs must be positive"));
}
