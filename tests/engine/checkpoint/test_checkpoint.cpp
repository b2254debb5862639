// Safetensors round trip and validation; atomic checkpoint saves.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/errors.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/safetensors.hpp"

namespace fs = std::filesystem;
using namespace loom::engine;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("loom-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}
StTensor f32(std::vector<int64_t> shape, float start) {
  StTensor t{"F32", shape, {}};
  int64_t n = 1;
  for (auto d : shape) n *= d;
  t.data.resize((size_t)n * 4);
  auto* p = reinterpret_cast<float*>(t.data.data());
  for (int64_t i = 0; i < n; ++i) p[i] = start + (float)i;
  return t;
}
void truncate_file(const fs::path& p, uintmax_t by) { fs::resize_file(p, fs::file_size(p) - by); }
}  // namespace

TEST_CASE("safetensors: round trip, and the header matches the published layout") {
  fs::path dir = temp_dir("st");
  StFile f{{"b", f32({2, 3}, 1)}, {"a", f32({4}, 10)}};
  write_safetensors(dir / "x.safetensors", f, {{"note", "hi"}});
  std::map<std::string, std::string> meta;
  StFile g = read_safetensors(dir / "x.safetensors", &meta);
  CHECK(meta["note"] == "hi");
  REQUIRE(g.size() == 2);
  CHECK(g["b"].shape == std::vector<int64_t>{2, 3});
  CHECK(g["b"].data == f["b"].data);
  CHECK(g["a"].data == f["a"].data);
  // Layout by hand: u64 little-endian header length, JSON, data at an 8-byte boundary.
  std::ifstream in(dir / "x.safetensors", std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= (uint64_t)len[i] << (8 * i);
  CHECK((n + 8) % 8 == 0);
  CHECK(fs::file_size(dir / "x.safetensors") == 8 + n + 4 * 6 + 4 * 4);
  fs::remove_all(dir);
}

TEST_CASE("safetensors: truncated or corrupt files are refused, never half-read") {
  fs::path dir = temp_dir("st-bad");
  StFile f{{"w", f32({16, 16}, 0)}};
  write_safetensors(dir / "t.safetensors", f);
  truncate_file(dir / "t.safetensors", 4);
  CHECK_THROWS_WITH_AS(read_safetensors(dir / "t.safetensors"), doctest::Contains("truncated"),
                       RunError);
  std::ofstream(dir / "c.safetensors", std::ios::binary)
      << std::string("\x10\0\0\0\0\0\0\0{not json}xxxxx", 24);
  CHECK_THROWS_WITH_AS(read_safetensors(dir / "c.safetensors"), doctest::Contains("corrupt"),
                       RunError);
  std::ofstream(dir / "e.safetensors", std::ios::binary) << "abc";
  CHECK_THROWS_AS(read_safetensors(dir / "e.safetensors"), RunError);
  fs::remove_all(dir);
}

TEST_CASE("checkpoints: save, load, verify, and a crash mid-save keeps the previous one") {
  fs::path dir = temp_dir("ckpt");
  Checkpoint c;
  c.iteration = 10;
  c.consumed_samples = 80;
  c.seed = 7;
  c.recipe_toml = "[train]\niters = 20\n";
  c.model = {{"w", f32({3, 3}, 1)}};
  c.optimizer = {{"exp_avg.w", f32({3, 3}, 0)}};
  save_checkpoint(dir, c);
  CHECK(fs::exists(dir / "iter_0000010" / "manifest.json"));
  Checkpoint d = load_checkpoint(dir);
  CHECK(d.iteration == 10);
  CHECK(d.consumed_samples == 80);
  CHECK(d.model["w"].data == c.model["w"].data);

  // A crash during the next save: its temporary folder is left half-written. The tracker
  // still names iteration 10 and that checkpoint still loads.
  fs::create_directories(dir / ".tmp-iter_0000020-999");
  std::ofstream(dir / ".tmp-iter_0000020-999" / "model.safetensors") << "partial";
  CHECK(load_checkpoint(dir).iteration == 10);

  // A later save supersedes it.
  c.iteration = 20;
  save_checkpoint(dir, c);
  CHECK(load_checkpoint(dir).iteration == 20);
  CHECK(load_checkpoint(dir / "iter_0000010").iteration == 10);

  // Damage is detected before anything is loaded.
  truncate_file(dir / "iter_0000020" / "model.safetensors", 8);
  CHECK_THROWS_WITH_AS(load_checkpoint(dir), doctest::Contains("truncated"), RunError);
  {
    std::fstream f(dir / "iter_0000010" / "optimizer.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH_AS(load_checkpoint(dir / "iter_0000010"), doctest::Contains("sha256"),
                       RunError);
  CHECK_THROWS_AS(load_checkpoint(dir / "nothing-here"), RunError);
  fs::remove_all(dir);
}
