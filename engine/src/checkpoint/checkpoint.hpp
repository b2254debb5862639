// Checkpoints: a directory per iteration, written atomically.
//
//   <save>/iter_0000010/manifest.json      iteration, data position, layout, file sha256s
//   <save>/iter_0000010/recipe.toml        the resolved recipe (generation rebuilds from it)
//   <save>/iter_0000010/model.safetensors  parameters by name
//   <save>/iter_0000010/optimizer.safetensors
//   <save>/latest_checkpointed_iteration.txt   "10" (Megatron's tracker file)
//
// A save writes everything into a temporary sibling folder, fsyncs it, renames it into
// place and only then rewrites the tracker (write + rename), so a crash at any point
// leaves the previous checkpoint and tracker intact.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"

namespace loom::engine {

// One rank's part of a checkpoint. A single-rank run writes model.safetensors and
// optimizer.safetensors; with model parallelism or a sharded optimizer every rank writes its
// own files (model-tpT-ppP.safetensors, optimizer-tpT-ppP[-dpD].safetensors) whose
// metadata says where each tensor sits in the full one (see train.cpp), and the manifest
// lists every rank's files. An empty file name: this rank writes no such file (a replica).
struct Checkpoint {
  int64_t iteration = 0;         // iterations completed
  int64_t consumed_samples = 0;  // training samples consumed (the data loader's position)
  uint64_t seed = 0;
  std::string recipe_toml;
  std::string model_file = "model.safetensors", optimizer_file = "optimizer.safetensors";
  StFile model, optimizer;
  std::map<std::string, std::string> model_meta, optimizer_meta;
  std::map<std::string, int64_t> parallel = {{"tensor", 1}, {"pipeline", 1}, {"data", 1}};
  std::map<std::string, double> state;  // the loop's own state (the fp16 loss scale, ...)
  std::filesystem::path folder;         // where it was loaded from (verified)
  std::set<std::string> files;          // the files its manifest lists
  // Files this process writes besides its own: an offline conversion writes every rank's.
  struct File {
    std::string name;
    StFile tensors;
    std::map<std::string, std::string> meta;
  };
  std::vector<File> more_files;
};

// How the ranks of a run save one checkpoint together: every rank writes its files into
// one temporary folder, then the leader writes the manifest and renames the folder into
// place. `barrier` synchronises every rank of the world.
struct Collective {
  bool leader = true;
  std::function<void()> barrier = [] {};
};

void save_checkpoint(const std::filesystem::path& save_dir, const Checkpoint& ckpt,
                     const Collective& collective = {});
// save_checkpoint's three parts, so that checkpoint.async can write in the background:
//  - begin (COLLECTIVE): the leader makes the temporary folder `.tmp-iter_N` (returned) and
//    writes the recipe there;
//  - write (this rank alone, any thread): its files into that folder, each fsynced, with its
//    sha256 beside it;
//  - finish (COLLECTIVE, once every rank has written): the leader writes the manifest, then
//    renames the folder into place and moves the tracker. Reads only ckpt's metadata.
// Until finish renames it, a crash leaves the previous checkpoint the newest complete one.
std::filesystem::path begin_checkpoint(const std::filesystem::path& save_dir,
                                       const Checkpoint& ckpt, const Collective& collective);
void write_checkpoint_files(const std::filesystem::path& tmp, const Checkpoint& ckpt);
void finish_checkpoint(const std::filesystem::path& save_dir, const Checkpoint& ckpt,
                       const Collective& collective);

// `dir` is a checkpoint folder (with manifest.json) or a save folder with the tracker file.
// Verifies every file's size and sha256 first, then reads the named model and optimizer
// files ("" = none); throws RunError on anything missing, truncated or corrupt.
Checkpoint load_checkpoint(const std::filesystem::path& dir,
                           const std::string& model_file = "model.safetensors",
                           const std::string& optimizer_file = "optimizer.safetensors");

// Every model tensor of a checkpoint as a full tensor: the shards of each rank's model
// file put in place by their metadata (a single-rank checkpoint is returned as it is).
StFile merge_model(const std::filesystem::path& dir);

// Reads the named model and optimizer files ("" = none) of a checkpoint load_checkpoint
// already verified (its folder and manifest list), without hashing everything again.
void read_rank_files(Checkpoint& c, const std::string& model_file,
                     const std::string& optimizer_file);

// The folder load_checkpoint would read, or "" when `dir` holds no checkpoint: `dir` itself
// when it is one, else the one its tracker names, else (no tracker, with a warning) the
// newest complete iter_* folder. A tracker that holds no iteration is a RunError.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& dir);
// The iterations of the complete checkpoints in `dir` (iter_* folders with a manifest), in
// increasing order.
std::vector<int64_t> complete_iterations(const std::filesystem::path& dir);

// The one rule for "may this writer save into the save folder `dir`" (`loom run`'s
// checkpoint.save, `loom checkpoint convert` and `loom import-hf`'s output): not when `dir`
// already holds checkpoints (or a tracker) that the writer does not continue, since its save
// would replace a checkpoint of the same iteration or move the tracker back from a newer one
// (so that load = "auto" resumes from an older state), unless `overwrite`. `continues`: the
// writer resumed from this folder's checkpoints. A refusal is a UsageError (exit 2):
// "<who> already holds checkpoints (newest iter_N) and <writer> does not resume from them:
// it would write over them. <fix>".
void check_save_folder(const std::filesystem::path& dir, bool continues, bool overwrite,
                       const std::string& who, const std::string& writer, const std::string& fix);

// A checkpoint save folder as a tool's output (`loom checkpoint convert`, `loom import-hf`):
// not the input `src` nor inside or around it (check_output), not a file unless `overwrite`,
// and `loom run`'s save-folder rule (check_save_folder: checkpoints already in `dst` are
// written over only with `overwrite`); `writer` names the writer ("this conversion").
void check_checkpoint_output(const std::string& command, const std::filesystem::path& dst,
                             const std::filesystem::path& src, bool overwrite,
                             const std::string& writer);

}  // namespace loom::engine
