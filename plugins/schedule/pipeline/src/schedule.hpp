// Pipeline schedules as data, part 2: the communication plan that threads the stages'
// point-to-point messages between the computations of schedule_order.hpp's orders without
// deadlock. (The timeline those orders make is loom/cpp/schedule_timeline.hpp's.)
//
// Header-only and free of the ABI so the schedule tests can check the plans of many
// (P, V, M) without MPI.
//
// Why a plan: comm send/recv are blocking, and a send above MPI's eager limit waits for the
// matching receive. Running "recv input, compute, send output" per step deadlocks 1F1B (rank
// 0 sends micro-batch 1's activation while rank 1 sends micro-batch 0's gradient). Instead,
// every rank simulates the whole pipeline (all ranks' compute orders on a clock; a message is
// delivered as soon as it is produced) and records one global sequence of messages. Each rank then
// runs its computations and its part of that sequence in the simulated order. Since every
// message involves two ranks that both perform their messages in the same global order, the
// earliest unfinished message always has both ends ready: no cycle of blocked sends exists.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule_order.hpp"

namespace loom::pipeline {

// One entry of a rank's plan: a computation, or its end of a message. Activations flow
// from stage s to s+1, gradients from s+1 to s; `chunk` is this rank's chunk involved. Where
// both stages sit on one rank (the fold of a V), the message is a local hand-over: kSendAct
// and kRecvAct (or kSendGrad and kRecvGrad) with peer == this rank, one after the other.
enum class OpType {
  kForward,
  kBackward,        // BW: input and weight gradients
  kBackwardInput,   // B: input gradients; the weight gradients wait for
  kBackwardWeight,  // W
  kSendAct,
  kRecvAct,
  kSendGrad,
  kRecvGrad
};
struct Op {
  OpType type;
  int32_t chunk;
  int64_t mb;
  int peer;  // pipeline-group rank at the other end of a message
};

inline OpType op_type(Phase p) {
  switch (p) {
    case Phase::kF:
      return OpType::kForward;
    case Phase::kBW:
      return OpType::kBackward;
    case Phase::kB:
      return OpType::kBackwardInput;
    case Phase::kW:
      return OpType::kBackwardWeight;
  }
  return OpType::kForward;
}

// When each (stage, micro-batch) input and output gradient arrives (< 0: not made yet).
struct Arrivals {
  int64_t S = 0;
  std::vector<std::vector<double>> act, grad;  // arrival time; < 0: not yet
  Arrivals(int64_t stages, int64_t M)
      : S(stages), act(stages, std::vector<double>(M, -1)), grad(act) {}
  // When step `st` of stage s may start (its inputs are there), or < 0 when not yet. A W
  // follows its own B on the same rank, which the order already puts first.
  double ready(const Step& st, int64_t s) const {
    if (st.phase == Phase::kF) return s == 0 ? 0.0 : act[s][st.mb];
    if (st.phase == Phase::kW) return 0.0;
    return s == S - 1 ? 0.0 : grad[s][st.mb];
  }
};

inline std::string stuck_at(Kind kind, int P, const std::vector<std::vector<Step>>& orders,
                            const std::vector<size_t>& pc) {
  static const char* names[] = {"forward", "backward", "input backward", "weight backward"};
  std::string where;
  for (int r = 0; r < P; ++r)
    if (pc[r] < orders[r].size()) {
      const Step& st = orders[r][pc[r]];
      where += " rank " + std::to_string(r) + " at " + names[int(st.phase)] + " of stage " +
               std::to_string(stage_of(kind, P, r, st.chunk)) + " micro-batch " +
               std::to_string(st.mb) + ";";
    }
  return "pipeline schedule cannot proceed:" + where;
}

// Every rank's plan: plans[r] for pipeline rank r. The simulation runs on the clock `loom
// schedule show` draws the orders with: F, B and W one unit each, a whole backward two. A
// step starts once its rank is free and its input has arrived; a message arrives the moment
// the step that makes it ends. Events are taken in time order (at one time: deliveries
// first, then steps by rank), so a rank receives each message just before the first step it
// starts after the arrival. (Lockstep rounds, the first planner, made a rank wait at a
// round's end for messages it did not need yet: DualPipeV's pairs of one-unit and two-unit
// steps measured 5 % of the step more idle than its own timeline.) Throws if the orders
// cannot complete even with unlimited buffering (a schedule bug), naming where it stopped.
inline std::vector<std::vector<Op>> plan(Kind kind, int P, int V, int64_t M, bool forward_only) {
  const int C = chunks_per_rank(kind, V);
  const int64_t S = int64_t(P) * C;
  const std::vector<std::vector<Step>> ord = orders(kind, P, V, M, forward_only);
  Arrivals have(S, M);
  std::vector<std::vector<Op>> plans(P);
  std::vector<size_t> pc(P, 0);
  std::vector<double> free_at(P, 0.0);
  struct Msg {
    double at;
    bool act;
    int64_t to_stage, mb;
  };
  std::vector<Msg> pending;  // made, not yet delivered; in the order they were made
  auto deliver = [&](const Msg& m) {
    const int64_t from_stage = m.act ? m.to_stage - 1 : m.to_stage + 1;
    const int from = rank_of(kind, P, from_stage), to = rank_of(kind, P, m.to_stage);
    const int32_t from_chunk = chunk_of(kind, P, from_stage);
    const int32_t to_chunk = chunk_of(kind, P, m.to_stage);
    plans[from].push_back({m.act ? OpType::kSendAct : OpType::kSendGrad, from_chunk, m.mb, to});
    plans[to].push_back({m.act ? OpType::kRecvAct : OpType::kRecvGrad, to_chunk, m.mb, from});
  };
  for (;;) {
    int next = -1;  // the rank whose next step starts first, at `start`
    double start = 0;
    bool done = true;
    for (int r = 0; r < P; ++r) {
      if (pc[r] == ord[r].size()) continue;
      done = false;
      const Step& st = ord[r][pc[r]];
      const double arrived = have.ready(st, stage_of(kind, P, r, st.chunk));
      if (arrived < 0) continue;
      const double t = std::max(free_at[r], arrived);
      if (next < 0 || t < start) next = r, start = t;
    }
    // Every message due by then, earliest first (made-order among equal times).
    std::stable_sort(pending.begin(), pending.end(),
                     [](const Msg& a, const Msg& b) { return a.at < b.at; });
    size_t due = 0;
    while (due < pending.size() && (next < 0 || pending[due].at <= start)) deliver(pending[due++]);
    pending.erase(pending.begin(), pending.begin() + (ptrdiff_t)due);
    if (done) break;
    if (next < 0) throw std::logic_error(stuck_at(kind, P, ord, pc));
    const Step& st = ord[next][pc[next]];
    const int64_t s = stage_of(kind, P, next, st.chunk);
    plans[next].push_back({op_type(st.phase), st.chunk, st.mb, next});
    const double end = start + (st.phase == Phase::kBW ? 2.0 : 1.0);
    free_at[next] = end;
    if (st.phase == Phase::kF && s < S - 1) {
      pending.push_back({end, true, s + 1, st.mb});
      have.act[s + 1][st.mb] = end;
    }
    if ((st.phase == Phase::kBW || st.phase == Phase::kB) && s > 0) {
      pending.push_back({end, false, s - 1, st.mb});
      have.grad[s - 1][st.mb] = end;
    }
    ++pc[next];
  }
  return plans;
}

}  // namespace loom::pipeline
