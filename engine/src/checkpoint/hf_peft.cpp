// LoRA adapters of a checkpoint: merged for `loom export-hf --merge-lora`, or exported in HF
// PEFT's layout by `loom export-peft` (hf_peft.hpp).
#include "checkpoint/hf_peft.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "base/errors.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/hf_interop.hpp"
#include "recipe/recipe.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

using nlohmann::json;

const std::string kA = ".lora_A.weight", kB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Rows [row0, row0 + rows) of an f32 matrix.
StTensor rows_of(const StTensor& t, int64_t row0, int64_t rows) {
  const size_t row = t.data.size() / (size_t)t.shape[0];
  return {"F32",
          {rows, t.shape[1]},
          {t.data.begin() + (std::ptrdiff_t)(row0 * row),
           t.data.begin() + (std::ptrdiff_t)((row0 + rows) * row)}};
}

}  // namespace

LoraSettings lora_of(const std::map<std::string, std::string>& keys) {
  LoraSettings s;
  auto it = keys.find("peft");
  if (it == keys.end() || it->second != "\"lora\"") return s;
  s.rank = std::stoll(keys.at("peft_rank"));
  s.alpha = std::stod(keys.at("peft_alpha"));
  return s;
}

void merge_lora(StFile& model, double scale) {
  std::vector<std::string> adapted;
  for (const auto& [name, t] : model)
    if (ends_with(name, kA)) adapted.push_back(name.substr(0, name.size() - kA.size()));
  for (const std::string& p : adapted) {
    auto w = model.find(p + ".weight"), b = model.find(p + kB);
    if (w == model.end() || b == model.end())
      throw RunError("merging LoRA: " + p + kA + " has no " +
                     (w == model.end() ? p + ".weight" : p + kB) + " beside it");
    const StTensor A = to_f32(model.at(p + kA), p + kA), B = to_f32(b->second, p + kB);
    StTensor W = to_f32(w->second, p + ".weight");
    const int64_t out = W.shape[0], in = W.shape[1], r = A.shape[0];
    if (A.shape[1] != in || B.shape[0] != out || B.shape[1] != r)
      throw RunError("merging LoRA: " + p + " has W " + shape_str(W.shape) + ", A " +
                     shape_str(A.shape) + ", B " + shape_str(B.shape));
    const float* a = reinterpret_cast<const float*>(A.data.data());
    const float* bv = reinterpret_cast<const float*>(B.data.data());
    float* wv = reinterpret_cast<float*>(W.data.data());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0.0;
        for (int64_t k = 0; k < r; ++k) sum += (double)bv[o * r + k] * (double)a[k * in + i];
        wv[o * in + i] = (float)((double)wv[o * in + i] + scale * sum);
      }
    w->second = std::move(W);
    model.erase(p + kA);
    model.erase(b);
  }
}

void export_peft(const fs::path& checkpoint, const fs::path& out, Registry& registry,
                 bool overwrite) {
  check_export_output("loom export-peft", out, checkpoint, overwrite);
  const ExportSource src = load_export_source(checkpoint, registry, "", false);
  if (src.lora.rank <= 0)
    throw UsageError("export-peft: " + src.folder.string() +
                     " has no LoRA adapters (its recipe's model.peft is not \"lora\")");
  StFile adapters;
  std::set<std::string> modules;
  bool fan_in_fan_out = false;
  size_t used = 0;
  for (const HfRule& r : src.arch.rules) {
    if (!ends_with(r.loom, ".weight")) continue;
    const std::string p = r.loom.substr(0, r.loom.size() - 7);
    auto a = src.full.model.find(p + kA), b = src.full.model.find(p + kB);
    if (a == src.full.model.end() || b == src.full.model.end()) continue;
    const StTensor A = to_f32(a->second, p + kA);
    // B's rows are the weight's: the same order and the same cuts into HF modules
    const StTensor B = permute_rows(to_f32(b->second, p + kB), r.rows, true);
    int64_t row0 = 0;
    for (size_t i = 0; i < r.hf.size(); ++i) {
      const int64_t rows = r.transpose ? r.shapes[i][1] : r.shapes[i][0];
      if (!ends_with(r.hf[i], ".weight") || row0 + rows > B.shape[0])
        throw RunError("export-peft: " + p + kB + " " + shape_str(B.shape) + " does not cut into " +
                       r.hf[i]);
      const std::string module = r.hf[i].substr(0, r.hf[i].size() - 7);
      adapters["base_model.model." + module + kA] = A;
      adapters["base_model.model." + module + kB] = rows_of(B, row0, rows);
      modules.insert(module);
      row0 += rows;
    }
    fan_in_fan_out = fan_in_fan_out || r.transpose;  // GPT-2's Conv1D keeps (in, out)
    used += 2;
  }
  // PEFT matches target_modules as name suffixes: a leaf name that a module without an
  // adapter shares (GPT-2's attn.c_proj and mlp.c_proj) is named with its parent.
  std::set<std::string> targets;
  for (const std::string& m : modules) {
    const std::string leaf = m.substr(m.rfind('.') + 1);
    bool shared = false;
    for (const HfRule& r : src.arch.rules)
      for (const std::string& h : r.hf) {
        const std::string other = h.substr(0, h.size() - 7);
        shared = shared || (ends_with(h, ".weight") && !modules.count(other) &&
                            other.substr(other.rfind('.') + 1) == leaf);
      }
    const size_t dot = m.rfind('.', m.rfind('.') - 1);
    targets.insert(shared ? m.substr(dot + 1) : leaf);
  }
  size_t in_checkpoint = 0;
  for (const auto& [name, t] : src.full.model)
    in_checkpoint += ends_with(name, kA) || ends_with(name, kB);
  if (used != in_checkpoint)
    throw RunError("export-peft: " + std::to_string(in_checkpoint - used) + " of " +
                   src.folder.string() + "'s adapters sit on weights with no HF module");
  // PEFT's LoraConfig as save_pretrained writes it (peft 0.1x), for the base export-hf writes
  const double alpha = src.lora.alpha;
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"base_model_name_or_path", src.config.value("_name_or_path", "")},
                 {"r", src.lora.rank},
                 {"lora_alpha", alpha == std::floor(alpha) ? json((int64_t)alpha) : json(alpha)},
                 {"lora_dropout", 0.0},
                 {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                 {"bias", "none"},
                 {"fan_in_fan_out", fan_in_fan_out},
                 {"inference_mode", true},
                 {"init_lora_weights", true},
                 {"modules_to_save", nullptr},
                 {"layers_to_transform", nullptr},
                 {"layers_pattern", nullptr},
                 {"rank_pattern", json::object()},
                 {"alpha_pattern", json::object()},
                 {"use_rslora", false},
                 {"use_dora", false},
                 {"revision", nullptr}};
  write_folder_atomically(out, [&](const fs::path& dir) {
    std::ofstream f(dir / "adapter_config.json");
    f << config.dump(2) << "\n";
    f.close();
    if (!f) throw RunError("export-peft: cannot write " + (dir / "adapter_config.json").string());
    write_safetensors(dir / "adapter_model.safetensors", adapters, {{"format", "pt"}});
  });
  std::printf("exported %zu LoRA adapters (rank %lld, alpha %g, %zu PEFT tensors on %s) to %s\n",
              used / 2, (long long)src.lora.rank, alpha, adapters.size(),
              src.config["architectures"][0].get<std::string>().c_str(), out.string().c_str());
}

}  // namespace loom::engine
