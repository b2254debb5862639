// A training run's checkpoints (TrainRun::save and TrainRun::resume, train_run.hpp): each
// rank's parameters as f32 (main parameters, or the model's values when the optimizer is
// sharded), its optimizer state, the loss scaler and the data position, through
// checkpoint.cpp's atomic, verified directories.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "errors.hpp"
#include "loom/cpp/comm.hpp"
#include "train_run.hpp"

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

void upload(const loom_backend_ref& be, const StFile& file, const std::string& name, DLTensor* t,
            const std::string& where) {
  auto it = file.find(name);
  if (it == file.end()) throw RunError(where + ": no tensor '" + name + "'");
  const StTensor& s = it->second;
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  if (s.dtype != st_dtype(t->dtype) || s.shape != shape)
    throw RunError(where + ": tensor '" + name + "' has dtype/shape " + s.dtype +
                   " that does not match the model's (a different model configuration?)");
  check(be.api->from_host(be.self, t, s.data.data(), s.data.size()), "loading " + name);
}

// upload into a bf16/f16 tensor from f32 checkpoint data (values saved by download_f32).
void upload_cast(const loom_backend_ref& be, const StFile& file, const std::string& name,
                 DLTensor* t, const std::string& where) {
  if (is_wide(t->dtype)) return upload(be, file, name, t, where);
  ScratchTensor wide(be, loom_f32(), t->ndim, t->shape, "widening a tensor");
  upload(be, file, name, wide.t, where);
  check(be.api->ops->copy(be.self, t, wide.t), "loading " + name);
}

// Where a rank's parameter sits in the full tensor, for the checkpoint metadata that lets
// `merge_model` (and later a resharding load) put shards together.
nlohmann::json shard_entry(const loom_model_param& p, const loom_parallel_layout& l) {
  std::vector<int64_t> shape(p.value->shape, p.value->shape + p.value->ndim);
  const int d = p.tp_split_dim;
  nlohmann::json e = {
      {"split_dim", l.tensor > 1 ? d : -1}, {"tp_rank", l.tensor_rank}, {"tp_size", l.tensor}};
  if (l.tensor > 1 && d >= 0) {
    shape[d] *= l.tensor;
    std::vector<int64_t> blocks;
    if (p.tp_num_blocks > 1)
      blocks.assign(p.tp_block_sizes, p.tp_block_sizes + p.tp_num_blocks);
    else
      blocks = {shape[d]};
    e["blocks"] = blocks;
  }
  e["shape"] = shape;
  return e;
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

}  // namespace

void TrainRun::resume() {
  std::string load_dir = recipe.get_string("checkpoint", "load");
  if (load_dir.empty()) return;
  if (resolve_checkpoint(load_dir).empty()) {
    spdlog::warn("checkpoint.load = \"{}\" holds no checkpoint yet; starting from scratch",
                 load_dir);
    return;
  }
  Checkpoint ck = load_checkpoint(load_dir, model_file, opt_file);
  std::string where = resolve_checkpoint(load_dir).string();
  // The model file holds f32 main parameters, or (sharded optimizer) the model's values in
  // f32, with the main shards in this rank's optimizer file.
  for (size_t i = 0; i < params.size(); ++i) {
    if (sharded && main->main(i) != shards[i].param)  // every rank's own, duplicates too
      upload(be, ck.optimizer, std::string("main.") + params[i].name, main->main(i), where);
    if (params[i].pipeline_duplicate) continue;
    if (sharded)
      upload_cast(be, ck.model, params[i].name, params[i].value, where);
    else
      upload(be, ck.model, params[i].name, main->main(i), where);
  }
  for (auto [name, t] : optimizer_state(optimizer)) upload(be, ck.optimizer, name, t, where);
  // A tied tensor's copies follow the first stage's (tie group "embedding", checked at
  // setup to be the only one there is).
  if (layout.pipeline > 1)
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].tie_group != nullptr) {
        DLTensor t = *(sharded ? params[i].value : main->main(i));
        loom_comm_group* g = session.group(LOOM_GROUP_EMBEDDING);
        if (comm.api->group_size(comm.self, g) > 1)
          check(loom::comm_broadcast(comm, g, &t, 0), "syncing the tied embedding");
      }
  if (!sharded) main->to_model();
  scaler.load(ck.state);
  auto taken = ck.state.find("optimizer_steps");
  opt_steps = taken != ck.state.end() ? (int64_t)taken->second : ck.iteration;
  start_iter = ck.iteration;
  consumed = ck.consumed_samples;
  spdlog::info("resumed from {} at iteration {} ({} samples consumed)", where, start_iter,
               consumed);
}

void TrainRun::save(int64_t iteration) {
  const std::string save_dir = recipe.get_string("checkpoint", "save");
  Checkpoint ck;
  ck.iteration = iteration;
  ck.consumed_samples = consumed;
  ck.seed = seed;
  ck.recipe_toml = recipe.to_toml();
  ck.parallel = {{"tensor", layout.tensor},
                 {"pipeline", layout.pipeline},
                 {"virtual_stages", layout.virtual_stages},
                 {"data", layout.data},
                 {"sharded_optimizer", sharded ? 1 : 0}};
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
  if (scaler.dynamic) ck.state = scaler.state();
  ck.state["optimizer_steps"] = (double)opt_steps;
  ck.model_meta["loom.shards"] = entries.dump();
  for (auto [name, t] : optimizer_state(optimizer)) ck.optimizer[name] = download(be, t);
  if (sharded) {  // flat offsets of each parameter's shard, for resharding
    nlohmann::json opt_entries = nlohmann::json::object();
    for (size_t i = 0; i < params.size(); ++i)
      if (loom_tensor_numel(shards[i].param) > 0)
        opt_entries[params[i].name] = {{"flat_offset", shards[i].offset},
                                       {"numel", loom_tensor_numel(shards[i].param)},
                                       {"param", shard_entry(params[i], layout)}};
    ck.optimizer_meta["loom.shards"] = opt_entries.dump();
  }
  Collective coll;
  coll.leader = rank == 0;
  coll.barrier = [&] {
    if (world > 1) check(loom::comm_barrier(comm, nullptr), "checkpoint barrier");
  };
  save_checkpoint(save_dir, ck, coll);
  spdlog::info("saved checkpoint {}/iter_{:07d}", save_dir, iteration);
}

}  // namespace loom::engine
