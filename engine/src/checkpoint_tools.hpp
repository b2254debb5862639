// `loom checkpoint merge|diff` (see checkpoint_tools.cpp).
#pragma once

#include <filesystem>

namespace loom::engine {

// Writes the checkpoint's model as full tensors to one safetensors file.
void checkpoint_merge(const std::filesystem::path& dir, const std::filesystem::path& out);
// Prints every model tensor whose max |a-b| exceeds rtol x max |a| (with `norm`: whose
// ||a-b||_2 exceeds rtol x ||a||_2); returns 0 when none does.
int checkpoint_diff(const std::filesystem::path& a, const std::filesystem::path& b, double rtol,
                    bool norm);

}  // namespace loom::engine
