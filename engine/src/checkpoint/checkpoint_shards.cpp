#include "checkpoint/checkpoint_shards.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/errors.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/checkpoint.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

int64_t numel(const std::vector<int64_t>& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

// Calls copy(full_element, local_element, count) for every contiguous run of the shard:
// local row i of block k is full row (start of block k) + rank * (block / tp) + i.
void for_each_run(const ShardSpec& s, const std::function<void(int64_t, int64_t, int64_t)>& copy) {
  const int d = s.split_dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= s.full[i];
  for (size_t i = d + 1; i < s.full.size(); ++i) inner *= s.full[i];
  const int64_t local_d = s.full[d] / s.tp;
  int64_t lrow = 0, gstart = 0;
  for (int64_t b : s.blocks) {
    const int64_t lb = b / s.tp;
    for (int64_t i = 0; i < lb; ++i, ++lrow)
      for (int64_t o = 0; o < outer; ++o)
        copy((o * s.full[d] + gstart + s.rank * lb + i) * inner, (o * local_d + lrow) * inner,
             inner);
    gstart += b;
  }
}

// The rows [0, rows) of `t` along dimension 0, zero-filled past its own.
StTensor fit_rows(const StTensor& t, int64_t rows) {
  StTensor out{t.dtype, t.shape, {}};
  out.shape[0] = rows;
  const size_t row_bytes = t.shape[0] > 0 ? t.data.size() / (size_t)t.shape[0] : 0;
  out.data.assign(row_bytes * (size_t)rows, 0);
  std::memcpy(out.data.data(), t.data.data(), row_bytes * (size_t)std::min(rows, t.shape[0]));
  return out;
}

}  // namespace

ShardSpec ShardSpec::parse(const nlohmann::json& e, const std::string& where) {
  ShardSpec s;
  // An integer field in [lo, hi], `def` when absent (a float or a huge number is refused
  // here rather than converted).
  auto integer = [&](const char* key, int64_t def, int64_t lo, int64_t hi) -> int64_t {
    if (!e.contains(key)) return def;
    const nlohmann::json& v = e.at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)hi) ||
        v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw RunError(where + ": malformed shard metadata: " + key + " is " + v.dump() +
                     ", not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
    return v.get<int64_t>();
  };
  try {
    s.full = e.at("shape").get<std::vector<int64_t>>();
    s.split_dim = (int)integer("split_dim", -1, -1, 64);
    s.tp = (int)integer("tp_size", 1, 1, INT32_MAX);
    s.rank = (int)integer("tp_rank", 0, 0, INT32_MAX);
    s.ep = (int)integer("ep_size", 1, 1, INT32_MAX);
    s.ep_rank = (int)integer("ep_rank", 0, 0, INT32_MAX);
    if (s.split_dim >= 0 && s.tp > 1) {
      if (s.split_dim >= (int)s.full.size()) throw RunError("split_dim outside the shape");
      s.blocks = e.value("blocks", std::vector<int64_t>{s.full[s.split_dim]});
    } else {
      s.split_dim = -1;
    }
  } catch (const nlohmann::json::exception& ex) {
    throw RunError(where + ": malformed shard metadata: " + ex.what());
  }
  // The full tensor must be one that can be allocated: sizes >= 0, 8-byte elements counted
  // in an int64 without overflow.
  int64_t elements = 1;
  for (int64_t d : s.full) {
    if (d < 0 || (d > 0 && elements > (INT64_MAX / 8) / d))
      throw RunError(where + ": the shard metadata's full shape " + shape_str(s.full) +
                     " is negative or too large");
    elements *= d;
  }
  int64_t sum = 0;
  for (int64_t b : s.blocks) {
    if (b < 0 || b > s.full[s.split_dim] - sum)
      throw RunError(where + ": the shard metadata's blocks do not add up to the full extent");
    if (b % s.tp != 0) throw RunError(where + ": a block of the shard metadata does not divide");
    sum += b;
  }
  if (s.split_dim >= 0 && sum != s.full[s.split_dim])
    throw RunError(where + ": the shard metadata's blocks do not add up to the full extent");
  if (s.rank < 0 || s.rank >= s.tp) throw RunError(where + ": shard rank outside the group");
  if (s.ep < 1 || s.ep_rank < 0 || s.ep_rank >= s.ep || s.full.empty() || s.full[0] % s.ep != 0)
    throw RunError(where + ": the expert-parallel shard metadata (ep_rank " +
                   std::to_string(s.ep_rank) + " of ep_size " + std::to_string(s.ep) +
                   ") does not cut dimension 0 evenly");
  return s;
}

std::string checkpoint_file(const std::string& kind, const loom_parallel_layout& l,
                            bool per_data_rank) {
  std::string f = kind;
  if (l.tensor * l.pipeline > 1) {
    char tag[64];
    std::snprintf(tag, sizeof tag, "-tp%02d-pp%03d", l.tensor_rank, l.pipeline_rank);
    f += tag;
  }
  if (per_data_rank) {  // the rank in data x context: every one holds its own shard
    f += "-dp" + std::to_string(l.data_rank * l.context + l.context_rank);
  } else if (l.expert > 1) {
    char tag[16];
    std::snprintf(tag, sizeof tag, "-ep%02d", l.expert_rank);
    f += tag;
  }
  return f + ".safetensors";
}

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
  if (p.reduce_group == LOOM_GROUP_EXPERT_DATA && l.expert > 1) {
    shape[0] *= l.expert;
    e["ep_rank"] = l.expert_rank;
    e["ep_size"] = l.expert;
  }
  e["shape"] = shape;
  return e;
}

std::vector<int64_t> ShardSpec::local_shape() const {
  std::vector<int64_t> l = full;
  if (!l.empty()) l[0] /= ep;
  if (split_dim >= 0) l[split_dim] /= tp;
  return l;
}

ShardSpec ShardSpec::slab() const {
  ShardSpec s = *this;
  if (!s.full.empty()) s.full[0] /= ep;
  if (s.split_dim == 0)
    for (int64_t& b : s.blocks) b /= ep;
  s.ep = 1;
  s.ep_rank = 0;
  return s;
}

namespace {
// The full tensor a shard goes into: allocated (zeros) by the first shard, which the others
// must agree with.
void prepare_full(const ShardSpec& spec, const StTensor& local, StTensor& full,
                  const std::string& what) {
  if (full.data.empty()) {
    full.dtype = local.dtype;
    full.shape = spec.full;
    full.data.assign((size_t)numel(spec.full) * dtype_size(local.dtype), 0);
  } else if (full.shape != spec.full || full.dtype != local.dtype) {
    throw RunError(what + ": shards disagree on the full tensor (" + full.dtype +
                   shape_str(full.shape) + " and " + local.dtype + shape_str(spec.full) + ")");
  }
}
}  // namespace

void put_shard(const ShardSpec& spec, const StTensor& local, StTensor& full,
               const std::string& what) {
  if (spec.ep > 1) {  // into this expert rank's slab of dimension 0, itself tensor-parallel
    prepare_full(spec, local, full, what);
    const ShardSpec sub = spec.slab();
    const size_t bytes = (size_t)numel(sub.full) * dtype_size(local.dtype);
    uint8_t* at = full.data.data() + (size_t)spec.ep_rank * bytes;
    StTensor slab{local.dtype, sub.full, std::vector<uint8_t>(at, at + bytes)};
    put_shard(sub, local, slab, what);
    std::memcpy(at, slab.data.data(), bytes);
    return;
  }
  if (local.shape != spec.local_shape())
    throw RunError(what + ": shape " + shape_str(local.shape) +
                   " is not the shard its metadata describes " + shape_str(spec.local_shape()));
  prepare_full(spec, local, full, what);
  if (spec.split_dim < 0) {
    full.data = local.data;
    return;
  }
  const size_t es = dtype_size(local.dtype);
  for_each_run(spec, [&](int64_t g, int64_t l, int64_t n) {
    std::memcpy(full.data.data() + g * es, local.data.data() + l * es, (size_t)n * es);
  });
}

StTensor take_shard(const ShardSpec& spec, const StTensor& full, int64_t vocab,
                    const std::string& what) {
  const StTensor* src = &full;
  StTensor fitted;
  if (full.shape != spec.full) {
    const bool padding_only =
        full.shape.size() == spec.full.size() && !full.shape.empty() &&
        std::equal(full.shape.begin() + 1, full.shape.end(), spec.full.begin() + 1) && vocab > 0 &&
        std::min(full.shape[0], spec.full[0]) >= vocab;
    if (!padding_only)
      throw RunError(what + ": the checkpoint holds " + shape_str(full.shape) + ", the model has " +
                     shape_str(spec.full) + " (another model configuration?)");
    fitted = fit_rows(full, spec.full[0]);
    src = &fitted;
  }
  if (spec.ep > 1) {  // this expert rank's slab of dimension 0, then its tensor-parallel shard
    const ShardSpec sub = spec.slab();
    const size_t bytes = (size_t)numel(sub.full) * dtype_size(src->dtype);
    const uint8_t* at = src->data.data() + (size_t)spec.ep_rank * bytes;
    return take_shard(sub, StTensor{src->dtype, sub.full, std::vector<uint8_t>(at, at + bytes)}, 0,
                      what);
  }
  StTensor local{src->dtype, spec.local_shape(), {}};
  if (spec.split_dim < 0) {
    local.data = src->data;
    return local;
  }
  const size_t es = dtype_size(src->dtype);
  local.data.resize((size_t)numel(local.shape) * es);
  for_each_run(spec, [&](int64_t g, int64_t l, int64_t n) {
    std::memcpy(local.data.data() + l * es, src->data.data() + g * es, (size_t)n * es);
  });
  return local;
}

namespace {

// A rank file's "loom.shards" metadata (an object of entries by tensor name), or {}.
nlohmann::json shard_meta(const std::map<std::string, std::string>& meta, const fs::path& file) {
  auto it = meta.find("loom.shards");
  if (it == meta.end()) return nlohmann::json::object();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    throw RunError(file.string() + ": corrupt loom.shards metadata: " + e.what());
  }
  if (!j.is_object())
    throw RunError(file.string() + ": corrupt loom.shards metadata: not a JSON object");
  return j;
}

// "optimizer-tp01-pp000-dp1.safetensors" -> "-tp01-pp000": the model-parallel rank's tag,
// which its model file shares ("model-tp01-pp000.safetensors"); the expert rank's
// ("-ep01") goes too, since expert parameters say their slab themselves.
std::string rank_tag(const std::string& file, const std::string& kind) {
  std::string stem = fs::path(file).stem().string().substr(kind.size());
  if (auto dp = stem.rfind("-dp"); dp != std::string::npos) stem.resize(dp);
  if (auto ep = stem.rfind("-ep"); ep != std::string::npos) stem.resize(ep);
  return stem;
}

std::vector<std::string> files_of(const fs::path& folder, const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string f = entry.path().filename().string();
    if (f.rfind(kind, 0) != 0 || entry.path().extension() != ".safetensors") continue;
    entry_in_folder(folder, f, folder);  // a link out of the folder is refused, as in a manifest
    out.push_back(f);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string param_of(const std::string& state) {
  const size_t dot = state.find('.');
  return dot == std::string::npos ? state : state.substr(dot + 1);
}

std::map<std::string, std::string> model_metadata(const fs::path& folder) {
  const std::vector<std::string> files = files_of(folder, "model");
  return files.empty() ? std::map<std::string, std::string>{}
                       : read_safetensors_metadata(folder / files.front());
}

namespace {

ShardSpec whole(const StTensor& t) { return ShardSpec{t.shape, -1, {}, 1, 0, 1, 0}; }

// Member `key` of a shard metadata entry, or a RunError naming the tensor.
const nlohmann::json& json_at(const nlohmann::json& e, const char* key, const std::string& what) {
  if (!e.is_object() || !e.contains(key))
    throw RunError(what + ": malformed shard metadata: no \"" + key + "\"");
  return e.at(key);
}

void merge_model_files(const fs::path& folder, FullCheckpoint& out,
                       std::map<std::string, nlohmann::json>& specs_by_tag,
                       const ParamFilter& want) {
  for (const std::string& f : files_of(folder, "model")) {
    std::map<std::string, std::string> meta;
    StFile part = read_safetensors(folder / f, &meta, want);
    const nlohmann::json shards = shard_meta(meta, folder / f);
    specs_by_tag[rank_tag(f, "model")] = shards;
    for (auto& [name, t] : part) {
      const std::string what = (folder / f).string() + ": " + name;
      put_shard(shards.contains(name) ? ShardSpec::parse(shards.at(name), what) : whole(t), t,
                out.model[name], what);
    }
  }
  if (out.model.empty() && !want) throw RunError(folder.string() + ": no model tensors");
}

// Optimizer files hold tensors "<kind>.<parameter>": whole or tensor-parallel shards of
// the parameter, or (distributed optimizer) one data-parallel rank's flat slice of the
// flattened tensor-parallel shard, at "flat_offset".
void merge_optimizer_files(const fs::path& folder, FullCheckpoint& out,
                           const std::map<std::string, nlohmann::json>& model_specs,
                           const ParamFilter& want) {
  struct Flat {
    ShardSpec spec;
    StTensor local;
    StFile* dst;
    std::string what;
  };
  std::map<std::string, Flat> flats;  // by rank tag and tensor name
  for (const std::string& f : files_of(folder, "optimizer")) {
    std::map<std::string, std::string> meta;
    StFile part = read_safetensors(
        folder / f, &meta, [&](const std::string& name) { return !want || want(param_of(name)); });
    const nlohmann::json shards = shard_meta(meta, folder / f);
    const std::string tag = rank_tag(f, "optimizer");
    const auto model_it = model_specs.find(tag);
    for (auto& [name, t] : part) {
      const std::string what = (folder / f).string() + ": " + name;
      const std::string pname = param_of(name);
      StFile* dst = name.rfind("main.", 0) == 0 ? &out.main : &out.optimizer;
      const std::string full_name = dst == &out.main ? pname : name;
      const nlohmann::json* e = shards.contains(pname) ? &shards.at(pname) : nullptr;
      if (e && e->contains("flat_offset")) {
        // an expert parameter's flat slices put together per expert rank
        const nlohmann::json& param = json_at(*e, "param", what);
        const ShardSpec spec = ShardSpec::parse(param, what);
        Flat& fl = flats[tag + '/' + std::to_string(spec.ep_rank) + '\n' + full_name];
        if (fl.local.data.empty()) {
          fl.spec = spec;
          fl.local = {t.dtype, fl.spec.local_shape(), {}};
          fl.local.data.assign((size_t)numel(fl.local.shape) * dtype_size(t.dtype), 0);
          fl.dst = dst;
          fl.what = what;
        }
        const nlohmann::json& offset = json_at(*e, "flat_offset", what);
        if (!offset.is_number_integer())
          throw RunError(what + ": malformed shard metadata: flat_offset is not an integer");
        const int64_t off = offset.get<int64_t>(), n = numel(t.shape);
        const size_t es = dtype_size(t.dtype);
        if (t.dtype != fl.local.dtype || off < 0 || n > numel(fl.local.shape) - off)
          throw RunError(what + ": flat shard outside its parameter");
        std::memcpy(fl.local.data.data() + off * es, t.data.data(), (size_t)n * es);
        continue;
      }
      const nlohmann::json* m = model_it != model_specs.end() && model_it->second.contains(pname)
                                    ? &model_it->second.at(pname)
                                    : nullptr;
      const nlohmann::json* spec = e ? &json_at(*e, "param", what) : m;
      // A pipeline duplicate (the tied embedding's copy on the last stage) has no model
      // entry in older checkpoints; its first stage's state is the same tensor.
      if (!spec && dst->count(full_name)) continue;
      put_shard(spec ? ShardSpec::parse(*spec, what) : whole(t), t, (*dst)[full_name], what);
    }
  }
  for (auto& [key, fl] : flats) {
    const std::string full_name = key.substr(key.find('\n') + 1);
    put_shard(fl.spec, fl.local, (*fl.dst)[full_name], fl.what);
  }
}

}  // namespace

std::string peft_base_of(const fs::path& folder) {
  const auto meta = model_metadata(folder);
  auto it = meta.find("loom.peft_base");
  return it == meta.end() ? "" : it->second;
}

void add_peft_base(const fs::path& folder, StFile& model, const ParamFilter& want) {
  const std::string base = peft_base_of(folder);
  if (base.empty()) return;
  fs::path verified;
  try {
    verified = load_checkpoint(base, "", "").folder;
  } catch (const std::exception& e) {
    throw RunError(folder.string() + " holds LoRA adapters alone; their frozen base " + base +
                   " (loom.peft_base) cannot be read: " + e.what() +
                   ". Restore the base there: the adapters need it");
  }
  FullCheckpoint b = merge_checkpoint(
      verified, false, [&](const std::string& n) { return !model.count(n) && (!want || want(n)); });
  for (auto& [name, t] : b.model)
    if (!model.count(name)) model[name] = std::move(t);
}

FullCheckpoint merge_checkpoint(const fs::path& folder, bool with_optimizer,
                                const ParamFilter& want) {
  FullCheckpoint out;
  std::map<std::string, nlohmann::json> specs_by_tag;
  merge_model_files(folder, out, specs_by_tag, want);
  add_peft_base(folder, out.model, want);
  out.main = out.model;
  if (with_optimizer) merge_optimizer_files(folder, out, specs_by_tag, want);
  return out;
}

}  // namespace loom::engine
