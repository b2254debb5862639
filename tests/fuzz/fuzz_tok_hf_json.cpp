// libFuzzer harness: tokenizer/hf-json encode, decode and vocabulary look-ups on a fixed
// tokenizer.json (tests/tokenizer/data), and the tokenizer.json parser itself (mode 3: the
// rest is a tokenizer.json; option bit 0 = add_special_tokens). See fuzz_host.hpp.
#include "fuzz_host.hpp"

extern "C" const loom_plugin_descriptor* loom_plugin_entry(uint32_t, uint32_t);

namespace {

std::map<std::string, std::string> from_input(std::string_view model, unsigned bits) {
  return {{"tokenizer_file", loomfuzz::put_file("tokenizer.json", model)},
          {"add_special_tokens", bits & 1 ? "true" : "false"}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static loomfuzz::TokenizerHarness h{
      loom_plugin_entry(LOOM_ABI_MAJOR, LOOM_ABI_MINOR),
      {{"tokenizer_file", loomfuzz::source_file("tests/tokenizer/data/hf-llama2-bf.json")}},
      from_input};
  return h.run(data, size);
}
