// `loom checkpoint merge` and `loom checkpoint diff`: a checkpoint of any parallel layout as
// full tensors, and the largest difference between two checkpoints' models (how the
// equivalence tests compare a parallel run with a single-rank one).
#include "checkpoint/checkpoint_tools.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/errors.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "checkpoint/safetensors.hpp"
#include "loader/registry.hpp"
#include "recipe/parallel_layout.hpp"
#include "recipe/recipe.hpp"
#include "session/config_check.hpp"
#include "session/host.hpp"

namespace fs = std::filesystem;

namespace loom::engine {

namespace {

std::vector<double> as_f64(const StTensor& t) {
  std::vector<double> v;
  if (t.dtype == "F32") {
    v.resize(t.data.size() / 4);
    for (size_t i = 0; i < v.size(); ++i) {
      float f;
      std::memcpy(&f, t.data.data() + 4 * i, 4);
      v[i] = f;
    }
  } else if (t.dtype == "F64") {
    v.resize(t.data.size() / 8);
    std::memcpy(v.data(), t.data.data(), t.data.size());
  } else {
    throw RunError("checkpoint diff: tensors of dtype " + t.dtype + " are not compared");
  }
  return v;
}

// The real vocabulary a checkpoint's model file records ("loom.vocab"), 0 when unknown.
int64_t real_vocab(const fs::path& dir) {
  const std::map<std::string, std::string> meta = model_metadata(resolve_checkpoint(dir));
  auto it = meta.find("loom.vocab");
  if (it == meta.end()) return 0;
  try {
    return std::max<int64_t>(std::stoll(it->second), 0);
  } catch (const std::exception&) {
    return 0;
  }
}

// The layer library's parameters whose rows are the vocabulary, padded past it
// (sdk/layers/decoder/decoder.cpp, t5/model.cpp: `vrows`).
bool vocab_rows(const std::string& name) {
  return name == "wte" || name == "lm_head.weight" || name == "lm_head.bias";
}

}  // namespace

void checkpoint_merge(const fs::path& dir, const fs::path& out, bool overwrite) {
  check_output("loom checkpoint merge", out, {dir}, overwrite);
  StFile full = merge_model(dir);
  write_file_atomically(out, [&](const fs::path& tmp) { write_safetensors(tmp, full); });
  std::cout << "wrote " << full.size() << " tensors to " << out.string() << "\n";
}

std::vector<TensorDiff> compare_models(const fs::path& a, const fs::path& b, bool norm) {
  StFile x = merge_model(a), y = merge_model(b);
  // Rows past the real vocabulary are padding: random in a trained model, zero after an
  // import, never looked up nor scored. Only the real rows are compared.
  const int64_t va = real_vocab(a), vb = real_vocab(b);
  std::vector<TensorDiff> out;
  for (auto& [name, tx] : x) {
    auto it = y.find(name);
    if (it == y.end()) {
      out.push_back({name, 0, "only in " + a.string()});
      continue;
    }
    const StTensor& ty = it->second;
    // Vocabulary padding may differ with the tensor-parallel size (a multiple of pad x TP):
    // compare the rows both have when the trailing dimensions agree.
    const bool same_rows = tx.shape.size() == ty.shape.size() && tx.shape.size() >= 1 &&
                           std::equal(tx.shape.begin() + 1, tx.shape.end(), ty.shape.begin() + 1);
    if (!same_rows) {
      out.push_back({name, 0, "shapes differ"});
      continue;
    }
    if (vocab_rows(name) && va > 0 && vb > 0 && va != vb) {
      out.push_back({name, 0,
                     "vocabularies differ (" + std::to_string(va) + " and " + std::to_string(vb) +
                         " tokens)"});
      continue;
    }
    std::vector<double> u = as_f64(tx), v = as_f64(ty);
    size_t n = std::min(u.size(), v.size());
    int64_t real_rows = 0;
    if (vocab_rows(name) && va > 0 && va == vb && tx.shape[0] >= va && ty.shape[0] >= va &&
        (tx.shape[0] > va || ty.shape[0] > va)) {
      real_rows = va;
      n = u.size() / (size_t)tx.shape[0] * (size_t)va;
    }
    double scale = 0, diff = 0;
    if (norm) {  // ||a - b||_2 / ||a||_2
      for (size_t i = 0; i < n; ++i) scale += u[i] * u[i], diff += (u[i] - v[i]) * (u[i] - v[i]);
      scale = std::sqrt(scale), diff = std::sqrt(diff);
    } else {  // max |a - b| / max |a|
      for (size_t i = 0; i < n; ++i) scale = std::max({scale, std::fabs(u[i]), std::fabs(v[i])});
      for (size_t i = 0; i < n; ++i) diff = std::max(diff, std::fabs(u[i] - v[i]));
    }
    out.push_back({name, scale > 0 ? diff / scale : diff, "", true, real_rows});
  }
  for (auto& [name, t] : y)
    if (!x.count(name)) out.push_back({name, 0, "only in " + b.string(), false});
  return out;
}

int checkpoint_diff(const fs::path& a, const fs::path& b, double rtol, bool norm) {
  double worst = 0;
  std::string worst_name;
  int bad = 0;
  size_t in_a = 0;
  std::string padded;  // the tensors compared on their real vocabulary rows only
  int64_t real_rows = 0;
  for (const TensorDiff& d : compare_models(a, b, norm)) {
    if (d.in_first) ++in_a;
    if (d.real_rows > 0) padded += (padded.empty() ? "" : ", ") + d.name, real_rows = d.real_rows;
    if (!d.problem.empty()) {
      std::cout << d.name << ": " << d.problem << "\n";
      ++bad;
      continue;
    }
    if (d.rel > worst) worst = d.rel, worst_name = d.name;
    if (!d.within(rtol)) {
      std::cout << d.name << (norm ? ": ||a-b|| / ||a|| = " : ": max |a-b| / max |a| = ") << d.rel
                << " > " << rtol << "\n";
      ++bad;
    }
  }
  std::cout << (bad ? "differ" : "match") << ": " << in_a << " tensors, worst relative "
            << "difference " << worst << (worst_name.empty() ? "" : " (" + worst_name + ")")
            << ", tolerance " << rtol << "\n";
  if (!padded.empty())
    std::cout << padded << ": the " << real_rows << " rows of the real vocabulary compared; "
              << "the padding rows past them are not (they differ by design)\n";
  return bad ? 1 : 0;
}

namespace {

// One rank's files of the target layout: its parameters' shards (main values, f32 or as
// saved) in the model file and their optimizer state in the optimizer file, listed by the
// model plugin itself for that rank (Session::assume_rank), so the split dims, q|k|v
// blocks, stage boundaries and tied copies are the model's own.
// `states`: the optimizer state names of each parameter.
void convert_rank(Recipe& recipe, Registry& registry, int world, int rank,
                  const FullCheckpoint& full,
                  const std::map<std::string, std::vector<std::string>>& states, Checkpoint& out) {
  Session session(recipe, registry);
  session.assume_rank(world, rank);
  const loom_parallel_layout& l = session.layout();
  loom_tokenizer_ref tok = session.tokenizer();
  const int64_t vocab = tok.api->vocab_size(tok.self);
  Checkpoint::File model{checkpoint_file("model", l, false), {}, {}};
  Checkpoint::File opt{checkpoint_file("optimizer", l, false), {}, {}};
  nlohmann::json model_entries = nlohmann::json::object(), opt_entries = model_entries;
  const ChunkPlacement place = chunk_placement(recipe, registry, l, 0);
  if (place.placement != 0) out.parallel["placement"] = place.placement;
  for (const auto& [k, v] : stage_split_record(recipe, place.total)) out.parallel[k] = v;
  for (size_t v = 0; v < place.stages.size(); ++v) {
    loom_model_create_args args = inference_create_args(vocab, recipe.get_int("train", "seq_len"),
                                                        recipe.get_int("train", "micro_batch_size"),
                                                        place.stages[v], place.total);
    auto [api, m] = v == 0 ? session.model(args) : session.model_chunk(args);
    for (size_t i = 0; i < api->num_params(m); ++i) {
      loom_model_param p{};
      p.struct_size = LOOM_MODEL_PARAM_SIZE_V2;
      check(api->get_param(m, i, &p), "listing model parameters");
      const std::string name = p.name;
      const nlohmann::json entry = shard_entry(p, l);
      const ShardSpec spec = ShardSpec::parse(entry, name);
      auto src = full.main.find(name);
      if (src == full.main.end()) throw RunError("the checkpoint has no tensor " + name);
      if (!p.pipeline_duplicate) {
        model.tensors[name] = take_shard(spec, src->second, vocab, name);
        model_entries[name] = entry;
      }
      opt_entries[name] = {{"param", entry}};
      if (auto it = states.find(name); it != states.end())
        for (const std::string& state : it->second)
          opt.tensors[state] = take_shard(spec, full.optimizer.at(state), vocab, state);
    }
  }
  model.meta = {{"loom.shards", model_entries.dump()}, {"loom.vocab", std::to_string(vocab)}};
  opt.meta = {{"loom.shards", opt_entries.dump()}};
  out.more_files.push_back(std::move(model));
  if (!full.optimizer.empty()) out.more_files.push_back(std::move(opt));
}

}  // namespace

void checkpoint_convert(const fs::path& src, const fs::path& dst, int tensor, int pipeline,
                        int virtual_stages, const std::vector<std::string>& overrides,
                        Registry& registry, bool overwrite) {
  check_checkpoint_output("loom checkpoint convert", dst, src, overwrite, "this conversion");
  const Checkpoint in = load_checkpoint(src, "", "");
  const FullCheckpoint full = merge_checkpoint(in.folder, true);
  std::vector<std::string> sets = {"parallel.tensor=" + std::to_string(tensor),
                                   "parallel.pipeline=" + std::to_string(pipeline),
                                   "parallel.virtual_stages=" + std::to_string(virtual_stages),
                                   "parallel.context=1",
                                   "parallel.data=ddp",
                                   "comm.plugin=single"};
  if (tensor == 1) sets.push_back("parallel.sequence_parallel=false");
  if (virtual_stages > 1) sets.push_back("parallel.schedule=interleaved-1f1b");
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  Recipe recipe = Recipe::load(in.folder / "recipe.toml", sets);
  // The source's strategy may read keys ddp does not (fsdp's zero_stage, the distributed
  // optimizer's overlap_param_gather): the converted recipe leaves them out.
  keep_grad_keys_of(recipe, registry, "ddp");
  recipe.validate(registry);
  Checkpoint out;
  out.iteration = in.iteration;
  out.consumed_samples = in.consumed_samples;
  out.seed = in.seed;
  out.state = in.state;
  out.recipe_toml = recipe.to_toml();
  out.model_file = out.optimizer_file = "";
  out.parallel = {{"tensor", tensor},
                  {"pipeline", pipeline},
                  {"virtual_stages", virtual_stages},
                  {"data", 1},
                  {"sharded_optimizer", 0}};
  const int world = tensor * pipeline;
  std::map<std::string, std::vector<std::string>> states;
  for (const auto& [state, t] : full.optimizer) states[param_of(state)].push_back(state);
  for (int r = 0; r < world; ++r) convert_rank(recipe, registry, world, r, full, states, out);
  save_checkpoint(dst, out);
  std::cout << "converted " << in.folder.string() << " (iteration " << in.iteration << ") to "
            << dst.string() << ": tensor " << tensor << ", pipeline " << pipeline
            << ", virtual stages " << virtual_stages << ", " << out.more_files.size() << " files"
            << (full.optimizer.empty() ? " (no optimizer state in the source)" : "") << "\n";
}

}  // namespace loom::engine
