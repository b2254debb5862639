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

#include "schedule.hpp"

namespace pp = loom::pipeline;

namespace {

std::string str(const std::vector<pp::Step>& s) {
  std::string out;
  for (const pp::Step& x : s) {  // (piecewise: "a" + to_string trips GCC 12's -Wrestrict)
    out += x.forward ? 'F' : 'B';
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
bool is_compute(pp::OpType t) { return t == pp::OpType::kForward || t == pp::OpType::kBackward; }

// Runs the plans with synchronous messages; fails the test on deadlock, on a message whose
// ends disagree, on a computation whose input has not arrived, on a gradient sent after the
// sender's next computation (the model's dinput is valid only until then), and checks that
// every (stage, micro-batch) runs forward once and (unless forward_only) backward once.
void execute(const std::vector<std::vector<pp::Op>>& plans, int P, int V, int64_t M,
             bool forward_only) {
  const int64_t S = int64_t(P) * V;
  std::vector<size_t> pc(P, 0);
  std::set<std::tuple<int64_t, int64_t>> has_act, has_grad, fwd, bwd;
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
      const int64_t s = int64_t(op->chunk) * P + r;
      if (is_compute(op->type)) {
        REQUIRE_MESSAGE(unsent_grads[r].empty(), "rank ", r, " computes before sending dinput");
        if (op->type == pp::OpType::kForward) {
          if (s > 0) REQUIRE(has_act.count({s, op->mb}));
          REQUIRE(fwd.insert({s, op->mb}).second);
        } else {
          REQUIRE(fwd.count({s, op->mb}));
          if (s < S - 1) REQUIRE(has_grad.count({s, op->mb}));
          REQUIRE(bwd.insert({s, op->mb}).second);
          if (s > 0) unsent_grads[r].insert({s, op->mb});
        }
        ++pc[r];
        progressed = true;
      } else if (is_send(op->type)) {
        const bool act = op->type == pp::OpType::kSendAct;
        const pp::Op* peer = at(op->peer);
        // the receiver is not there yet (busy, or waiting on another rank)
        if (!peer || !is_recv(peer->type) || peer->peer != r) continue;
        const int64_t to_stage = act ? s + 1 : s - 1;
        REQUIRE(peer->type == (act ? pp::OpType::kRecvAct : pp::OpType::kRecvGrad));
        REQUIRE(peer->mb == op->mb);
        REQUIRE(int64_t(peer->chunk) * P + op->peer == to_stage);
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
  CHECK(str(pp::order(pp::Kind::kInterleaved, 4, 1, 1, 6, false)) == str(pp::order_1f1b(4, 1, 6)));
}

TEST_CASE("gpipe: all forwards, then all backwards in reverse") {
  CHECK(str(pp::order_gpipe(1, 3)) == "F0 F1 F2 B2 B1 B0 ");
  CHECK(str(pp::order(pp::Kind::kGPipe, 2, 0, 1, 3, true)) == "F0 F1 F2 ");
}

TEST_CASE("every plan completes with synchronous messages (no deadlock), all dependencies met") {
  for (int P = 2; P <= 5; ++P)
    for (int V = 1; V <= 3; ++V)
      for (int64_t M = 1; M <= 12; ++M)
        for (pp::Kind kind : {pp::Kind::kGPipe, pp::Kind::k1F1B, pp::Kind::kInterleaved}) {
          if (kind == pp::Kind::k1F1B && V > 1) continue;
          if (kind == pp::Kind::kInterleaved && V > 1 && M % P != 0) continue;
          for (bool fo : {false, true}) {
            CAPTURE(P);
            CAPTURE(V);
            CAPTURE(M);
            CAPTURE(static_cast<int>(kind));
            CAPTURE(fo);
            const auto plans = pp::plan(kind, P, V, M, fo);
            REQUIRE(plans.size() == size_t(P));
            execute(plans, P, V, M, fo);
          }
        }
}
