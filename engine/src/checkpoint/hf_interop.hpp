// Hugging Face interop: `loom import-hf` and `loom export-hf`, and pretrained weights for
// `checkpoint.finetune`. A Hugging Face model directory (config.json, model.safetensors or
// shards with model.safetensors.index.json, tokenizer files) of GPT2LMHeadModel or
// LlamaForCausalLM maps exactly onto model/gpt; anything that does not map (a key, a shape,
// a config value) is refused by name, never dropped. docs/interop.md has the tables.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_shards.hpp"
#include "checkpoint/hf_peft.hpp"
#include "checkpoint/safetensors.hpp"

namespace loom::engine {

class Recipe;
class Registry;

// One Loom tensor made of Hugging Face tensors: concatenated along dimension 0 (q|k|v,
// gate;up), each stored transposed when `transpose` (GPT-2's Conv1D keeps (in, out)).
struct HfRule {
  std::string loom;
  std::vector<std::string> hf;
  std::vector<std::vector<int64_t>> shapes;  // as stored in the HF file
  bool transpose = false;
  bool vocab = false;  // rows are the vocabulary: padded in Loom, exact in HF
  // Loom's shape when it is not the pieces stacked along dimension 0 (a mixture of experts'
  // (E, 2F, C) from E x (w1, w3)); empty: as stacked.
  std::vector<int64_t> loom_shape = {};
  // Loom's row i is the stacked HF rows' row rows[i] (a permutation; empty: the same order):
  // DeepSeek's interleaved rotary pairs as Loom's rotate-half halves.
  std::vector<int64_t> rows = {};
  // Stored in float32 whatever the other tensors' dtype (DeepSeek's router bias).
  bool f32 = false;
};

// An architecture's mapping for one config.
struct HfArch {
  std::string name;                               // "gpt2" | "llama"
  std::map<std::string, std::string> model_keys;  // Loom [model] keys as TOML literals
  std::vector<HfRule> rules;
  std::vector<std::string> ignored_suffixes;  // non-parameter buffers HF may store
  std::string tied_head;                      // HF key of a tied head, "" when untied
  int64_t vocab = 0;
  std::string unmapped;  // a part of the HF model not mapped, said when its tensors are found
  // HF tensors that repeat another (copy, original): written on export; on import optional,
  // and refused when they differ (DeepSeek-V3's MTP module stores the embedding and head again).
  std::vector<std::pair<std::string, std::string>> copies = {};
};

// Refuses (UsageError) a config.json whose sizes (layers, width, vocabulary, experts, ...)
// are not positive integers or disagree with the tensors' shapes (`shapes`: dtype and shape
// of every tensor of the directory, no data), naming the key, its value and the tensor;
// run before the mapping is built, so that a huge size allocates nothing.
void check_hf_sizes(const nlohmann::json& config, const StFile& shapes, const std::string& where);
// The mapping for a config.json; refuses a config value that does not map, naming it.
// `shapes` tells what the files hold where a part of the model is optional (DeepSeek-V3's
// multi-token prediction module is mapped when its tensors are there).
HfArch hf_arch_from_config(const nlohmann::json& config, const StFile& shapes,
                           const std::string& where);
// The mapping and config.json for a Loom [model] section (resolved values, TOML literals)
// and its real vocabulary; `base` (a config this model was imported from, or null) keeps
// keys Loom does not own (token ids, ...).
std::pair<HfArch, nlohmann::json> hf_arch_from_model(std::map<std::string, std::string> model_keys,
                                                     int64_t vocab, const nlohmann::json& base,
                                                     const std::string& torch_dtype);
// [model] keys (TOML literals) with the derived defaults made explicit: n_kv_head 0 = n_head,
// ffn_hidden 0 = 4 x n_embd (gelu) or 8 x n_embd / 3 rounded up to 256 (swiglu), as
// model/gpt's options define them.
void resolve_model_defaults(std::map<std::string, std::string>& model_keys);

// A Hugging Face directory read into full Loom tensors (f32, vocabulary rows unpadded).
struct HfModel {
  HfArch arch;
  nlohmann::json config;
  StFile tensors;
  std::string dtype;  // of the HF tensors: "F32" | "BF16" | "F16"
};
bool is_hf_dir(const std::filesystem::path& dir);
// The "loom.hf_config" and "loom.hf_dtype" metadata of a checkpoint folder's model file (or
// of an HF directory's model): what it was imported from, carried by every later save so
// that export-hf writes the same config keys (token ids, ...) and dtype.
std::map<std::string, std::string> hf_origin(const std::filesystem::path& folder);
HfModel read_hf(const std::filesystem::path& dir);

// The Loom checkpoint a command reads for `path`: a checkpoint (or its parent with
// `latest`) as it is, or a Hugging Face directory imported into a scratch checkpoint that is
// removed with this object. dir() is empty when `path` holds neither.
class CheckpointSource {
 public:
  explicit CheckpointSource(const std::filesystem::path& path);
  ~CheckpointSource();
  CheckpointSource(const CheckpointSource&) = delete;
  CheckpointSource& operator=(const CheckpointSource&) = delete;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_, scratch_;
};

// Tensor helpers of the mapping (export-hf's and export-peft's): an f32 copy of a float
// tensor; a row permutation (out row i = t's row from[i], or the inverse); an f32 tensor in
// "F32", "BF16" or "F16".
StTensor to_f32(const StTensor& t, const std::string& what);
StTensor permute_rows(const StTensor& t, const std::vector<int64_t>& from, bool inverse);
StTensor from_f32(const StTensor& t, const std::string& dtype);

// `loom import-hf HF_DIR OUT`: a Loom checkpoint (iteration 0, no optimizer state) whose
// recipe.toml holds the model keys and a tokenizer from the directory's files. `out` follows
// `loom run`'s save-folder rule (check_checkpoint_output): checkpoints already there are
// written over only with `overwrite`.
void import_hf(const std::filesystem::path& hf_dir, const std::filesystem::path& out,
               bool overwrite);
// `loom export-hf CHECKPOINT OUT_DIR`: config.json, safetensors (one file, or shards of at
// most `max_shard_bytes` with an index) in `dtype` ("" = as imported, else float32), and
// the tokenizer files. A non-empty `out` is refused unless `overwrite`, and then replaced
// whole: the export is written into a sibling folder and swapped in, so no stale shard or
// index of an older export survives, and a failure leaves the old export as it was. A
// checkpoint with LoRA adapters is refused unless `merge_lora`, which merges them into the
// weights they adapt (W + alpha/rank B A).
void export_hf(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
               Registry& registry, const std::string& dtype, uint64_t max_shard_bytes,
               bool overwrite, bool merge_lora = false);

// What an export reads from a checkpoint: its full tensors (LoRA merged when `merge`), its
// recipe's model keys and the HF mapping and config.json they give (export-hf, export-peft).
struct ExportSource {
  std::filesystem::path folder;
  FullCheckpoint full;
  std::unique_ptr<Recipe> recipe;
  std::map<std::string, std::string> keys;  // [model], TOML literals
  LoraSettings lora;
  std::string dtype;  // the export's: "F32" | "BF16" | "F16"
  int64_t vocab = 0;  // the real vocabulary (Loom pads its rows)
  HfArch arch;
  nlohmann::json config;
};
// `out` of an export from `checkpoint`: refused when it holds the checkpoint, and unless
// `overwrite` when it exists and is not an empty folder (export-hf's, export-peft's rule).
void check_export_output(const std::string& command, const std::filesystem::path& out,
                         const std::filesystem::path& checkpoint, bool overwrite);
ExportSource load_export_source(const std::filesystem::path& checkpoint, Registry& registry,
                                const std::string& dtype, bool merge);

}  // namespace loom::engine
