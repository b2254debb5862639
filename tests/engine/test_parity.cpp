// `loom parity`'s layout tokens (parity.cpp) as recipe keys, and the tokens it refuses.
#include <doctest/doctest.h>

#include <algorithm>

#include "errors.hpp"
#include "parity.hpp"

using namespace loom::engine;

namespace {

bool has(const ParityLayout& l, const std::string& set) {
  return std::find(l.sets.begin(), l.sets.end(), set) != l.sets.end();
}

std::string refusal(const std::string& token) {
  try {
    parse_parity_layout(token);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parity layouts: degrees multiply, flags set their keys") {
  ParityLayout l = parse_parity_layout("tp2+pp2");
  CHECK(l.world == 4);
  CHECK(l.data == 1);
  CHECK(has(l, "parallel.tensor=2"));
  CHECK(has(l, "parallel.pipeline=2"));
  CHECK(has(l, "parallel.data=ddp"));
  l = parse_parity_layout("pp2vp2");
  CHECK(l.world == 2);
  CHECK(has(l, "parallel.virtual_stages=2"));
  CHECK(has(l, "parallel.schedule=interleaved-1f1b"));
  l = parse_parity_layout("dp2+zero1");
  CHECK(l.world == 2);
  CHECK(l.data == 2);
  CHECK(has(l, "parallel.data=distributed-optimizer"));
  CHECK(parse_parity_layout("dp2+dist").sets == l.sets);
  l = parse_parity_layout("fsdp2");
  CHECK(l.world == 2);
  CHECK(has(l, "parallel.data=fsdp"));
  CHECK(!has(l, "parallel.zero_stage=2"));
  l = parse_parity_layout("dp2+zero2");
  CHECK(has(l, "parallel.data=fsdp"));
  CHECK(has(l, "parallel.zero_stage=2"));
  l = parse_parity_layout("tp2+sp");
  CHECK(has(l, "parallel.sequence_parallel=true"));
  l = parse_parity_layout("ep2+dp2");
  CHECK(l.world == 4);
  CHECK(l.data == 4);
  CHECK(has(l, "parallel.expert=2"));
  l = parse_parity_layout("cp2+a2a+tp2");
  CHECK(l.world == 4);
  CHECK(has(l, "parallel.context=2"));
  CHECK(has(l, "parallel.cp_comm_type=a2a"));
  l = parse_parity_layout("tp2+etp");
  CHECK(has(l, "parallel.expert_tensor=2"));
  l = parse_parity_layout("pp4+gpipe");
  CHECK(l.world == 4);
  CHECK(has(l, "parallel.schedule=gpipe"));
}

TEST_CASE("parity layouts: unknown parts and impossible combinations are usage errors") {
  CHECK(refusal("tp2+xx3").find("unknown layout part 'xx3' in 'tp2+xx3'") != std::string::npos);
  CHECK(refusal("tp2+xx3").find("tpN (tensor)") != std::string::npos);  // the grammar
  for (const char* bad :
       {"", "tp", "tp0", "tp2+", "+tp2", "pp2vp", "zero", "zero4", "sp2", "tp2x", "tp99999"})
    CHECK_MESSAGE(!refusal(bad).empty(), bad);
  CHECK(refusal("tp2+tp4").find("tp is given twice") != std::string::npos);
  CHECK(refusal("dp2+sp").find("needs tp2 or more") != std::string::npos);
  CHECK(refusal("cp2+zero1+fsdp").find("different data-parallel strategies") != std::string::npos);
  CHECK(refusal("dp2+a2a").find("needs cp2 or more") != std::string::npos);
  CHECK(refusal("pp2vp2+gpipe").find("gpipe has no virtual stages") != std::string::npos);
}
