// `loom checkpoint merge|diff|convert` (see checkpoint_tools.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace loom::engine {

// Writes the checkpoint's model as full tensors to one safetensors file.
void checkpoint_merge(const std::filesystem::path& dir, const std::filesystem::path& out);
// Prints every model tensor whose max |a-b| exceeds rtol x max |a| (with `norm`: whose
// ||a-b||_2 exceeds rtol x ||a||_2); returns 0 when none does.
int checkpoint_diff(const std::filesystem::path& a, const std::filesystem::path& b, double rtol,
                    bool norm);

// `loom checkpoint convert`: the checkpoint rewritten for another layout (tensor x pipeline
// x virtual stages, one data-parallel replica), optimizer state included, as Megatron's
// tools/checkpoint/convert.py --target-tensor-parallel-size does. `overrides` (--set) adjust
// the saved recipe where the new layout needs it (a schedule, a batch).
class Registry;
void checkpoint_convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                        int tensor, int pipeline, int virtual_stages,
                        const std::vector<std::string>& overrides, Registry& registry);

}  // namespace loom::engine
