// Which schedule this build of the pipeline plugin is: LOOM_SCHEDULE (plugins/schedule/
// pipeline/CMakeLists.txt) picks one of schedule_order.hpp's kinds.
#pragma once

#include <string>

#include "loom/schedule.h"
#include "schedule_order.hpp"

namespace loom::pipeline {

// LOOM_SCHEDULE indexes this table: the kind and the descriptor's description.
struct KindInfo {
  Kind kind;
  const char* description;
};
constexpr KindInfo kKinds[] = {
    {Kind::kGPipe, "pipeline schedule GPipe: every micro-batch's forward, then every backward"},
    {Kind::k1F1B,
     "pipeline schedule 1F1B (Megatron's non-interleaved): warmup, one forward one backward, "
     "cooldown"},
    {Kind::kInterleaved,
     "pipeline schedule interleaved 1F1B (Megatron's virtual stages): several model chunks per "
     "rank"},
    {Kind::kZBH1,
     "pipeline schedule ZB-H1 (zero bubble, Qi et al. 2024): 1F1B's memory, the backward split "
     "into input (B) and weight (W) gradients, W's filling the bubbles"},
    {Kind::kZBV,
     "pipeline schedule ZB-V (zero bubble, V-shaped): two chunks per rank, stage r and 2P-1-r, "
     "the backward split into B and W"},
    {Kind::kDualPipeV,
     "pipeline schedule DualPipeV (DeepSeek-V3's DualPipe in a V): two chunks per rank, "
     "forward and backward chunks paired, W's deferred at the ends"},
};
static_assert(LOOM_SCHEDULE >= 0 && LOOM_SCHEDULE < 6, "LOOM_SCHEDULE: 0 (gpipe) to 5 (dualpipev)");
constexpr Kind kKind = kKinds[LOOM_SCHEDULE].kind;
constexpr const char* kDescription = kKinds[LOOM_SCHEDULE].description;

inline const std::string& prefix() {
  static const std::string p = std::string("schedule/") + LOOM_PLUGIN_NAME + ": ";
  return p;
}

// order_ext.cpp: the plugin's loom.schedule-order/1 table.
extern const loom_schedule_order_ext kOrderExt;

}  // namespace loom::pipeline
