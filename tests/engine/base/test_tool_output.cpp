// The rules file-writing tools share (tool_output.hpp) and the one save-folder rule
// (check_save_folder), on their own: every spelling of "the output is an input", existing
// outputs, atomic writes that fail, and listing entries that leave their folder.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "base/errors.hpp"
#include "base/tool_output.hpp"
#include "checkpoint/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace loom::engine;

namespace {
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("loom-test-out-" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir / "in" / "sub");
    std::ofstream(dir / "in" / "sub" / "f") << "data";
  }
  ~Scratch() { fs::remove_all(dir); }
};
std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST_CASE("check_output: an output that is, lies in or holds an input, however spelled") {
  Scratch s;
  const fs::path in = s.dir / "in";
  auto refused = [&](const fs::path& out, const std::vector<fs::path>& inputs,
                     const std::string& how) {
    CAPTURE(out);
    CHECK_THROWS_WITH_AS(check_output("t", out, inputs, true), doctest::Contains(how.c_str()),
                         UsageError);
  };
  refused(in, {in}, "is the input");
  refused(in / "sub" / "f", {in}, "lies inside the input");
  refused(in / "sub" / "new", {in}, "lies inside the input");        // not there yet
  refused(s.dir / "in" / ".." / "in" / "sub", {in}, "lies inside");  // "..": canonical
  refused(s.dir / "in/", {in}, "is the input");                      // a trailing separator
  refused(s.dir, {in / "sub" / "f"}, "holds the input");
  fs::create_directory_symlink(in, s.dir / "link");
  refused(s.dir / "link" / "sub" / "f", {in}, "lies inside");  // through a link
  fs::create_hard_link(in / "sub" / "f", s.dir / "hard");
  refused(s.dir / "hard", {in / "sub" / "f"}, "is the input");  // the same inode
  CHECK_NOTHROW(check_output("t", s.dir / "other", {in}, false));
  CHECK_NOTHROW(check_output("t", s.dir / "inx", {in}, false));  // a prefix is no parent
}

TEST_CASE("check_output: an existing output only with overwrite, or when existing_ok says so") {
  Scratch s;
  const fs::path f = s.dir / "in" / "sub" / "f";
  const std::string says = "loom x: the output " + f.string() + " already exists; pass --overwrite";
  CHECK_THROWS_WITH_AS(check_output("loom x", f, {}, false), doctest::Contains(says.c_str()),
                       UsageError);
  CHECK_NOTHROW(check_output("loom x", f, {}, true));
  CHECK_NOTHROW(check_output("loom x", f, {}, false, [](const fs::path&) { return true; }));
  fs::create_symlink(s.dir / "nowhere", s.dir / "dangling");  // a dangling link exists too
  CHECK_THROWS_AS(check_output("loom x", s.dir / "dangling", {}, false), UsageError);
}

TEST_CASE("atomic writes: a failure leaves the old output and no temporary") {
  Scratch s;
  const fs::path file = s.dir / "out.txt", folder = s.dir / "out";
  std::ofstream(file) << "old";
  CHECK_THROWS_AS(write_file_atomically(file,
                                        [](const fs::path& tmp) {
                                          std::ofstream(tmp) << "half";
                                          throw std::runtime_error("disk full");
                                        }),
                  std::runtime_error);
  CHECK(slurp(file) == "old");
  write_file_atomically(file, [](const fs::path& tmp) { std::ofstream(tmp) << "new"; });
  CHECK(slurp(file) == "new");

  fs::create_directories(folder);
  std::ofstream(folder / "stale.safetensors") << "old shard";
  CHECK_THROWS_AS(write_folder_atomically(folder,
                                          [](const fs::path& tmp) {
                                            std::ofstream(tmp / "model.safetensors") << "half";
                                            fs::copy_file(tmp / "missing", tmp / "x");
                                          }),
                  RunError);  // a file-system error names the output
  CHECK(slurp(folder / "stale.safetensors") == "old shard");
  write_folder_atomically(
      folder, [](const fs::path& tmp) { std::ofstream(tmp / "model.safetensors") << "new"; });
  CHECK(!fs::exists(folder / "stale.safetensors"));  // replaced whole
  CHECK(slurp(folder / "model.safetensors") == "new");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(s.dir)) entries += e.path().filename() != "in";
  CHECK(entries == 2);  // out.txt and out: no .tmp- or .old- sibling left
}

TEST_CASE("entry_in_folder: plain names inside the folder only") {
  Scratch s;
  const fs::path in = s.dir / "in", listing = in / "index.json";
  CHECK(entry_in_folder(in, "a.safetensors", listing) == in / "a.safetensors");
  for (const char* bad : {"", ".", "..", "../x", "/dev/zero", "sub/f", "a\\b"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(entry_in_folder(in, bad, listing),
                         doctest::Contains((listing.string() + ": entry '").c_str()), UsageError);
  }
  fs::create_symlink("/etc/passwd", in / "out-link");
  CHECK_THROWS_WITH_AS(entry_in_folder(in, "out-link", listing),
                       doctest::Contains("is a link that leaves the folder"), UsageError);
  fs::create_symlink("sub/f", in / "in-link");  // a link that stays inside is a file there
  CHECK_NOTHROW(entry_in_folder(in, "in-link", listing));
}

TEST_CASE("check_save_folder: checkpoints another writer does not continue are not written over") {
  Scratch s;
  const fs::path save = s.dir / "save";
  CHECK_NOTHROW(check_save_folder(save, false, false, "w", "this writer", "fix"));  // none yet
  fs::create_directories(save / "iter_0000072");
  std::ofstream(save / "iter_0000072" / "manifest.json") << "{}";
  CHECK_THROWS_WITH_AS(check_save_folder(save, false, false, "w", "this writer", "Fix it."),
                       doctest::Contains("w already holds checkpoints (newest iter_72) and this "
                                         "writer does not resume from them: it would write over "
                                         "them. Fix it."),
                       UsageError);
  CHECK_NOTHROW(check_save_folder(save, true, false, "w", "this writer", "fix"));  // resumes
  CHECK_NOTHROW(check_save_folder(save, false, true, "w", "this writer", "fix"));  // overwrite
  fs::remove_all(save / "iter_0000072");
  std::ofstream(save / "latest_checkpointed_iteration.txt") << "72\n";  // a tracker alone
  CHECK_THROWS_WITH_AS(check_save_folder(save, false, false, "w", "this writer", "fix"),
                       doctest::Contains("(a tracker)"), UsageError);
}
