// The timeline a pipeline schedule's orders make (loom.schedule-order/1, schedule.h): every
// rank runs its order as soon as each step's inputs are there, messages taking no time, with
// a forward, an input backward and a weight backward taking the given times (a whole
// backward, B + W). From it: the bubble (idle time over ranks x makespan) and the most
// activations a rank holds at once. `loom schedule show` draws it; the schedule tests hold
// the published formulas to it. Header-only, C++17 (a schedule plugin may use it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "loom/schedule.h"

namespace loom::schedule {

struct Costs {
  double f = 1, b = 1, w = 1;  // forward, input backward, weight backward
};

struct Slot {
  int32_t phase;  // loom_schedule_phase
  int32_t chunk;
  int64_t stage, mb;
  double start, end;
};

struct Timeline {
  std::vector<std::vector<Slot>> ranks;
  double makespan = 0;

  double busy(size_t r) const {
    double t = 0;
    for (const Slot& s : ranks[r]) t += s.end - s.start;
    return t;
  }
  // Idle time over ranks x makespan.
  double bubble() const {
    double all = 0;
    for (size_t r = 0; r < ranks.size(); ++r) all += busy(r);
    return makespan > 0 ? 1.0 - all / (makespan * double(ranks.size())) : 0.0;
  }
  // The most (chunk, micro-batch) activations rank r holds at once: from a forward's start
  // to the end of its backward's input half (an input or a whole backward), or, with
  // `until_weights`, to the end of the backward that finishes its weight gradients (a whole
  // or a weight backward): what a waiting weight backward keeps counts too.
  int64_t peak_held(size_t r, bool until_weights) const {
    std::vector<std::pair<double, int>> ev;
    for (const Slot& s : ranks[r]) {
      if (s.phase == LOOM_PHASE_FORWARD) ev.emplace_back(s.start, +1);
      const bool frees =
          s.phase == LOOM_PHASE_BACKWARD ||
          s.phase == (until_weights ? LOOM_PHASE_BACKWARD_WEIGHT : LOOM_PHASE_BACKWARD_INPUT);
      if (frees) ev.emplace_back(s.end, -1);
    }
    std::sort(ev.begin(), ev.end());  // at a tie the release (-1) comes first
    int64_t held = 0, peak = 0;
    for (const auto& e : ev) peak = std::max(peak, held += e.second);
    return peak;
  }
};

// `steps[r]` is rank r's order, `stages[r * chunks + c]` the stage its chunk c holds, of
// pipeline x chunks stages and `microbatches` micro-batches. Throws std::logic_error when the
// orders cannot complete (a step waits for one that never comes).
inline Timeline timeline(const std::vector<std::vector<loom_schedule_step>>& steps,
                         const std::vector<int32_t>& stages, int chunks, int64_t microbatches,
                         const Costs& c) {
  const int P = static_cast<int>(steps.size());
  const int64_t S = int64_t(P) * chunks, M = microbatches;
  // arrival of each stage's input (act) and of its output's gradient (grad); < 0: not yet
  std::vector<std::vector<double>> act(S, std::vector<double>(M, -1)), grad = act;
  Timeline t;
  t.ranks.resize(P);
  std::vector<size_t> pc(P, 0);
  std::vector<double> free_at(P, 0);
  for (;;) {
    bool done = true, progressed = false;
    for (int r = 0; r < P; ++r) {
      if (pc[r] == steps[r].size()) continue;
      done = false;
      const loom_schedule_step& st = steps[r][pc[r]];
      const int64_t s = stages[size_t(r) * chunks + st.chunk];
      if (s < 0 || s >= S || st.microbatch < 0 || st.microbatch >= M)
        throw std::logic_error("a step outside the stages or micro-batches");
      const int64_t i = st.microbatch;
      double ready = 0;  // a weight backward follows its input half on the same rank
      if (st.phase == LOOM_PHASE_FORWARD && s > 0) ready = act[s][i];
      if ((st.phase == LOOM_PHASE_BACKWARD || st.phase == LOOM_PHASE_BACKWARD_INPUT) && s < S - 1)
        ready = grad[s][i];
      if (ready < 0) continue;
      const double cost = st.phase == LOOM_PHASE_FORWARD          ? c.f
                          : st.phase == LOOM_PHASE_BACKWARD       ? c.b + c.w
                          : st.phase == LOOM_PHASE_BACKWARD_INPUT ? c.b
                                                                  : c.w;
      const double start = std::max(free_at[r], ready), end = start + cost;
      t.ranks[r].push_back({st.phase, st.chunk, s, i, start, end});
      free_at[r] = end;
      t.makespan = std::max(t.makespan, end);
      if (st.phase == LOOM_PHASE_FORWARD && s < S - 1) act[s + 1][i] = end;
      if ((st.phase == LOOM_PHASE_BACKWARD || st.phase == LOOM_PHASE_BACKWARD_INPUT) && s > 0)
        grad[s - 1][i] = end;
      ++pc[r];
      progressed = true;
    }
    if (done) break;
    if (!progressed) {
      std::string where;
      for (int r = 0; r < P; ++r)
        if (pc[r] < steps[r].size())
          where += " rank " + std::to_string(r) + " at step " + std::to_string(pc[r]) + ";";
      throw std::logic_error("the schedule's orders cannot complete:" + where);
    }
  }
  return t;
}

}  // namespace loom::schedule
