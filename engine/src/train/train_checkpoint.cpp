// A training run's checkpoints (TrainRun::save and TrainRun::resume, train_run.hpp): each
// rank's parameters as f32 (main parameters, or the model's values when the optimizer is
// sharded), its optimizer state, the loss scaler and the data position, through
// checkpoint.cpp's atomic, verified directories.
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "base/errors.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "checkpoint/hf_interop.hpp"
#include "loom/cpp/comm.hpp"
#include "loom/cpp/fp8_args.hpp"
#include "recipe/parallel_layout.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

std::string st_dtype(DLDataType d) {
  if (d.code == kDLFloat && d.bits == 32) return "F32";
  if (d.code == kDLFloat && d.bits == 64) return "F64";
  if (d.code == kDLFloat && d.bits == 16) return "F16";
  if (d.code == kDLBfloat && d.bits == 16) return "BF16";
  if (d.code == kDLInt && d.bits == 32) return "I32";
  throw RunError("tensor dtype not storable in a checkpoint");
}

// A named device tensor as checkpoint data, and back.
StTensor download(const loom_backend_ref& be, const DLTensor* t) {
  StTensor s;
  s.dtype = st_dtype(t->dtype);
  s.shape.assign(t->shape, t->shape + t->ndim);
  s.data.resize((size_t)loom_tensor_numel(t) * loom_dtype_bytes(t->dtype));
  check(be.api->to_host(be.self, t, s.data.data(), s.data.size()), "reading a tensor");
  return s;
}

// A tensor as f32 checkpoint data (always f32): bf16/f16 values are widened exactly, through
// an f32 backend tensor of t's shape.
StTensor download_f32(const loom_backend_ref& be, const DLTensor* t) {
  if (is_wide(t->dtype)) return download(be, t);
  ScratchTensor wide(be, loom_f32(), t->ndim, t->shape, "widening a tensor");
  check(be.api->ops->copy(be.self, wide.t, t), "widening a tensor");
  return download(be, wide.t);
}

void upload(const loom_backend_ref& be, const StTensor& s, const std::string& name, DLTensor* t,
            const std::string& where) {
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  if (s.dtype != st_dtype(t->dtype) || s.shape != shape)
    throw RunError(where + ": tensor '" + name + "' has dtype/shape " + s.dtype +
                   " that does not match the model's (a different model configuration?)");
  check(be.api->from_host(be.self, t, s.data.data(), s.data.size()), "loading " + name);
}

const StTensor& find(const StFile& file, const std::string& name, const std::string& where) {
  auto it = file.find(name);
  if (it == file.end()) throw RunError(where + ": no tensor '" + name + "'");
  return it->second;
}

void upload(const loom_backend_ref& be, const StFile& file, const std::string& name, DLTensor* t,
            const std::string& where) {
  upload(be, find(file, name, where), name, t, where);
}

// upload into a bf16/f16 tensor from f32 checkpoint data (values saved by download_f32).
void upload_cast(const loom_backend_ref& be, const StTensor& s, const std::string& name,
                 DLTensor* t, const std::string& where) {
  if (is_wide(t->dtype)) return upload(be, s, name, t, where);
  ScratchTensor wide(be, loom_f32(), t->ndim, t->shape, "widening a tensor");
  upload(be, s, name, wide.t, where);
  check(be.api->ops->copy(be.self, t, wide.t), "loading " + name);
}

// Elements [offset, offset + n) of a tensor's flattening: a distributed optimizer's shard.
StTensor flat_slice(const StTensor& s, int64_t offset, int64_t n) {
  const size_t es = dtype_size(s.dtype);
  StTensor out{s.dtype, {n}, {}};
  out.data.assign(s.data.begin() + offset * es, s.data.begin() + (offset + n) * es);
  return out;
}

// The optimizer's state tensors by name.
std::vector<std::pair<const char*, DLTensor*>> optimizer_state(
    const std::pair<const loom_optimizer_api*, loom_optimizer*>& o) {
  std::vector<std::pair<const char*, DLTensor*>> out;
  for (size_t i = 0; i < o.first->num_state(o.second); ++i) {
    const char* name = nullptr;
    DLTensor* t = nullptr;
    check(o.first->get_state(o.second, i, &name, &t), "listing optimizer state");
    out.emplace_back(name, t);
  }
  return out;
}

// "a, b, c" or "a, b, c, d, e and 7 more": the first names of a list, for a message.
std::string first_names(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
}

// The names in `a` that are not in `b`.
std::vector<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::vector<std::string> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// A resume takes every tensor of a checkpoint and lacks none: a model of another shape
// (model.n_layer, a norm with a bias, bias = false) would otherwise start from a partial
// load, and state of another optimizer would be dropped, without a word. `missing`: tensors
// this rank needs that the checkpoint lacks; `unused`: tensors it holds that no rank takes.
void refuse_mismatch(const std::string& where, const std::string& what,
                     const std::vector<std::string>& missing,
                     const std::vector<std::string>& unused, const std::string& fix) {
  if (missing.empty() && unused.empty()) return;
  std::string msg = "checkpoint.load: " + where + ": its " + what + " tensors are not this run's:";
  if (!missing.empty())
    msg += " it lacks " + std::to_string(missing.size()) + " the run needs (" +
           first_names(missing) + ")";
  if (!unused.empty())
    msg += std::string(missing.empty() ? "" : ";") + " it holds " + std::to_string(unused.size()) +
           " the run does not take (" + first_names(unused) + ")";
  throw UsageError(msg + "; " + fix);
}

constexpr const char* kModelFix =
    "the recipe's [model] differs from the one the checkpoint was saved with (its recipe.toml): "
    "resume with that model, or start from the weights with checkpoint.finetune";
constexpr const char* kOptimizerFix =
    "the recipe's [optimizer] differs from the one the checkpoint was saved with: set "
    "checkpoint.no_load_optim = true to resume with a fresh optimizer";

// The [optimizer] plugin a checkpoint's resolved recipe names ("" when it names none).
std::string saved_optimizer(const Checkpoint& ck) {
  try {
    toml::table t = toml::parse(ck.recipe_toml);
    return t["optimizer"]["plugin"].value_or(std::string());
  } catch (const toml::parse_error&) {
    return "";
  }
}

}  // namespace

// Whether a checkpoint's files are this run's: saved in the same layout, so that each rank
// reads its own files as they are.
bool TrainRun::same_layout(const std::map<std::string, int64_t>& saved) const {
  auto get = [&](const char* k, int64_t dflt) {
    auto it = saved.find(k);
    return it == saved.end() ? dflt : it->second;
  };
  const std::map<std::string, int64_t> split = stage_split_record(recipe, place.total);
  auto split_now = [&](const char* k) { return split.count(k) ? split.at(k) : 0; };
  const bool was_sharded = get("sharded_optimizer", 0) != 0;
  return get("tensor", 1) == layout.tensor && get("pipeline", 1) == layout.pipeline &&
         get("virtual_stages", 1) == layout.virtual_stages && get("expert", 1) == layout.expert &&
         get("context", 1) == layout.context && get("placement", 0) == place.placement &&
         get("first_stage_layers", 0) == split_now("first_stage_layers") &&
         get("last_stage_layers", 0) == split_now("last_stage_layers") && was_sharded == sharded &&
         (!sharded || get("data", 1) == layout.data);
}

void TrainRun::resume() {
  std::string load_dir = recipe.get_string("checkpoint", "load");
  const std::string pretrained = recipe.get_string("checkpoint", "finetune");
  if (load_dir == "auto") {  // the newest complete checkpoint of this run's own folder
    load_dir = recipe.get_string("checkpoint", "save");
    if (load_dir.empty())
      throw UsageError("checkpoint.load = \"auto\" resumes from checkpoint.save, which is empty");
    if (resolve_checkpoint(load_dir).empty()) {
      spdlog::info("checkpoint.load = \"auto\": no checkpoint under {} yet; starting {}", load_dir,
                   pretrained.empty() ? "from scratch" : "from checkpoint.finetune");
      if (!pretrained.empty()) finetune(pretrained);
      return;
    }
  }
  if (load_dir.empty() || resolve_checkpoint(load_dir).empty()) {
    if (!load_dir.empty())
      spdlog::warn("checkpoint.load = \"{}\" holds no checkpoint yet; starting {}", load_dir,
                   pretrained.empty() ? "from scratch" : "from checkpoint.finetune");
    if (!pretrained.empty()) finetune(pretrained);
    return;
  }
  Checkpoint ck = load_checkpoint(load_dir, "", "");
  resumed_from = load_dir;
  hf_meta = hf_origin(ck.folder);
  peft_base = peft_base_of(ck.folder);
  const bool with_optimizer = !recipe.get_bool("checkpoint", "no_load_optim");
  const std::string theirs = saved_optimizer(ck), ours = recipe.plugin("optimizer");
  if (with_optimizer && !theirs.empty() && theirs != ours)
    throw UsageError("checkpoint.load = \"" + load_dir + "\": " + ck.folder.string() +
                     " holds the state of optimizer/" + theirs + ", and the recipe selects " +
                     "optimizer/" + ours + ": set checkpoint.no_load_optim = true to resume " +
                     "with a fresh optimizer/" + ours +
                     " (weights, iteration and data position carry over)");
  const bool has_optimizer = std::any_of(
      ck.files.begin(), ck.files.end(), [](const auto& f) { return f.rfind("optimizer", 0) == 0; });
  if (!has_optimizer)
    throw UsageError("checkpoint.load = \"" + load_dir + "\": " + ck.folder.string() +
                     " holds weights but no optimizer state (an import?); start from it with "
                     "checkpoint.finetune instead");
  bool own = same_layout(ck.parallel);
  if (own) {
    read_rank_files(ck, model_file, opt_file);
    own = same_shards(ck);
  }
  // Every rank takes the same path: resharding checks names over the world (a collective).
  double others[1] = {own ? 0.0 : 1.0};
  sum_over(be, comm, nullptr, others, 1);
  own = others[0] == 0;
  if (own) {
    load_own_files(ck, with_optimizer);
  } else {
    std::string from;
    for (auto& [k, v] : ck.parallel) from += " " + k + "=" + std::to_string(v);
    spdlog::info(
        "resharding {} (saved with{}) onto tensor={} pipeline={} virtual_stages={} "
        "data={}{}",
        ck.folder.string(), from, layout.tensor, layout.pipeline, layout.virtual_stages,
        layout.data, sharded ? " (distributed optimizer)" : "");
    // Every name offered to the filter is one the checkpoint holds: those no rank takes are
    // tensors of another model.
    const ParamFilter mine = own_params();
    std::set<std::string> offered;
    const FullCheckpoint full =
        merge_checkpoint(ck.folder, with_optimizer, [&](const std::string& name) {
          offered.insert(name);
          return mine(name);
        });
    std::vector<std::string> names(offered.begin(), offered.end());
    std::vector<double> taken(names.size());
    for (size_t k = 0; k < names.size(); ++k) taken[k] = mine(names[k]) ? 1 : 0;
    if (!taken.empty()) sum_over(be, comm, nullptr, taken.data(), (int64_t)taken.size());
    std::vector<std::string> unused;
    for (size_t k = 0; k < names.size(); ++k)
      if (taken[k] == 0) unused.push_back(names[k]);
    check_full(full, ck.folder.string(), with_optimizer, unused);
    load_full(full, ck.folder.string(), with_optimizer);
  }
  if (with_optimizer) {
    scaler.load(ck.state);
    auto taken = ck.state.find("optimizer_steps");
    opt_steps = taken != ck.state.end() ? (int64_t)taken->second : ck.iteration;
  } else {  // Megatron's --no-load-optim: the loss scale is the optimizer's state too
    opt_steps = 0;
    spdlog::info(
        "checkpoint.no_load_optim: optimizer/{} starts fresh (the checkpoint's {} state is "
        "not loaded)",
        ours, theirs.empty() ? std::string("optimizer") : "optimizer/" + theirs);
  }
  start_iter = ck.iteration;
  consumed = ck.consumed_samples;
  spdlog::info("resumed from {} at iteration {} ({} samples consumed)", ck.folder.string(),
               start_iter, consumed);
}

// A sharded optimizer's own files fit only its shards as they are now: the distributed
// optimizer's bucket_size decides them too. Any difference sends the load through the full
// tensors (resharding), which cut the saved shards by the offsets they recorded.
bool TrainRun::same_shards(const Checkpoint& ck) const {
  if (!sharded) return true;
  auto it = ck.optimizer_meta.find("loom.shards");
  if (it == ck.optimizer_meta.end()) return false;
  const nlohmann::json e = nlohmann::json::parse(it->second, nullptr, false);
  if (e.is_discarded() || !e.is_object()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = loom_tensor_numel(shards[i].param);
    auto p = e.find(params[i].name);
    if (n == 0 || p == e.end()) {
      if ((n == 0) != (p == e.end())) return false;  // saved without one it owns, or with one
      continue;
    }
    if (p->value("flat_offset", int64_t(-1)) != shards[i].offset ||
        p->value("numel", int64_t(-1)) != n)
      return false;
  }
  return true;
}

// The names a resharding load needs against those the merged checkpoint holds for this rank;
// `unused`: the checkpoint's parameters no rank takes.
void TrainRun::check_full(const FullCheckpoint& full, const std::string& where, bool with_optimizer,
                          const std::vector<std::string>& unused) const {
  std::set<std::string> need, have;
  for (const loom_model_param& p : params) need.insert(p.name);
  for (const loom_model_param& b : buffers) need.insert(b.name);
  for (const auto& [name, t] : full.main) have.insert(name);
  std::vector<std::string> other;  // FP8 state no rank takes is relax_fp8_state's to report
  for (const std::string& n : unused)
    if (loom::is_fp8_state(n))
      have.insert(n);
    else
      other.push_back(n);
  relax_fp8_state(need, have, where);
  refuse_mismatch(where, "model", minus(need, have), other, kModelFix);
  if (!with_optimizer) return;
  // The optimizer's state: what this rank's optimizer holds must be there. The merged state
  // covers every parameter of this rank's, of which a sharded optimizer holds a slice only,
  // so what it does not take is judged by kind ("exp_avg" of "exp_avg.h.0.attn.c_attn.weight"):
  // a kind this optimizer does not keep is another optimizer's state.
  need.clear();
  std::set<std::string> kinds;
  for (auto [name, t] : optimizer_state(optimizer)) {
    need.insert(name);
    const std::string n = name;
    kinds.insert(n.substr(0, n.find('.')));
  }
  std::vector<std::string> missing, foreign;
  for (const std::string& n : need)
    if (!full.optimizer.count(n)) missing.push_back(n);
  if (!kinds.empty())
    for (const auto& [name, t] : full.optimizer)
      if (!kinds.count(name.substr(0, name.find('.')))) foreign.push_back(name);
  refuse_mismatch(where, "optimizer", missing, foreign, kOptimizerFix);
}

// This rank's files of a checkpoint saved in this layout. Without `with_optimizer` the
// optimizer's state stays as created (its main parameters still load).
void TrainRun::load_own_files(const Checkpoint& ck, bool with_optimizer) {
  const std::string where = ck.folder.string();
  // What the files hold of the buffers: not a tied copy (sync_tied fills it), nor, when the
  // checkpoint names a base (resume read it into peft_base), the frozen weights.
  auto in_files = [&](const loom_model_param& b) {
    return !b.pipeline_duplicate && !(b.frozen && !peft_base.empty());
  };
  {  // the files hold exactly what this rank takes
    std::set<std::string> need, have, need_opt, have_opt;
    for (size_t i = 0; i < params.size(); ++i) {
      if (sharded && main->main(i) != shards[i].param)
        need_opt.insert(std::string("main.") + params[i].name);
      if (!params[i].pipeline_duplicate) need.insert(params[i].name);
    }
    for (const loom_model_param& b : buffers)
      if (in_files(b)) need.insert(b.name);
    for (const auto& [name, t] : ck.model) have.insert(name);
    relax_fp8_state(need, have, where);
    refuse_mismatch(where, "model", minus(need, have), minus(have, need), kModelFix);
    for (const auto& [name, t] : ck.optimizer)
      if (with_optimizer || name.rfind("main.", 0) == 0) have_opt.insert(name);
    if (with_optimizer)
      for (auto [name, t] : optimizer_state(optimizer)) need_opt.insert(name);
    refuse_mismatch(where, "optimizer", minus(need_opt, have_opt), minus(have_opt, need_opt),
                    kOptimizerFix);
  }
  // The model file holds f32 main parameters, or (sharded optimizer) the model's values in
  // f32, with the main shards in this rank's optimizer file.
  for (size_t i = 0; i < params.size(); ++i) {
    if (sharded && main->main(i) != shards[i].param)  // every rank's own, duplicates too
      upload(be, ck.optimizer, std::string("main.") + params[i].name, main->main(i), where);
    if (params[i].pipeline_duplicate) continue;
    if (sharded)
      upload_cast(be, find(ck.model, params[i].name, where), params[i].name, params[i].value,
                  where);
    else
      upload(be, ck.model, params[i].name, main->main(i), where);
  }
  for (const loom_model_param& b : buffers)  // (FP8 state the files lack starts fresh)
    if (in_files(b) && ck.model.count(b.name))
      upload_cast(be, find(ck.model, b.name, where), b.name, b.value, where);
  if (!peft_base.empty()) load_frozen_base(ck.folder);
  if (with_optimizer)
    for (auto [name, t] : optimizer_state(optimizer)) upload(be, ck.optimizer, name, t, where);
  sync_tied();
  if (!sharded) main->to_model();
}

// Every parameter (and with `with_optimizer` the optimizer's state) cut from full tensors
// for this rank's place in the layout: a checkpoint of another layout, or pretrained
// weights.
void TrainRun::load_full(const FullCheckpoint& full, const std::string& where, bool with_optimizer,
                         const std::function<bool(const std::string&)>& fresh) {
  std::map<std::string, size_t> index;
  std::vector<ShardSpec> specs;
  for (size_t i = 0; i < params.size(); ++i) {
    index[params[i].name] = i;
    specs.push_back(ShardSpec::parse(shard_entry(params[i], layout), params[i].name));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = params[i].name;
    if (fresh && fresh(name)) continue;
    const StTensor local =
        take_shard(specs[i], find(full.main, name, where), vocab, where + ": " + name);
    if (!sharded) {
      upload(be, local, name, main->main(i), where);
      continue;
    }
    upload_cast(be, local, name, params[i].value, where);
    if (main->main(i) != shards[i].param && loom_tensor_numel(shards[i].param) > 0)
      upload(be, flat_slice(local, shards[i].offset, loom_tensor_numel(shards[i].param)), name,
             main->main(i), where);
  }
  for (const loom_model_param& b : buffers) {
    // a buffer the weights lack (finetuning from a model trained without it, or FP8
    // scaling state: relax_fp8_state) starts fresh
    if ((!with_optimizer || loom::is_fp8_state(b.name)) && !full.main.count(b.name)) continue;
    upload_buffer(full.main, b, where);
  }
  if (with_optimizer)
    for (auto [name, t] : optimizer_state(optimizer)) {
      const std::string n = name;
      auto it = index.find(param_of(n));
      if (it == index.end()) throw RunError("optimizer state " + n + " names no parameter");
      const size_t i = it->second;
      StTensor local =
          take_shard(specs[i], find(full.optimizer, n, where), vocab, where + ": " + n);
      if (sharded) local = flat_slice(local, shards[i].offset, loom_tensor_numel(t));
      upload(be, local, n, t, where);
    }
  if (!sharded) main->to_model();
}

void TrainRun::upload_buffer(const StFile& full, const loom_model_param& b,
                             const std::string& where) {
  const ShardSpec spec = ShardSpec::parse(shard_entry(b, layout), b.name);
  upload_cast(be, take_shard(spec, find(full, b.name, where), vocab, where + ": " + b.name), b.name,
              b.value, where);
}

void TrainRun::load_frozen_base(const fs::path& folder) {
  std::set<std::string> frozen;
  for (const loom_model_param& b : buffers)
    if (b.frozen) frozen.insert(b.name);
  StFile full;
  add_peft_base(folder, full, [&](const std::string& n) { return frozen.count(n) > 0; });
  const std::string where = peft_base_of(folder) + " (the frozen base of " + folder.string() + ")";
  for (const loom_model_param& b : buffers)
    if (b.frozen) upload_buffer(full, b, where);
}

// Picks this rank's parameters by name: a rank of another layout reads only what it holds.
ParamFilter TrainRun::own_params() const {
  auto mine = std::make_shared<std::set<std::string>>();
  for (const loom_model_param& p : params) mine->insert(p.name);
  for (const loom_model_param& b : buffers) mine->insert(b.name);
  return [mine](const std::string& n) { return mine->count(n) > 0; };
}

// A tied tensor's copies follow the first stage's (tie group "embedding", checked at setup to
// be the only one there is).
void TrainRun::sync_tied() {
  if (layout.pipeline == 1) return;
  std::vector<DLTensor> tied;  // the frozen ones too (LoRA): the same, never trained
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].tie_group != nullptr)
      tied.push_back(*(sharded ? params[i].value : main->main(i)));
  for (const loom_model_param& b : buffers)
    if (b.tie_group != nullptr) tied.push_back(*b.value);
  if (tied.empty()) return;  // a stage holding no tied copy is in no embedding group
  loom_comm_group* g = session.group(LOOM_GROUP_EMBEDDING);
  if (comm.api->group_size(comm.self, g) <= 1) return;
  for (DLTensor& t : tied)
    check(loom::comm_broadcast(comm, g, &t, 0), "syncing the tied embedding");
}

Collective TrainRun::save_collective() {
  Collective coll;
  coll.leader = rank == 0;
  coll.barrier = [this] {
    if (world > 1) check(loom::comm_barrier(comm, nullptr), "checkpoint barrier");
  };
  return coll;
}

void TrainRun::save(int64_t iteration, bool background) {
  finish_save(true);  // at most one save in flight
  const auto t0 = std::chrono::steady_clock::now();
  const std::string save_dir = recipe.get_string("checkpoint", "save");
  // Under a residency every value is gathered for the file and let go after it.
  const bool release = !held;
  hold_params(true);
  Checkpoint ck;
  ck.iteration = iteration;
  ck.consumed_samples = consumed;
  ck.seed = seed;
  ck.recipe_toml = recipe.to_toml();
  ck.parallel = {{"tensor", layout.tensor},
                 {"pipeline", layout.pipeline},
                 {"virtual_stages", layout.virtual_stages},
                 {"data", layout.data},
                 {"expert", layout.expert},
                 {"context", layout.context},
                 {"sharded_optimizer", sharded ? 1 : 0}};
  // A schedule's own placement of the chunks (a V) is recorded: files saved under one
  // placement hold other stages than another's, so a resume under another reshards.
  if (place.placement != 0) ck.parallel["placement"] = place.placement;
  for (const auto& [k, v] : stage_split_record(recipe, place.total)) ck.parallel[k] = v;
  ck.model_file = writes_model ? model_file : "";
  ck.optimizer_file = writes_opt ? opt_file : "";
  nlohmann::json entries = nlohmann::json::object();
  for (size_t i = 0; i < params.size(); ++i) {
    if (sharded && main->main(i) != shards[i].param)
      ck.optimizer[std::string("main.") + params[i].name] = download(be, main->main(i));
    if (params[i].pipeline_duplicate) continue;
    ck.model[params[i].name] = download_f32(be, sharded ? params[i].value : main->main(i));
    entries[params[i].name] = shard_entry(params[i], layout);
  }
  for (const loom_model_param& b : buffers) {
    if (b.pipeline_duplicate) continue;            // a frozen tied embedding's copy (LoRA under PP)
    if (b.frozen && !peft_base.empty()) continue;  // in the base the checkpoint names
    ck.model[b.name] = download_f32(be, b.value);
    entries[b.name] = shard_entry(b, layout);
  }
  if (scaler.dynamic) ck.state = scaler.state();
  ck.state["optimizer_steps"] = (double)opt_steps;
  ck.model_meta["loom.shards"] = entries.dump();
  ck.model_meta["loom.vocab"] = std::to_string(vocab);  // the rows past it are padding
  for (auto& [k, v] : hf_meta) ck.model_meta[k] = v;
  if (!peft_base.empty()) ck.model_meta["loom.peft_base"] = peft_base;
  for (auto [name, t] : optimizer_state(optimizer)) ck.optimizer[name] = download(be, t);
  // Where each parameter's state sits, for resharding: its tensor-parallel shard (the
  // pipeline duplicate's too, which the model file leaves out) and, sharded, the flat
  // offset of this rank's slice of it.
  nlohmann::json opt_entries = nlohmann::json::object();
  for (size_t i = 0; i < params.size(); ++i) {
    nlohmann::json e = {{"param", shard_entry(params[i], layout)}};
    if (sharded) {
      if (loom_tensor_numel(shards[i].param) == 0) continue;
      e["flat_offset"] = shards[i].offset;
      e["numel"] = loom_tensor_numel(shards[i].param);
    }
    opt_entries[params[i].name] = e;
  }
  ck.optimizer_meta["loom.shards"] = opt_entries.dump();
  if (release) hold_params(false);  // everything is on the host now
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  if (!background) {
    save_checkpoint(save_dir, ck, save_collective());
    spdlog::info("saved checkpoint {}/iter_{:07d} in {:.3f} s", save_dir, iteration, since(t0));
    return;
  }
  auto a = std::make_unique<AsyncSave>();
  a->ck = std::move(ck);
  a->dir = save_dir;
  const fs::path tmp = begin_checkpoint(save_dir, a->ck, save_collective());
  a->snapshot_s = since(t0);
  AsyncSave* p = a.get();
  // The writer gets its own copy of the test hooks (none in a normal run: no sleep).
  const TestHooks test_hooks = hooks ? *hooks : TestHooks{};
  a->writer = std::thread([p, tmp, t0, test_hooks] {
    try {
      test_hooks.slow_save(p->ck.iteration);  // tests only
      write_checkpoint_files(tmp, p->ck);
    } catch (const std::exception& e) {
      p->error = e.what();
    }
    // finish_save reads only the metadata: the host copy of the state goes now.
    p->ck.model.clear(), p->ck.optimizer.clear(), p->ck.more_files.clear();
    p->write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    p->done = true;
  });
  spdlog::info("checkpoint {}/iter_{:07d}: state copied in {:.3f} s, writing in the background",
               save_dir, iteration, p->snapshot_s);
  pending_save = std::move(a);
}

void TrainRun::finish_save(bool wait) {
  if (!pending_save) return;
  if (!wait) {
    double not_done = pending_save->done ? 0 : 1;
    sum_over(be, comm, nullptr, &not_done, 1);
    if (not_done > 0) return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  pending_save->writer.join();
  const std::unique_ptr<AsyncSave> a = std::move(pending_save);
  const std::string name = a->dir.string() + "/iter_" + fmt::format("{:07d}", a->ck.iteration);
  if (!a->error.empty())
    throw RunError("writing checkpoint " + name + " in the background: " + a->error);
  finish_checkpoint(a->dir, a->ck, save_collective());
  spdlog::info(
      "saved checkpoint {} (checkpoint.async: the loop stopped {:.3f} s for the snapshot and "
      "{:.3f} s to finish; the files took {:.3f} s in the background)",
      name, a->snapshot_s,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), a->write_s);
}

}  // namespace loom::engine
