// libFuzzer harness: tokenizer/wordpiece encode, decode and vocabulary look-ups on a fixed
// BERT vocab.txt (tests/tokenizer/data), and vocab.txt loading (mode 3: the rest is a
// vocab.txt; option bit 0 = lower_case, bits 1-2 = vocab_extra_ids). See fuzz_host.hpp.
#include "fuzz_host.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

std::map<std::string, std::string> from_input(std::string_view model, unsigned bits) {
  return {{"vocab_file", loomfuzz::put_file("vocab.txt", model)},
          {"lower_case", bits & 1 ? "true" : "false"},
          {"vocab_extra_ids", std::to_string((bits >> 1) & 3)}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static loomfuzz::TokenizerHarness h{
      loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR),
      {{"vocab_file", loomfuzz::source_file("tests/tokenizer/data/wordpiece-vocab.txt")}},
      from_input};
  return h.run(data, size);
}
