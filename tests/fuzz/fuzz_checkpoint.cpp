// libFuzzer harness: the checkpoint readers (checkpoint.cpp, checkpoint_shards.cpp): the
// tracker file, manifest.json, and the merge of rank files by their "loom.shards"
// metadata, over the safetensors reader.
//
// Input: four parts, each a 16-bit length then that many bytes (the last takes the rest):
// latest_checkpointed_iteration.txt, iter_0000001/manifest.json, and the model and optimizer
// files of one tensor-parallel rank (model-tp00-pp000.safetensors,
// optimizer-tp00-pp000.safetensors). Anything wrong must be a RunError naming the file.
#include "base/errors.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_shards.hpp"
#include "fuzz_host.hpp"

namespace {

namespace fs = std::filesystem;
using loom::engine::RunError;

void put(const fs::path& p, std::string_view data) {
  std::ofstream(p, std::ios::binary | std::ios::trunc).write(data.data(), data.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loomfuzz::Bytes in(data, size);
  const fs::path save = loomfuzz::scratch() / "save";
  const fs::path iter = save / "iter_0000001";
  static const bool made = fs::create_directories(iter);
  (void)made;
  put(save / "latest_checkpointed_iteration.txt", in.take(in.u16()));
  put(iter / "manifest.json", in.take(in.u16()));
  put(iter / "recipe.toml", "[train]\niters = 1\n");
  put(iter / "model-tp00-pp000.safetensors", in.take(in.u16()));
  put(iter / "optimizer-tp00-pp000.safetensors", in.rest());

  try {
    (void)loom::engine::complete_iterations(save);
    (void)loom::engine::resolve_checkpoint(save);
  } catch (const RunError& e) {
    loomfuzz::note(e.what());
  }
  try {
    (void)loom::engine::load_checkpoint(save, "", "");
  } catch (const RunError& e) {
    loomfuzz::note(e.what());
  } catch (const loom::engine::UsageError& e) {  // a manifest entry that names no file here
    loomfuzz::note(e.what());
  }
  try {
    (void)loom::engine::model_metadata(iter);
  } catch (const RunError& e) {
    loomfuzz::note(e.what());
  }
  try {
    const loom::engine::FullCheckpoint full = loom::engine::merge_checkpoint(iter, true, {});
    for (const auto* part : {&full.model, &full.optimizer, &full.main})
      for (const auto& [name, t] : *part) {
        unsigned __int128 bytes = loom::engine::dtype_size(t.dtype);
        for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
        if (bytes != t.data.size()) std::abort();  // a merged tensor must fill its shape
      }
  } catch (const RunError& e) {
    loomfuzz::note(e.what());
  }
  return 0;
}
