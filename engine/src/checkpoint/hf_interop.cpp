// Hugging Face interop, the files: reading and writing HF model directories, and
// `loom import-hf` / `loom export-hf` (hf_interop.hpp; the mapping is hf_map.cpp).
#include "checkpoint/hf_interop.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "data/chat_format.hpp"
#include "loom/cpp/fp8_args.hpp"
#include "loom/cpp/half.hpp"
#include "recipe/recipe.hpp"
#include "session/host.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

using nlohmann::json;

// Tokenizer files a model directory may carry; import and export copy them as they are.
const char* const kTokenizerFiles[] = {"tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "vocab.json",
                                       "merges.txt",
                                       "tokenizer.model",
                                       "added_tokens.json",
                                       "vocab.txt",
                                       "generation_config.json"};

// Python's json writes float('inf') and nan as the bare words Infinity, -Infinity and NaN,
// which JSON has not (transformers' Mamba2Config saves time_step_limit = [0.0, Infinity]):
// outside strings they become the strings "Infinity", "-Infinity" and "NaN".
std::string python_json(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) out += text[++i];
      if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    bool word = false;
    for (const char* w : {"-Infinity", "Infinity", "NaN"})
      if (text.compare(i, std::strlen(w), w) == 0) {
        out.append("\"").append(w).append("\"");
        i += std::strlen(w) - 1;
        word = true;
        break;
      }
    if (!word) out += ch;
  }
  return out;
}

json read_json(const fs::path& p) {
  require_regular_file(p.string());
  std::ifstream in(p);
  if (!in) throw RunError("cannot read " + p.string());
  try {
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return json::parse(python_json(text));
  } catch (const json::exception& e) {
    throw RunError(p.string() + ": not JSON: " + e.what());
  }
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw RunError("cannot write " + p.string());
}

const char* torch_dtype_of(const std::string& st) {
  return st == "BF16" ? "bfloat16" : st == "F16" ? "float16" : "float32";
}
std::string st_dtype_of(const std::string& torch) {
  if (torch == "bfloat16" || torch == "bf16") return "BF16";
  if (torch == "float16" || torch == "fp16") return "F16";
  if (torch == "float32" || torch == "fp32") return "F32";
  throw UsageError("--dtype " + torch + ": choose float32, bfloat16 or float16");
}

}  // namespace

// f32 copy of a float tensor (bf16 and f16 widen exactly; f64 rounds).
StTensor to_f32(const StTensor& t, const std::string& what) {
  const size_t n = t.data.size() / std::max<size_t>(dtype_size(t.dtype), 1);
  StTensor out{"F32", t.shape, std::vector<uint8_t>(n * 4)};
  float* o = reinterpret_cast<float*>(out.data.data());
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data.data() + i * dtype_size(t.dtype);
    uint16_t h;
    double d;
    if (t.dtype == "F32") {
      std::memcpy(&o[i], p, 4);
    } else if (t.dtype == "F64") {
      std::memcpy(&d, p, 8);
      o[i] = (float)d;
    } else if (t.dtype == "BF16" || t.dtype == "F16") {
      std::memcpy(&h, p, 2);
      o[i] = t.dtype == "BF16" ? loom::bf16_to_f32(h) : loom::f16_to_f32(h);
    } else {
      throw RunError(what + ": dtype " + t.dtype + " is not a float type Loom reads");
    }
  }
  return out;
}

// An f32 tensor in `dtype` (round to nearest even).
StTensor from_f32(const StTensor& t, const std::string& dtype) {
  if (dtype == "F32") return t;
  const float* v = reinterpret_cast<const float*>(t.data.data());
  const size_t n = t.data.size() / 4;
  StTensor out{dtype, t.shape, std::vector<uint8_t>(n * 2)};
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = dtype == "BF16" ? loom::f32_to_bf16(v[i]) : loom::f32_to_f16(v[i]);
    std::memcpy(out.data.data() + 2 * i, &h, 2);
  }
  return out;
}

// out row i = t's row from[i] (inverse: t's row from[i] = out row i), rows of equal size.
StTensor permute_rows(const StTensor& t, const std::vector<int64_t>& from, bool inverse) {
  if (from.empty()) return t;
  const size_t row = t.data.size() / from.size();
  StTensor out{t.dtype, t.shape, std::vector<uint8_t>(t.data.size())};
  for (size_t i = 0; i < from.size(); ++i) {
    const size_t src = inverse ? i : (size_t)from[i], dst = inverse ? (size_t)from[i] : i;
    std::memcpy(out.data.data() + dst * row, t.data.data() + src * row, row);
  }
  return out;
}

namespace {

StTensor transpose(const StTensor& t) {
  const int64_t r = t.shape[0], c = t.shape[1];
  const size_t es = dtype_size(t.dtype);
  StTensor out{t.dtype, {c, r}, std::vector<uint8_t>(t.data.size())};
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      std::memcpy(out.data.data() + (j * r + i) * es, t.data.data() + (i * c + j) * es, es);
  return out;
}

// The safetensors files of the directory and the keys each holds: model.safetensors (any
// keys), or the shards its index names (each key in the file the index says; every name a
// plain file of the directory).
std::map<fs::path, std::set<std::string>> hf_files(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(dir / "model.safetensors"))
      throw RunError(dir.string() +
                     ": neither model.safetensors nor model.safetensors.index.json "
                     "(pytorch_model.bin is not read: save the model with safe_serialization)");
    return {{entry_in_folder(dir, "model.safetensors", dir), {}}};
  }
  const json map = read_json(index).value("weight_map", json::object());
  std::map<fs::path, std::set<std::string>> by_file;
  for (auto& [k, f] : map.items()) {
    if (!f.is_string())
      throw UsageError(index.string() + ": weight_map[\"" + k + "\"] is " + f.dump() +
                       ", not a file name");
    by_file[entry_in_folder(dir, f.get<std::string>(), index)].insert(k);
  }
  return by_file;
}

// Every tensor of the files hf_files lists, checked against the index.
StFile read_hf_tensors(const std::map<fs::path, std::set<std::string>>& files) {
  StFile out;
  for (auto& [f, keys] : files) {
    StFile part = read_safetensors(f);
    for (auto& [k, t] : part) {
      if (!keys.empty() && !keys.count(k))
        throw RunError(f.string() + ": tensor " + k + " is not in the directory's index");
      out[k] = std::move(t);
    }
    for (const std::string& k : keys)
      if (!out.count(k))
        throw RunError("the index puts " + k + " in " + f.string() + ", which lacks it");
  }
  return out;
}

// config.json, the tensors (one file, or shards of at most max_shard_bytes in rule order,
// as save_pretrained does) and the tokenizer files (source -> name) into `dir`; the number
// of safetensors files.
size_t write_hf_folder(const fs::path& dir, const json& config, const HfArch& arch, StFile& hf,
                       uint64_t max_shard_bytes,
                       const std::vector<std::pair<fs::path, std::string>>& tokenizer_files) {
  write_text(dir / "config.json", config.dump(2) + "\n");
  std::vector<StFile> shards(1);
  uint64_t size = 0, total = 0;
  auto put = [&](const std::string& k) {
    const uint64_t b = hf[k].data.size();
    if (size > 0 && size + b > max_shard_bytes) shards.emplace_back(), size = 0;
    shards.back()[k] = std::move(hf[k]);
    size += b, total += b;
  };
  for (const HfRule& r : arch.rules)
    for (const std::string& k : r.hf) put(k);
  for (const auto& [copy, of] : arch.copies) put(copy);
  const std::map<std::string, std::string> st_meta = {{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors(dir / "model.safetensors", shards[0], st_meta);
  } else {
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      write_safetensors(dir / name, shards[i], st_meta);
      for (auto& [k, t] : shards[i]) index["weight_map"][k] = name;
    }
    write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  // The tokenizer's files: an hf-json tokenizer's folder, or gpt2-bpe's vocab and merges.
  for (const auto& [from, to] : tokenizer_files)
    fs::copy_file(from, dir / to, fs::copy_options::overwrite_existing);
  return shards.size();
}

}  // namespace

bool is_hf_dir(const fs::path& dir) {
  return fs::exists(dir / "config.json") && !fs::exists(dir / "manifest.json") &&
         !fs::exists(dir / "latest_checkpointed_iteration.txt");
}

std::map<std::string, std::string> hf_origin(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : model_metadata(folder))
    if (k.rfind("loom.hf_", 0) == 0) out[k] = v;
  return out;
}

HfModel read_hf(const fs::path& dir) {
  HfModel m;
  if (!fs::exists(dir / "config.json"))
    throw RunError(dir.string() + ": not a Hugging Face model directory (no config.json)");
  m.config = read_json(entry_in_folder(dir, "config.json", dir));
  // The sizes against the tensors' shapes first: the mapping grows with them.
  const std::map<fs::path, std::set<std::string>> files = hf_files(dir);
  StFile shapes;
  for (auto& [f, keys] : files) shapes.merge(read_safetensors_shapes(f));
  check_hf_sizes(m.config, shapes, (dir / "config.json").string());
  m.arch = hf_arch_from_config(m.config, shapes, (dir / "config.json").string());
  StFile raw = read_hf_tensors(files);
  if (m.arch.name == "gpt2") {  // GPT2Model's names lack GPT2LMHeadModel's "transformer."
    StFile named;
    for (auto& [k, t] : raw)
      named[k.rfind("transformer.", 0) == 0 || k == "lm_head.weight" ? k : "transformer." + k] =
          std::move(t);
    raw = std::move(named);
  }
  std::set<std::string> used;
  const std::string where = dir.string() + ": tensor ";
  for (const HfRule& r : m.arch.rules) {
    StTensor loom_t{"F32", {0}, {}};
    for (size_t i = 0; i < r.hf.size(); ++i) {
      auto it = raw.find(r.hf[i]);
      if (it == raw.end())
        throw RunError(dir.string() + ": no tensor " + r.hf[i] + " (config.json implies it)");
      const StTensor& t = it->second;
      if (t.shape != r.shapes[i])
        throw RunError(where + r.hf[i] + " has shape " + shape_str(t.shape) +
                       ", config.json implies " + shape_str(r.shapes[i]));
      if (m.dtype.empty() && !r.f32) m.dtype = t.dtype;
      if (r.f32 ? t.dtype != "F32" : t.dtype != m.dtype)
        throw RunError(where + r.hf[i] + " is " + t.dtype +
                       (r.f32 ? " (F32 expected)" : " while others are " + m.dtype));
      StTensor f = to_f32(t, where + r.hf[i]);
      if (r.transpose) f = transpose(f);
      loom_t.shape = f.shape.size() == 1
                         ? std::vector<int64_t>{loom_t.shape[0] + f.shape[0]}
                         : std::vector<int64_t>{loom_t.shape[0] + f.shape[0], f.shape[1]};
      loom_t.data.insert(loom_t.data.end(), f.data.begin(), f.data.end());
      used.insert(r.hf[i]);
    }
    if (!r.loom_shape.empty()) loom_t.shape = r.loom_shape;  // same elements, Loom's dims
    m.tensors[r.loom] = permute_rows(loom_t, r.rows, false);
  }
  if (auto it = raw.find(m.arch.tied_head); it != raw.end() && !m.arch.tied_head.empty()) {
    if (it->second.data != raw.at(m.arch.rules.front().hf.front()).data)
      throw RunError(where + it->first +
                     " differs from the embedding, but config.json ties them "
                     "(tie_word_embeddings)");
    used.insert(it->first);
  }
  for (const auto& [copy, of] : m.arch.copies) {
    auto it = raw.find(copy);
    if (it == raw.end()) continue;  // the original alone is enough
    const StTensor& orig = raw.at(of);
    if (it->second.shape != orig.shape || it->second.data != orig.data)
      throw RunError(where + copy + " differs from " + of + ", which model/gpt shares with it");
    used.insert(copy);
  }
  for (auto& [k, t] : raw) {
    if (used.count(k)) continue;
    bool buffer = false;
    for (const std::string& s : m.arch.ignored_suffixes)
      buffer |= k.size() > s.size() && k.compare(k.size() - s.size(), s.size(), s) == 0;
    if (!buffer)
      throw RunError(where + k + " has no place in model/gpt's " + m.arch.name +
                     " mapping; refusing rather than dropping it" +
                     (m.arch.unmapped.empty() ? "" : " (" + m.arch.unmapped + ")"));
  }
  return m;
}

namespace {

// The chat format of the model's tokenizer_config.json chat_template when it is a known one
// (data/chat_format.hpp), which the imported recipe's serve.chat_format records; "" (and a
// line saying so) otherwise, when loom serve keeps its serve.chat_template keys.
std::string hf_chat_format(const fs::path& hf_dir) {
  const fs::path cfg_path = hf_dir / "tokenizer_config.json";
  const std::string jinja = ChatFormat::template_in(cfg_path, "loom import-hf");
  if (jinja.empty()) return "";
  const std::string name = ChatFormat::recognise(jinja);
  if (name.empty())
    spdlog::info(
        "import-hf: the chat_template of {} is none of Loom's chat formats; loom serve uses the "
        "serve.chat_template keys (docs/serving.md)",
        cfg_path.string());
  else
    spdlog::info("import-hf: chat format {} (the chat_template of {}): serve.chat_format", name,
                 cfg_path.string());
  return name;
}

}  // namespace

void import_hf(const fs::path& hf_dir, const fs::path& out, bool overwrite) {
  check_checkpoint_output("loom import-hf", out, hf_dir, overwrite, "this import");
  HfModel m = read_hf(hf_dir);
  const fs::path abs_out = fs::absolute(out);
  const int64_t V = m.arch.vocab, padded = (V + 127) / 128 * 128;  // pad_vocab_to's default
  std::ostringstream recipe;
  recipe << "# Imported by `loom import-hf` from " << fs::absolute(hf_dir).string() << " ("
         << m.arch.name << ", " << m.dtype << ")\n[model]\nplugin = \"gpt\"\n";
  for (auto& [k, v] : m.arch.model_keys) recipe << k << " = " << v << "\n";
  for (const char* f : kTokenizerFiles)  // checked before anything is written
    if (fs::exists(hf_dir / f)) entry_in_folder(hf_dir, f, hf_dir);
  fs::create_directories(abs_out / "tokenizer");
  std::vector<std::string> copied;
  for (const char* f : kTokenizerFiles)
    if (fs::exists(hf_dir / f)) {
      require_regular_file((hf_dir / f).string());
      fs::copy_file(hf_dir / f, abs_out / "tokenizer" / f, fs::copy_options::overwrite_existing);
      copied.push_back(f);
    }
  recipe << "\n[tokenizer]\n";
  if (fs::exists(hf_dir / "tokenizer.json"))
    recipe << "plugin = \"hf-json\"\ntokenizer_file = \""
           << (abs_out / "tokenizer" / "tokenizer.json").string() << "\"\n";
  else if (fs::exists(hf_dir / "vocab.json") && fs::exists(hf_dir / "merges.txt"))
    recipe << "plugin = \"gpt2-bpe\"\nvocab_file = \""
           << (abs_out / "tokenizer" / "vocab.json").string() << "\"\nmerge_file = \""
           << (abs_out / "tokenizer" / "merges.txt").string() << "\"\n";
  else  // no tokenizer files: token ids, as Megatron's NullTokenizer reads them (its EOD,
        // the last id, makes the vocabulary vocab_size + 1)
    recipe << "plugin = \"null\"\nvocab_size = " << V - 1 << "\n";
  const int64_t P = std::stoll(m.arch.model_keys.at("max_seq_len"));
  recipe << "\n[train]\nseq_len = " << std::min<int64_t>(P, 1024)
         << "\n\n[data]\nplugin = \"mock\"\n";
  if (const std::string f = hf_chat_format(hf_dir); !f.empty())
    recipe << "\n[serve]\nchat_format = \"" << f << "\"\n";

  Checkpoint ck;
  ck.recipe_toml = recipe.str();
  ck.optimizer_file = "";
  for (auto& [name, t] : m.tensors) {
    const bool rows = name == "wte" || name == "lm_head.weight";
    ck.model[name] =
        rows ? take_shard(ShardSpec{{padded, t.shape[1]}, -1, {}, 1, 0, 1, 0}, t, V, name)
             : std::move(t);
  }
  ck.model_meta = {{"loom.vocab", std::to_string(V)},
                   {"loom.hf_config", m.config.dump()},
                   {"loom.hf_dtype", m.dtype}};
  save_checkpoint(abs_out, ck);
  std::printf("imported %s (%s, %zu tensors, vocabulary %lld padded to %lld) into %s%s%s\n",
              m.arch.name.c_str(), m.dtype.c_str(), ck.model.size(), (long long)V,
              (long long)padded, (abs_out / "iter_0000000").string().c_str(),
              copied.empty() ? "; no tokenizer files, so the null tokenizer (token ids)" : "",
              copied.empty() ? "" : "; tokenizer files copied to tokenizer/");
}

void check_export_output(const std::string& command, const fs::path& out,
                         const fs::path& checkpoint, bool overwrite) {
  // A folder is replaced whole or not at all; an empty one is the same as none.
  check_output(command, out, {checkpoint}, overwrite, [](const fs::path& p) {
    std::error_code ec;
    return fs::is_directory(p, ec) && fs::is_empty(p, ec);
  });
}

ExportSource load_export_source(const fs::path& checkpoint, Registry& registry,
                                const std::string& dtype_arg, bool merge) {
  ExportSource src;
  Checkpoint ck = load_checkpoint(checkpoint, "", "");
  src.folder = ck.folder;
  src.full = merge_checkpoint(ck.folder, false);
  std::map<std::string, std::string> meta = model_metadata(ck.folder);
  src.recipe =
      std::make_unique<Recipe>(Recipe::load(ck.folder / "recipe.toml", {"comm.plugin=single"}));
  Recipe& recipe = *src.recipe;
  recipe.validate(registry);
  if (recipe.plugin("model") != "gpt")
    throw RunError("export-hf: model/" + recipe.plugin("model") + " has no HF mapping");
  for (auto& [k, v] : recipe.section("model").values) src.keys[k] = toml_literal(v);
  src.lora = lora_of(src.keys);
  if (src.lora.rank > 0 && merge) merge_lora(src.full.model, src.lora.scale());
  const json base = meta.count("loom.hf_config") ? json::parse(meta["loom.hf_config"]) : json();
  int64_t vocab = base.is_object() ? base.value("vocab_size", int64_t{0}) : 0;
  if (vocab == 0 && meta.count("loom.vocab")) vocab = std::stoll(meta["loom.vocab"]);
  if (vocab == 0) {  // older checkpoints: ask the recipe's tokenizer
    Session session(recipe, registry);
    loom_tokenizer_ref tok = session.tokenizer();
    vocab = tok.api->vocab_size(tok.self);
  }
  src.dtype = !dtype_arg.empty()            ? st_dtype_of(dtype_arg)
              : meta.count("loom.hf_dtype") ? meta["loom.hf_dtype"]
                                            : "F32";
  src.vocab = vocab;
  std::tie(src.arch, src.config) =
      hf_arch_from_model(src.keys, vocab, base, torch_dtype_of(src.dtype));
  return src;
}

void export_hf(const fs::path& checkpoint, const fs::path& out, Registry& registry,
               const std::string& dtype_arg, uint64_t max_shard_bytes, bool overwrite, bool merge) {
  check_export_output("loom export-hf", out, checkpoint, overwrite);
  ExportSource src = load_export_source(checkpoint, registry, dtype_arg, merge);
  if (src.lora.rank > 0 && !merge)
    throw UsageError("export-hf: " + src.folder.string() +
                     " holds LoRA adapters (model.peft = \"lora\"): --merge-lora writes the "
                     "model with them merged into its weights, `loom export-peft` the adapters "
                     "alone in HF PEFT's layout");
  const FullCheckpoint& full = src.full;
  Recipe& recipe = *src.recipe;
  const std::string& dtype = src.dtype;
  const int64_t vocab = src.vocab;
  const HfArch& arch = src.arch;
  json& config = src.config;

  StFile hf;
  std::set<std::string> used;
  for (const HfRule& r : arch.rules) {
    auto it = full.model.find(r.loom);
    if (it == full.model.end()) throw RunError(src.folder.string() + ": no tensor " + r.loom);
    StTensor t = to_f32(it->second, r.loom);
    if (r.vocab)
      t = take_shard(ShardSpec{{vocab, t.shape[1]}, -1, {}, 1, 0, 1, 0}, t, vocab, r.loom);
    t = permute_rows(t, r.rows, true);
    size_t off = 0;
    for (size_t i = 0; i < r.hf.size(); ++i) {
      std::vector<int64_t> s = r.shapes[i];
      if (r.transpose) std::swap(s[0], s[1]);
      int64_t numel = 1;  // every dimension: Mamba's conv1d is stored (channels, 1, K)
      for (int64_t e : s) numel *= e;
      const size_t bytes = (size_t)numel * 4;
      if (off + bytes > t.data.size())
        throw RunError(src.folder.string() + ": tensor " + r.loom + " " + shape_str(t.shape) +
                       " is smaller than the recipe's model implies");
      StTensor piece{"F32", s, {t.data.begin() + off, t.data.begin() + off + bytes}};
      off += bytes;
      hf[r.hf[i]] = from_f32(r.transpose ? transpose(piece) : piece, r.f32 ? "F32" : dtype);
    }
    used.insert(r.loom);
  }
  for (const auto& [copy, of] : arch.copies) hf[copy] = hf.at(of);
  for (auto& [name, t] : full.model)
    if (!used.count(name) && !loom::is_fp8_state(name))  // FP8 scaling: training state
      throw RunError(src.folder.string() + ": tensor " + name + " has no place in " +
                     config["architectures"][0].get<std::string>());

  // The tokenizer's files: an hf-json tokenizer's folder, or gpt2-bpe's vocab and merges.
  std::vector<std::pair<fs::path, std::string>> tokenizer_files;
  const std::string tp = recipe.plugin("tokenizer");
  const auto& tok = recipe.section("tokenizer").values;
  if (tp == "hf-json") {
    const fs::path src = fs::path(tok.at("tokenizer_file").s).parent_path();
    for (const char* f : kTokenizerFiles)
      if (fs::exists(src / f)) tokenizer_files.emplace_back(src / f, f);
  } else if (tp == "gpt2-bpe") {
    tokenizer_files = {{tok.at("vocab_file").s, "vocab.json"},
                       {tok.at("merge_file").s, "merges.txt"}};
  }
  for (const auto& [from, to] : tokenizer_files) {  // read before `out` is replaced
    require_regular_file(fs::path(from).string());
    check_output("loom export-hf", out, {from}, true);
  }
  size_t files = 0;
  write_folder_atomically(out, [&](const fs::path& dir) {
    files = write_hf_folder(dir, config, arch, hf, max_shard_bytes, tokenizer_files);
  });
  std::printf("exported %s (%s, %zu tensors in %zu file%s, %zu tokenizer files) to %s\n",
              config["architectures"][0].get<std::string>().c_str(), torch_dtype_of(dtype),
              used.size(), files, files == 1 ? "" : "s", tokenizer_files.size(),
              out.string().c_str());
}

CheckpointSource::CheckpointSource(const fs::path& path) {
  if (is_hf_dir(path)) {  // through import-hf's own mapping
    scratch_ = fs::temp_directory_path() /
               ("loom-import-" + std::to_string(::getpid()) + "-" +
                std::to_string(std::hash<std::string>{}(fs::absolute(path).string())));
    fs::remove_all(scratch_);
    import_hf(path, scratch_, true);
    dir_ = resolve_checkpoint(scratch_);
  } else {
    dir_ = resolve_checkpoint(path);
  }
}

CheckpointSource::~CheckpointSource() {
  std::error_code ec;
  if (!scratch_.empty()) fs::remove_all(scratch_, ec);
}

}  // namespace loom::engine
