// The parallel layout: which rank holds which tensor/context/data/pipeline coordinate, and
// the colours that partition the world into each kind of process group. Megatron-Core's
// order: tensor fastest, then context, data, pipeline —
//   world rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Header-only SDK helper: the engine lays ranks out with it, and a test or a tool that
// builds a host of its own lays them out exactly as the engine does.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "loom/host.h"

namespace loom::layout {

struct Degrees {
  int32_t tensor = 1, context = 1, pipeline = 1, expert = 1, virtual_stages = 1;
  bool sequence_parallel = false;
  int32_t cp_comm_type = LOOM_CP_P2P;
  int32_t expert_tensor = 1;
};

// How a model's layers split over its pipeline stages: evenly, or with `first` layers on
// the first pipeline rank and `last` on the last one (Megatron's
// --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers; 0 = that
// rank's even share), the other ranks splitting the rest evenly. DeepSeek-V3's 61 layers on
// 16 stages, say: first 1, last 0, 4 on each other. With virtual stages (interleaved: stage
// s on pipeline rank s % pipeline) each rank's layers split evenly over its chunks, as
// Megatron-Core's interleaved uneven pipeline does. One stage holds every layer whatever the
// two say (a checkpoint trained on uneven stages generates, converts and evaluates on one).
struct StageSplit {
  int64_t layers = 0, stages = 1, first = 0, last = 0, virtual_stages = 1;
  bool uneven() const { return (first > 0 || last > 0) && stages > 1; }
  // Chunks per pipeline rank: virtual_stages, or 1 where the stages are not pipeline x it
  // (one stage holding every layer).
  int64_t chunks() const {
    return virtual_stages > 1 && stages % virtual_stages == 0 ? virtual_stages : 1;
  }
  int64_t pipeline() const { return stages / chunks(); }
  // What makes the split impossible, naming the numbers; empty when it is valid.
  std::string problem() const {
    auto s = [](int64_t v) { return std::to_string(v); };
    const std::string fl = "decoder_first_pipeline_num_layers = " + s(first) +
                           " and decoder_last_pipeline_num_layers = " + s(last);
    if (!uneven())
      return layers % stages == 0
                 ? ""
                 : "n_layer = " + s(layers) + " is not divisible by pipeline_stages = " + s(stages);
    const int64_t vp = chunks(), middle = middle_ranks(), rest = layers - first - last;
    if (first % vp != 0 || last % vp != 0)
      return fl + ": each must be divisible by virtual_stages = " + s(vp) +
             " (a rank's layers split evenly over its model chunks)";
    if (rest < 0 || (middle == 0 && rest != 0) ||
        (middle > 0 && (rest % (middle * vp) != 0 || rest == 0)))
      return fl + " leave " + s(rest) + " of n_layer = " + s(layers) + " layers for the " +
             s(middle * vp) + " other stage(s): each needs the same number, at least 1";
    return "";
  }
  // Stage `stage`'s layers [first, second); the split must be valid.
  std::pair<int64_t, int64_t> range(int64_t stage) const {
    if (!uneven()) return {stage * layers / stages, (stage + 1) * layers / stages};
    const int64_t vp = chunks(), pp = pipeline(), middle = middle_ranks();
    const int64_t each = middle > 0 ? (layers - first - last) / (middle * vp) : 0;
    auto size = [&](int64_t st) {
      const int64_t rank = st % pp;
      return rank == 0 && first > 0 ? first / vp : rank == pp - 1 && last > 0 ? last / vp : each;
    };
    int64_t begin = 0;
    for (int64_t st = 0; st < stage; ++st) begin += size(st);
    return {begin, begin + size(stage)};
  }

 private:
  int64_t middle_ranks() const { return pipeline() - (first > 0) - (last > 0); }
};

// The problems of a layout for `world` ranks and a model of `layers` layers and `heads`
// (kv_heads) attention heads, each naming the numbers involved; empty when it is valid.
// layers/heads of 0 skip the model checks (the engine checks what it knows). `first` and
// `last`: StageSplit's.
inline std::vector<std::string> problems(const Degrees& d, int world, int64_t layers = 0,
                                         int64_t heads = 0, int64_t kv_heads = 0, int64_t first = 0,
                                         int64_t last = 0) {
  std::vector<std::string> out;
  auto s = [](int64_t v) { return std::to_string(v); };
  const int64_t mp = (int64_t)d.tensor * d.context * d.pipeline;
  if (world % mp != 0)
    out.push_back("world size " + s(world) + " is not divisible by tensor (" + s(d.tensor) +
                  ") x context (" + s(d.context) + ") x pipeline (" + s(d.pipeline) +
                  ") = " + s(mp));
  const int64_t dp = world % mp == 0 ? world / mp : 0;
  if (dp > 0 && ((int64_t)dp * d.context) % d.expert != 0)
    out.push_back("expert (" + s(d.expert) + ") does not divide data (" + s(dp) + ") x context (" +
                  s(d.context) + ") = " + s(dp * d.context) +
                  " (the expert group is carved from data x context; Megatron's parallel "
                  "folding, an expert group across tensor ranks, is not implemented)");
  if (d.virtual_stages > 1 && d.pipeline == 1)
    out.push_back("virtual_stages = " + s(d.virtual_stages) +
                  " needs pipeline > 1 (interleaving splits each pipeline rank's layers)");
  const int64_t stages = (int64_t)d.pipeline * d.virtual_stages;
  const StageSplit split{layers, stages, first, last, d.virtual_stages};
  if (layers > 0 && !split.uneven() && layers % stages != 0)
    out.push_back("n_layer = " + s(layers) + " is not divisible by pipeline (" + s(d.pipeline) +
                  ") x virtual_stages (" + s(d.virtual_stages) + ") = " + s(stages) + " stages");
  if (layers > 0 && split.uneven() && !split.problem().empty())
    out.push_back("model." + split.problem());
  if (heads > 0 && heads % d.tensor != 0)
    out.push_back("n_head = " + s(heads) + " is not divisible by tensor = " + s(d.tensor));
  if (kv_heads > 0 && kv_heads % d.tensor != 0)
    out.push_back("n_kv_head = " + s(kv_heads) + " is not divisible by tensor = " + s(d.tensor));
  if (d.expert_tensor != 1 && d.expert_tensor != d.tensor)
    out.push_back("expert_tensor = " + s(d.expert_tensor) + " must be 1 or tensor (" + s(d.tensor) +
                  "): experts split over the whole tensor group or not at all (parallel "
                  "folding onto a smaller expert-tensor group is not implemented)");
  if (d.sequence_parallel && d.tensor == 1)
    out.push_back("sequence_parallel needs tensor > 1 (it shards over the tensor group)");
  return out;
}

// This rank's coordinates; `d` must be valid for `world`.
inline loom_parallel_layout coordinates(const Degrees& d, int world, int rank) {
  loom_parallel_layout l{};
  l.struct_size = LOOM_PARALLEL_LAYOUT_SIZE_V2_9;
  l.world = world;
  l.tensor = d.tensor;
  l.context = d.context;
  l.pipeline = d.pipeline;
  l.data = world / (d.tensor * d.context * d.pipeline);
  l.expert = d.expert;
  l.virtual_stages = d.virtual_stages;
  l.sequence_parallel = d.sequence_parallel ? 1 : 0;
  l.cp_comm_type = d.cp_comm_type;
  l.expert_tensor = d.expert_tensor;
  int r = rank;
  l.tensor_rank = r % d.tensor;
  r /= d.tensor;
  l.context_rank = r % d.context;
  r /= d.context;
  l.data_rank = r % l.data;
  l.pipeline_rank = r / l.data;
  // expert groups: consecutive blocks of `expert` ranks of the data x context index
  l.expert_rank = (l.data_rank * d.context + l.context_rank) % d.expert;
  return l;
}

// The colour of every world rank for one group kind: ranks of one colour form a group,
// ordered by world rank (so a pipeline group is ordered by stage).
inline std::vector<int> colors(const Degrees& d, int world, loom_group_kind kind) {
  std::vector<int> c(world);
  for (int r = 0; r < world; ++r) {
    const loom_parallel_layout l = coordinates(d, world, r);
    const int T = l.tensor, C = l.context, D = l.data;
    const int tp = l.tensor_rank, cp = l.context_rank, dp = l.data_rank, pp = l.pipeline_rank;
    switch (kind) {
      case LOOM_GROUP_WORLD:
        c[r] = 0;
        break;
      case LOOM_GROUP_TENSOR:
        c[r] = cp + C * (dp + D * pp);
        break;
      case LOOM_GROUP_CONTEXT:
        c[r] = tp + T * (dp + D * pp);
        break;
      case LOOM_GROUP_DATA:
        c[r] = tp + T * (cp + C * pp);
        break;
      case LOOM_GROUP_PIPELINE:
        c[r] = tp + T * (cp + C * dp);
        break;
      case LOOM_GROUP_DATA_CONTEXT:
        c[r] = tp + T * pp;
        break;
      case LOOM_GROUP_MODEL:
        c[r] = dp;
        break;
      case LOOM_GROUP_EMBEDDING: {
        const bool edge = pp == 0 || pp == l.pipeline - 1;
        c[r] = edge ? tp + T * (cp + C * dp) : world + r;  // others alone
        break;
      }
      case LOOM_GROUP_EXPERT: {
        const int dc = dp * C + cp;  // index in data x context
        c[r] = tp + T * (pp + l.pipeline * (dc / l.expert));
        break;
      }
      case LOOM_GROUP_EXPERT_DATA: {  // the same expert rank in every expert group
        const int dc = dp * C + cp;
        c[r] = tp + T * (pp + l.pipeline * (dc % l.expert));
        break;
      }
    }
  }
  return c;
}

constexpr loom_group_kind kAllGroups[] = {
    LOOM_GROUP_WORLD,    LOOM_GROUP_TENSOR,       LOOM_GROUP_CONTEXT, LOOM_GROUP_DATA,
    LOOM_GROUP_PIPELINE, LOOM_GROUP_DATA_CONTEXT, LOOM_GROUP_MODEL,   LOOM_GROUP_EMBEDDING,
    LOOM_GROUP_EXPERT,   LOOM_GROUP_EXPERT_DATA};

// get_layout's copy: the fields the caller's struct_size holds (an older plugin's is shorter).
inline void copy_layout(const loom_parallel_layout& from, loom_parallel_layout* out) {
  const size_t size = out->struct_size;
  std::memcpy(out, &from, size < sizeof from ? size : sizeof from);
  out->struct_size = size;
}

// One past the largest group kind: the size of an array indexed by kind.
constexpr int kNumGroupKinds = LOOM_GROUP_EXPERT_DATA + 1;

inline const char* group_name(loom_group_kind k) {
  switch (k) {
    case LOOM_GROUP_WORLD:
      return "world";
    case LOOM_GROUP_TENSOR:
      return "tensor";
    case LOOM_GROUP_CONTEXT:
      return "context";
    case LOOM_GROUP_DATA:
      return "data";
    case LOOM_GROUP_PIPELINE:
      return "pipeline";
    case LOOM_GROUP_DATA_CONTEXT:
      return "data x context";
    case LOOM_GROUP_MODEL:
      return "model";
    case LOOM_GROUP_EMBEDDING:
      return "embedding";
    case LOOM_GROUP_EXPERT:
      return "expert";
    case LOOM_GROUP_EXPERT_DATA:
      return "expert data";
  }
  return "?";
}

}  // namespace loom::layout
