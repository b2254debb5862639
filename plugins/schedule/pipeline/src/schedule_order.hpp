// Pipeline schedules as data, part 1: which stage each of a rank's model chunks holds, and the
// order in which each rank runs its computations. schedule.hpp turns the orders into a
// deadlock-free communication plan and into a timeline.
//
// A computation is one phase of one (chunk, micro-batch):
//   F   forward;
//   BW  the whole backward: input and weight gradients (1F1B, GPipe, interleaved);
//   B   the input gradients only, sent on at once; the weight gradients wait for
//   W   the weight gradients of a B run earlier, filling what would be a bubble (zero
//       bubble: Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).
// Header-only and free of the ABI, so the schedule tests check many (P, V, M) without MPI.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/schedule.h"

namespace loom::pipeline {

enum class Kind { kGPipe, k1F1B, kInterleaved, kZBH1, kZBV, kDualPipeV };
enum class Phase : uint8_t { kF, kBW, kB, kW };

struct Step {
  Phase phase;
  int32_t chunk;  // this rank's chunk; its stage is stage_of(kind, P, rank, chunk)
  int64_t mb;
  bool forward() const { return phase == Phase::kF; }
};

// The V-shaped placements (ZB-V, DualPipeV) give every rank two chunks: stage r going down
// and stage 2P-1-r coming back, so the first and the last stage share rank 0 and the
// middle two stages rank P-1. The others place chunk v of rank r at stage v*P + r.
inline bool v_shape(Kind k) { return k == Kind::kZBV || k == Kind::kDualPipeV; }
inline bool splits_backward(Kind k) {
  return k == Kind::kZBH1 || k == Kind::kZBV || k == Kind::kDualPipeV;
}
inline int64_t stage_of(Kind k, int P, int rank, int32_t chunk) {
  if (v_shape(k)) return chunk == 0 ? rank : 2 * int64_t(P) - 1 - rank;
  return int64_t(chunk) * P + rank;
}
inline int rank_of(Kind k, int P, int64_t stage) {
  if (v_shape(k)) return static_cast<int>(stage < P ? stage : 2 * int64_t(P) - 1 - stage);
  return static_cast<int>(stage % P);
}
inline int32_t chunk_of(Kind k, int P, int64_t stage) {
  if (v_shape(k)) return stage < P ? 0 : 1;
  return static_cast<int32_t>(stage / P);
}

// Megatron's non-interleaved 1F1B for one chunk: warmup forwards, steady 1F1B, cooldown.
inline std::vector<Step> order_1f1b(int P, int rank, int64_t M) {
  const int64_t warmup = std::min<int64_t>(P - rank - 1, M);
  std::vector<Step> s;
  for (int64_t i = 0; i < warmup; ++i) s.push_back({Phase::kF, 0, i});
  for (int64_t k = 0; k < M - warmup; ++k) {
    s.push_back({Phase::kF, 0, warmup + k});
    s.push_back({Phase::kBW, 0, k});
  }
  for (int64_t i = M - warmup; i < M; ++i) s.push_back({Phase::kBW, 0, i});
  return s;
}

// Megatron's interleaved schedule (forward_backward_pipelining_with_interleaving with
// microbatch_group_size_per_vp_stage = P): virtual micro-batch k runs chunk
// (k mod PV) / P (reversed for backwards) on micro-batch (k / PV) * P + k mod P.
inline Step interleaved_step(int P, int V, int64_t k, bool forward) {
  const int64_t in_group = k % (int64_t(P) * V);
  int32_t chunk = static_cast<int32_t>(in_group / P);
  if (!forward) chunk = V - 1 - chunk;
  return {forward ? Phase::kF : Phase::kBW, chunk, (k / (int64_t(P) * V)) * P + k % P};
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
    for (int64_t i = 0; i < M; ++i) s.push_back({Phase::kF, v, i});
  for (int32_t v = V - 1; v >= 0; --v)
    for (int64_t i = M - 1; i >= 0; --i) s.push_back({Phase::kBW, v, i});
  return s;
}

// DualPipeV (DeepSeek-V3's DualPipe folded into a V, as DeepSeek's public DualPipeV): eight
// phases per rank, in micro-batch order within each chunk. Chunk 0 goes down the pipeline,
// chunk 1 comes back. "F0 & B1" pairs are the pairs DualPipe overlaps on a GPU; here they
// run one after the other. A B whose weight gradients wait is B; the rest are BW. Needs
// M >= 2P.
inline std::vector<Step> order_dualpipev(int P, int r, int64_t M) {
  std::vector<Step> s;
  int64_t next_f[2] = {0, 0}, next_b[2] = {0, 0};
  std::deque<std::pair<int32_t, int64_t>> deferred;  // B's waiting for their W, in order
  const auto F = [&](int32_t c) { s.push_back({Phase::kF, c, next_f[c]++}); };
  const auto B = [&](int32_t c, bool defer) {
    const int64_t mb = next_b[c]++;
    s.push_back({defer ? Phase::kB : Phase::kBW, c, mb});
    if (defer) deferred.emplace_back(c, mb);
  };
  const auto W = [&] {
    s.push_back({Phase::kW, deferred.front().first, deferred.front().second});
    deferred.pop_front();
  };
  for (int64_t i = 0; i < 2 * int64_t(P - r - 1); ++i) F(0);  // 1: warmup down the V
  for (int i = 0; i <= r; ++i) F(0), F(1);                    // 2: and back up
  for (int i = 0; i < P - r - 1; ++i) B(1, true), W(), F(1);  // 3
  for (int64_t i = 0; i < M - 2 * P + r + 1; ++i) {           // 4: the steady state
    F(0), B(1, false);
    F(1), B(0, false);
  }
  for (int i = 0; i < P - r - 1; ++i) B(1, false), F(1), B(0, false);  // 5
  bool zb = false;                                                     // 6: the W's wait
  for (int i = 0; i <= r; ++i) {                                       // from the middle on
    if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
    B(1, zb);
    if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
    B(0, zb);
  }
  for (int i = 0; i < P - r - 1; ++i) W(), B(0, true);  // 7
  while (!deferred.empty()) W();                        // 8
  return s;
}

// ZB-H1 and ZB-V: the zero-bubble paper's greedy heuristic, played out on a clock where F,
// B and W each take one unit. Each free rank runs, in this preference: a ready B (the
// critical path: the previous stage waits for it; the deeper stage first), a ready F (the
// deeper chunk first) while it holds fewer than `limit` activations (F's whose B has not
// run) and fewer than `limit_w` W's wait, else the oldest waiting W, else it idles. As in
// the paper, B frees what only the input gradient needed and a waiting W keeps the rest (a
// linear layer's inputs and output gradient). `limit` is 1F1B's: P - r stage activations
// on rank r for ZB-H1, 2P half-stage chunks on every rank for ZB-V (1F1B's rank 0); at most
// P (ZB-H1) or 2P (ZB-V) W's wait. Every rank plays the same game, so every rank derives
// the same orders.
inline std::vector<std::vector<Step>> orders_zero_bubble(Kind kind, int P, int64_t M) {
  const int C = kind == Kind::kZBV ? 2 : 1;
  const int64_t S = int64_t(P) * C;
  // done time of each (stage, mb) phase; -1 = not yet
  std::vector<std::vector<int64_t>> f_end(S, std::vector<int64_t>(M, -1)), b_end = f_end;
  std::vector<std::vector<Step>> orders(P);
  std::vector<std::vector<int64_t>> next_f(P, std::vector<int64_t>(C, 0)), next_b = next_f;
  std::vector<std::deque<Step>> pending_w(P);
  std::vector<int64_t> held(P, 0);
  size_t total = 0;
  for (int64_t t = 0; total < size_t(P) * C * M * 3; ++t) {
    bool any = false;
    for (int r = 0; r < P; ++r) {
      const int64_t limit = kind == Kind::kZBV ? 2 * int64_t(P) : P - r;
      const int64_t limit_w = kind == Kind::kZBV ? 2 * int64_t(P) : P;
      std::vector<int32_t> by_depth(C);  // chunks, the deeper stage first
      for (int32_t c = 0; c < C; ++c) by_depth[c] = c;
      std::sort(by_depth.begin(), by_depth.end(), [&](int32_t a, int32_t b) {
        return stage_of(kind, P, r, a) > stage_of(kind, P, r, b);
      });
      const auto done_by = [&](int64_t end) { return end >= 0 && end <= t; };
      Step pick{Phase::kW, -1, -1};
      for (int32_t c : by_depth) {  // a ready B
        const int64_t s = stage_of(kind, P, r, c), i = next_b[r][c];
        if (i < M && done_by(f_end[s][i]) && (s == S - 1 || done_by(b_end[s + 1][i]))) {
          pick = {Phase::kB, c, i};
          break;
        }
      }
      if (pick.chunk < 0 && held[r] < limit && int64_t(pending_w[r].size()) < limit_w)
        for (int32_t c : by_depth) {  // a ready F under the limit
          const int64_t s = stage_of(kind, P, r, c), i = next_f[r][c];
          if (i < M && (s == 0 || done_by(f_end[s - 1][i]))) {
            pick = {Phase::kF, c, i};
            break;
          }
        }
      if (pick.chunk < 0 && !pending_w[r].empty()) {
        pick = pending_w[r].front();
        pending_w[r].pop_front();
      }
      if (pick.chunk < 0) continue;
      any = true;
      ++total;
      orders[r].push_back(pick);
      const int64_t s = stage_of(kind, P, r, pick.chunk);
      if (pick.phase == Phase::kF) {
        f_end[s][pick.mb] = t + 1;
        ++next_f[r][pick.chunk];
        ++held[r];
      } else if (pick.phase == Phase::kB) {
        b_end[s][pick.mb] = t + 1;
        ++next_b[r][pick.chunk];
        pending_w[r].push_back({Phase::kW, pick.chunk, pick.mb});
        --held[r];
      }
    }
    // a rank idles only while another works; nobody working with work left is a bug
    if (!any && total < size_t(P) * C * M * 3) {
      bool waiting = false;
      for (int r = 0; r < P; ++r)
        for (int32_t c = 0; c < C; ++c) {
          const int64_t s = stage_of(kind, P, r, c);
          for (int64_t i = 0; i < M; ++i) waiting |= f_end[s][i] > t || b_end[s][i] > t;
        }
      if (!waiting) throw std::logic_error("zero-bubble schedule stalled");
    }
  }
  return orders;
}

// A step as loom.schedule-order/1 (schedule.h) states it.
inline loom_schedule_step to_abi(const Step& x) {
  const int32_t phase = x.phase == Phase::kF    ? LOOM_PHASE_FORWARD
                        : x.phase == Phase::kBW ? LOOM_PHASE_BACKWARD
                        : x.phase == Phase::kB  ? LOOM_PHASE_BACKWARD_INPUT
                                                : LOOM_PHASE_BACKWARD_WEIGHT;
  return {LOOM_SCHEDULE_STEP_SIZE_V2_19, phase, x.chunk, x.mb};
}

// The chunks per rank a kind runs: 2 for the V shapes, else the layout's virtual stages.
inline int chunks_per_rank(Kind kind, int V) { return v_shape(kind) ? 2 : V; }

// Why (kind, P, V, M) cannot run, or "" when it can.
inline std::string order_refusal(Kind kind, int P, int V, int64_t M) {
  if (P < 1 || V < 1 || M < 0) return "invalid pipeline, virtual stages or micro-batches";
  if ((kind == Kind::k1F1B || kind == Kind::kZBH1) && V != 1)
    return "runs one model chunk per rank but virtual_stages = " + std::to_string(V) +
           (kind == Kind::k1F1B ? "; use parallel.schedule = \"interleaved-1f1b\""
                                : "; zb-v runs two per rank");
  if (v_shape(kind) && V != 2)
    return "places two model chunks per rank in a V (virtual_stages = 2), not " + std::to_string(V);
  if (kind == Kind::kInterleaved && V > 1 && M % P != 0)
    return "needs the number of micro-batches (" + std::to_string(M) +
           ") to be a multiple of pipeline (" + std::to_string(P) +
           "), as Megatron's interleaved schedule does";
  if (kind == Kind::kDualPipeV && M < 2 * int64_t(P))
    return "needs at least 2 x pipeline = " + std::to_string(2 * P) +
           " micro-batches a step, as DeepSeek's DualPipeV does; got " + std::to_string(M);
  return {};
}

// Every rank's compute order. forward_only keeps the forwards (in the same order).
inline std::vector<std::vector<Step>> orders(Kind kind, int P, int V, int64_t M,
                                             bool forward_only) {
  const std::string why = order_refusal(kind, P, V, M);
  if (!why.empty()) throw std::invalid_argument(why);
  std::vector<std::vector<Step>> all;
  if (kind == Kind::kZBH1 || kind == Kind::kZBV) {
    all = orders_zero_bubble(kind, P, M);
  } else {
    for (int r = 0; r < P; ++r) {
      if (kind == Kind::kGPipe)
        all.push_back(order_gpipe(V, M));
      else if (kind == Kind::kInterleaved && V > 1)
        all.push_back(order_interleaved(P, r, V, M));
      else if (kind == Kind::kDualPipeV)
        all.push_back(order_dualpipev(P, r, M));
      else
        all.push_back(order_1f1b(P, r, M));
    }
  }
  if (forward_only)
    for (auto& s : all) {
      std::vector<Step> f;
      for (const Step& x : s)
        if (x.forward()) f.push_back(x);
      // a V's forwards, as ordered above, may wait on one another across the fold; one
      // chunk after the other always completes
      if (v_shape(kind))
        std::stable_sort(f.begin(), f.end(),
                         [](const Step& a, const Step& b) { return a.chunk < b.chunk; });
      s = f;
    }
  return all;
}

}  // namespace loom::pipeline
