// What a run writes, made ready before the first step (TrainRun::prepare_save_dir,
// train_run.hpp) and checked by `loom validate` with the same messages (folder_refusal):
// checkpoint.save must be a folder this run can write, hold no other run's checkpoints, and be
// used by no other run (folder_lock.hpp); train.metrics must be a file it can write.
// Writability is tested by making a file, since permission bits say nothing for root, on a
// read-only mount or under an ACL.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/errors.hpp"
#include "base/folder_lock.hpp"
#include "checkpoint/checkpoint.hpp"
#include "loom/cpp/regular_file.hpp"
#include "train/train.hpp"
#include "train/train_run.hpp"

namespace fs = std::filesystem;

namespace loom::engine {
namespace {

// `p` when it exists, else its nearest existing ancestor: where making it would start.
fs::path nearest_existing(const fs::path& p) {
  std::error_code ec;
  fs::path q = fs::absolute(p, ec);
  while (!fs::exists(fs::symlink_status(q, ec)) && q.has_relative_path()) q = q.parent_path();
  return q;
}

// "" when a file can be made in folder `dir` (made first when `make`; otherwise, when it is
// missing, its nearest existing ancestor must be a folder that takes one), else why not.
std::string write_problem(const fs::path& dir, bool make, const std::string& tag) {
  std::error_code ec;
  const fs::path base = nearest_existing(dir);
  struct stat st {};
  if (::stat(base.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return base.string() + " is " + loom::file_kind(st.st_mode) + ", not a folder";
  if (make && (fs::create_directories(dir, ec), ec)) return ec.message();
  const fs::path probe =
      (make ? dir : base) / (".loom-write-probe-" + tag + "-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  const bool wrote = ::write(fd, "probe\n", 6) == 6;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return wrote ? "" : std::strerror(err);
}

std::string unwritable_save(const std::string& save, const std::string& why) {
  return "checkpoint.save = \"" + save + "\" is not a folder this run can write (" + why +
         "); found before training, so nothing is lost";
}

// checkpoint.save holds checkpoints this run neither resumes from nor may overwrite: the one
// rule `loom checkpoint convert` and `import-hf` follow too (check_save_folder).
std::string foreign_checkpoints(const Recipe& recipe, const fs::path& dir) {
  std::error_code ec;
  const std::string load = recipe.get_string("checkpoint", "load");
  auto inside = [&](const fs::path& p) {
    const fs::path a = fs::weakly_canonical(p, ec), b = fs::weakly_canonical(dir, ec);
    return a == b || a.parent_path() == b;
  };
  try {
    check_save_folder(dir, load == "auto" || (!load.empty() && inside(load)),
                      recipe.get_bool("checkpoint", "overwrite"),
                      "checkpoint.save = \"" + dir.string() + "\"", "this run",
                      "Resume with checkpoint.load = \"auto\", save elsewhere, or set "
                      "checkpoint.overwrite = true");
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception&) {  // unreadable: the writability check names it
  }
  return "";
}

// train.metrics: a regular file (or none yet) in a folder this run can write.
std::string metrics_problem(const std::string& path, bool make) {
  if (path.empty()) return "";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return "train.metrics = \"" + path + "\" is " + loom::file_kind(st.st_mode) +
           ", not a file this run can write";
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
  const std::string why = write_problem(parent, make, "metrics");
  if (why.empty()) return "";
  return "train.metrics = \"" + path + "\" is not in a folder this run can write (" + why + ")";
}

// A partial save a killed run left (checkpoint.cpp's .tmp-iter_* and .old-iter_* folders).
void remove_partial_saves(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    const std::string n = p.filename().string();
    if (n.rfind(".tmp-iter_", 0) != 0 && n.rfind(".old-iter_", 0) != 0) continue;
    std::error_code rm;
    fs::remove_all(p, rm);
    spdlog::warn("removed {}: {}", p.string(),
                 rm ? "could not: " + rm.message()
                    : std::string("a partial checkpoint a killed save left behind"));
  }
}

}  // namespace

std::string folder_refusal(const Recipe& recipe) {
  const std::string save = recipe.get_string("checkpoint", "save");
  if (!save.empty()) {
    if (std::string why = write_problem(save, false, "validate"); !why.empty())
      return unwritable_save(save, why);
    if (std::string why = folder_lock_refusal(save, "checkpoint.save"); !why.empty()) return why;
    if (std::string why = foreign_checkpoints(recipe, save); !why.empty()) return why;
  }
  return metrics_problem(recipe.get_string("train", "metrics"), false);
}

// Every rank checks that it can write the folder (ranks on several hosts may see different
// file systems); rank 0 also takes the folder's lock for the run's lifetime, then removes
// partial saves, refuses another run's checkpoints and checks train.metrics, which it alone
// writes.
// The ranks then agree (COLLECTIVE), so that a refusal on one ends every rank with exit 2
// before training instead of leaving the others waiting in the first collective.
void TrainRun::prepare_save_dir() {
  const std::string save = recipe.get_string("checkpoint", "save");
  std::string why;
  if (!save.empty()) {
    why = write_problem(save, true, std::to_string(rank));
    if (!why.empty()) why = unwritable_save(save, why);
    if (why.empty() && rank == 0) try {
        save_lock = std::make_unique<FolderLock>(save, "checkpoint.save");
      } catch (const UsageError& e) {
        why = e.what();
      }
    // Only under the lock: another run's partial save may be one it is writing now.
    if (why.empty() && rank == 0) remove_partial_saves(save);
    if (why.empty() && rank == 0) why = foreign_checkpoints(recipe, save);
  }
  if (why.empty() && rank == 0) why = metrics_problem(recipe.get_string("train", "metrics"), true);
  double refused = why.empty() ? 0 : 1;
  sum_over(be, comm, nullptr, &refused, 1);
  if (!why.empty()) throw UsageError(why);
  if (refused > 0) throw QuietExit{2};  // another rank says why
}

}  // namespace loom::engine
