// Pipeline schedules as data: the order in which each pipeline rank runs the forwards and
// backwards of its (chunk, micro-batch) pairs, and the communication plan that threads the
// stages' point-to-point messages between those computations without deadlock.
//
// Header-only and free of the ABI so the schedule tests can check the plans of many
// (P, V, M) without MPI.
//
// Why a plan: comm send/recv are blocking, and a send above MPI's eager limit waits for the
// matching receive. Running "recv input, compute, send output" per step deadlocks 1F1B (rank
// 0 sends micro-batch 1's activation while rank 1 sends micro-batch 0's gradient). Instead,
// every rank simulates the whole pipeline (all ranks' compute orders; a message is delivered
// as soon as it is produced) and records one global sequence of messages. Each rank then
// runs its computations and its part of that sequence in the simulated order. Since every
// message involves two ranks that both perform their messages in the same global order, the
// earliest unfinished message always has both ends ready: no cycle of blocked sends exists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::pipeline {

enum class Kind { kGPipe, k1F1B, kInterleaved };

struct Step {
  bool forward;
  int32_t chunk;  // stage = chunk * P + rank
  int64_t mb;
};

// Megatron's non-interleaved 1F1B for one chunk: warmup forwards, steady 1F1B, cooldown.
inline std::vector<Step> order_1f1b(int P, int rank, int64_t M) {
  const int64_t warmup = std::min<int64_t>(P - rank - 1, M);
  std::vector<Step> s;
  for (int64_t i = 0; i < warmup; ++i) s.push_back({true, 0, i});
  for (int64_t k = 0; k < M - warmup; ++k) {
    s.push_back({true, 0, warmup + k});
    s.push_back({false, 0, k});
  }
  for (int64_t i = M - warmup; i < M; ++i) s.push_back({false, 0, i});
  return s;
}

// Megatron's interleaved schedule (forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = P): virtual micro-batch k runs chunk
// (k mod PV) / P (reversed for backwards) on micro-batch (k / PV) * P + k mod P.
inline Step interleaved_step(int P, int V, int64_t k, bool forward) {
  const int64_t in_group = k % (int64_t(P) * V);
  int32_t chunk = static_cast<int32_t>(in_group / P);
  if (!forward) chunk = V - 1 - chunk;
  return {forward, chunk, (k / (int64_t(P) * V)) * P + k % P};
}

inline std::vector<Step> order_interleaved(int P, int rank, int V, int64_t M) {
  const int64_t total = M * V;
  const int64_t warmup = std::min<int64_t>(int64_t(P - rank - 1) * 2 + int64_t(V - 1) * P, total);
  std::vector<Step> s;
  for (int64_t k = 0; k < warmup; ++k) s.push_back(interleaved_step(P, V, k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    s.push_back(interleaved_step(P, V, warmup + k, true));
    s.push_back(interleaved_step(P, V, k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k) s.push_back(interleaved_step(P, V, k, false));
  return s;
}

// GPipe: every forward (chunk by chunk, micro-batches in order), then every backward in
// reverse.
inline std::vector<Step> order_gpipe(int V, int64_t M) {
  std::vector<Step> s;
  for (int32_t v = 0; v < V; ++v)
    for (int64_t i = 0; i < M; ++i) s.push_back({true, v, i});
  for (int32_t v = V - 1; v >= 0; --v)
    for (int64_t i = M - 1; i >= 0; --i) s.push_back({false, v, i});
  return s;
}

// The compute order of pipeline rank `rank`. forward_only keeps the schedule's forwards.
// interleaved with V == 1 is 1F1B; 1F1B with V > 1 is refused by the caller.
inline std::vector<Step> order(Kind kind, int P, int rank, int V, int64_t M, bool forward_only) {
  std::vector<Step> s;
  if (kind == Kind::kGPipe)
    s = order_gpipe(V, M);
  else if (kind == Kind::kInterleaved && V > 1)
    s = order_interleaved(P, rank, V, M);
  else
    s = order_1f1b(P, rank, M);
  if (forward_only) {
    std::vector<Step> f;
    for (const Step& x : s)
      if (x.forward) f.push_back(x);
    s = f;
  }
  return s;
}

// One entry of a rank's plan: a computation, or its end of a message. Activations flow
// from stage s to s+1, gradients from s+1 to s; `chunk` is this rank's chunk involved.
enum class OpType { kForward, kBackward, kSendAct, kRecvAct, kSendGrad, kRecvGrad };
struct Op {
  OpType type;
  int32_t chunk;
  int64_t mb;
  int peer;  // pipeline-group rank at the other end of a message
};

// Every rank's plan: plans[r] for pipeline rank r. Throws if the orders cannot complete
// even with unlimited buffering (a schedule bug), naming where it stopped.
inline std::vector<std::vector<Op>> plan(Kind kind, int P, int V, int64_t M, bool forward_only) {
  const int64_t S = int64_t(P) * V;
  std::vector<std::vector<Step>> orders;
  for (int r = 0; r < P; ++r) orders.push_back(order(kind, P, r, V, M, forward_only));
  // delivered messages: have_act[s][i] = stage s has micro-batch i's input,
  // have_grad[s][i] = stage s has the gradient of its output for micro-batch i
  std::vector<std::vector<char>> have_act(S, std::vector<char>(M, 0));
  std::vector<std::vector<char>> have_grad(S, std::vector<char>(M, 0));
  std::vector<std::vector<Op>> plans(P);
  std::vector<size_t> pc(P, 0);
  struct Msg {
    bool act;
    int64_t to_stage, mb;
  };
  for (;;) {
    bool done = true, progressed = false;
    std::vector<Msg> produced;
    for (int r = 0; r < P; ++r) {
      if (pc[r] == orders[r].size()) continue;
      done = false;
      const Step& st = orders[r][pc[r]];
      const int64_t s = int64_t(st.chunk) * P + r;
      const bool ready =
          st.forward ? (s == 0 || have_act[s][st.mb]) : (s == S - 1 || have_grad[s][st.mb]);
      if (!ready) continue;
      plans[r].push_back({st.forward ? OpType::kForward : OpType::kBackward, st.chunk, st.mb, r});
      if (st.forward && s < S - 1) produced.push_back({true, s + 1, st.mb});
      if (!st.forward && s > 0) produced.push_back({false, s - 1, st.mb});
      ++pc[r];
      progressed = true;
    }
    if (done) break;
    if (!progressed) {
      std::string where;
      for (int r = 0; r < P; ++r)
        if (pc[r] < orders[r].size())
          where += " rank " + std::to_string(r) + " at " +
                   (orders[r][pc[r]].forward ? "forward" : "backward") + " of chunk " +
                   std::to_string(orders[r][pc[r]].chunk) + " micro-batch " +
                   std::to_string(orders[r][pc[r]].mb) + ";";
      throw std::logic_error("pipeline schedule cannot proceed:" + where);
    }
    // Deliver this round's messages in one order that both ends record.
    for (const Msg& m : produced) {
      const int64_t from_stage = m.act ? m.to_stage - 1 : m.to_stage + 1;
      const int from = static_cast<int>(from_stage % P), to = static_cast<int>(m.to_stage % P);
      const int32_t from_chunk = static_cast<int32_t>(from_stage / P);
      const int32_t to_chunk = static_cast<int32_t>(m.to_stage / P);
      plans[from].push_back({m.act ? OpType::kSendAct : OpType::kSendGrad, from_chunk, m.mb, to});
      plans[to].push_back({m.act ? OpType::kRecvAct : OpType::kRecvGrad, to_chunk, m.mb, from});
      (m.act ? have_act : have_grad)[m.to_stage][m.mb] = 1;
    }
  }
  return plans;
}

}  // namespace loom::pipeline
