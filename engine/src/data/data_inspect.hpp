// `loom data inspect PREFIX`: what a Megatron indexed dataset holds — counts, dtype,
// sequence lengths, the most frequent token ids and, with a tokenizer, the start of the
// first sequence decoded.
#pragma once

#include <string>
#include <vector>

namespace loom::engine {

int cmd_data_inspect(const std::vector<std::string>& args);

}  // namespace loom::engine
