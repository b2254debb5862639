// Parallel layout checks and description (see parallel_layout.hpp).
#include "recipe/parallel_layout.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "base/errors.hpp"
#include "loader/registry.hpp"
#include "recipe/recipe.hpp"

namespace loom::engine {

namespace {

// An int key of the [model] section when the model's schema has it, else 0.
int64_t model_int(const Recipe& recipe, const char* key) {
  const loom_config& m = recipe.section("model");
  auto it = m.values.find(key);
  if (it == m.values.end() || it->second.type != LOOM_PARAM_INT) return 0;
  return it->second.i;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? " " : "") << ranks[i];
  s << "]";
  return s.str();
}

}  // namespace

layout::Degrees layout_degrees(const Recipe& recipe) {
  layout::Degrees d;
  d.tensor = (int32_t)recipe.get_int("parallel", "tensor");
  d.context = (int32_t)recipe.get_int("parallel", "context");
  d.pipeline = (int32_t)recipe.get_int("parallel", "pipeline");
  d.expert = (int32_t)recipe.get_int("parallel", "expert");
  d.virtual_stages = (int32_t)recipe.get_int("parallel", "virtual_stages");
  d.sequence_parallel = recipe.get_bool("parallel", "sequence_parallel");
  d.cp_comm_type =
      recipe.get_string("parallel", "cp_comm_type") == "a2a" ? LOOM_CP_A2A : LOOM_CP_P2P;
  d.expert_tensor = (int32_t)recipe.get_int("parallel", "expert_tensor");
  return d;
}

namespace {
// Each launcher's world-size and rank variables: mpirun (Open MPI), PMI, PMIx, an srun step.
constexpr std::pair<const char*, const char*> kLauncherVars[] = {
    {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
    {"PMI_SIZE", "PMI_RANK"},
    {"PMIX_SIZE", "PMIX_RANK"},
    {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"}};
int env_int(const char* var) {
  const char* v = std::getenv(var);
  return v ? std::atoi(v) : 0;
}
}  // namespace

std::pair<int, int> launched_as() {
  for (const auto& [size, rank] : kLauncherVars)
    if (env_int(size) > 1) return {env_int(size), env_int(rank)};
  return {1, 0};
}

int launcher_world_size() {
  for (const auto& [size, rank] : kLauncherVars)
    if (env_int(size) > 0) return env_int(size);
  // An sbatch script runs `loom validate` as one process of an allocation whose steps will
  // start SLURM_NTASKS ranks: lay those out.
  return std::max(env_int("SLURM_NTASKS"), 0);
}

std::pair<int, const char*> launcher_local_size() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                          "LOCAL_WORLD_SIZE"})
    if (env_int(var) > 0) return {env_int(var), var};
  // An srun step's tasks per node: "4" or "4(x2)" when every node has as many; "4,3" says
  // nothing of this node.
  const char* step = std::getenv("SLURM_STEP_TASKS_PER_NODE");
  if (step && !std::strchr(step, ',') && std::atoi(step) > 0)
    return {std::atoi(step), "SLURM_STEP_TASKS_PER_NODE"};
  return {0, ""};
}

void keep_grad_keys_of(Recipe& recipe, Registry& registry, const std::string& data) {
  std::set<std::string> keep;
  const loom_plugin_descriptor* target = registry.get(LOOM_KIND_GRAD, data).desc;
  for (size_t i = 0; i < target->num_params; ++i) keep.insert(target->params[i].name);
  for (const std::string& name : registry.names(LOOM_KIND_GRAD)) {
    const loom_plugin_descriptor* d = registry.get(LOOM_KIND_GRAD, name).desc;
    for (size_t i = 0; i < d->num_params; ++i)
      if (!keep.count(d->params[i].name)) recipe.drop_key("parallel", d->params[i].name);
  }
}

layout::StageSplit stage_split(const Recipe& recipe, int64_t stages) {
  return {model_int(recipe, "n_layer"), stages,
          model_int(recipe, "decoder_first_pipeline_num_layers"),
          model_int(recipe, "decoder_last_pipeline_num_layers"),
          recipe.get_int("parallel", "virtual_stages")};
}

std::map<std::string, int64_t> stage_split_record(const Recipe& recipe, int64_t stages) {
  const layout::StageSplit split = stage_split(recipe, stages);
  std::map<std::string, int64_t> out;
  if (split.uneven() && split.first > 0) out["first_stage_layers"] = split.first;
  if (split.uneven() && split.last > 0) out["last_stage_layers"] = split.last;
  return out;
}

int64_t microbatches_per_step(const Recipe& recipe, int data_parallel) {
  const int64_t mbs = recipe.get_int("train", "micro_batch_size");
  int64_t gbs = recipe.get_int("train", "global_batch_size");
  if (gbs == 0) gbs = mbs * data_parallel;
  return gbs / (mbs * data_parallel);
}

void check_layout(const Recipe& recipe, int world) {
  layout::Degrees d = layout_degrees(recipe);
  std::vector<std::string> problems = layout::problems(
      d, world, model_int(recipe, "n_layer"), model_int(recipe, "n_head"),
      model_int(recipe, "n_kv_head"), stage_split(recipe, 1).first, stage_split(recipe, 1).last);
  if (d.expert > 1) {  // the experts split evenly over the expert group
    const int64_t experts = model_int(recipe, "num_experts");
    const std::string ep = std::to_string(d.expert);
    if (experts == 0)
      problems.push_back("expert = " + ep +
                         " splits a mixture of experts, and model.num_experts is 0 (or the model "
                         "has none)");
    else if (experts % d.expert != 0)
      problems.push_back("model.num_experts = " + std::to_string(experts) +
                         " is not divisible by expert = " + ep);
  }
  // An uneven split under virtual stages gives the first and last pipeline ranks' layers to
  // their interleaved chunks (Megatron's); a V places stages p and 2P - 1 - p on rank p.
  const std::string schedule = recipe.get_string("parallel", "schedule");
  if (d.virtual_stages > 1 &&
      stage_split(recipe, (int64_t)d.pipeline * d.virtual_stages).uneven() &&
      (schedule == "zb-v" || schedule == "dualpipev"))
    problems.push_back("model.decoder_first/last_pipeline_num_layers with parallel.schedule = \"" +
                       schedule +
                       "\" is not implemented (the uneven split is the interleaved placement's: "
                       "use interleaved-1f1b)");
  if (d.expert_tensor > 1) {  // each expert's MLP columns split over the tensor group
    const int64_t experts = model_int(recipe, "num_experts");
    int64_t ffn = model_int(recipe, "moe_ffn_hidden_size");
    if (ffn == 0) ffn = model_int(recipe, "ffn_hidden");
    const std::string et = std::to_string(d.expert_tensor);
    if (experts == 0)
      problems.push_back("expert_tensor = " + et +
                         " splits a mixture of experts, and model.num_experts is 0 (or the model "
                         "has none)");
    else if (ffn > 0 && ffn % d.expert_tensor != 0)
      problems.push_back("model.moe_ffn_hidden_size = " + std::to_string(ffn) +
                         " is not divisible by expert_tensor = " + et);
  }
  if (d.context > 1) {  // Megatron's load balancing: 2 x context chunks per sample
    const int64_t T = recipe.get_int("train", "seq_len");
    if (T % (2 * d.context) != 0)
      problems.push_back("train.seq_len = " + std::to_string(T) +
                         " is not divisible by 2 x context = " + std::to_string(2 * d.context));
    // all-to-all: each context rank takes a share of every tensor rank's heads
    const int64_t share = (int64_t)d.tensor * d.context;
    for (const char* heads : {"n_head", "n_kv_head"}) {
      const int64_t h = model_int(recipe, heads);
      if (d.cp_comm_type == LOOM_CP_A2A && h > 0 && h % share != 0)
        problems.push_back("cp_comm_type = \"a2a\" splits the heads: model." + std::string(heads) +
                           " = " + std::to_string(h) +
                           " is not divisible by tensor x context = " + std::to_string(share));
    }
  }
  if (problems.empty()) {
    const int dp = world / (d.tensor * d.context * d.pipeline);
    const int64_t mbs = recipe.get_int("train", "micro_batch_size");
    const int64_t gbs = recipe.get_int("train", "global_batch_size");
    if (gbs != 0 && gbs % (mbs * dp) != 0)
      problems.push_back("train.global_batch_size = " + std::to_string(gbs) +
                         " is not a multiple of micro_batch_size (" + std::to_string(mbs) +
                         ") x data-parallel size (" + std::to_string(dp) + ")");
    // Which virtual stages and micro-batch counts a schedule runs is the schedule's to say
    // (loom.schedule-order/1): check_plugin_configs asks it.
  }
  if (problems.empty()) return;
  std::string msg = "parallel layout for " + std::to_string(world) + " rank" +
                    (world == 1 ? "" : "s") + ": " + problems.front();
  for (size_t i = 1; i < problems.size(); ++i) msg += "; " + problems[i];
  throw UsageError(msg);
}

std::string describe_layout(const Recipe& recipe, int world) {
  layout::Degrees d = layout_degrees(recipe);
  loom_parallel_layout l = layout::coordinates(d, world, 0);
  std::ostringstream o;
  o << "layout: world " << world << " = tensor " << l.tensor << " x context " << l.context
    << " x data " << l.data << " x pipeline " << l.pipeline;
  if (l.virtual_stages > 1) o << " (x " << l.virtual_stages << " virtual stages)";
  if (l.expert > 1) o << ", expert " << l.expert;
  if (l.expert_tensor > 1) o << ", experts split over the tensor group";
  if (l.context > 1) o << ", context attention " << (l.cp_comm_type == LOOM_CP_A2A ? "a2a" : "p2p");
  if (l.sequence_parallel) o << ", sequence parallel";
  o << "; schedule " << recipe.get_string("parallel", "schedule") << ", gradients "
    << recipe.get_string("parallel", "data") << "\n";
  std::vector<loom_group_kind> kinds = {LOOM_GROUP_TENSOR, LOOM_GROUP_CONTEXT, LOOM_GROUP_DATA,
                                        LOOM_GROUP_PIPELINE, LOOM_GROUP_EMBEDDING};
  if (l.expert > 1) kinds.insert(kinds.end(), {LOOM_GROUP_EXPERT, LOOM_GROUP_EXPERT_DATA});
  for (loom_group_kind k : kinds) {
    std::vector<int> colors = layout::colors(d, world, k);
    std::map<int, std::vector<int>> groups;
    for (int r = 0; r < world; ++r) groups[colors[r]].push_back(r);
    o << "  " << layout::group_name(k) << " groups:";
    for (auto& [c, ranks] : groups)
      if (k != LOOM_GROUP_EMBEDDING || ranks.size() > 1 || l.pipeline == 1)
        o << " " << join_ranks(ranks);
    o << "\n";
  }
  const int64_t layers = model_int(recipe, "n_layer");
  const int stages = l.pipeline * l.virtual_stages;
  const layout::StageSplit split = stage_split(recipe, stages);
  if (layers > 0 && split.uneven() && split.problem().empty()) {
    o << "  layers per stage:";
    for (int s = 0; s < stages; ++s) {
      const auto [a, b] = split.range(s);
      o << " " << b - a;
    }
    o << " (uneven: decoder_first/last_pipeline_num_layers)\n";
  } else if (layers > 0) {
    o << "  layers per stage: " << layers / stages << " (" << stages << " stage"
      << (stages == 1 ? "" : "s");
    if (l.virtual_stages > 1)
      o << "; the schedule places them: pipeline rank p holds stages p, p+" << l.pipeline
        << ", ... (interleaved) or p and " << 2 * l.pipeline - 1 << "-p (a V)";
    o << ")\n";
  }
  const int64_t micro = microbatches_per_step(recipe, l.data);
  o << "  micro-batches per step: " << micro << " of "
    << recipe.get_int("train", "micro_batch_size") << " x " << recipe.get_int("train", "seq_len")
    << " on each of " << l.data << " data-parallel rank" << (l.data == 1 ? "" : "s") << "\n";
  return o.str();
}

}  // namespace loom::engine
