// libFuzzer harness: tokenizer/gpt2-bpe encode, decode and vocabulary look-ups on a small
// fixed model, and the loading of vocab.json + merges.txt taken from the input (mode 3:
// the rest is vocab.json, a NUL byte, merges.txt). See fuzz_host.hpp for the input layout.
#include "fuzz_host.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

std::map<std::string, std::string> from_input(std::string_view model, unsigned) {
  const size_t cut = std::min(model.find('\0'), model.size());
  const std::string vocab = loomfuzz::put_file("vocab.json", model.substr(0, cut));
  const std::string merges =
      loomfuzz::put_file("merges.txt", cut < model.size() ? model.substr(cut + 1) : "");
  return {{"vocab_file", vocab}, {"merge_file", merges}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static loomfuzz::TokenizerHarness h{
      loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR),
      {{"vocab_file", loomfuzz::source_file("tests/fuzz/tok_gpt2_bpe/model/vocab.json")},
       {"merge_file", loomfuzz::source_file("tests/fuzz/tok_gpt2_bpe/model/merges.txt")}},
      from_input};
  return h.run(data, size);
}
