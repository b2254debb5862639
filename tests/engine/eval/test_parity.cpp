// `loom parity`'s layout tokens (parity.cpp) as recipe keys, and the tokens it refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "base/errors.hpp"
#include "eval/parity.hpp"

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
  // the zero-bubble schedules; ZB-V and DualPipeV run two chunks a rank
  l = parse_parity_layout("pp4+zbh1");
  CHECK(has(l, "parallel.schedule=zb-h1"));
  CHECK(has(l, "parallel.virtual_stages=1"));
  l = parse_parity_layout("pp2+zbv");
  CHECK(has(l, "parallel.schedule=zb-v"));
  CHECK(has(l, "parallel.virtual_stages=2"));
  l = parse_parity_layout("pp2vp2+dualpipev+dp2");
  CHECK(l.world == 4);
  CHECK(has(l, "parallel.schedule=dualpipev"));
  CHECK(!has(l, "parallel.schedule=interleaved-1f1b"));
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
  CHECK(refusal("dp2+zbh1").find("zb-h1 needs pp2 or more") != std::string::npos);
  CHECK(refusal("pp2vp2+zbh1").find("zbh1 runs one chunk a rank") != std::string::npos);
  CHECK(refusal("pp2vp3+zbv").find("zb-v places two chunks a rank (vp2), not vp3") !=
        std::string::npos);
  CHECK(refusal("pp2+zbv+dualpipev").find("the schedule is given twice") != std::string::npos);
  CHECK(refusal("pp2+gpipe+zbh1").find("give one schedule") != std::string::npos);
}

TEST_CASE("parity layouts: a part given twice is refused whatever its values") {
  // tp2+tp4 was refused but tp2+tp2 accepted (issue 35): the same slip, one answer.
  CHECK(refusal("tp2+tp2").find("tp is given twice ('tp2' and 'tp2')") != std::string::npos);
  CHECK(refusal("tp2+tp4").find("tp is given twice ('tp2' and 'tp4')") != std::string::npos);
  for (const char* bad : {"pp2+pp2",
                          "cp2+cp2",
                          "ep2+ep2",
                          "dp2+dp2",
                          "fsdp2+dp2",
                          "dp2+fsdp2",
                          "pp2vp2+pp2",
                          "pp2vp2+pp2vp2",
                          "tp2+sp+sp",
                          "tp2+ep2+etp+etp",
                          "cp2+a2a+a2a",
                          "pp2+gpipe+gpipe",
                          "dp2+zero1+zero1",
                          "dp2+zero1+dist",
                          "dp2+fsdp+fsdp",
                          "dp2+zero2+zero2",
                          "dp2+zero2+zero3",
                          "dp2+mb1+mb2",
                          "dp2+mb1+mb1",
                          "dp2+overlap+overlap",
                          "tp2+recompute+recompute"})
    CHECK_MESSAGE(refusal(bad).find("given twice") != std::string::npos, bad);
  CHECK(refusal("dp2+recompute+selective").find("give one") != std::string::npos);
  CHECK(refusal("dp2+fsdp+zero2").empty());  // FSDP, and its stage
}

TEST_CASE("parity layouts: recompute, overlap and micro-batch size") {
  ParityLayout l = parse_parity_layout("dp2+zero1+overlap+recompute+mb1");
  CHECK(l.world == 2);
  CHECK(has(l, "parallel.overlap_grad_reduce=true"));
  CHECK(has(l, "parallel.overlap_param_gather=true"));
  CHECK(has(l, "train.recompute_granularity=full"));
  CHECK(has(l, "train.micro_batch_size=1"));
  CHECK(l.micro == 1);  // the size of the one-rank run it is compared with
  l = parse_parity_layout("pp2+dp2+overlap+selective");
  CHECK(l.micro == 0);  // the recipe's
  CHECK(has(l, "parallel.overlap_grad_reduce=true"));
  CHECK(!has(l, "parallel.overlap_param_gather=true"));  // not with a pipeline
  CHECK(has(l, "train.recompute_granularity=selective"));
  CHECK(!refusal("mb0").empty());
}

TEST_CASE("parity fuzz: reproducible from the seed, valid, within the rank limit") {
  auto accept = [](const std::string&) { return std::string(); };
  const std::vector<std::string> a = draw_parity_layouts(40, 7, 8, accept);
  CHECK(a.size() == 40);
  CHECK(a == draw_parity_layouts(40, 7, 8, accept));
  CHECK(a != draw_parity_layouts(40, 8, 8, accept));
  CHECK(std::set<std::string>(a.begin(), a.end()).size() == a.size());
  std::set<std::string> seen;  // every part of the grammar is drawn somewhere
  for (const std::string& t : a) {
    const ParityLayout l = parse_parity_layout(t);  // the token reruns with --layouts
    CHECK_MESSAGE(l.world >= 2, t);
    CHECK_MESSAGE(l.world <= 8, t);
    for (const char* part :
         {"tp",   "pp",    "vp",        "cp",        "ep",      "dp",        "sp",
          "etp",  "a2a",   "gpipe",     "zbh1",      "zbv",     "dualpipev", "zero1",
          "fsdp", "zero2", "recompute", "selective", "overlap", "mb"})
      if (t.find(part) != std::string::npos) seen.insert(part);
  }
  CHECK(seen.size() == 20);
  for (const std::string& t : draw_parity_layouts(20, 3, 4, accept))
    CHECK_MESSAGE(parse_parity_layout(t).world <= 4, t);
  // What the recipe's model refuses is not drawn: here, any tensor parallelism.
  auto no_tp = [](const std::string& t) { return t.find("tp") != std::string::npos ? "tp" : ""; };
  const std::vector<std::string> b = draw_parity_layouts(10, 7, 8, no_tp);
  CHECK(b.size() == 10);
  for (const std::string& t : b) CHECK_MESSAGE(t.find("tp") == std::string::npos, t);
  // Nothing valid: fewer than asked, not a hang.
  CHECK(draw_parity_layouts(5, 1, 8, [](const std::string&) { return "no"; }).empty());
}
