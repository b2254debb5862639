#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "errors.hpp"
#include "package.hpp"

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
  std::ifstream in(p);
  if (!in) throw RunError("cannot read " + p.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void save_checkpoint(const fs::path& save_dir, const Checkpoint& ckpt) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (ec) throw RunError("cannot create " + save_dir.string() + ": " + ec.message());
  std::string name = iter_name(ckpt.iteration);
  fs::path tmp = save_dir / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);

  write_safetensors(tmp / "model.safetensors", ckpt.model);
  write_safetensors(tmp / "optimizer.safetensors", ckpt.optimizer);
  write_text(tmp / "recipe.toml", ckpt.recipe_toml);
  nlohmann::json files = nlohmann::json::object();
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "recipe.toml"})
    files[f] = {{"sha256", sha256_of_file(tmp / f)}, {"bytes", fs::file_size(tmp / f)}};
  nlohmann::json manifest = {{"format", "loom-checkpoint"},
                             {"version", 1},
                             {"iteration", ckpt.iteration},
                             {"consumed_samples", ckpt.consumed_samples},
                             {"seed", ckpt.seed},
                             {"parallel", {{"tensor", 1}, {"pipeline", 1}, {"data", 1}}},
                             {"files", files}};
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

fs::path resolve_checkpoint(const fs::path& dir) {
  if (fs::exists(dir / "manifest.json")) return dir;
  fs::path tracker = dir / kTracker;
  if (!fs::exists(tracker)) return {};
  std::string text = read_text(tracker);
  int64_t it = 0;
  try {
    it = std::stoll(text);
  } catch (const std::exception&) {
    throw RunError(tracker.string() + ": corrupt tracker file (\"" + text + "\")");
  }
  return dir / iter_name(it);
}

Checkpoint load_checkpoint(const fs::path& dir) {
  fs::path path = resolve_checkpoint(dir);
  if (path.empty()) throw RunError("no checkpoint in " + dir.string());
  if (!fs::exists(path / "manifest.json"))
    throw RunError(path.string() + ": checkpoint folder without manifest.json");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_text(path / "manifest.json"));
  } catch (const nlohmann::json::exception& e) {
    throw RunError((path / "manifest.json").string() + ": corrupt: " + e.what());
  }
  if (m.value("format", "") != "loom-checkpoint" || m.value("version", 0) != 1)
    throw RunError(path.string() + ": not a Loom v1 checkpoint");
  // Every file must be whole and unchanged before anything is loaded.
  for (auto& [f, info] : m.at("files").items()) {
    fs::path p = path / f;
    if (!fs::exists(p)) throw RunError(path.string() + ": missing " + f);
    uint64_t want = info.at("bytes").get<uint64_t>();
    if (fs::file_size(p) != want)
      throw RunError(p.string() + ": truncated or resized (" + std::to_string(fs::file_size(p)) +
                     " bytes, manifest says " + std::to_string(want) + ")");
    if (sha256_of_file(p) != info.at("sha256").get<std::string>())
      throw RunError(p.string() + ": sha256 does not match the manifest (corrupt)");
  }
  Checkpoint c;
  c.iteration = m.at("iteration").get<int64_t>();
  c.consumed_samples = m.at("consumed_samples").get<int64_t>();
  c.seed = m.at("seed").get<uint64_t>();
  c.recipe_toml = read_text(path / "recipe.toml");
  c.model = read_safetensors(path / "model.safetensors");
  c.optimizer = read_safetensors(path / "optimizer.safetensors");
  return c;
}

}  // namespace loom::engine
