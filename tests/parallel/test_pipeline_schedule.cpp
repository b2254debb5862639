// The pipeline schedules as data (plugins/schedule/pipeline/src/schedule.hpp), without MPI:
// the compute orders are Megatron's, and every plan runs to completion on a strict
// rendezvous machine (a send finishes only when its receiver sits at the matching receive,
// i.e. every message above MPI's eager limit) with every dependency and buffer lifetime
// respected. The executor here is independent of the planner: it only reads the plans.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "loom/cpp/schedule_timeline.hpp"
#include "schedule.hpp"

namespace pp = loom::pipeline;

namespace {

// F, B (the whole backward, BW), I (the input half) and W (the weight half).
std::string str(const std::vector<pp::Step>& s) {
  std::string out;
  for (const pp::Step& x : s) {  // (piecewise: "a" + to_string trips GCC 12's -Wrestrict)
    out += "FBIW"[static_cast<int>(x.phase)];
    out += std::to_string(x.mb);
    if (x.chunk) {
      out += '.';
      out += std::to_string(x.chunk);
    }
    out += ' ';
  }
  return out;
}

bool is_send(pp::OpType t) { return t == pp::OpType::kSendAct || t == pp::OpType::kSendGrad; }
bool is_recv(pp::OpType t) { return t == pp::OpType::kRecvAct || t == pp::OpType::kRecvGrad; }
bool is_compute(pp::OpType t) { return !is_send(t) && !is_recv(t); }

// Runs the plans with synchronous messages; fails the test on deadlock, on a message whose
// ends disagree, on a computation whose input has not arrived, on a gradient sent after the
// sender's next computation (the model's dinput is valid only until then), on a W without
// its B, and checks that every (stage, micro-batch) runs forward once and (unless
// forward_only) its input gradients once and its weight gradients once. A message between
// two stages of one rank (the fold of a V) is its send and its receive back to back.
void execute(const std::vector<std::vector<pp::Op>>& plans, pp::Kind kind, int P, int V, int64_t M,
             bool forward_only) {
  const int64_t S = int64_t(P) * pp::chunks_per_rank(kind, V);
  std::vector<size_t> pc(P, 0);
  std::set<std::tuple<int64_t, int64_t>> has_act, has_grad, fwd, bwd, wgt, b_only;
  std::vector<std::set<std::tuple<int64_t, int64_t>>> unsent_grads(P);
  auto at = [&](int r) -> const pp::Op* {
    return pc[r] < plans[r].size() ? &plans[r][pc[r]] : nullptr;
  };
  for (;;) {
    bool done = true, progressed = false;
    for (int r = 0; r < P; ++r) {
      const pp::Op* op = at(r);
      if (!op) continue;
      done = false;
      const int64_t s = pp::stage_of(kind, P, r, op->chunk);
      if (is_compute(op->type)) {
        REQUIRE_MESSAGE(unsent_grads[r].empty(), "rank ", r, " computes before sending dinput");
        if (op->type == pp::OpType::kForward) {
          if (s > 0) REQUIRE(has_act.count({s, op->mb}));
          REQUIRE(fwd.insert({s, op->mb}).second);
        } else if (op->type == pp::OpType::kBackwardWeight) {
          REQUIRE(b_only.count({s, op->mb}));
          REQUIRE(wgt.insert({s, op->mb}).second);
        } else {
          REQUIRE(fwd.count({s, op->mb}));
          if (s < S - 1) REQUIRE(has_grad.count({s, op->mb}));
          REQUIRE(bwd.insert({s, op->mb}).second);
          if (op->type == pp::OpType::kBackward)
            REQUIRE(wgt.insert({s, op->mb}).second);
          else
            b_only.insert({s, op->mb});
          if (s > 0) unsent_grads[r].insert({s, op->mb});
        }
        ++pc[r];
        progressed = true;
      } else if (is_send(op->type)) {
        const bool act = op->type == pp::OpType::kSendAct;
        const bool local = op->peer == r;
        // the receiver is not there yet (busy, or waiting on another rank)
        const pp::Op* peer =
            local ? (pc[r] + 1 < plans[r].size() ? &plans[r][pc[r] + 1] : nullptr) : at(op->peer);
        if (!peer || !is_recv(peer->type) || peer->peer != r) {
          REQUIRE_MESSAGE(!local, "rank ", r, "'s local send is not followed by its receive");
          continue;
        }
        const int64_t to_stage = act ? s + 1 : s - 1;
        REQUIRE(peer->type == (act ? pp::OpType::kRecvAct : pp::OpType::kRecvGrad));
        REQUIRE(peer->mb == op->mb);
        REQUIRE(pp::stage_of(kind, P, op->peer, peer->chunk) == to_stage);
        REQUIRE((act ? fwd : bwd).count({s, op->mb}));
        (act ? has_act : has_grad).insert({to_stage, op->mb});
        if (!act) unsent_grads[r].erase({s, op->mb});
        ++pc[r];
        ++pc[op->peer];
        progressed = true;
      }
    }
    if (done) break;
    REQUIRE_MESSAGE(progressed, "deadlock with P=", P, " V=", V, " M=", M);
  }
  CHECK(fwd.size() == size_t(S * M));
  CHECK(bwd.size() == (forward_only ? 0 : size_t(S * M)));
  CHECK(wgt.size() == bwd.size());
}

// The timeline of kind's orders (loom/cpp/schedule_timeline.hpp, what `loom schedule show`
// draws) on a clock where F, B and W each take one unit (BW two).
loom::schedule::Timeline unit_timeline(pp::Kind kind, int P, int V, int64_t M) {
  const int C = pp::chunks_per_rank(kind, V);
  std::vector<std::vector<loom_schedule_step>> steps;
  for (const auto& rank : pp::orders(kind, P, V, M, false)) {
    steps.emplace_back();
    for (const pp::Step& x : rank) steps.back().push_back(pp::to_abi(x));
  }
  std::vector<int32_t> stages;
  for (int r = 0; r < P; ++r)
    for (int32_t c = 0; c < C; ++c) stages.push_back(int32_t(pp::stage_of(kind, P, r, c)));
  return loom::schedule::timeline(steps, stages, C, M, {1, 1, 1});
}

}  // namespace

TEST_CASE("1f1b: Megatron's warmup / steady / cooldown per rank") {
  // P = 4, M = 6: rank r runs min(P - r - 1, M) warmup forwards
  CHECK(str(pp::order_1f1b(4, 0, 6)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  CHECK(str(pp::order_1f1b(4, 3, 6)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  CHECK(str(pp::order_1f1b(4, 1, 2)) == "F0 F1 B0 B1 ");  // warmup capped at M
}

TEST_CASE("interleaved-1f1b: Megatron's chunk order (groups of P micro-batches per chunk)") {
  // P = 2, V = 2, M = 4: virtual micro-batches k -> (chunk, mb):
  // forward 0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1) 4:(0,2) 5:(0,3) 6:(1,2) 7:(1,3)
  CHECK(str(pp::order_interleaved(2, 0, 2, 4)) ==
        "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3 ");
  // rank 1 warms up (V-1)*P = 2 forwards only
  CHECK(str(pp::order_interleaved(2, 1, 2, 4)) ==
        "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3 ");
  // interleaved with one chunk is 1F1B
  CHECK(str(pp::orders(pp::Kind::kInterleaved, 4, 1, 6, false)[1]) == str(pp::order_1f1b(4, 1, 6)));
}

TEST_CASE("gpipe: all forwards, then all backwards in reverse") {
  CHECK(str(pp::order_gpipe(1, 3)) == "F0 F1 F2 B2 B1 B0 ");
  CHECK(str(pp::orders(pp::Kind::kGPipe, 2, 1, 3, true)[0]) == "F0 F1 F2 ");
}

TEST_CASE("every plan completes with synchronous messages (no deadlock), all dependencies met") {
  for (int P = 1; P <= 5; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int64_t M = 1; M <= 12; ++M)
        for (int k = 0; k <= static_cast<int>(pp::Kind::kDualPipeV); ++k) {
          const auto kind = static_cast<pp::Kind>(k);
          if (!pp::order_refusal(kind, P, V, M).empty()) continue;
          for (bool fo : {false, true}) {
            CAPTURE(P);
            CAPTURE(V);
            CAPTURE(M);
            CAPTURE(k);
            CAPTURE(fo);
            const auto plans = pp::plan(kind, P, V, M, fo);
            REQUIRE(plans.size() == size_t(P));
            execute(plans, kind, P, V, M, fo);
          }
        }
}

TEST_CASE("the V placements: rank r holds stage r and stage 2P-1-r") {
  for (pp::Kind k : {pp::Kind::kZBV, pp::Kind::kDualPipeV}) {
    CHECK(pp::stage_of(k, 4, 0, 0) == 0);
    CHECK(pp::stage_of(k, 4, 0, 1) == 7);
    CHECK(pp::stage_of(k, 4, 3, 0) == 3);
    CHECK(pp::stage_of(k, 4, 3, 1) == 4);
    for (int64_t s = 0; s < 8; ++s)
      CHECK(pp::stage_of(k, 4, pp::rank_of(k, 4, s), pp::chunk_of(k, 4, s)) == s);
  }
  CHECK(pp::stage_of(pp::Kind::kInterleaved, 4, 1, 1) == 5);
  CHECK(pp::order_refusal(pp::Kind::kZBV, 4, 1, 8).find("V") != std::string::npos);
  CHECK(pp::order_refusal(pp::Kind::kZBH1, 4, 2, 8).find("one model chunk") != std::string::npos);
  CHECK(pp::order_refusal(pp::Kind::kDualPipeV, 4, 2, 7).find("at least 2 x pipeline = 8") !=
        std::string::npos);
}

TEST_CASE("ZB-H1: the last stage runs F, B, W in turn; the first fills its tail with W's") {
  const auto o = pp::orders(pp::Kind::kZBH1, 4, 1, 8, false);
  CHECK(str(o[3]) == "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7 ");
  CHECK(str(o[0]) == "F0 F1 F2 F3 I0 F4 I1 F5 I2 F6 I3 W0 F7 I4 W1 W2 I5 W3 W4 I6 W5 W6 I7 W7 ");
}

TEST_CASE("DualPipeV: DeepSeek's eight phases per rank") {
  // P = 2, M = 4, played by hand. Rank 0: 1 warmup (F0 F1), 2 (F2 F0.1), 3 (I0.1 W0.1
  // F1.1), 4 (F3 B1.1 F2.1 B0), 5 (B2.1 F3.1 B1), 6 (B3.1, then its W's wait: I2),
  // 7 (W2 I3), 8 (W3).
  const auto o = pp::orders(pp::Kind::kDualPipeV, 2, 2, 4, false);
  CHECK(str(o[0]) == "F0 F1 F2 F0.1 I0.1 W0.1 F1.1 F3 B1.1 F2.1 B0 B2.1 F3.1 B1 B3.1 I2 W2 I3 W3 ");
  // Rank 1 (the fold: stages 1 and 2): no warmup, 2 (F0 F0.1 F1 F1.1), two steady rounds,
  // 6 (B2.1 B2, then I3.1 I3), 8 (W3.1 W3).
  CHECK(str(o[1]) == "F0 F0.1 F1 F1.1 F2 B0.1 F2.1 B0 F3 B1.1 F3.1 B1 B2.1 B2 I3.1 I3 W3.1 W3 ");
}

TEST_CASE("bubbles from the schedules themselves match the published formulas") {
  for (int P = 2; P <= 8; ++P)
    for (int64_t M = P; M <= 4 * P; ++M) {
      CAPTURE(P);
      CAPTURE(M);
      // 1F1B: (p-1)/(m+p-1), and the same for GPipe
      const double f1b = double(P - 1) / double(M + P - 1);
      CHECK(unit_timeline(pp::Kind::k1F1B, P, 1, M).bubble() == doctest::Approx(f1b));
      CHECK(unit_timeline(pp::Kind::kGPipe, P, 1, M).bubble() == doctest::Approx(f1b));
      // ZB-H1: (p-1)(F+B-W) idle per rank, a third of 1F1B's (p-1)(F+B+W)
      const loom::schedule::Timeline h = unit_timeline(pp::Kind::kZBH1, P, 1, M);
      CHECK(h.bubble() == doctest::Approx(double(P - 1) / double(3 * M + P - 1)));
      for (int r = 0; r < P; ++r) CHECK(h.peak_held(r, false) <= P - r);  // 1F1B's memory
      if (M % P != 0 || M < 2 * P) continue;
      // ZB-V and DualPipeV: at most p-1 idle chunk-units per rank, under 1F1B's memory
      const double v_bound = double(P - 1) / double(6 * M + P - 1) + 1e-12;
      const loom::schedule::Timeline v = unit_timeline(pp::Kind::kZBV, P, 2, M);
      CHECK(v.bubble() <= v_bound);
      CHECK(unit_timeline(pp::Kind::kDualPipeV, P, 2, M).bubble() <= v_bound);
      for (int r = 0; r < P; ++r) CHECK(v.peak_held(r, false) <= 2 * P);
    }
}
