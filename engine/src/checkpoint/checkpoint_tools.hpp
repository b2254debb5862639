// `loom checkpoint merge|diff|convert` (see checkpoint_tools.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::engine {

// Writes the checkpoint's model as full tensors to one safetensors file (tool_output.hpp's
// rules: not over an input, not over an existing file unless `overwrite`, renamed into place).
void checkpoint_merge(const std::filesystem::path& dir, const std::filesystem::path& out,
                      bool overwrite);
// One model tensor of two checkpoints compared (compare_models).
struct TensorDiff {
  std::string name;
  double rel = 0;         // max |a-b| / max |a|, or ||a-b||_2 / ||a||_2 (compare_models' norm)
  std::string problem;    // "" when compared; else why not ("shapes differ", "only in DIR")
  bool in_first = true;   // the first checkpoint has it
  int64_t real_rows = 0;  // > 0: only these rows (the real vocabulary) were compared
  // Compared, and within `rtol` (a NaN difference is not).
  bool within(double rtol) const { return problem.empty() && rel <= rtol; }
};
// Every model tensor of checkpoints `a` and `b` (any layouts: merged from their shards),
// by name; those of `b` alone last. The tensors compared are those of `a`'s rows that `b`
// has too (the vocabulary padding follows the tensor-parallel size); the vocabulary's
// tensors (wte, lm_head) only on the real vocabulary's rows ("loom.vocab"), since the
// padding rows past it differ by design (random in training, zero after an import).
std::vector<TensorDiff> compare_models(const std::filesystem::path& a,
                                       const std::filesystem::path& b, bool norm);
// Prints every model tensor whose max |a-b| exceeds rtol x max |a| (with `norm`: whose
// ||a-b||_2 exceeds rtol x ||a||_2); returns 0 when none does.
int checkpoint_diff(const std::filesystem::path& a, const std::filesystem::path& b, double rtol,
                    bool norm);

// `loom checkpoint convert`: the checkpoint rewritten for another layout (tensor x pipeline
// x virtual stages, one data-parallel replica), optimizer state included, as Megatron's
// tools/checkpoint/convert.py --target-tensor-parallel-size does. `overrides` (--set) adjust
// the saved recipe where the new layout needs it (a schedule, a batch). `dst` follows the
// save-folder rule of `loom run` (check_save_folder): checkpoints already there are written
// over only with `overwrite`.
class Registry;
void checkpoint_convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                        int tensor, int pipeline, int virtual_stages,
                        const std::vector<std::string>& overrides, Registry& registry,
                        bool overwrite);

}  // namespace loom::engine
