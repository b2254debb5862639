#include "checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.hpp"
#include "base/require_regular.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "loader/package.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

constexpr const char* kTracker = "latest_checkpointed_iteration.txt";

std::string iter_name(int64_t it) {
  std::ostringstream s;
  s << "iter_" << std::setw(7) << std::setfill('0') << it;
  return s.str();
}

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw RunError("cannot write " + p.string());
  fsync_path(p);
}

std::string read_text(const fs::path& p) {
  require_regular_file(p.string());
  std::ifstream in(p);
  if (!in) throw RunError("cannot read " + p.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

namespace {
constexpr const char* kHashPrefix = ".sha256-";  // a file's hash, beside it until the manifest

// `file` under `dir`, then its sha256 and size in `.sha256-FILE` beside it.
void write_hashed(const fs::path& dir, const std::string& file, const StFile& tensors,
                  const std::map<std::string, std::string>& meta) {
  write_safetensors(dir / file, tensors, meta);
  write_text(dir / (kHashPrefix + file),
             sha256_of_file(dir / file) + " " + std::to_string(fs::file_size(dir / file)) + "\n");
}
}  // namespace

fs::path begin_checkpoint(const fs::path& save_dir, const Checkpoint& ckpt,
                          const Collective& coll) {
  std::error_code ec;
  // One name every rank agrees on (a pid would differ between ranks).
  fs::path tmp = save_dir / (".tmp-" + iter_name(ckpt.iteration));
  if (coll.leader) {
    fs::create_directories(save_dir, ec);
    if (ec) throw RunError("cannot create " + save_dir.string() + ": " + ec.message());
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    write_text(tmp / "recipe.toml", ckpt.recipe_toml);
  }
  coll.barrier();
  return tmp;
}

void write_checkpoint_files(const fs::path& tmp, const Checkpoint& ckpt) {
  if (!ckpt.model_file.empty()) write_hashed(tmp, ckpt.model_file, ckpt.model, ckpt.model_meta);
  if (!ckpt.optimizer_file.empty())
    write_hashed(tmp, ckpt.optimizer_file, ckpt.optimizer, ckpt.optimizer_meta);
  for (const Checkpoint::File& f : ckpt.more_files) write_hashed(tmp, f.name, f.tensors, f.meta);
}

void finish_checkpoint(const fs::path& save_dir, const Checkpoint& ckpt, const Collective& coll) {
  std::error_code ec;
  const std::string name = iter_name(ckpt.iteration);
  const fs::path tmp = save_dir / (".tmp-" + name);
  coll.barrier();
  if (coll.leader) {
    // Every rank hashed its own files as it wrote them; only the recipe is hashed here.
    nlohmann::json files = nlohmann::json::object();
    std::vector<fs::path> hashes;
    for (const auto& entry : fs::directory_iterator(tmp)) {
      const std::string f = entry.path().filename().string();
      if (f.rfind(kHashPrefix, 0) == 0) {
        hashes.push_back(entry.path());
        continue;
      }
      const fs::path noted = tmp / (kHashPrefix + f);
      if (fs::exists(noted)) {
        std::istringstream in(read_text(noted));
        std::string sha;
        uint64_t bytes = 0;
        in >> sha >> bytes;
        files[f] = {{"sha256", sha}, {"bytes", bytes}};
      } else {
        files[f] = {{"sha256", sha256_of_file(entry.path())},
                    {"bytes", fs::file_size(entry.path())}};
      }
    }
    for (const fs::path& h : hashes) fs::remove(h);
    nlohmann::json manifest = {
        {"format", "loom-checkpoint"}, {"version", 1},
        {"iteration", ckpt.iteration}, {"consumed_samples", ckpt.consumed_samples},
        {"seed", ckpt.seed},           {"parallel", ckpt.parallel},
        {"state", ckpt.state},         {"files", files}};
    write_text(tmp / "manifest.json", manifest.dump(2) + "\n");
    fsync_path(tmp);

    // Put the new folder in place. An older folder of the same iteration is moved aside
    // first and removed only after the rename succeeded.
    fs::path final_dir = save_dir / name;
    fs::path old = save_dir / (".old-" + name + "-" + std::to_string(::getpid()));
    bool had_old = fs::exists(final_dir);
    if (had_old) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fsync_path(save_dir);
    write_text(save_dir / (std::string(kTracker) + ".tmp"), std::to_string(ckpt.iteration) + "\n");
    fs::rename(save_dir / (std::string(kTracker) + ".tmp"), save_dir / kTracker);
    fsync_path(save_dir);
    if (had_old) fs::remove_all(old, ec);
  }
  coll.barrier();
}

void save_checkpoint(const fs::path& save_dir, const Checkpoint& ckpt, const Collective& coll) {
  write_checkpoint_files(begin_checkpoint(save_dir, ckpt, coll), ckpt);
  finish_checkpoint(save_dir, ckpt, coll);
}

std::vector<int64_t> complete_iterations(const fs::path& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() != 12 || n.compare(0, 5, "iter_") != 0 ||
        n.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    if (fs::exists(e.path() / "manifest.json")) out.push_back(std::stoll(n.substr(5)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_save_folder(const fs::path& dir, bool continues, bool overwrite, const std::string& who,
                       const std::string& writer, const std::string& fix) {
  const std::vector<int64_t> its = complete_iterations(dir);
  std::error_code ec;
  const bool tracker = fs::exists(dir / kTracker, ec);
  if ((its.empty() && !tracker) || continues || overwrite) return;
  throw UsageError(
      who + " already holds checkpoints (" +
      (its.empty() ? std::string("a tracker") : "newest iter_" + std::to_string(its.back())) +
      ") and " + writer + " does not resume from them: it would write over them. " + fix);
}

fs::path resolve_checkpoint(const fs::path& dir) {
  if (fs::exists(dir / "manifest.json")) return dir;
  fs::path tracker = dir / kTracker;
  if (!fs::exists(tracker)) {
    // A tracker lost (or never renamed into place) while complete checkpoints exist: the
    // newest of them, rather than "no checkpoint" and a fresh run that overwrites them.
    const std::vector<int64_t> its = complete_iterations(dir);
    if (its.empty()) return {};
    spdlog::warn("{} is missing; resuming from the newest complete checkpoint there, {}",
                 tracker.string(), iter_name(its.back()));
    return dir / iter_name(its.back());
  }
  std::string text = read_text(tracker);
  int64_t it = -1;
  try {
    size_t used = 0;
    it = std::stoll(text, &used);
    if (text.find_first_not_of(" \t\r\n", used) != std::string::npos) it = -1;
  } catch (const std::exception&) {
    it = -1;
  }
  if (it < 0 || it > 9999999)
    throw RunError(tracker.string() + ": corrupt tracker file (\"" + one_line(text, 40) +
                   "\"): it holds the iteration of the newest checkpoint, 0 to 9999999");
  return dir / iter_name(it);
}

namespace {

// The verified folder of the checkpoint in `dir` and its manifest.
std::pair<fs::path, nlohmann::json> verified(const fs::path& dir) {
  fs::path path = resolve_checkpoint(dir);
  if (path.empty()) throw RunError("no checkpoint in " + dir.string());
  const fs::path manifest = path / "manifest.json";
  if (!fs::exists(manifest))
    throw RunError(path.string() + ": checkpoint folder without manifest.json");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_text(manifest));
  } catch (const nlohmann::json::exception& e) {
    throw RunError(manifest.string() + ": corrupt: " + e.what());
  }
  if (!m.is_object() || m.value("format", nlohmann::json()) != "loom-checkpoint" ||
      m.value("version", nlohmann::json()) != 1)
    throw RunError(path.string() + ": not a Loom v1 checkpoint");
  // Every file must be whole and unchanged before anything is loaded.
  try {
    for (auto& [f, info] : m.at("files").items()) {
      const fs::path p = entry_in_folder(path, f, manifest);
      require_regular_file(p.string(), "checkpoint ");
      if (!fs::is_regular_file(p)) throw RunError(path.string() + ": missing " + f);
      uint64_t want = info.at("bytes").get<uint64_t>();
      if (fs::file_size(p) != want)
        throw RunError(p.string() + ": truncated or resized (" + std::to_string(fs::file_size(p)) +
                       " bytes, manifest says " + std::to_string(want) + ")");
      if (sha256_of_file(p) != info.at("sha256").get<std::string>())
        throw RunError(p.string() + ": sha256 does not match the manifest (corrupt)");
    }
  } catch (const nlohmann::json::exception& e) {
    throw RunError(manifest.string() + ": corrupt: " + e.what());
  }
  return {path, m};
}

}  // namespace

Checkpoint load_checkpoint(const fs::path& dir, const std::string& model_file,
                           const std::string& optimizer_file) {
  auto [path, m] = verified(dir);
  Checkpoint c;
  try {
    c.iteration = m.at("iteration").get<int64_t>();
    c.consumed_samples = m.at("consumed_samples").get<int64_t>();
    c.seed = m.at("seed").get<uint64_t>();
    if (m.contains("state")) c.state = m.at("state").get<std::map<std::string, double>>();
    if (m.contains("parallel")) c.parallel = m.at("parallel").get<std::map<std::string, int64_t>>();
    for (auto& [f, info] : m.at("files").items()) c.files.insert(f);
  } catch (const nlohmann::json::exception& e) {
    throw RunError((path / "manifest.json").string() + ": corrupt: " + e.what());
  }
  c.recipe_toml = read_text(path / "recipe.toml");
  c.folder = path;
  read_rank_files(c, model_file, optimizer_file);
  return c;
}

void read_rank_files(Checkpoint& c, const std::string& model_file,
                     const std::string& optimizer_file) {
  c.model_file = model_file;
  c.optimizer_file = optimizer_file;
  for (auto [file, tensors, meta] : {std::tuple{model_file, &c.model, &c.model_meta},
                                     std::tuple{optimizer_file, &c.optimizer, &c.optimizer_meta}}) {
    if (file.empty()) continue;
    if (!c.files.count(file))
      throw RunError(c.folder.string() + ": no " + file +
                     " (saved with another parallel layout? the manifest says " +
                     nlohmann::json(c.parallel).dump() + ")");
    *tensors = read_safetensors(c.folder / file, meta);
  }
}

}  // namespace loom::engine

namespace loom::engine {

StFile merge_model(const fs::path& dir) {
  return merge_checkpoint(verified(dir).first, false).model;
}

void check_checkpoint_output(const std::string& command, const fs::path& dst, const fs::path& src,
                             bool overwrite, const std::string& writer) {
  std::error_code ec;
  check_output(command, dst, {src}, overwrite,
               [](const fs::path& p) { return fs::is_directory(p); });
  if (!fs::is_directory(dst, ec)) return;
  check_save_folder(dst, false, overwrite, command + ": " + dst.string(), writer,
                    "Write into another folder, or pass --overwrite to write over them");
}

}  // namespace loom::engine
