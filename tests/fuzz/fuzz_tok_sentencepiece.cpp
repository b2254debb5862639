// libFuzzer harness: tokenizer/sentencepiece (Debian's libsentencepiece behind Loom's
// plugin) encode, decode and id checks on a fixed BPE model (tests/tokenizer/data), and
// model loading (mode 3: the rest is a .model file; option bits 0-1 = add_bos, add_eos).
// libsentencepiece itself is not instrumented; the plugin code around it is.
#include "fuzz_host.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

std::map<std::string, std::string> from_input(std::string_view model, unsigned bits) {
  return {{"model_file", loomfuzz::put_file("sp.model", model)},
          {"add_bos", bits & 1 ? "true" : "false"},
          {"add_eos", bits & 2 ? "true" : "false"}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static loomfuzz::TokenizerHarness h{
      loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR),
      {{"model_file", loomfuzz::source_file("tests/tokenizer/data/sp-shakespeare-bpe.model")}},
      from_input};
  return h.run(data, size);
}
